"""playbooks/files/verify_allreduce.py: the node-to-node all-reduce, run for real on CPU.

CI has no GPU, so two Gloo ranks on this machine stand in for a pair of nodes (torchrun
--standalone); the multi-host run is tests/integration/test_multihost.py's acceptance test.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "playbooks/files/verify_allreduce.py"
_spec = importlib.util.spec_from_file_location("verify_allreduce", SCRIPT)
allreduce = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(allreduce)


def test_the_bus_factor_is_nccl_tests_all_reduce_factor():
    assert allreduce.bus_factor(2) == 1.0
    assert allreduce.bus_factor(8) == 1.75
    assert allreduce.bus_factor(16) == 1.875


def test_two_ranks_report_one_json_with_bus_bandwidth_samples():
    pytest.importorskip("torch")
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(SCRIPT), "--mib", "1", "--repeats", "3", "--iters", "2"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("{")]  # rank 0 only
    report = json.loads(line)
    assert report["backend"] == "gloo" and report["ranks"] == 2
    assert report["bytes"] == 1 << 20 and len(report["busbw_gbs"]) == 3
    assert report["busbw_gbs"] == report["algbw_gbs"]  # n = 2: bus factor 1
    assert all(x > 0 for x in report["busbw_gbs"])


@pytest.mark.parametrize(
    ("option", "value"), [("--mib", "0"), ("--mib", "nan"), ("--repeats", "1"), ("--iters", "x")]
)
def test_bad_values_are_refused_before_anything_runs(option, value):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), option, value], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert option in done.stderr and repr(value) in done.stderr
