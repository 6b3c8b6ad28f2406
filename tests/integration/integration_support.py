"""What the integration modules share: prerequisite checks and the tiny workload they launch.

Every module launches real torchrun/horovodrun processes; the multi-host and Slurm modules also
need root for network namespaces and sshd. A missing prerequisite skips the test, or fails it
where GPUSTACK_REQUIRE_ALL_TESTS=1 (CI), so the suite cannot go green by skipping.
"""

from __future__ import annotations

import os
import shutil
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
