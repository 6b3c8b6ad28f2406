"""benchmarks/step_variants.py runs as documented: each named variant in a process of its own,
the first again at the end, and a table of img/s and ratios. The figures are measurements for a
GPU (docs/results/2026-11-26-h100), never asserted here; on CPU only the uncompiled variants
are quick enough to run."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from integration_support import REPO

pytestmark = pytest.mark.slow

SCRIPT = str(REPO / "benchmarks" / "step_variants.py")


def test_step_variants_times_each_variant_and_repeats_the_first() -> None:
    small = ["--device", "cpu", "--image-size", "32", "--batch-size", "2"]
    small += ["--steps", "2", "--windows", "2", "--warmup", "1"]
    done = subprocess.run(
        [sys.executable, SCRIPT, *small, "--variants", "eager,ddp-eager"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = re.findall(r"^(eager|ddp-eager)\s+2\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", done.stdout, re.M)
    assert [name for name, *_ in rows] == ["eager", "ddp-eager", "eager"], done.stdout
    (_, best, median, ratio), *others = rows
    assert float(best) >= float(median) > 0 and ratio == "1.000"
    for _, best, median, ratio in others:
        assert float(best) >= float(median) > 0 and float(ratio) > 0


def test_step_variants_refuses_an_unknown_variant_before_running_any() -> None:
    done = subprocess.run(
        [sys.executable, SCRIPT, "--device", "cpu", "--variants", "eager,warp-speed"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "unknown variants ['warp-speed']" in done.stderr
    assert "eager:" not in done.stdout  # nothing ran
