"""What the integration modules share: prerequisite checks and the tiny workload they launch.

Every module launches real torchrun/horovodrun processes; the multi-host and Slurm modules also
need root for network namespaces and sshd. A missing prerequisite skips the test, or fails it
where GPUSTACK_REQUIRE_ALL_TESTS=1 (CI), so the suite cannot go green by skipping.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
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
NETNS_TOOLS = ("ip", "nsenter", "unshare", "ssh", "ssh-keygen", "/usr/sbin/sshd")


def unavailable(reason: str) -> None:
    """Skip, or fail where GPUSTACK_REQUIRE_ALL_TESTS=1 (CI) so nothing passes by skipping."""
    if os.environ.get("GPUSTACK_REQUIRE_ALL_TESTS") == "1":
        pytest.fail(f"GPUSTACK_REQUIRE_ALL_TESTS=1 but {reason}")
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
    way a python_env environment has them from packages.yml; the bench comes only from the wheel
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
    (Path(own) / "gpustack-test-shared.pth").write_text(
        f"import site; site.addsitedir({shared!r})\n"
    )
    return python
