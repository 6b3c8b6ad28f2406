"""--resume (issue 25): the lock is taken and what an earlier controller of the sweep left
running on this machine is stopped before anything else happens."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from bench_builders import config_for, cpu_machine

from bench.launchers import SWEEP_TAG_VAR
from bench.launchers.stop import StopPolicy
from bench.options import parse_request
from bench.results import ResultStore
from bench.resume import open_saved
from bench.sweep_lock import LOCK_NAME, read_holder


def saved_sweep(directory: Path, sweep_id: str) -> None:
    config = config_for(["--out", str(directory.parent)], cpu_machine())
    ResultStore(directory).create({"sweep_id": sweep_id, "config": config.to_dict()})


def test_resume_stops_what_an_earlier_controller_left_and_takes_the_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep_id = f"sweep-{uuid.uuid4().hex[:8]}"
    saved_sweep(tmp_path / "s", sweep_id)
    # a rank an earlier controller left: it carries the sweep's tag and ignores SIGTERM
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    env = {**os.environ, SWEEP_TAG_VAR: sweep_id}
    left = subprocess.Popen([sys.executable, "-c", code], env=env)
    other = subprocess.Popen([sys.executable, "-c", code],
                             env={**os.environ, SWEEP_TAG_VAR: sweep_id + "-other"})  # fmt: skip
    try:
        argv = ["--resume", str(tmp_path / "s")]
        saved = open_saved(parse_request(argv), argv, StopPolicy(grace_s=0.5))
        assert saved is not None
        assert left.wait(timeout=10) == -9  # SIGTERM ignored: SIGKILL after the grace period
        assert other.poll() is None  # another sweep's process is left alone
    finally:
        for proc in (left, other):
            proc.kill()
            proc.wait()
    err = capsys.readouterr().err
    assert f"stopped 1 process(es) an earlier controller left: {left.pid}" in err
    holder = read_holder(tmp_path / "s" / LOCK_NAME)
    assert holder is not None and holder.pid == os.getpid()
    saved.lock.release()
    assert not (tmp_path / "s" / LOCK_NAME).exists()
