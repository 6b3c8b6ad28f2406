"""What the integration modules share: prerequisite checks and the tiny workload they launch.

Every module launches real torchrun/horovodrun processes; the multi-host and Slurm modules also
need root for network namespaces and sshd. A missing prerequisite skips the test, or fails it
where GPURIG_REQUIRE_ALL_TESTS=1 (CI), so the suite cannot go green by skipping.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "tests" / "infra"
# CPU ranks with gloo; ResNet-18 on 32x32 images keeps each launch to seconds.
TINY = [
    "--model",
    "resnet18",
    "--image-size",
    "32",
    "--batch-size",
    "4",
    "--warmup-steps",
    "1",
    "--steps",
    "3",
    "--no-progress",
]
# The network-namespace hosts of tests/infra/netns.sh (conftest.py's `hosts` fixture): gsb1..gsb3
# on SUBNET.0/24, sshd on PORT in each; this machine is SUBNET.1 on the bridge.
NETNS = INFRA / "netns.sh"
SUBNET = "10.213.0"
PORT = 2213
HOST1, HOST2, HOST3 = f"{SUBNET}.11", f"{SUBNET}.12", f"{SUBNET}.13"
NETNS_TOOLS = ("ip", "nsenter", "unshare", "ssh", "ssh-keygen", "/usr/sbin/sshd")


def netns(command: str, state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """tests/infra/netns.sh COMMAND for the hosts whose state directory is `state` (`up 3` again
    restarts an sshd a test stopped, and changes nothing else)."""
    env = {
        **os.environ,
        "GSB_NETNS_STATE": str(state),
        "GSB_NETNS_SUBNET": SUBNET,
        "GSB_NETNS_SSH_PORT": str(PORT),
    }
    return subprocess.run(
        [str(NETNS), command, *args], env=env, capture_output=True, text=True, timeout=120
    )


def unavailable(reason: str) -> None:
    """Skip, or fail where GPURIG_REQUIRE_ALL_TESTS=1 (CI) so nothing passes by skipping."""
    if os.environ.get("GPURIG_REQUIRE_ALL_TESTS") == "1":
        pytest.fail(f"GPURIG_REQUIRE_ALL_TESTS=1 but {reason}")
    pytest.skip(reason)


def require_netns_hosts(needs_root_for: str) -> None:
    """Stop the test unless this machine can make namespace hosts running sshd."""
    if os.geteuid() != 0:
        unavailable(f"{needs_root_for} need root")
    missing = [t for t in NETNS_TOOLS if not shutil.which(t)]
    if missing:
        unavailable(f"missing {', '.join(missing)} (iproute2, util-linux, openssh)")


def bench_env(root: Path) -> Path:
    """A venv for playbooks/bench.yml to install the bench's wheel into; its Python.

    It sees this interpreter's packages (torch, pandas, pip, ...) through a site directory, the
    way a python_env environment has them from its pip installs; the bench comes only from the wheel
    the playbook installs in it. (This .venv has the bench in editable mode, which the playbook
    leaves alone.)"""
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    own = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    shared = sysconfig.get_path("purelib")
    (Path(own) / "gpurig-test-shared.pth").write_text(f"import site; site.addsitedir({shared!r})\n")
    return python


def netns_fleet(
    state: Path, python: Path | str, gpus_per_node: int, workdir: Path, count: int = 2
) -> dict:
    """An inventory whose gpu_nodes are the first `count` namespace hosts, gsb1 and gsb2 unless
    said (state: the `hosts` fixture's directory), reached as root with the test key, with
    playbooks/bench.yml's settings for hosts that share this filesystem: the environment `python`
    runs in, each host's ranks and its scratch."""
    addresses = {"gsb1": HOST1, "gsb2": HOST2, "gsb3": HOST3}
    return {
        "all": {
            "children": {
                "gpu_nodes": {
                    "hosts": {
                        name: {"ansible_host": address}
                        for name, address in list(addresses.items())[:count]
                    },
                    "vars": {
                        "ansible_port": PORT,
                        "ansible_user": "root",
                        "ansible_ssh_private_key_file": str(state / "id_ed25519"),
                        "ansible_ssh_common_args": (
                            f"-o UserKnownHostsFile={state / 'known_hosts'} "
                            "-o StrictHostKeyChecking=yes"
                        ),
                        "ansible_python_interpreter": "/usr/bin/python3",
                        # ssh's connect timeout: this 2-core machine, loaded by the suite and by
                        # molecule beside it, has taken over the default 10 s to answer.
                        "ansible_ssh_timeout": 60,
                        "bench_python": str(python),
                        "bench_gpus_per_node": gpus_per_node,
                        "bench_workdir": str(workdir),
                    },
                }
            }
        }
    }


@contextlib.contextmanager
def slurm_on_netns(
    base: Path, prefix: str, subnet: str, ssh_port: int, slurm_port: int, hosts: int
) -> Iterator[dict[str, str]]:
    """A test Slurm whose nodes are `hosts` namespace hosts (tests/infra/netns.sh, then slurm.sh:
    munge, slurmctld on their bridge, one slurmd in each), with their own prefix, subnet, ports
    and state under `base`, torn down afterwards. Yields the environment that reaches it:
    SLURM_CONF, and this Python first on PATH (sbatch and srun pass PATH on to the tasks)."""
    require_netns_hosts("network namespaces, sshd, slurmd and munged")
    env = {
        **os.environ,
        "GSB_NETNS_PREFIX": prefix,
        "GSB_NETNS_SUBNET": subnet,
        "GSB_NETNS_SSH_PORT": str(ssh_port),
        "GSB_NETNS_STATE": str(base / "netns"),
        "GSB_SLURM_STATE": str(base / "slurm"),
        "GSB_SLURM_PORT": str(slurm_port),
    }

    def infra(script: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(INFRA / script), *args], env=env, capture_output=True, text=True, timeout=300
        )

    infra("slurm.sh", "down")
    infra("netns.sh", "down")
    try:
        up = infra("netns.sh", "up", str(hosts))
        assert up.returncode == 0, up.stderr
        up = infra("slurm.sh", "up", "netns")
        assert up.returncode == 0, up.stderr
        path = f"{Path(sys.executable).parent}:{env['PATH']}"
        yield {**env, "PATH": path, "SLURM_CONF": str(base / "slurm" / "slurm.conf")}
    finally:
        infra("slurm.sh", "down")
        infra("netns.sh", "down")
