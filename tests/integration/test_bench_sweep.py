"""Real sweeps: torchrun and horovodrun with 1 and 2 CPU ranks on tiny images.

Each test launches `python -m bench.scaling` as users do and checks the rows, files and report
it leaves behind, including after injected failures (bench.rank.faults): a rank that exits, a hung
run killed by the timeout, and a Ctrl-C followed by --resume. ResNet-18 at 32x32 with 1 warm-up
and 3 timed steps keeps each launch to seconds; nothing here asserts on speed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from integration_support import TINY

from bench.machine import horovod_status
from bench.rank.faults import ENV_VAR as FAULT_VAR
from bench.results import ResultStore

pytestmark = pytest.mark.slow


def sweep(
    out: Path, *args: str, fault: str | None = None, timeout_s: float = 300
) -> tuple[subprocess.CompletedProcess[str], Path]:
    env = {k: v for k, v in os.environ.items() if k != FAULT_VAR}
    if fault:
        env[FAULT_VAR] = fault
    done = subprocess.run(
        [sys.executable, "-m", "bench.scaling", *TINY, "--out", str(out), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
    )
    dirs = [d for d in out.iterdir() if d.is_dir()] if out.exists() else []
    assert len(dirs) == 1, done.stderr[-3000:]
    return done, dirs[0]


def rows(directory: Path) -> pd.DataFrame:
    return pd.read_parquet(directory / "runs.parquet")


def by_id(directory: Path) -> dict[str, dict]:
    return {r["run_id"]: r for r in rows(directory).to_dict(orient="records")}


def test_ddp_sweep_writes_rows_files_and_report(tmp_path: Path) -> None:
    done, d = sweep(
        tmp_path, "--launchers", "ddp", "--gpus", "1,2", "--repeats", "1", "--probe-mb", "8"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = by_id(d)
    assert set(runs) == {"ddp-n1-fp32-nchw-r0", "ddp-n2-fp32-nchw-r0"}
    for run in runs.values():
        assert run["status"] == "ok", run["error"]
        assert run["images"] == run["global_batch"] * 3
        assert run["throughput"] == pytest.approx(run["images"] / run["window_s"])
        assert run["backend"] == "gloo" and run["device"] == "cpu"
        assert run["gradient_mb"] == pytest.approx(11_689_512 * 4 / 1e6)  # ResNet-18
    one, two = runs["ddp-n1-fp32-nchw-r0"], runs["ddp-n2-fp32-nchw-r0"]
    assert (one["gpus"], one["threads_per_rank"], one["interconnect"]) == (1, 2, "none (1 rank)")
    assert (two["gpus"], two["threads_per_rank"], two["interconnect"]) == (2, 1, "loopback (gloo)")
    assert (two["nodes"], two["gpus_per_node"], two["hosts"]) == (1, 2, "localhost:2")
    # the same rows in CSV and in the store
    csv = pd.read_csv(d / "runs.csv")
    assert sorted(csv["run_id"]) == sorted(runs)
    store = ResultStore(d)
    document = store.read_meta()
    assert document["state"] == "complete" and len(store.runs.rows()) == 2
    assert document["config"]["gpu_counts"] == [1, 2]
    assert document["system"]["versions"]["torch"].startswith("2.")
    probe = pd.read_parquet(d / "probes.parquet").iloc[0]
    assert (probe["status"], probe["gpus"], probe["nbytes"]) == ("ok", 2, 8_000_000)
    assert probe["busbw_gbps"] == pytest.approx(probe["algbw_gbps"])  # n = 2: 2(n-1)/n = 1
    text = (d / "report.md").read_text()
    assert "CPU SMOKE TEST: NOT GPU RESULTS" in text
    assert "| ddp | fp32-nchw | 2 | 1 | 8 |" in text
    for name in ("throughput.png", "efficiency.png"):
        assert (d / name).read_bytes()[:4] == b"\x89PNG"
    assert (d / "logs" / "ddp-n2-fp32-nchw-r0.log").exists()
    assert "| ddp | fp32-nchw | 2 |" in done.stdout  # the summary table


@pytest.mark.usefixtures("horovod")
def test_horovod_sweep_with_fp16_compression(tmp_path: Path) -> None:
    done, d = sweep(
        tmp_path,
        "--launchers",
        "horovod",
        "--gpus",
        "1,2",
        "--repeats",
        "1",
        "--no-probe",
        "--fp16-allreduce",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = by_id(d)
    assert {r["status"] for r in runs.values()} == {"ok"}, runs
    two = runs["horovod-n2-fp32-nchw-r0"]
    assert (two["launcher"], two["gpus"], two["backend"]) == ("horovod", 2, "gloo")
    assert two["interconnect"] == "loopback (gloo)" and two["fp16_allreduce"]
    assert two["threads_per_rank"] == 1  # set for horovodrun too, which sets none itself
    assert "| horovod | fp32-nchw | 2 |" in (d / "report.md").read_text()


@pytest.mark.usefixtures("horovod", "tensorflow")
def test_ddp_horovod_and_tf_side_by_side(tmp_path: Path) -> None:
    done, d = sweep(
        tmp_path,
        "--model",
        "resnet50",  # the one model the tf launcher trains (keras.applications.ResNet50)
        "--launchers",
        "ddp,horovod,tf",
        "--gpus",
        "1,2",
        "--repeats",
        "1",
        "--no-probe",
        timeout_s=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = by_id(d)
    for run in runs.values():
        assert run["status"] == "ok", (run["run_id"], run["error"])
        assert run["images"] == run["global_batch"] * 3  # TINY's 3 timed steps, every launcher
    # on CPU each launcher in its framework's layout: Keras' NHWC, torch's NCHW
    one, two = runs["tf-n1-fp32-channels_last-r0"], runs["tf-n2-fp32-channels_last-r0"]
    assert (one["backend"], one["interconnect"]) == ("none", "none (1 process)")
    # two replicas in one process: MirroredStrategy reduces them in-process on CPU
    assert (two["backend"], two["interconnect"]) == (
        "one-device",
        "in-process (TensorFlow over 2 CPU devices)",
    )
    assert two["gpus"] == 2 and two["global_batch"] == 2 * two["batch_per_gpu"]
    assert two["rank_tensorflow"] and not two["rank_torch"]
    assert (
        runs["ddp-n2-fp32-nchw-r0"]["rank_torch"]
        and not runs["ddp-n2-fp32-nchw-r0"]["rank_tensorflow"]
    )
    report = (d / "report.md").read_text()
    side_by_side = report.split("## Launchers side by side")[1].split("##")[0]
    assert "| DDP img/s in nchw (mean of launches) |" in side_by_side
    assert "| TensorFlow img/s in channels_last (mean of launches) |" in side_by_side
    assert "| Horovod / DDP | TensorFlow / DDP |" in side_by_side
    assert "| fp32 | 2 |" in side_by_side


@pytest.mark.usefixtures("horovod")
def test_gradient_accumulation_under_both_launchers(tmp_path: Path) -> None:
    # DDP skips the allreduce (no_sync) on the first micro-batch, Horovod holds it back with
    # backward_passes_per_step=2: each step trains 2 x 4 images per rank, one allreduce, so the
    # effective global batch is 2 ranks x 2 micro-batches x 4 images.
    done, d = sweep(
        tmp_path,
        "--launchers",
        "ddp,horovod",
        "--gpus",
        "2",
        "--repeats",
        "1",
        "--no-probe",
        "--grad-accum",
        "2",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = by_id(d)
    assert set(runs) == {"ddp-n2-fp32-nchw-acc2-r0", "horovod-n2-fp32-nchw-acc2-r0"}
    for run in runs.values():
        assert run["status"] == "ok", run["error"]
        assert run["grad_accum"] == 2 and run["global_batch"] == 16
        assert run["images"] == 16 * 3  # global batch per optimizer step x timed steps
        assert run["allreduce_mb_per_image"] == pytest.approx(run["gradient_mb"] / 8)
    assert "fp32-nchw-acc2" in (d / "report.md").read_text()


def test_a_rank_that_exits_is_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    # with Horovod: ddp n1, ddp n2 (rank 1 exits), horovod n1, horovod n2 (rank 1 exits);
    # without it, two DDP repeats. Either way a run follows a crash and the crash is a row.
    horovod = horovod_status().available
    launchers, repeats = ("ddp,horovod", "1") if horovod else ("ddp", "2")
    done, d = sweep(
        tmp_path,
        "--launchers",
        launchers,
        "--gpus",
        "1,2",
        "--repeats",
        repeats,
        "--no-probe",
        fault="exit@1",
    )
    assert done.returncode == 1, done.stderr[-3000:]  # some runs failed, their rows recorded
    runs = rows(d)
    expected = (
        [
            "ddp-n1-fp32-nchw-r0",
            "ddp-n2-fp32-nchw-r0",
            "horovod-n1-fp32-nchw-r0",
            "horovod-n2-fp32-nchw-r0",
        ]
        if horovod
        else [
            "ddp-n1-fp32-nchw-r0",
            "ddp-n2-fp32-nchw-r0",
            "ddp-n1-fp32-nchw-r1",
            "ddp-n2-fp32-nchw-r1",
        ]
    )
    assert runs["run_id"].tolist() == expected
    assert runs["status"].tolist() == ["ok", "failed", "ok", "failed"]
    failed = runs[runs["status"] == "failed"].set_index("run_id")
    assert failed["throughput"].isna().all() and failed["images"].isna().all()
    for error in failed["error"]:
        assert "injecting fault 'exit'" in error
    assert "exitcode  : 3" in failed.loc["ddp-n2-fp32-nchw-r0", "error"]  # torchrun's summary
    if horovod:
        assert "Process 1 exit with status code 3" in failed.loc["horovod-n2-fp32-nchw-r0", "error"]
    report = (d / "report.md").read_text()
    assert "| ddp-n2-fp32-nchw-r0 | failed |" in report
    assert f"| 0/{'1' if horovod else '2'} |" in report  # no 2-rank run succeeded


def live_processes_with(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text in (entry / "cmdline").read_text():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_hung_run_is_killed_at_the_timeout(tmp_path: Path) -> None:
    done, d = sweep(
        tmp_path,
        "--launchers",
        "ddp",
        "--gpus",
        "2",
        "--repeats",
        "1",
        "--no-probe",
        "--timeout",
        "20",
        fault="hang@0",
    )
    assert done.returncode == 1, done.stderr[-3000:]  # every run failed: not a success
    (run,) = by_id(d).values()
    assert run["status"] == "timeout"
    assert "killed after the 20 s timeout" in run["error"]
    # the encoded spec is on every process of the run: none may outlive it
    header = (d / "logs" / f"{run['run_id']}.log").read_text().splitlines()[0]
    spec = header.split("--spec ", 1)[1].split()[0]
    assert live_processes_with(spec) == []


def wait_for(condition, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_interrupt_keeps_finished_rows_and_resume_completes(tmp_path: Path) -> None:
    args = [
        sys.executable,
        "-m",
        "bench.scaling",
        *TINY,
        "--out",
        str(tmp_path),
        "--launchers",
        "ddp",
        "--gpus",
        "1",
        "--repeats",
        "2",
        "--no-probe",
    ]

    # As from a terminal: SIGINT at its default even where this suite runs as a background job
    # (a shell starts those with SIGINT ignored, and Python then installs no Ctrl-C handler).
    def default_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint
    )
    try:
        wait_for(
            lambda: list(tmp_path.glob("*/logs/ddp-n1-fp32-nchw-r1.log")),
            300,
            "the second run to start",
        )
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "--resume" in err, err[-3000:]
    (d,) = tmp_path.iterdir()
    first = by_id(d)
    assert first["ddp-n1-fp32-nchw-r0"]["status"] == "ok", first["ddp-n1-fp32-nchw-r0"]["error"]
    assert first["ddp-n1-fp32-nchw-r1"]["status"] == "interrupted", first["ddp-n1-fp32-nchw-r1"]
    assert ResultStore(d).read_meta()["state"] == "interrupted"
    assert "## Failures" in (d / "report.md").read_text()  # written from what finished

    resume = [sys.executable, "-m", "bench.scaling", "--resume", str(d), "--no-progress"]
    done = subprocess.run(resume, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "launching 1 run(s) and 0 probe(s); 1 run(s) already done" in done.stderr, done.stderr
    after = by_id(d)
    assert {r["status"] for r in after.values()} == {"ok"} and len(after) == 2, after
    # the row finished before the interrupt is the same row, not a rerun
    assert after["ddp-n1-fp32-nchw-r0"]["started_at"] == first["ddp-n1-fp32-nchw-r0"]["started_at"]
    assert ResultStore(d).read_meta()["state"] == "complete"
    assert len(pd.read_csv(d / "runs.csv")) == 2


def test_imagefolder_data_and_ddp_knobs(tmp_path: Path) -> None:
    from PIL import Image

    data = tmp_path / "data"
    for cls in ("a", "b"):
        (data / cls).mkdir(parents=True)
        for i in range(12):
            Image.new("RGB", (48, 40), (10 * i, 50, 100)).save(data / cls / f"{i}.png")
    done, d = sweep(
        tmp_path / "out",
        "--launchers",
        "ddp",
        "--gpus",
        "2",
        "--repeats",
        "1",
        "--no-probe",
        "--data",
        str(data),
        "--workers",
        "1",
        "--memory-format",
        "channels_last",
        "--static-graph",
        "--no-gradient-as-bucket-view",
        "--fp16-allreduce",
        "--broadcast-buffers",
        "--bucket-cap-mb",
        "5",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = by_id(d).values()
    assert run["status"] == "ok", run["error"]
    assert run["data"] == str(data) and run["loader_workers"] == 1
    assert run["data_wait_s"] > 0
    assert run["channels_last"] and run["static_graph"] and not run["gradient_as_bucket_view"]
    assert run["fp16_allreduce"] and run["broadcast_buffers"] and run["bucket_cap_mb"] == 5
    # Real data adds the loader to the variant's label (synthetic runs have no loader).
    assert run["variant"] == "fp32-channels_last-torch" and run["loader"] == "torch"


def test_impossible_requests_stop_before_any_launch(tmp_path: Path) -> None:
    # Values out of range and problems with this machine are listed together, in one
    # refusal; nothing is launched or written.
    cases = (
        (["--batch-size", "0"], ("--batch-size must be >= 1",)),
        (["--gpus", "1,64", "--model", "resnet5"], ("64 requested", "did you mean resnet50")),
    )
    for args, expected in cases:
        done = subprocess.run(
            [sys.executable, "-m", "bench.scaling", *args, "--out", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 2, done.stderr
        for text in expected:
            assert text in done.stderr
    assert list(tmp_path.iterdir()) == []
