"""compat.yml, the one compatibility table: internally consistent, mirrored by the support
matrix in docs/SUPPORT.md and by the stand-in repo's manifest (tests/standin/packages.yml), and
given to the roles as the vars of the role gpurig, never read through a path outside a role."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("compat_drift", ROOT / "scripts/compat_drift.py")
drift = importlib.util.module_from_spec(_spec)
sys.modules["compat_drift"] = drift  # dataclasses look their module up
_spec.loader.exec_module(drift)
COMPAT = drift.load_compat()
MANIFEST = yaml.safe_load((ROOT / "tests/standin/packages.yml").read_text())
STANDIN_DISTROS = tuple(MANIFEST["nvidia_keys"])
DISTROS = list(COMPAT["distros"])
# The distros whose repo key compat.yml names; one whose key is unverified (null, e.g. ubuntu2604)
# has no stand-in directory and no test container: nvidia_repo stops there until a key is set.
KEYED_DISTROS = [d for d in DISTROS if COMPAT["distros"][d]["key"] is not None]


def cuda_major(release: str) -> str:
    return release.split(".")[0]


def render_matrix(compat: dict) -> str:
    """docs/SUPPORT.md's support-matrix table, as compat.yml states it."""
    rows = [
        "| OS | support | driver branches (NVIDIA repo) | CUDA releases | default |",
        "|---|---|---|---|---|",
    ]
    for entry in compat["distros"].values():
        cuda = entry["cuda"]
        releases = cuda[0] if len(cuda) == 1 else f"{cuda[0]} to {cuda[-1]}"
        default = f"{entry['default']['branch']} + CUDA {entry['default']['cuda']}"
        rows.append(
            f"| {entry['name']} | {entry['support']} | {', '.join(entry['branches'])} "
            f"| {releases} | {default} |"
        )
    return "\n".join(rows)


def readme_matrix() -> str:
    text = (ROOT / "docs/SUPPORT.md").read_text()
    found = re.search(r"<!-- compat-matrix:[^>]*-->\n(.*?)\n<!-- /compat-matrix -->", text, re.S)
    assert found, "docs/SUPPORT.md lost its compat-matrix block"
    return found.group(1)


def test_support_matrix_follows_compat_yml():
    assert readme_matrix() == render_matrix(COMPAT)


def test_standin_serves_every_distro_whose_key_the_table_names():
    assert sorted(KEYED_DISTROS) == sorted(STANDIN_DISTROS)


def test_standin_signs_each_distro_with_the_key_file_the_table_names():
    # One throwaway key per key file name (tests/infra/standin_repo.py), so a role that assumed one
    # key for every distro would fail in the tests as on NVIDIA's server.
    assert MANIFEST["nvidia_keys"] == {d: COMPAT["distros"][d]["key"] for d in KEYED_DISTROS}
    assert set(MANIFEST["nvidia_keys"].values()) <= set(COMPAT["nvidia_repo_keys"])
    assert len(set(MANIFEST["nvidia_keys"].values())) > 1


@pytest.mark.parametrize("distro", DISTROS)
def test_each_distro_names_a_known_key_or_none(distro):
    key = COMPAT["distros"][distro]["key"]
    assert key is None or key in COMPAT["nvidia_repo_keys"]
    for fingerprint in COMPAT["nvidia_repo_keys"].values():
        assert re.fullmatch(r"[0-9A-F]{40}", fingerprint)


@pytest.mark.parametrize(
    "branch", sorted({b for e in COMPAT["distros"].values() for b in e["branches"]})
)
def test_every_offered_branch_has_a_life_entry(branch):
    assert re.fullmatch(r"\d{4}-\d{2}", COMPAT["branches"][branch]["end_of_life"])


def test_default_branch_is_not_past_its_end_of_life():
    # The roles refuse a branch past its end of life unless told otherwise: the defaults must not
    # need that. Compared with the month compat.yml was last checked (its "checked" dates).
    checked = max(re.findall(r"checked (\d{4}-\d{2})-\d{2}", drift.COMPAT_FILE.read_text()))
    for distro, entry in COMPAT["distros"].items():
        assert COMPAT["branches"][entry["default"]["branch"]]["end_of_life"] >= checked, distro


@pytest.mark.parametrize("distro", DISTROS)
def test_default_combination_is_allowed_by_the_table(distro):
    entry = COMPAT["distros"][distro]
    branch, cuda = entry["default"]["branch"], entry["default"]["cuda"]
    assert branch in entry["branches"]
    assert cuda in entry["cuda"]
    assert COMPAT["cuda"][cuda]["min_branch"] <= int(branch)
    assert "nccl" in COMPAT["cuda"][cuda], f"no default NCCL for CUDA {cuda}"
    assert cuda_major(cuda) in COMPAT["cuda_major"]


@pytest.mark.parametrize("distro", DISTROS)
def test_listed_cuda_releases_are_known_and_ordered(distro):
    releases = COMPAT["distros"][distro]["cuda"]
    assert all(release in COMPAT["cuda"] for release in releases)
    order = list(COMPAT["cuda"])
    assert [order.index(r) for r in releases] == sorted(order.index(r) for r in releases)


def test_cuda_13_needs_580_and_skips_ubuntu_2004():
    for release, entry in COMPAT["cuda"].items():
        if cuda_major(release) == "13":
            assert entry["min_branch"] >= 580
    assert not [r for r in COMPAT["distros"]["ubuntu2004"]["cuda"] if cuda_major(r) == "13"]
    assert "ESM" in COMPAT["distros"]["ubuntu2004"]["support"]


def test_default_is_the_newest_cuda_of_the_newest_major_with_a_default_nccl():
    # compat.yml: the default CUDA is the newest release of the newest major published for the OS
    # that the default branch runs and that has a default NCCL (13.4; 12.9 on Ubuntu 20.04).
    for distro, entry in COMPAT["distros"].items():
        branch = int(entry["default"]["branch"])
        usable = [
            r
            for r in entry["cuda"]
            if COMPAT["cuda"][r]["min_branch"] <= branch and "nccl" in COMPAT["cuda"][r]
        ]
        newest_major = max(cuda_major(r) for r in usable)
        expected = [r for r in usable if cuda_major(r) == newest_major][-1]
        assert entry["default"]["cuda"] == expected, distro


def test_torch_index_matches_the_cuda_major():
    for major, entry in COMPAT["cuda_major"].items():
        assert re.fullmatch(
            rf"https://download\.pytorch\.org/whl/cu{major}\d", entry["torch_index"]
        )


def standin_versions(distro: str) -> dict[str, set[str]]:
    """{package: versions} the stand-in's manifest builds for one distro."""
    found: dict[str, set[str]] = {}
    for pkg in MANIFEST["nvidia"]:
        if distro not in pkg.get("distros", STANDIN_DISTROS):
            continue
        for version in pkg["versions"]:
            found.setdefault(pkg["name"], set()).add(str(version))
    return found


@pytest.mark.parametrize("distro", STANDIN_DISTROS)
def test_standin_carries_the_default_stack_of_each_distro(distro):
    entry = COMPAT["distros"][distro]
    branch, cuda = entry["default"]["branch"], entry["default"]["cuda"]
    major, minor = cuda.split(".")
    offered = standin_versions(distro)
    assert offered.get(f"cuda-drivers-{branch}")
    assert offered.get(f"cuda-toolkit-{major}-{minor}")
    cudnn = COMPAT["cuda_major"][major]["cudnn"]
    for name in (f"cudnn9-cuda-{major}", f"libcudnn9-cuda-{major}", f"libcudnn9-dev-cuda-{major}"):
        assert f"{cudnn}-1" in offered.get(name, set()), name
    nccl = f"{COMPAT['cuda'][cuda]['nccl']}+cuda{cuda}"
    assert nccl in offered.get("libnccl2", set()) and nccl in offered.get("libnccl-dev", set())


@pytest.mark.parametrize("distro", STANDIN_DISTROS)
def test_standin_offers_no_branch_or_cuda_the_table_does_not_publish(distro):
    entry = COMPAT["distros"][distro]
    offered = standin_versions(distro)
    branches = {m.group(1) for n in offered if (m := re.fullmatch(r"cuda-drivers-(\d{3})", n))}
    assert branches <= set(entry["branches"])
    toolkits = {
        f"{m.group(1)}.{m.group(2)}"
        for n in offered
        if (m := re.fullmatch(r"cuda-toolkit-(\d+)-(\d+)", n))
    }
    assert toolkits <= set(entry["cuda"])


def test_each_cuda_major_names_its_torch_and_cupy():
    for major, entry in COMPAT["cuda_major"].items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", entry["torch"]), major
        assert re.fullmatch(r"\d+\.\d+\.\d+", entry["torchvision"]), major
        assert re.fullmatch(r"3\.\d+", entry["torch_min_python"]), major
        # PyPI's CuPy wheels are named by CUDA major: cupy-cuda12x, cupy-cuda13x.
        assert entry["cupy"] == f"cupy-cuda{major}x"
        assert re.fullmatch(r"\d+\.\d+\.\d+", entry["cupy_version"]), major


def test_each_cuda_major_names_its_dcgm_package():
    # NVIDIA names DCGM 4's CUDA packages by major (datacenter-gpu-manager-4-cuda12, -cuda13) and
    # versions them with epoch 1 (1:4.5.2-1); roles/dcgm installs these with -core and -proprietary.
    for major, entry in COMPAT["cuda_major"].items():
        assert entry["dcgm"] == f"datacenter-gpu-manager-4-cuda{major}"
        assert re.fullmatch(r"1:4\.\d+\.\d+-\d+", entry["dcgm_version"]), major
    assert all(isinstance(e["dcgm"], bool) for e in COMPAT["distros"].values())


DCGM_COMMON = ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-proprietary")


@pytest.mark.parametrize("distro", STANDIN_DISTROS)
def test_standin_offers_dcgm_only_where_the_table_says_nvidia_publishes_it(distro):
    offered = standin_versions(distro)
    dcgm = {name for name in offered if name.startswith("datacenter-gpu-manager")}
    if not COMPAT["distros"][distro]["dcgm"]:
        assert dcgm == set()
        return
    for entry in COMPAT["cuda_major"].values():
        for name in (*DCGM_COMMON, entry["dcgm"]):
            assert entry["dcgm_version"] in offered.get(name, set()), name
            # A newer build than the table's, which the pins and holds must keep out.
            newer = [
                v for v in offered[name] if v.split(":")[1] > entry["dcgm_version"].split(":")[1]
            ]
            assert newer, name


PYTHON_ENV = ROOT / "roles/python_env"


@pytest.mark.parametrize(
    ("variable", "key"),
    [
        ("python_env_torch_version", "torch"),
        ("python_env_torchvision_version", "torchvision"),
        ("python_env_min_python", "torch_min_python"),
        ("python_env_torch_index_url", "torch_index"),
        ("python_env_cupy_package", "cupy"),
        ("python_env_cupy_version", "cupy_version"),
    ],
)
def test_python_env_defaults_come_from_compat_yml(variable, key):
    # The role's versions are compat.yml's for the CUDA major, not literals of its own: a torch or
    # CuPy release is changed in one place.
    defaults = yaml.safe_load((PYTHON_ENV / "defaults/main.yml").read_text())
    assert " ".join(defaults[variable].split()) == f"{{{{ python_env_compat_major.{key} }}}}"
    internal = yaml.safe_load((PYTHON_ENV / "vars/main.yml").read_text())
    assert "gpurig_compat.cuda_major[python_env_cuda_major]" in internal["python_env_compat_major"]


def test_wheelhouse_carries_compat_yml_s_cupy_for_cuda_13():
    # The containers' torch is PyPI's CUDA 13 build, so python_env installs CuPy for CUDA 13 from
    # the local wheelhouse: it must hold exactly the release compat.yml pins.
    script = (ROOT / "tests/infra/wheelhouse.sh").read_text()
    cupy = COMPAT["cuda_major"]["13"]
    pins = re.findall(r"\bcupy-cuda\d+x==[\d.]+", script)
    assert pins == [f"{cupy['cupy']}=={cupy['cupy_version']}"]


UBUNTU = [d for d in DISTROS if d.startswith("ubuntu")]


@pytest.mark.parametrize("distro", DISTROS)
def test_server_branches_only_for_ubuntu(distro):
    # Canonical's -server driver packages exist on Ubuntu only (nvidia_driver_source: distro).
    entry = COMPAT["distros"][distro]
    if distro in UBUNTU:
        branches = entry["server_branches"]
        assert branches and all(re.fullmatch(r"\d{3}", b) for b in branches)
        assert branches == sorted(branches, key=int)
        # Only branches that run the CUDA releases this table knows.
        assert min(map(int, branches)) >= min(c["min_branch"] for c in COMPAT["cuda"].values())
    else:
        assert "server_branches" not in entry


def test_standin_archive_serves_a_branch_compat_yml_lists_for_focal():
    # molecule/driver_distro_source installs the stand-in archive's real branch on the Ubuntu
    # 20.04 stand-in, so the preflight must accept it; its retired branch (packages that depend on
    # another branch's) must be one the list leaves out.
    real, retired = set(), set()
    for pkg in MANIFEST["ubuntu_archive"]:
        found = re.fullmatch(r"nvidia-headless-(\d{3})-server", pkg["name"])
        if found:
            branch = found.group(1)
            others = set(re.findall(r"-(\d{3})-server", pkg.get("depends", ""))) - {branch}
            (retired if others else real).add(branch)
    listed = set(COMPAT["distros"]["ubuntu2004"]["server_branches"])
    assert real and real <= listed
    assert retired and not retired & listed


def test_nvidia_ml_py_floor_is_compat_yml_s_everywhere():
    # The NVML bindings' floor is stated once (compat.yml) and followed by the bench's own
    # dependency and the training environment's package list.
    floor = COMPAT["nvidia_ml_py_min"]
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'"nvidia-ml-py>={floor}"' in pyproject
    defaults = yaml.safe_load((PYTHON_ENV / "defaults/main.yml").read_text())
    assert "nvidia-ml-py>={{ gpurig_compat.nvidia_ml_py_min }}" in defaults["python_env_packages"]


def test_the_tests_tensorflow_is_the_release_compat_yml_installs():
    """CI's tensorflow-cpu (constraints.txt: the bench's tests and molecule's wheelhouse) is
    the TensorFlow python_env installs on servers, so what CI shows is what a server gets."""
    pins = re.findall(r"^tensorflow-cpu==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M)
    assert pins == [COMPAT["tensorflow"]["version"]]


# ---- Where the table lives -----------------------------------------------------------------------
ROLES = ROOT / "roles"
# role_path followed by a way up: "/..", "| dirname", or dirname(role_path) in an expression.
ROLE_PATH_UP = re.compile(r"role_path\b[^\n]*?(\.\.|\|\s*dirname\b)|dirname\(\s*role_path\b")


def role_path_escapes(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if ROLE_PATH_UP.search(line)]


@pytest.mark.parametrize(
    "line",
    [
        "x: \"{{ lookup('ansible.builtin.file', role_path ~ '/../../compat.yml') | from_yaml }}\"",
        'python_env_bench_src: "{{ role_path | dirname | dirname }}"',
        'x: "{{ role_path }}/../files/y"',
    ],
)
def test_role_path_escape_is_recognised(line):
    assert role_path_escapes(line) == [line]


@pytest.mark.parametrize(
    "line",
    [
        'paths: ["{{ role_path }}/vars"]',
        "paths=[role_path ~ '/vars'], skip=true) }}",
        '- "{{ role_path }}/files/bench_wheel.py"',
    ],
)
def test_role_path_inside_the_role_is_not_an_escape(line):
    assert role_path_escapes(line) == []


def test_no_role_reads_a_path_outside_itself_through_role_path():
    found = {
        str(path.relative_to(ROOT)): hits
        for path in sorted(ROLES.rglob("*"))
        if path.is_file() and path.suffix in (".yml", ".yaml", ".j2", ".py")
        for hits in [role_path_escapes(path.read_text())]
        if hits
    }
    assert found == {}


def test_the_table_and_the_host_s_key_are_the_role_gpurig_s_only_vars():
    # Ansible loads every file in a role's vars/main/ directory as the role's vars: compat.yml holds
    # the whole table under one name, which load_compat and the roles read; host.yml the host's key.
    assert drift.COMPAT_FILE.parent == ROLES / "gpurig/vars/main"
    assert sorted(p.name for p in drift.COMPAT_FILE.parent.iterdir()) == ["compat.yml", "host.yml"]
    assert list(yaml.safe_load(drift.COMPAT_FILE.read_text())) == [drift.COMPAT_VARIABLE]
    host = yaml.safe_load((drift.COMPAT_FILE.parent / "host.yml").read_text())
    assert list(host) == ["gpurig_os"]
    assert {"branches", "cuda", "cuda_major", "distros", "nvidia_repo_keys"} <= set(COMPAT)


def dependencies(role: str) -> list[str]:
    meta = yaml.safe_load((ROLES / role / "meta/main.yml").read_text())
    return [d if isinstance(d, str) else d["role"] for d in meta.get("dependencies") or []]


def test_each_role_reading_gpurig_s_variables_depends_on_it():
    # Ansible gives a role the vars and defaults of its meta/main.yml dependencies: without the
    # dependency, gpurig_compat, gpurig_os and the shared values (gpurig_driver_branch, ...) would
    # be undefined whenever the role runs on its own. Its task files (kinds, pci,
    # check-mode-report), which apt_source and package_hold include too, read only what they are
    # given and the table.
    shared = (
        r"gpurig_(compat|os|driver_branch|cuda_version|conda_prefix|conda_channels|env_path"
        r"|pip_extra_args)"
    )
    readers = {
        path.relative_to(ROLES).parts[0]
        for path in ROLES.glob("*/[dvt]*/**/*.yml")
        if re.search(rf"\b{shared}\b", path.read_text())
    } - {"gpurig"}
    assert {"nvidia_repo", "nvidia_driver", "python_env", "conda", "horovod"} <= readers
    assert {
        role: dependencies(role) for role in readers if "gpurig" not in dependencies(role)
    } == {}


def test_the_host_s_key_in_the_table_is_worked_out_once():
    """roles/gpurig/vars/main/host.yml's gpurig_os is the one expression that turns facts into
    compat.yml's OS key; the roles and verify.yml read it."""
    found = []
    for path in [*ROOT.glob("roles/**/*.yml"), *ROOT.glob("playbooks/**/*.yml"), ROOT / "site.yml"]:
        if "distribution_version'] | default('') | replace('.', '')" in path.read_text():
            found.append(str(path.relative_to(ROOT)))
    assert found == ["roles/gpurig/vars/main/host.yml"]


def test_the_os_default_branch_and_cuda_are_looked_up_once():
    """gpurig_driver_branch and gpurig_cuda_version (roles/gpurig/defaults/main.yml) are the one
    lookup of each; roles and verify.yml read them, with no literal fallback of their own."""
    found = {"branch": [], "cuda": []}
    for path in [*ROOT.glob("roles/**/*.yml"), *ROOT.glob("playbooks/**/*.yml"), ROOT / "site.yml"]:
        text = path.read_text()
        for what in found:
            if re.search(rf"\.default\.{what}\b", text):
                found[what].append(str(path.relative_to(ROOT)))
    assert found == {
        "branch": ["roles/gpurig/defaults/main.yml"],
        "cuda": ["roles/gpurig/defaults/main.yml"],
    }


def test_the_pci_bus_is_read_in_one_place():
    """roles/gpurig/tasks/pci.yml is the one reading of the PCI bus (gpurig_pci: the NVIDIA GPUs and
    NVSwitches) for the roles and playbooks; they include it, and no other YAML file or role script
    walks a PCI devices directory. (The Slurm health check, playbooks/files/gpurig_healthcheck.py,
    counts the GPUs on the bus when Slurm runs it, away from Ansible: that count is its check.)"""
    readers = [
        str(path.relative_to(ROOT))
        for path in [*ROOT.glob("roles/**/*"), *ROOT.glob("playbooks/**/*.yml"), ROOT / "site.yml"]
        if path.is_file()
        and path.suffix in (".yml", ".py", ".sh")
        and re.search(r"dev/vendor|\"vendor\"\)", path.read_text())  # sh's $dev/vendor, open()
    ]
    assert readers == ["roles/gpurig/tasks/pci.yml"]
    includes = [
        str(path.relative_to(ROOT))
        for path in [*ROOT.glob("roles/**/*.yml"), *ROOT.glob("playbooks/**/*.yml")]
        if re.search(r"tasks_from: pci\b", path.read_text())
    ]
    assert sorted(includes) == [
        "playbooks/bench.yml",
        "playbooks/verify.yml",
        "roles/gpu_prereqs/tasks/main.yml",
        "roles/horovod/tasks/probe.yml",
        "roles/nvidia_driver/tasks/main.yml",
    ]


def test_the_supported_os_list_is_compat_yml_alone():
    """An OS is supported when compat.yml's distros has its entry: no role's meta/main.yml keeps a
    galaxy platforms list of its own (they had drifted from the table)."""
    listing = [
        str(path.relative_to(ROOT))
        for path in ROOT.glob("roles/*/meta/main.yml")
        if "platforms" in (yaml.safe_load(path.read_text()).get("galaxy_info") or {})
    ]
    assert listing == []
