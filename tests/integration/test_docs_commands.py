"""The commands README.md, docs/PROVISIONING.md and docs/BENCHMARKING.md show, run as written.

Every command in those files' shell blocks must be one this module knows how to run; a new one
fails test_every_shown_command_is_known until it is added to HOW below. README.md's commands run in
order in a fresh copy of this checkout (its tracked and unignored files, as a clone has them),
where nothing of the suite's own set-up is visible: the copy's own scripts/bootstrap.sh makes its
.venv and its Ansible collections, and nothing on PATH or in the environment points elsewhere.

What is substituted, and only that:
- the hosts: inventory/mycluster (copied from inventory/example as the README says) lists a fresh
  systemd container (the molecule platform's Debian 12 image) for `site.yml --check`, which must
  say what each role would install and leave the container exactly as it was, and the
  network-namespace hosts of tests/infra/netns.sh, which share this machine's filesystem and so
  have the copy's .venv (with the bench and Horovod) as their training environment, for
  playbooks/bench.yml (whose sweep runs one repeat there instead of three);
- NVIDIA's repository, PyTorch's index and the other upstreams: the signed stand-ins that
  scripts/test.sh serves (the same group variables as .config/molecule/config.yml's inventory).

The commands that cannot run here name the test that runs them instead, and why.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import textwrap
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest
import yaml
from integration_support import HOST1, HOST2, REPO, netns_fleet, unavailable

DOCS = ("README.md", "docs/PROVISIONING.md", "docs/BENCHMARKING.md")
PLAYBOOK = ".venv/bin/ansible-playbook -i inventory/mycluster"

# How each shown command runs here: "run" (by test_readme_commands_in_order, in the fresh copy), or
# where it runs instead and why not in that copy.
HOW: dict[str, str] = {
    # README.md
    "scripts/bootstrap.sh && .venv/bin/python -m bench.scaling": "run",
    "scripts/test.sh": (
        "the suite this test is part of (.ci/run runs it; test_ci_runs_the_readme_test_command)"
    ),
    "cp -r inventory/example inventory/mycluster": "run",
    f"{PLAYBOOK} site.yml --check": "run",
    f"{PLAYBOOK} site.yml": (
        "molecule/site (every NVIDIA role on Debian 12, 13 and the Ubuntu 20.04 stand-in) and "
        "molecule/horovod (the Python roles): provisioning builds Horovod and nccl-tests, minutes "
        "per host, and nccl-tests needs an nvcc the stand-in's packages do not carry"
    ),
    f"{PLAYBOOK} playbooks/verify.yml": (
        "molecule/site (every GPU check fails in a container without a GPU, as it must) and "
        "tests/integration/test_multihost.py (acceptance.yml runs verify.yml's checks against the "
        "stand-in GPU tools, which verify.yml takes as extra variables, not from an inventory)"
    ),
    f"{PLAYBOOK} playbooks/bench.yml": "run",
    f"{PLAYBOOK} playbooks/acceptance.yml": (
        "tests/integration/test_multihost.py, with the stand-in GPU tools as extra variables "
        "(see verify.yml above)"
    ),
    # docs/PROVISIONING.md
    ".venv/bin/ansible-playbook site.yml": (
        "inventory/local is the machine running it: provisioning the test machine itself would "
        "change it; molecule/site runs site.yml"
    ),
    f"{PLAYBOOK} site.yml -e gpurig_container_runtime=true": "molecule/container_runtime",
    f"{PLAYBOOK} playbooks/verify.yml -e gpurig_container_runtime=true --tags container": (
        "molecule/container_runtime (test_container_runtime.py runs verify.yml's container check)"
    ),
    "srun --nodes=4 --ntasks-per-node=1 --gpus-per-node=8 --exclusive "
    "/opt/miniforge3/envs/train/bin/python playbooks/files/slurm_pairs.py "
    "--out /shared/acceptance/pairs": (
        "tests/integration/test_slurm_pairs.py, on three namespace hosts under a test Slurm with "
        "this checkout's Python and one Gloo rank per node: there are no GPUs here"
    ),
}
# docs/BENCHMARKING.md: the sweep's own commands. `--help` runs; the others are sized for GPUs
# (8 per node, a full ImageNet epoch, other hosts, Slurm, NGC's image), so their options are parsed
# and checked as the sweep does before it launches anything (test_shown_sweep_options_are_accepted).
SWEEP = re.compile(r"^(?:\.venv/bin/)?python -m bench\.scaling(?P<args>(?: .*)?)$")
SBATCH = re.compile(r"^sbatch (?:--\S+ )+scripts/slurm-sweep\.sh(?P<args> .*)$")
# The options scripts/slurm-sweep.sh puts before its own arguments.
SLURM_SWEEP_ARGS = shlex.split(
    re.search(
        r'^exec python -m bench\.scaling (.*) "\$@"$',
        (REPO / "scripts/slurm-sweep.sh").read_text(),
        re.M,
    )[1]
)


def shown_commands(doc: str) -> list[str]:
    """The commands in the file's bash blocks: comments dropped, continued lines joined."""
    commands, block, joined = [], False, ""
    for line in (REPO / doc).read_text().splitlines():
        if line.startswith("```"):
            block = line.strip() in ("```bash", "```sh", "```shell") if not block else False
            continue
        if not block:
            continue
        line = joined + line.strip()
        joined = ""
        if line.endswith("\\"):
            joined = line[:-1].strip() + " "
            continue
        command = re.sub(r"\s+#.*$", "", line).strip()
        if command and not command.startswith("#"):
            commands.append(re.sub(r"\s+", " ", command))
    return commands


def how(command: str) -> str:
    if command in HOW:
        return HOW[command]
    sweep = SWEEP.match(command)
    if sweep:
        return "run" if sweep["args"].strip() in ("", "--help") else "parsed"
    return "parsed" if SBATCH.match(command) else ""


def test_every_shown_command_is_known() -> None:
    unknown = [(doc, c) for doc in DOCS for c in shown_commands(doc) if not how(c)]
    assert unknown == [], "commands this test does not know how to run (add them to HOW)"
    # and every entry of HOW is still shown somewhere
    shown = {c for doc in DOCS for c in shown_commands(doc)}
    assert set(HOW) <= shown, set(HOW) - shown


def test_ci_runs_the_readme_test_command() -> None:
    quick_start = shown_commands("README.md")[:2]
    assert quick_start[1] == "scripts/test.sh"
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"^exec scripts/test\.sh$", ci, re.M), ci


def test_shown_sweep_options_are_accepted() -> None:
    from bench.admission import request_problems
    from bench.options import parse_request

    parsed = []
    for doc in DOCS:
        for command in shown_commands(doc):
            if how(command) != "parsed":
                continue
            sweep = SWEEP.match(command)
            argv = (
                shlex.split(sweep["args"])
                if sweep
                else [*SLURM_SWEEP_ARGS, *shlex.split(SBATCH.match(command)["args"])]
            )
            try:
                request = parse_request(argv)
            except SystemExit:
                pytest.fail(f"{doc}: {command}: the sweep refuses these options (see above)")
            assert request_problems(request) == [], (doc, command)
            parsed.append(command)
    assert len(parsed) >= 8, parsed


# --- README.md in order, in a fresh copy -------------------------------------------------------


def fresh_copy(root: Path) -> Path:
    """This checkout's tracked and unignored files, as a clone has them (a clean CI checkout is
    exactly its commit)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    copy = root / "gpurig"
    for name in filter(None, (n.decode() for n in listed)):
        source = REPO / name
        if source.is_file() or source.is_symlink():
            target = copy / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)
    return copy


def user_env() -> dict[str, str]:
    """A login shell's environment: nothing of the suite's .venv, collections or settings."""
    dropped = ("ANSIBLE_", "VIRTUAL_ENV", "PYTHON", "PYTEST", "MOLECULE_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env["PATH"] = os.pathsep.join(
        p for p in env["PATH"].split(os.pathsep) if not p.startswith(str(REPO))
    )
    return env


def shell(copy: Path, command: str, timeout: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=copy,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def standin_vars() -> dict:
    """The stand-in upstreams, as every molecule scenario's inventory gives them."""
    if not os.environ.get("STANDIN_URL"):
        unavailable("the stand-in repositories are not served (scripts/test.sh serves them)")
    config = yaml.safe_load((REPO / ".config/molecule/config.yml").read_text())
    group = config["provisioner"]["inventory"]["group_vars"]["all"]
    return yaml.safe_load(os.path.expandvars(yaml.safe_dump(group)))


CONTAINER_ARGS = [
    # the molecule platform's settings (.config/molecule/config.yml)
    *("--cgroupns", "host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw"),
    *("--tmpfs", "/run", "--tmpfs", "/run/lock", "--security-opt", "seccomp=unconfined"),
    *(
        f"--cap-add={c}"
        for c in [
            "SYS_ADMIN",
            "NET_ADMIN",
            "SYS_PTRACE",
            "SYS_MODULE",
            "SYS_NICE",
            "SYS_TIME",
            "IPC_LOCK",
            "MKNOD",
            "AUDIT_CONTROL",
        ]
    ),
]


@pytest.fixture
def container():
    if not shutil.which("docker"):
        unavailable("docker is not installed (scripts/test.sh installs and starts it)")
    name = f"gpurig-readme-{uuid.uuid4().hex[:8]}"
    started = subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "--name",
            name,
            *CONTAINER_ARGS,
            "local/gpurig-debian:12",
            "/lib/systemd/systemd",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if started.returncode != 0:
        unavailable(f"no Debian 12 test container: {started.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=120)


def host_state(container: str) -> list[str]:
    """The container's packages and configuration (tests/infra/snapshot.sh, as molecule's
    "nothing changed" checks take it)."""
    script = (REPO / "tests/infra/snapshot.sh").read_text()
    done = subprocess.run(
        ["docker", "exec", container, "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.splitlines()


# roles/gpurig/tasks/check-mode-report.yml's message: "Check mode: <role> would <what>".
WOULD = re.compile(r"^Check mode: (?P<role>[a-z_]+) would (?P<what>.+)$", re.S)
# A result the default callback prints with ansible.cfg's callback_result_format (yaml): the
# "ok/changed: [host] =>" line, then the result as YAML indented by four spaces.
RESULT = re.compile(r"^(?:ok|changed): \[[^\]]+\] =>[ \t]*\n((?:    .*\n)+)", re.M)


def messages(out: str) -> list[str]:
    """The `msg` of every result the run printed."""
    results = (yaml.safe_load(textwrap.dedent(m[1])) for m in RESULT.finditer(out))
    return [r["msg"] for r in results if isinstance(r, dict) and isinstance(r.get("msg"), str)]


# The roles that stop in check mode on a fresh host, at the first step that needs what an earlier
# role (or their own download) would have put there; each says what it would do.
STOPPING_ROLES = {
    *("nvidia_repo", "nvidia_driver", "cuda_toolkit", "cudnn", "nccl", "dcgm"),
    *("nccl_tests", "nvbandwidth"),
    *("conda", "python_env", "horovod"),
}


def assert_check_mode_report(out: str, given: dict) -> None:
    """Each stopping role says what it would install on Debian 12: the inventory's values (`given`,
    inventory/example's group variables), else compat.yml's defaults."""
    would = {m["role"]: m["what"] for m in map(WOULD.match, messages(out)) if m}
    assert set(would) == STOPPING_ROLES, would
    matrix = yaml.safe_load((REPO / "roles/gpurig/vars/main/compat.yml").read_text())
    compat = matrix["gpurig_compat"]
    default = compat["distros"]["debian12"]["default"]
    branch = given.get("gpurig_driver_branch", default["branch"])
    cuda = given.get("gpurig_cuda_version", default["cuda"])
    assert f"driver branch {branch}" in would["nvidia_driver"]
    assert f"cuda-toolkit-{cuda.replace('.', '-')}" in would["cuda_toolkit"]
    assert f"+cuda{cuda}" in would["nccl"]
    assert compat["distros"]["debian12"]["key"] in would["nvidia_repo"]
    # DCGM: the packages of the CUDA major the driver branch ships with (the newest release whose
    # ships_with the branch reaches).
    shipped = [c for c, e in compat["cuda"].items() if e["ships_with"] <= int(branch)]
    major = max(shipped, key=lambda c: tuple(int(n) for n in c.split("."))).split(".")[0]
    entry = compat["cuda_major"][major]
    for package in ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-proprietary"):
        assert f"{package}={entry['dcgm_version']}" in would["dcgm"]
    assert f"{entry['dcgm']}={entry['dcgm_version']}" in would["dcgm"]


def write_hosts(copy: Path, inventory: dict) -> None:
    """inventory/mycluster's hosts: the test hosts in place of the example's gpu01 and gpu02."""
    (copy / "inventory/mycluster/hosts.yml").write_text(yaml.safe_dump(inventory))


@pytest.mark.multihost
def test_readme_commands_in_order(tmp_path: Path, container: str, hosts: Path) -> None:
    standins = standin_vars()
    commands = shown_commands("README.md")
    copy = fresh_copy(tmp_path)
    ran = []
    for command in commands:
        if how(command) != "run":
            continue
        if command.startswith(f"{PLAYBOOK} site.yml"):
            container_host = {"ansible_host": container}
            group = {"hosts": {"readme-debian12": container_host}}
            group["vars"] = {"ansible_connection": "community.docker.docker", **standins}
            write_hosts(copy, {"all": {"children": {"gpu_nodes": group}}})
        elif command.startswith(f"{PLAYBOOK} playbooks/bench.yml"):
            # the hosts' training environment: the copy's .venv, which the quick start made (with
            # Horovod) and which the hosts see on the filesystem they share with this machine
            python = copy / ".venv" / "bin" / "python"
            fleet = netns_fleet(hosts, python, 1, tmp_path / "remote")
            # One repeat of the default sweep: the quick start above ran its three on this machine;
            # here the point is that the fleet command works, and each repeat costs a minute.
            fleet["all"]["children"]["gpu_nodes"]["vars"]["bench_args"] = ["--repeats", "1"]
            write_hosts(copy, fleet)
        if command == f"{PLAYBOOK} site.yml --check":
            before = host_state(container)
        started = time.monotonic()
        done = shell(copy, command, timeout=1800)
        if command == f"{PLAYBOOK} site.yml --check":
            after = host_state(container)
        # each command's seconds, in the output pytest keeps when the test fails (and under -s)
        print(f"{time.monotonic() - started:7.1f} s  {command}")
        assert done.returncode == 0, f"{command}\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
        ran.append((command, done))

    outputs = dict(ran)
    quick_start = outputs["scripts/bootstrap.sh && .venv/bin/python -m bench.scaling"]
    reports = list((copy / "results").glob("*/report.md"))
    assert len(reports) == 1, quick_start.stdout[-3000:]
    assert list((copy / ".cache/collections/ansible_collections").iterdir())
    check = outputs[f"{PLAYBOOK} site.yml --check"].stdout
    # through the preflight and its contact checks, then every role in check mode, saying what it
    # would do, on a host it leaves exactly as it was
    assert "Resolve the NVIDIA packages the selected roles would install" in check
    assert re.search(
        r"readme-debian12\s+: ok=\d+\s+changed=[1-9]\d*\s+unreachable=0\s+failed=0", check
    )
    example = yaml.safe_load((copy / "inventory/example/group_vars/gpu_nodes.yml").read_text())
    assert_check_mode_report(check, example)
    assert after == before
    assert not [
        line for line in after if re.search(r"nvidia|cuda|nccl|cudnn|miniforge|gpurig", line)
    ]
    # bench.yml's sweep across both hosts came back to the copy's results/<run name>/
    (fleet,) = [p.parent for p in (copy / "results").glob("*/*/runs.csv")]
    runs = pd.read_csv(fleet / "runs.csv")
    assert set(runs["status"]) == {"ok"}, runs["error"].tolist()
    assert f"{HOST1}:1,{HOST2}:1" in set(runs["hosts"])
