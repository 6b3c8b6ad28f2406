"""--resume of a --slurm sweep (issue 25): the jobs an earlier controller left (sbatch --wait
outlives a controller killed with kill -9) are found by the comment every job of the sweep
carries and cancelled with the common stop policy through scancel, against squeue/scancel
stand-ins on PATH (tests/unit/slurm_queue_standin.py). tests/integration/test_slurm_cluster.py
does the same against a real slurmctld."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pytest
from bench_builders import config_for, cpu_machine
from slurm_queue_standin import FakeQueue

from bench.config import ConfigError
from bench.hosts import ClusterConfig
from bench.launchers.stop import (
    SlurmQueueError,
    StopPolicy,
    slurm_jobs_with_comment,
    stop_slurm_jobs_with_comment,
)
from bench.options import parse_request
from bench.results import ResultStore
from bench.resume import open_saved
from bench.sweep_lock import LOCK_NAME

QUICK = StopPolicy(grace_s=0.5)
TAG = "gpustack-sweep:20261124-101500-login1"
JOBS = [
    {"id": "101", "comment": TAG},  # the sweep's job: ends on SIGTERM
    {"id": "102", "comment": TAG, "on_term": "ignore"},  # ends only on SIGKILL
    {"id": "103", "comment": TAG + "-2"},  # another sweep of the same second
    {"id": "104", "comment": "gpustack-sweep:other"},
    {"id": "105"},  # no comment: "(null)"
    {"id": "106", "comment": TAG, "user": "someone-else"},  # not this user's
]


@pytest.fixture
def queue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeQueue:
    fake = FakeQueue(tmp_path / "slurm", [dict(j) for j in JOBS])
    monkeypatch.setenv("PATH", fake.path(os.environ["PATH"]))
    return fake


def test_only_this_users_jobs_with_exactly_the_sweeps_comment_are_found(queue: FakeQueue) -> None:
    assert slurm_jobs_with_comment(TAG) == ["101", "102"]


def test_they_are_stopped_with_the_common_policy_and_waited_for(queue: FakeQueue) -> None:
    found, still = stop_slurm_jobs_with_comment(TAG, QUICK, wait_s=5)
    assert (found, still) == (["101", "102"], [])
    assert queue.job_ids() == ["103", "104", "105", "106"]
    assert queue.calls() == [
        ["--signal=TERM", "--full", "101"],  # gone within the grace period
        ["--signal=TERM", "--full", "102"],  # still listed after it: killed, then cancelled
        ["--signal=KILL", "--full", "102"],
        ["102"],
    ]


def test_a_job_that_stays_listed_is_reported_after_the_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeQueue(tmp_path, [{"id": "7", "comment": TAG, "on_term": "stuck"}])
    monkeypatch.setenv("PATH", fake.path(os.environ["PATH"]))
    started = time.monotonic()
    assert stop_slurm_jobs_with_comment(TAG, QUICK, wait_s=1) == (["7"], ["7"])
    assert time.monotonic() - started < 10  # bounded: grace + wait, not the job's --time


def test_squeue_failing_is_an_error_naming_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeQueue(tmp_path, [], fail="Unable to contact slurm controller (connect failure)")
    monkeypatch.setenv("PATH", fake.path(os.environ["PATH"]))
    with pytest.raises(SlurmQueueError, match=r"squeue --me --noheader.*rc=1.*connect failure"):
        slurm_jobs_with_comment(TAG)
    assert fake.calls() == []  # nothing cancelled blindly


SLURM = ClusterConfig(
    hosts=(("slurm-node1", 1), ("slurm-node2", 1)), node_counts=(2,), gpus_per_node=(1,), slurm=True
)


def saved_slurm_sweep(directory: Path, sweep_id: str) -> None:
    config = config_for(["--out", str(directory.parent)], cpu_machine())
    config = dataclasses.replace(config, cluster=SLURM)
    ResultStore(directory).create({"sweep_id": sweep_id, "config": config.to_dict()})


def resume(directory: Path):  # type: ignore[no-untyped-def]
    argv = ["--resume", str(directory)]
    return open_saved(parse_request(argv), argv, QUICK)


def test_resume_cancels_the_sweeps_jobs_and_names_them(
    queue: FakeQueue, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved_slurm_sweep(tmp_path / "s", "20261124-101500-login1")
    saved = resume(tmp_path / "s")
    assert saved is not None
    saved.lock.release()
    assert queue.job_ids() == ["103", "104", "105", "106"]
    err = capsys.readouterr().err
    assert f"cancelled 2 Slurm job(s) an earlier controller left ({TAG}): 101 102" in err


def test_resume_is_refused_while_squeue_cannot_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeQueue(tmp_path / "slurm", [{"id": "9", "comment": TAG}], fail="Socket timed out")
    monkeypatch.setenv("PATH", fake.path(os.environ["PATH"]))
    saved_slurm_sweep(tmp_path / "s", "20261124-101500-login1")
    with pytest.raises(ConfigError) as raised:
        resume(tmp_path / "s")
    message = str(raised.value)
    assert "cannot make sure that no Slurm job of this sweep is left" in message
    assert "Socket timed out" in message
    assert f"the comment {TAG}" in message  # how to find them by hand
    assert fake.calls() == [] and fake.job_ids() == ["9"]
    assert not (tmp_path / "s" / LOCK_NAME).exists()  # the lock is given back
