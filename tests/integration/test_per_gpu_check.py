"""The per-gpu check for real on CPU: two CPU processes stand in for two GPUs, each a one-rank run
started by the node spawner (bench.launchers.per_gpu) at the same time, on tiny images.

One test slows the second "GPU" through the fault hook (bench.rank.faults, slow@1) and finds it
flagged in the rows, the fleet table (per_gpu.parquet/.csv), report.md and the printed table;
the other crashes the first and finds a failed row beside a measured one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from integration_support import TINY

from bench.rank.faults import ENV_VAR as FAULT_VAR

pytestmark = pytest.mark.slow


def check(out: Path, fault: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    env = {**{k: v for k, v in os.environ.items() if k != FAULT_VAR}, FAULT_VAR: fault}
    argv = [sys.executable, "-m", "bench.scaling", *TINY, "--out", str(out)]
    argv += ["--launchers", "per-gpu", "--gpus", "2", "--repeats", "1"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    (directory,) = [d for d in out.iterdir() if d.is_dir()]
    return done, directory


def test_a_slow_gpu_is_flagged_in_rows_table_report_and_output(tmp_path: Path) -> None:
    done, d = check(tmp_path, "slow@1")
    assert done.returncode == 1, done.stderr[-3000:]  # a GPU was flagged
    runs = pd.read_parquet(d / "runs.parquet").set_index("gpu_index")
    assert sorted(runs.index) == [0, 1]  # one row per "GPU" of the one launch
    assert list(runs["status"]) == ["ok", "ok"] and list(runs["gpus"]) == [1, 1]
    assert set(runs["backend"]) == {"none"} and set(runs["hosts"]) == {"localhost:1"}
    assert runs.loc[1, "throughput"] < 0.9 * runs.loc[0, "throughput"]
    fleet = pd.read_parquet(d / "per_gpu.parquet")
    assert list(fleet["gpu_index"]) == [1, 0]  # slowest first
    assert list(fleet["verdict"]) == ["SLOW vs node median", "ok"]
    assert fleet["vs_node_median"].iloc[0] < -0.1 and fleet["published"].isna().all()
    assert list(pd.read_csv(d / "per_gpu.csv")["verdict"]) == list(fleet["verdict"])
    report = (d / "report.md").read_text()
    assert "## Per-GPU throughput check (slowest first)" in report
    assert "**1 of 2 GPU runs flagged:** localhost GPU 1 (SLOW vs node median)." in report
    assert "| localhost | 1 | cpu |" in done.stdout and "**SLOW vs node median** |" in done.stdout
    log = (d / "logs" / "per-gpu-n2-fp32-nchw-r0.log").read_text()
    assert "[slot 1] bench: injecting fault 'slow'" in log
    assert "[slot 0] bench: injecting fault" not in log


def test_a_failed_gpu_is_a_row_and_the_other_is_measured(tmp_path: Path) -> None:
    done, d = check(tmp_path, "exit@0")
    assert done.returncode == 1, done.stderr[-3000:]
    runs = pd.read_parquet(d / "runs.parquet").set_index("gpu_index")
    assert list(runs["status"]) == ["failed", "ok"]
    assert pd.isna(runs.loc[0, "throughput"]) and runs.loc[1, "throughput"] > 0
    assert "injecting fault 'exit'" in runs.loc[0, "error"]
    assert "bench: GPU 0 exited with status 3" in runs.loc[0, "error"]
    assert runs.loc[1, "error"] == ""
    fleet = pd.read_parquet(d / "per_gpu.parquet")
    assert list(zip(fleet["gpu_index"], fleet["verdict"], strict=True)) == [
        (0, "FAILED"),
        (1, "ok"),
    ]
    assert fleet["vs_node_median"].iloc[1] == 0.0  # the only measured GPU is its node's median
