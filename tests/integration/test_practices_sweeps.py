"""Two questions as users ask them, on CPU: "DDP vs DataParallel" and "where does a
step's time go" (activation checkpointing with --profile), each one real sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from test_bench_sweep import by_id, sweep

pytestmark = pytest.mark.slow


def test_ddp_against_dataparallel_in_one_command(tmp_path: Path) -> None:
    done, d = sweep(
        tmp_path,
        "--launchers",
        "dp,ddp",
        "--gpus",
        "1,2",
        "--repeats",
        "1",
        "--no-probe",
        "--compile",
        "off",
    )
    assert done.returncode == 1, done.stderr[-3000:]  # dp at 2 CPU ranks cannot run: recorded
    runs = by_id(d)
    dp, dp2 = runs["dp-n1-fp32-nchw-r0"], runs["dp-n2-fp32-nchw-r0"]
    assert dp["status"] == "ok", dp["error"]
    assert (dp["backend"], dp["interconnect"]) == ("none", "none (1 process)")
    assert dp["threads_per_rank"] == 2  # one process: every core
    assert dp2["status"] == "unavailable" and "one device" in dp2["error"]
    assert {runs[r]["status"] for r in ("ddp-n1-fp32-nchw-r0", "ddp-n2-fp32-nchw-r0")} == {"ok"}
    log = (d / "logs" / "dp-n1-fp32-nchw-r0.log").read_text().splitlines()[0]
    assert "-m bench.rank.worker" in log and "torch.distributed.run" not in log  # one process
    text = (d / "report.md").read_text()
    assert "DDP / DataParallel" in text and "| 1 process x 2 threads |" in text


def test_checkpointing_effect_and_profile_traces(tmp_path: Path) -> None:
    done, d = sweep(
        tmp_path,
        "--launchers",
        "ddp",
        "--gpus",
        "2",
        "--repeats",
        "1",
        "--no-probe",
        "--activation-checkpointing",
        "off,on",
        "--profile",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = pd.read_parquet(d / "runs.parquet").set_index("run_id")
    assert list(runs["activation_checkpointing"]) == [False, True] and set(runs["status"]) == {"ok"}
    assert runs["profile"].all()
    convolutions = {}
    for run_id in runs.index:
        trace = d / "logs" / f"{run_id}.trace.json"
        events = json.loads(trace.read_text())["traceEvents"]
        convolutions[run_id] = sum(1 for e in events if e.get("name") == "aten::convolution")
        summary = json.loads((d / "logs" / f"{run_id}.profile.json").read_text())
        assert summary["steps"] == 5 and summary["top"]
        assert 0 < summary["communication_share"] < 1  # gloo's allreduce between 2 ranks
    # ResNet-18 runs 20 convolutions a forward pass; the 19 of layer1-4 run again in backward
    plain, ckpt = convolutions["ddp-n2-fp32-nchw-r0"], convolutions["ddp-n2-fp32-nchw-ckpt-r0"]
    assert plain == 5 * 20 and ckpt == 5 * (20 + 19)
    text = (d / "report.md").read_text()
    assert "### Activation checkpointing" in text and "### ddp-n2-fp32-nchw-ckpt-r0" in text
    assert "(logs/ddp-n2-fp32-nchw-r0.trace.json)" in text
