"""A killed controller and a damaged sweep directory, with real CPU sweeps.

kill -9 of `python -m bench.scaling` leaves no process of its launches alive after 2 s (the
launcher and every rank die with it: bench.shared.lifeline); `--resume` then takes over the dead
controller's lock, reads the store with its last line cut short (named and left out) and writes a
damaged runs.parquet again, keeps every finished row as it was and measures only what did not
finish.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from integration_support import TINY

from bench.rank.faults import ENV_VAR as FAULT_VAR
from bench.results import ResultStore

pytestmark = pytest.mark.slow
MARK_VAR = "BENCH_TEST_CONTROLLER"  # inherited by everything the controller starts


def marked(mark: str) -> list[tuple[int, str]]:
    """Live (not zombie) processes whose environment has MARK_VAR=mark, with their command."""
    entry = f"{MARK_VAR}={mark}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if entry in environ.split(b"\0") and state != "Z":
            found.append((int(proc.name), command))
    return found


def wait_for(condition: Callable[[], object], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def start_sweep(out: Path, args: list[str], fault: str = "") -> tuple[subprocess.Popen[str], str]:
    mark = uuid.uuid4().hex
    env = {**{k: v for k, v in os.environ.items() if k != FAULT_VAR}, MARK_VAR: mark}
    if fault:
        env[FAULT_VAR] = fault
    argv = [sys.executable, "-m", "bench.scaling", *TINY, "--out", str(out), *args]
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    return proc, mark


def ranks(mark: str) -> list[tuple[int, str]]:
    """The rank processes themselves (python [-u] -m bench.rank.worker), not the launchers
    whose command lines end with that command."""
    found = []
    for pid, command in marked(mark):
        args = command.split()
        if len(args) > 3 and args[1] in ("-u", "-m") and "bench.rank.worker" in args[2:4]:
            found.append((pid, command))
    return found


def kill_controller(proc: subprocess.Popen[str], mark: str) -> list[tuple[int, str]]:
    """kill -9 the controller; what of its launches is still alive 2 s later."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    time.sleep(2.0)
    return marked(mark)


@pytest.mark.parametrize("launcher", ["ddp", "horovod"])
def test_kill_9_of_the_controller_leaves_no_rank_alive(
    tmp_path: Path, launcher: str, request: pytest.FixtureRequest
) -> None:
    if launcher == "horovod":
        request.getfixturevalue("horovod")
    # rank 0 hangs after warm-up: both ranks are alive, mid-run, when the controller dies
    args = [
        "--launchers",
        launcher,
        "--gpus",
        "2",
        "--repeats",
        "1",
        "--no-probe",
        "--timeout",
        "300",
    ]
    proc, mark = start_sweep(tmp_path, args, fault="hang@0")
    try:
        wait_for(lambda: len(ranks(mark)) == 2, 300, "two ranks to run")
        time.sleep(1.0)  # past their start-up
        left = kill_controller(proc, mark)
    finally:
        for pid, _ in marked(mark):
            os.kill(pid, signal.SIGKILL)
    assert left == [], f"{len(left)} alive 2 s after kill -9: {[c[:70] for _, c in left]}"


@pytest.fixture(scope="module")
def killed_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[int, str]]]:
    """One sweep of two DDP repeats whose controller got kill -9 while the second ran: its
    directory (the first row finished) and what of its launches was alive 2 s after the kill.
    Each damage case resumes its own copy, so the sweep is run and killed once for all of them."""
    out = tmp_path_factory.mktemp("killed")
    args = ["--launchers", "ddp", "--gpus", "1", "--repeats", "2", "--no-probe"]
    proc, mark = start_sweep(out, args)
    try:
        wait_for(
            lambda: list(out.glob("*/logs/ddp-n1-fp32-nchw-r1.log")),
            300,
            "the second run to start",
        )
        left = kill_controller(proc, mark)
    finally:
        proc.kill()
    (d,) = out.iterdir()
    return d, left


@pytest.mark.parametrize("damage", ["damage runs.parquet", "cut sweep.jsonl"])
def test_resume_after_kill_9_and_damage_keeps_finished_rows(
    killed_sweep: tuple[Path, list[tuple[int, str]]], tmp_path: Path, damage: str
) -> None:
    killed, left = killed_sweep
    assert left == []
    d = tmp_path / killed.name
    shutil.copytree(killed, d)  # the killed controller's lock file included
    finished = stored_rows(d)["ddp-n1-fp32-nchw-r0"]
    if damage == "damage runs.parquet":
        (d / "runs.parquet").write_bytes(b"PAR1")  # a view: written again from the store
    else:  # the last line, the state the killed controller saved after its first run, cut short
        text = (d / "sweep.jsonl").read_bytes()
        (d / "sweep.jsonl").write_bytes(text[:-10])

    resume = [sys.executable, "-m", "bench.scaling", "--resume", str(d), "--no-progress"]
    done = subprocess.run(resume, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "took over the lock of pid" in done.stderr  # the killed controller's
    cut = "sweep.jsonl: its last line was cut short (a crash while writing)"
    assert (cut in done.stderr) == (damage == "cut sweep.jsonl"), done.stderr[-3000:]
    assert "launching 1 run(s) and 0 probe(s); 1 run(s) already done" in done.stderr
    assert ResultStore(d).read_meta()["state"] == "complete"
    rows = stored_rows(d)
    assert rows["ddp-n1-fp32-nchw-r0"] == finished  # the same row, not measured again
    assert rows["ddp-n1-fp32-nchw-r1"].status == "ok"
    assert sorted(pd.read_parquet(d / "runs.parquet")["run_id"]) == sorted(rows)
    assert not (d / "controller.lock").exists()


def stored_rows(directory: Path) -> dict:
    return {r.run_id: r for r in ResultStore(directory).runs.rows()}
