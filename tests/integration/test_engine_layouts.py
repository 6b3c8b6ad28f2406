"""DDP and Horovod engines with channels_last and torch.compile, under real torchrun/horovodrun.

Horovod's collectives refuse tensors that are not row-major (channels_last weights crashed
hvd.broadcast_parameters with "Tensor is required to be contiguous"). engine_check.py makes the
ranks start from different weights, checks that the engine's broadcast leaves every rank with
rank 0's weights in their layout, trains a few steps and compares the result with one process
training on the whole batch. A small BatchNorm-free network keeps each launch to seconds (the
compiled runs compile it with Inductor on the CPU).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from integration_support import REPO, TINY

pytestmark = pytest.mark.slow

CHECK = Path(__file__).with_name("engine_check.py")
BIN = Path(sys.executable).parent


def launch(launcher: str, ranks: int, layout: str, mode: str) -> subprocess.CompletedProcess[str]:
    script = [str(CHECK), launcher, layout, mode]
    if launcher == "ddp":
        argv = [str(BIN / "torchrun"), "--standalone", f"--nproc_per_node={ranks}", *script]
    else:
        argv = [
            str(BIN / "horovodrun"),
            "-np",
            str(ranks),
            "-H",
            f"localhost:{ranks}",
            sys.executable,
            *script,
        ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, cwd=REPO)


def check(launcher: str, ranks: int, layout: str, mode: str) -> None:
    done = launch(launcher, ranks, layout, mode)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert f"ENGINE_CHECK_OK world={ranks}" in output, output[-4000:]


@pytest.mark.parametrize("ranks", [1, 2])
def test_ddp_channels_last(ranks: int) -> None:
    check("ddp", ranks, "channels_last", "eager")


@pytest.mark.usefixtures("horovod")
@pytest.mark.parametrize("ranks", [1, 2])
def test_horovod_channels_last(ranks: int) -> None:
    check("horovod", ranks, "channels_last", "eager")


@pytest.mark.parametrize("launcher", ["ddp", "horovod"])
def test_compile_channels_last_two_ranks(launcher: str, request: pytest.FixtureRequest) -> None:
    if launcher == "horovod":
        request.getfixturevalue("horovod")
    check(launcher, 2, "channels_last", "compile")


@pytest.mark.usefixtures("horovod")
def test_sweep_with_channels_last_compile_and_a_timed_window_in_seconds(tmp_path: Path) -> None:
    """The whole path through bench.scaling: both launchers, 2 ranks, channels_last + compile,
    warm-up until steady and a window of --timed-seconds; the row says what it ran."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.scaling",
            *TINY,
            "--out",
            str(tmp_path),
            "--gpus",
            "2",
            "--launchers",
            "ddp,horovod",
            "--repeats",
            "1",
            "--no-probe",
            "--memory-format",
            "channels_last",
            "--compile",
            "on",
            "--timed-seconds",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    (sweep,) = tmp_path.iterdir()
    rows = pd.read_parquet(sweep / "runs.parquet").set_index("run_id")
    assert sorted(rows.index) == [
        "ddp-n2-fp32-channels_last-compile-r0",
        "horovod-n2-fp32-channels_last-compile-r0",
    ]
    for run_id, row in rows.iterrows():
        assert row["status"] == "ok", (run_id, row["error"])
        assert row["channels_last"] and row["compile"] and row["timed_seconds"] == 2.0
        assert row["compile_s"] > 0  # the compiling first step, outside the window
        assert row["warmup_steps_run"] >= 1 + 5  # it, then at least one settling window
        assert row["timed_steps_run"] >= 3  # --steps is the minimum
        assert row["images"] == row["timed_steps_run"] * row["global_batch"]
        assert 0 <= row["step_time_cv"] < 10
