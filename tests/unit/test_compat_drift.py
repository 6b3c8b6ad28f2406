"""scripts/compat_drift.py: its parsers and comparisons on recorded pages (tests/fixtures/drift/,
see its README for what each page is), and the whole command on file:// copies of them."""

from __future__ import annotations

import copy
import gzip
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests/fixtures/drift"
_spec = importlib.util.spec_from_file_location("compat_drift", ROOT / "scripts/compat_drift.py")
drift = importlib.util.module_from_spec(_spec)
sys.modules["compat_drift"] = drift  # dataclasses look their module up
_spec.loader.exec_module(drift)
COMPAT = drift.load_compat()

PACKAGES_2204 = (FIXTURES / "nvidia/ubuntu2204/x86_64/Packages").read_text()


def stanza(name: str, version: str) -> str:
    return f"\nPackage: {name}\nVersion: {version}\nArchitecture: amd64\nDescription: x\n more\n"


def without(text: str, name: str, version: str) -> str:
    """The Packages text less one stanza."""
    kept = [
        s
        for s in text.split("\n\n")
        if not (f"Package: {name}\n" in s + "\n" and f"Version: {version}\n" in s + "\n")
    ]
    assert len(kept) == len(text.split("\n\n")) - 1, (name, version)
    return "\n\n".join(kept)


def findings_2204(text: str) -> list:
    return drift.check_nvidia_index(COMPAT, "ubuntu2204", drift.parse_packages(text), "u")


def by(findings: list, severity: str) -> dict[str, str]:
    return {f.subject: f.message for f in findings if f.severity == severity}


# ---- parsers -------------------------------------------------------------------------------


def test_packages_index_parses_every_stanza_and_skips_continuation_lines():
    packages = drift.parse_packages(PACKAGES_2204)
    assert sum(len(v) for v in packages.values()) == PACKAGES_2204.count("\nPackage: ") + 1
    assert packages["libnccl2"] == {"2.28.3-1+cuda13.0", "2.32.3-1+cuda12.9", "2.32.3-1+cuda13.4"}
    assert "Not NVIDIA's" not in str(packages)


def test_packages_gz_is_read_and_packages_is_the_fallback(tmp_path):
    gz = tmp_path / "gz/x86_64"
    gz.mkdir(parents=True)
    (gz / "Packages.gz").write_bytes(gzip.compress(PACKAGES_2204.encode()))
    plain = tmp_path / "plain/x86_64"
    plain.mkdir(parents=True)
    (plain / "Packages").write_text(PACKAGES_2204)
    fetcher = drift.Fetcher()
    for directory, name in ((gz, "Packages.gz"), (plain, "Packages")):
        packages, url = drift.read_packages(fetcher, directory.as_uri() + "/")
        assert url.endswith("/" + name)
        assert "cuda-drivers-580" in packages


def test_pep503_page_gives_unquoted_wheel_names():
    names = drift.parse_links((FIXTURES / "pytorch/cu132/torch/index.html").read_text())
    assert "torch-2.15.0+cu132-cp311-cp311-manylinux_2_28_x86_64.whl" in names
    assert all("%2B" not in n for n in names)


def test_wheel_names():
    wheel = drift.parse_wheel_name("torch-2.15.0+cu132-cp313-cp313t-manylinux_2_28_x86_64.whl")
    assert (wheel.project, wheel.version, wheel.python, wheel.abi) == (
        "torch",
        "2.15.0+cu132",
        "cp313",
        "cp313t",
    )
    assert not wheel.runs_on("3.13")  # free-threaded build
    assert (
        drift.parse_wheel_name("torch-2.15.0+cu132-cp311-cp311-win_amd64.whl").runs_on("3.11")
        is False
    )
    pure = drift.parse_wheel_name("torchvision-0.29.2+cu132-py3-none-manylinux_2_28_x86_64.whl")
    assert pure.runs_on("3.11") and pure.runs_on("3.13")
    assert drift.parse_wheel_name("torch-2.15.0.tar.gz") is None


def test_pypi_json_as_recorded():
    def load(name: str):
        return drift.parse_pypi_json(json.loads((FIXTURES / f"pypi/{name}.json").read_text()))

    torch = load("torch")
    assert torch.newest == COMPAT["cuda_major"]["13"]["torch"]
    assert torch.releases[COMPAT["cuda_major"]["12"]["torch"]] is False
    assert load("cupy-cuda12x").releases["13.5.0"] is True  # yanked on PyPI
    assert "4.304.01" not in load("nvidia-ml-py").releases  # a release with no files


def test_version_orders():
    key = drift.debian_version_key
    assert key("9.28.1.4-1") > key("9.26.0.51-1")
    assert key("2.32.3-1+cuda13.4") > key("2.28.3-1+cuda13.4")
    assert key("1:1.0-1") > key("9.0-1")
    assert drift.release_key("2.15.0+cu132") == (2, 15, 0)
    assert drift.release_key("2.16.0rc1") is None
    assert drift.release_key("2.16.0.dev20261101") is None
    assert drift.python_range("3.10") == ["3.10", "3.11", "3.12", "3.13"]


# ---- NVIDIA's index ------------------------------------------------------------------------


def test_fixture_index_matches_compat_yml():
    found = findings_2204(PACKAGES_2204)
    assert not by(found, "BREAKING") and not by(found, "STALE") and not by(found, "BEHIND")
    assert set(drift.default_stack(COMPAT, "ubuntu2204")) <= set(by(found, "OK"))
    assert "615" in by(found, "INFO")["cuda-drivers-*"]  # a feature branch, not offered


def test_missing_default_cudnn_build_breaks():
    pinned = COMPAT["cuda_major"]["13"]["cudnn"] + "-1"
    found = findings_2204(without(PACKAGES_2204, "cudnn9-cuda-13", pinned))
    assert f"{pinned} not in the index" in by(found, "BREAKING")["cudnn9-cuda-13"]


def test_missing_default_branch_or_nccl_build_breaks_not_stale():
    text = PACKAGES_2204
    for version in {s.split("\n")[1][9:] for s in text.split("\n\n") if "cuda-drivers-580\n" in s}:
        text = without(text, "cuda-drivers-580", version)
    text = without(text, "libnccl2", "2.32.3-1+cuda13.4")
    found = findings_2204(text)
    assert set(by(found, "BREAKING")) == {"cuda-drivers-580", "libnccl2"}
    assert not by(found, "STALE")


def test_listed_branch_and_release_gone_are_stale():
    text = without(PACKAGES_2204, "cuda-drivers-535", "535.274.02-0ubuntu1")
    text = without(text, "cuda-toolkit-12-0", "12.0.1-1")
    assert set(by(findings_2204(text), "STALE")) == {"cuda-drivers-535", "cuda-toolkit-12-0"}


def test_newer_branch_cuda_cudnn_and_nccl_are_behind():
    text = PACKAGES_2204 + "".join(
        stanza(name, version)
        for name, version in (
            ("cuda-drivers-640", "640.10.01-0ubuntu1"),
            ("cuda-toolkit-13-5", "13.5.0-1"),  # in the table, not listed for the OS
            ("cuda-toolkit-13-6", "13.6.0-1"),  # not in the table
            ("cudnn9-cuda-13", "9.30.0.20-1"),
            ("libnccl2", "2.33.1-1+cuda13.4"),
            ("libnccl2", "2.40.1-1+cuda13.6"),  # another CUDA: not the default's build
            ("cudnn10-cuda-13", "10.0.0.1-1"),
        )
    )
    behind = by(findings_2204(text), "BEHIND")
    assert set(behind) == {
        "cuda-drivers-640",
        "cuda-toolkit-13-5",
        "cuda-toolkit-13-6",
        "cudnn9-cuda-13",
        "libnccl2",
        "cudnn10-cuda-13",
    }
    assert "not in compat.yml's cuda table" in behind["cuda-toolkit-13-6"]
    assert "CUDA 13.5 published" in behind["cuda-toolkit-13-5"]
    assert "2.33.1-1+cuda13.4" in behind["libnccl2"]


def test_dcgm_is_in_the_default_stack_where_the_os_has_it():
    # roles/dcgm installs -core, -proprietary and -cuda<major of the default branch> at
    # dcgm_version, only where compat.yml says NVIDIA publishes DCGM for the OS.
    branch = COMPAT["distros"]["ubuntu2204"]["default"]["branch"]
    major = drift.dcgm_cuda_major(COMPAT, branch)
    entry = COMPAT["cuda_major"][major]
    stack = drift.default_stack(COMPAT, "ubuntu2204")
    for name in (*drift.DCGM_COMMON, entry["dcgm"]):
        assert stack[name] == entry["dcgm_version"], name
    assert drift.dcgm_cuda_major(COMPAT, "580") == "13"
    assert drift.dcgm_cuda_major(COMPAT, "535") == "12"
    assert not COMPAT["distros"]["ubuntu2004"]["dcgm"]
    assert not any("datacenter-gpu-manager" in n for n in drift.default_stack(COMPAT, "ubuntu2004"))


def test_missing_dcgm_build_breaks_and_a_newer_one_is_behind():
    branch = COMPAT["distros"]["ubuntu2204"]["default"]["branch"]
    entry = COMPAT["cuda_major"][drift.dcgm_cuda_major(COMPAT, branch)]
    pinned = entry["dcgm_version"]
    found = findings_2204(without(PACKAGES_2204, entry["dcgm"], pinned))
    assert set(by(found, "BREAKING")) == {entry["dcgm"]}
    epoch, _, rest = pinned.partition(":")
    newer = f"{epoch}:{int(rest.split('.')[0]) + 1}.0.0-1"  # a major above the pin
    behind = by(findings_2204(PACKAGES_2204 + stanza(drift.DCGM_COMMON[0], newer)), "BEHIND")
    assert behind == {drift.DCGM_COMMON[0]: f"{newer} is newer than the pinned {pinned}"}


def test_key_fingerprint_checks():
    expected = COMPAT["nvidia_repo_keys"]["3bf863cc.pub"]
    ok = drift.check_key("ubuntu2204", "3bf863cc.pub", expected, [expected], "u")
    wrong = drift.check_key("ubuntu2204", "3bf863cc.pub", expected, ["F" * 40], "u")
    not_a_key = drift.check_key("ubuntu2204", "3bf863cc.pub", expected, [], "u")
    assert (ok.severity, wrong.severity, not_a_key.severity) == ("OK", "BREAKING", "BREAKING")
    assert "no key in the file" in not_a_key.message
    assert drift.key_fingerprints(b"<html>404</html>") == []


# ---- PyTorch's index and PyPI --------------------------------------------------------------


def wheel_files(variant: str, project: str) -> list[str]:
    return drift.parse_links((FIXTURES / f"pytorch/{variant}/{project}/index.html").read_text())


@pytest.mark.parametrize(("major", "variant"), [("13", "cu132"), ("12", "cu126")])
def test_pinned_wheels_are_on_the_recorded_pages(major, variant):
    entry = COMPAT["cuda_major"][major]
    pythons = drift.python_range(entry["torch_min_python"])
    for project in ("torch", "torchvision"):
        files = wheel_files(variant, project)
        found = drift.check_wheels("c", project, entry[project], files, pythons, "3.11", True, "u")
        assert [f.severity for f in found] == ["OK"] * len(pythons), found


def test_missing_wheel_breaks_for_the_default_python_only():
    files = [
        f for f in wheel_files("cu132", "torch") if "-cp311-" not in f and "-cp312-" not in f
    ] + ["torch-2.16.0+cu132-cp313-cp313-manylinux_2_28_x86_64.whl"]
    pythons = ["3.11", "3.12", "3.13"]
    found = drift.check_wheels("c", "torch", "2.15.0", files, pythons, "3.11", True, "u")
    severities = [(f.severity, f.message.split(" for Python ")[-1][:4]) for f in found]
    assert ("BREAKING", "3.11") in severities and ("WARNING", "3.12") in severities
    assert by(found, "BEHIND")["torch"].startswith("2.16.0 on the index")
    # A CUDA major no OS defaults to: nothing breaks.
    found = drift.check_wheels("c", "torch", "2.15.0", files, pythons, "3.11", False, "u")
    assert not by(found, "BREAKING")


def test_pypi_pins():
    cupy12 = drift.parse_pypi_json(json.loads((FIXTURES / "pypi/cupy-cuda12x.json").read_text()))
    pin = COMPAT["cuda_major"]["12"]["cupy_version"]
    assert [
        f.severity for f in drift.check_pypi_pin("c", "cupy", pin, cupy12, "BREAKING", "u")
    ] == ["OK"]
    yanked = drift.check_pypi_pin("c", "cupy", "13.5.0", cupy12, "BREAKING", "u")
    assert [f.severity for f in yanked] == ["WARNING", "BEHIND"]
    gone = drift.check_pypi_pin("c", "cupy", "99.0.0", cupy12, "BREAKING", "u")
    assert [f.severity for f in gone] == ["BREAKING"]


def test_exit_codes():
    f = lambda severity: drift.Finding("s", severity, "x", "y")  # noqa: E731
    assert drift.exit_code([f("OK"), f("BEHIND"), f("STALE"), f("WARNING")]) == 0
    assert drift.exit_code([f("UNREACHABLE"), f("BREAKING")]) == 1
    assert drift.exit_code([f("UNREACHABLE")]) == 2
    assert drift.exit_code([f("UNREACHABLE")], skip_unreachable=True) == 0


# ---- the command on file:// copies of the recorded pages -----------------------------------


@pytest.fixture
def sources(tmp_path, monkeypatch):
    """file:// sources in the real layouts: <nvidia>/<distro>/x86_64/, <torch>/<variant>/<project>/,
    <pypi>/<project>/json; the key check answers with compat.yml's fingerprint (the recorded
    pages have no NVIDIA key)."""
    shutil.copytree(FIXTURES / "nvidia", tmp_path / "nvidia")
    (tmp_path / "nvidia/ubuntu2204/x86_64/3bf863cc.pub").write_text("key stand-in\n")
    (tmp_path / "nvidia/ubuntu2604/x86_64/fixture0.pub").write_text("key stand-in\n")
    shutil.copytree(FIXTURES / "pytorch", tmp_path / "pytorch")
    for page in (FIXTURES / "pypi").glob("*.json"):
        (tmp_path / "pypi" / page.stem).mkdir(parents=True)
        shutil.copy(page, tmp_path / "pypi" / page.stem / "json")
    fpr = COMPAT["nvidia_repo_keys"]["3bf863cc.pub"]
    monkeypatch.setattr(drift, "key_fingerprints", lambda key: [fpr])
    compat = tmp_path / "compat.yml"
    compat.write_text(drift.dump_compat(COMPAT))
    return tmp_path


def run(sources: Path, *extra: str, compat: dict | None = None) -> int:
    if compat is not None:
        (sources / "compat.yml").write_text(drift.dump_compat(compat))
    argv = [
        "--json",
        "--compat",
        str(sources / "compat.yml"),
        "--nvidia-base",
        (sources / "nvidia").as_uri(),
        "--torch-index-base",
        (sources / "pytorch").as_uri(),
        "--pypi",
        (sources / "pypi").as_uri(),
        "--python",
        "3.11",
        *extra,
    ]
    return drift.main(argv)


def report(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_command_on_recorded_pages_exits_0(sources, capsys):
    code = run(sources, "--distro", "ubuntu2204")
    out = report(capsys)
    assert code == 0 == out["exit"]
    assert not [f for f in out["findings"] if f["severity"] in ("BREAKING", "UNREACHABLE")]


def test_command_exits_1_on_a_cudnn_the_index_lacks(sources, capsys):
    compat = copy.deepcopy(COMPAT)
    compat["cuda_major"]["13"]["cudnn"] = "9.99.0.1"
    code = run(sources, "--distro", "ubuntu2204", compat=compat)
    breaking = {f["subject"] for f in report(capsys)["findings"] if f["severity"] == "BREAKING"}
    assert code == 1
    assert breaking == {"cudnn9-cuda-13", "libcudnn9-cuda-13", "libcudnn9-dev-cuda-13"}


def test_command_reports_an_unverified_key_as_a_warning(sources, capsys):
    # A table that leaves an OS key unverified (null): the key file its directory serves is named.
    compat = copy.deepcopy(COMPAT)
    compat["distros"]["ubuntu2604"]["key"] = None
    (sources / "nvidia/ubuntu2604/x86_64/Packages").write_text(PACKAGES_2204)
    code = run(sources, "--distro", "ubuntu2604", compat=compat)
    out = report(capsys)
    warnings = {f["subject"]: f["message"] for f in out["findings"] if f["severity"] == "WARNING"}
    assert "fixture0.pub" in warnings["key (none)"]
    assert code == 0


def test_command_names_each_unreachable_source_and_exits_2(sources, capsys):
    dead = ["--nvidia-base", "http://127.0.0.1:9/repos", "--allow-http", "--distro", "debian12"]
    code = run(sources, *dead)  # nothing listens on port 9
    unread = {f["url"] for f in report(capsys)["findings"] if f["severity"] == "UNREACHABLE"}
    assert code == 2
    assert unread == {
        "http://127.0.0.1:9/repos/debian12/x86_64/Packages.gz",
        "http://127.0.0.1:9/repos/debian12/x86_64/3bf863cc.pub",
    }
    code = run(sources, *dead, "--skip-unreachable")
    capsys.readouterr()
    assert code == 0


def test_plain_http_needs_allow_http(sources, capsys):
    code = drift.main(["--nvidia-base", "http://127.0.0.1:9/repos", "--distro", "ubuntu2204"])
    assert code == 2
    assert "--allow-http" in capsys.readouterr().err
    assert drift.main(["--distro", "ubuntu1804"]) == 2


@pytest.mark.parametrize("timeout", ["nan", "inf", "0", "-3", "abc"])
def test_timeout_must_be_finite_seconds_above_0(timeout, capsys):
    with pytest.raises(SystemExit) as stop:
        drift.parse_args(["--timeout", timeout])
    assert stop.value.code == 2
    assert f"--timeout: expected seconds above 0, got '{timeout}'" in capsys.readouterr().err


def test_a_table_not_laid_out_as_compat_yml_is_refused_by_its_entry(sources, capsys):
    compat = copy.deepcopy(COMPAT)
    del compat["distros"]["ubuntu2204"]["default"]
    code = run(sources, "--distro", "ubuntu2204", compat=compat)
    err = capsys.readouterr().err
    assert code == 2
    assert "is not laid out as roles/gpurig/vars/main/compat.yml: KeyError: 'default'" in err
