"""The sweep's orchestration with a stand-in launcher: rows, unavailable launchers, interrupts,
resume. (The integration tests launch the real thing.)"""

from __future__ import annotations

import dataclasses
import datetime
import errno
import json
from pathlib import Path

import pytest
from bench_builders import MODELS, cpu_machine

from bench import scaling, stages
from bench.config import ConfigError
from bench.launchers import ExecResult
from bench.machine import Environment, HorovodStatus
from bench.paths import SweepPaths
from bench.results import ResultStore
from bench.resume import open_saved
from bench.shared import wire
from bench.spec import ProbeSpec, RunSpec


class FakeLauncher:
    """Answers every launch as a healthy run would: rank 0's report on stdout."""

    def __init__(self, interrupt_at: str | None = None) -> None:
        self.launched: list[str] = []
        self.interrupt_at = interrupt_at

    def run(self, spec: RunSpec | ProbeSpec, timeout_s: float, log: Path) -> ExecResult:
        if isinstance(spec, ProbeSpec):
            probe = spec
            self.launched.append(probe.probe_id)
            payload = {
                "backend": "gloo",
                "world_size": probe.world_size,
                "time_s": 0.2,
                "nbytes": probe.nbytes,
            }
            return ExecResult(0, False, 1.0, "\n".join(wire.encode(probe.probe_id, payload)))
        self.launched.append(spec.run_id)
        if spec.run_id == self.interrupt_at:
            raise KeyboardInterrupt
        n = spec.world_size
        ranks = [wire.RankReport(r, r, "vm", "cpu", 1.0, [0.25] * 4, 0.0, 10**9) for r in range(n)]
        report = wire.RunReport(spec.run_id, "gloo", n, 4 * 10**6, spec.batch_per_gpu * 4, ranks)
        return ExecResult(
            0, False, 2.0, "\n".join(wire.encode(spec.run_id, dataclasses.asdict(report)))
        )


def prepare(argv: list[str], env: Environment) -> stages.Sweep:
    request = scaling.admitted(argv)
    return stages.prepare(request, env, open_saved(request, argv))


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(stages.models, "available_models", lambda: MODELS)
    monkeypatch.setattr(stages, "collect_system_info", lambda env: {"host": "vm"})
    return cpu_machine(horovod=HorovodStatus(False, reason="horovodrun not found"))


def test_two_sweeps_started_in_one_second_get_a_directory_each(
    tmp_path: Path, machine, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    class Frozen(datetime.datetime):  # both sweeps start in the same second
        @classmethod
        def now(cls, tz=None):  # type: ignore[no-untyped-def]
            return cls(2026, 11, 28, 2, 30, 0)

    monkeypatch.setattr(stages, "datetime", Frozen)
    first = prepare(["--out", str(tmp_path)], machine)
    second = prepare(["--out", str(tmp_path)], machine)
    name = first.meta["sweep_id"]
    assert name.startswith("20261128-023000-") and second.meta["sweep_id"] == f"{name}-2"
    assert {p.name for p in tmp_path.iterdir()} == {name, f"{name}-2"}
    assert {r.sweep_id for r in second.runs} == {f"{name}-2"}  # planned under its own name
    launcher = FakeLauncher()
    for sweep in (second, first):  # each holds its own lock and writes its own rows
        assert stages.execute_sweep(sweep, progress=False, launcher=launcher) == "complete"
        assert sweep.store.runs.rows()
    # A refused sweep claims nothing.
    with pytest.raises(ConfigError):
        prepare(["--out", str(tmp_path), "--launchers", "horovod"], machine)
    assert len(list(tmp_path.iterdir())) == 2


def test_sweep_stores_every_run_and_reports(tmp_path: Path, machine) -> None:  # type: ignore[no-untyped-def]
    sweep = prepare(["--out", str(tmp_path), "--repeats", "2"], machine)
    launcher = FakeLauncher()
    assert stages.execute_sweep(sweep, progress=False, launcher=launcher) == "complete"
    # horovod is missing and was not asked for by name: its runs are rows, never launched
    assert launcher.launched == [
        "allreduce-n2",
        "ddp-n1-fp32-nchw-r0",
        "ddp-n2-fp32-nchw-r0",
        "ddp-n1-fp32-nchw-r1",
        "ddp-n2-fp32-nchw-r1",
    ]
    rows = {r.run_id: r for r in sweep.store.runs.rows()}
    assert len(rows) == 8
    assert rows["horovod-n2-fp32-nchw-r1"].status == "unavailable"
    assert rows["horovod-n2-fp32-nchw-r1"].error == "horovodrun not found"
    assert rows["ddp-n2-fp32-nchw-r0"].throughput == pytest.approx(16 * 4 / 1.0)
    assert sweep.store.probes.rows()[0].algbw_gbps == pytest.approx(0.5)  # 100 MB / 0.2 s
    meta = ResultStore(sweep.store.directory).read_meta()
    assert meta["state"] == "complete" and len(meta["planned_runs"]) == 8
    assert "| ddp | fp32-nchw | 2 |" in (sweep.store.directory / "report.md").read_text()


def test_interrupt_then_resume(tmp_path: Path, machine) -> None:  # type: ignore[no-untyped-def]
    argv = ["--out", str(tmp_path), "--launchers", "ddp", "--gpus", "1", "--repeats", "3"]
    sweep = prepare(argv, machine)
    first = FakeLauncher(interrupt_at="ddp-n1-fp32-nchw-r1")
    assert stages.execute_sweep(sweep, progress=False, launcher=first) == "interrupted"
    directory = sweep.store.directory
    rows = {r.run_id: r.status for r in sweep.store.runs.rows()}
    assert rows == {"ddp-n1-fp32-nchw-r0": "ok", "ddp-n1-fp32-nchw-r1": "interrupted"}
    assert ResultStore(directory).read_meta()["state"] == "interrupted"
    assert (directory / "report.md").exists()

    # The interrupted run's output, as its launch left it: kept when it is measured again.
    (directory / "logs" / "ddp-n1-fp32-nchw-r1.log").write_text("the first attempt\n")
    (directory / "logs" / "ddp-n1-fp32-nchw-r1.nodes").mkdir()
    resumed = prepare(["--resume", str(directory)], machine)
    second = FakeLauncher()
    assert stages.execute_sweep(resumed, progress=False, launcher=second) == "complete"
    assert second.launched == ["ddp-n1-fp32-nchw-r1", "ddp-n1-fp32-nchw-r2"]
    assert [r.status for r in resumed.store.runs.rows()] == ["ok"] * 3
    kept = directory / "logs" / "ddp-n1-fp32-nchw-r1.1.log"
    assert kept.read_text() == "the first attempt\n"
    assert (directory / "logs" / "ddp-n1-fp32-nchw-r1.1.nodes").is_dir()
    (directory / "logs" / "ddp-n1-fp32-nchw-r1.log").write_text("the second\n")
    stages.keep_earlier(SweepPaths(directory), "ddp-n1-fp32-nchw-r1")
    assert (directory / "logs" / "ddp-n1-fp32-nchw-r1.2.log").read_text() == "the second\n"


def test_a_full_disk_keeps_the_stored_runs_leaves_no_lock_or_temporary_file_and_resume_goes_on(
    tmp_path: Path, machine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    from bench import results

    argv = ["--out", str(tmp_path), "--launchers", "ddp", "--gpus", "1", "--repeats", "3"]
    sweep = prepare(argv, machine)
    directory = sweep.store.directory
    real_fsync = results.os.fsync

    def fsync_until_full(fd: int) -> None:  # the disk fills once the first run is stored
        store = directory / "sweep.jsonl"
        if store.exists() and store.read_text(errors="replace").count('{"run": ') > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(results.os, "fsync", fsync_until_full)
    assert stages.execute_sweep(sweep, progress=False, launcher=FakeLauncher()) == "unsaved"
    said = " ".join(capsys.readouterr().err.split())
    assert "(No space left on device). The runs stored before are kept in" in said
    assert f"free space, then --resume {directory}" in said
    left = sorted(p.name for p in directory.iterdir())
    assert "controller.lock" not in left and not [n for n in left if n.endswith(".tmp")], left
    monkeypatch.setattr(results.os, "fsync", real_fsync)  # space again
    stored = {r.run_id for r in results.ResultStore(directory).runs.rows()}
    assert stored and stored < {f"ddp-n1-fp32-nchw-r{i}" for i in range(3)}
    resumed = prepare(["--resume", str(directory)], machine)
    again = FakeLauncher()
    assert stages.execute_sweep(resumed, progress=False, launcher=again) == "complete"
    assert not set(again.launched) & stored  # nothing stored is measured again
    assert [r.status for r in resumed.store.runs.rows()] == ["ok"] * 3


def test_resume_refuses_a_config_that_does_not_load(tmp_path: Path, machine) -> None:  # type: ignore[no-untyped-def]
    # as an earlier version saved it: one sweep.json document, read into the store
    saved = {"sweep_id": "s", "config": {"steps": 8}, "runs": [], "probes": []}
    (tmp_path / "sweep.json").write_text(json.dumps(saved))
    with pytest.raises(ConfigError, match="its configuration does not load"):
        prepare(["--resume", str(tmp_path)], machine)


def test_nodes_that_differ_are_refused_with_the_other_problems_at_once(
    tmp_path: Path, machine, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from test_ssh import ssh_launcher

    nodes = ssh_launcher()
    nodes.infos["gpu02"] = dataclasses.replace(nodes.infos["gpu02"], torch="2.12.0")
    monkeypatch.setattr(stages, "connect", lambda cluster: nodes)
    plain_file = tmp_path / "plain"
    plain_file.write_text("")
    argv = ["--out", str(plain_file), "--hosts", "gpu01:8,gpu02:8", "--launchers", "ddp"]
    with pytest.raises(ConfigError) as raised:
        prepare(argv, machine)
    message = str(raised.value)
    assert "--out" in message  # a problem of the request ...
    assert "2.12.0" in message and "gpu02" in message  # ... and the nodes', in one refusal
