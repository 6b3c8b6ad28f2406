"""--resume: the lock is taken and what an earlier controller of the sweep left
running, on its --hosts nodes and on this machine, is stopped before anything else happens."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from bench_builders import config_for, cpu_machine

from bench import resume
from bench.config import ConfigError
from bench.hosts import ClusterConfig
from bench.launchers import SWEEP_TAG_VAR
from bench.launchers.sites import Site, SlurmSite, SshSite
from bench.launchers.stop import StopPolicy, stop_script
from bench.options import parse_request
from bench.paths import SweepPaths
from bench.results import ResultStore
from bench.resume import open_saved
from bench.sweep_lock import read_holder


def saved_sweep(directory: Path, sweep_id: str, cluster: ClusterConfig | None = None) -> None:
    config = config_for(["--out", str(directory.parent)], cpu_machine())
    config = dataclasses.replace(config, cluster=cluster)
    ResultStore(directory).create({"sweep_id": sweep_id, "config": config.to_dict()})


CLUSTER = ClusterConfig(
    hosts=(("gpu01", 8), ("gpu02", 8)),
    node_counts=(1, 2),
    gpus_per_node=(8,),
    ssh_port=2222,
    ssh_user="u",
    remote_python="/venv/bin/python",
    remote_workdir="/srv/bench",
)
QUICK = StopPolicy(grace_s=0.5)


class FakeNodes:
    """run_on_host as the nodes would answer it: host -> (rc, stdout, stderr); records every
    call, and when this machine's own stop ran, in order."""

    def __init__(self, answers: dict[str, tuple[int, str, str]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, str, Site]] = []

    def run_on_host(self, host: str, command: str, site: Site, timeout_s: float):  # type: ignore[no-untyped-def]
        self.calls.append((host, command, site))
        rc, out, err = self.answers[host]
        return subprocess.CompletedProcess(["ssh", host], rc, out, err)

    def stop_tagged(self, tag_var: str, tag: str, policy: StopPolicy) -> list[int]:
        self.calls.append(("this machine", f"{tag_var}={tag}", SshSite()))
        return []


def resume_with(nodes: FakeNodes, directory: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(resume, "run_on_host", nodes.run_on_host)
    monkeypatch.setattr(resume, "stop_tagged", nodes.stop_tagged)
    argv = ["--resume", str(directory)]
    return open_saved(parse_request(argv), argv, QUICK)


def test_resume_stops_what_an_earlier_controller_left_and_takes_the_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep_id = f"sweep-{uuid.uuid4().hex[:8]}"
    saved_sweep(tmp_path / "s", sweep_id)
    # a rank an earlier controller left: it carries the sweep's tag and ignores SIGTERM; it says
    # so once the handler is in place (on a loaded machine a SIGTERM could otherwise come first)
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        " print('ignoring SIGTERM', flush=True); time.sleep(120)"
    )
    env = {**os.environ, SWEEP_TAG_VAR: sweep_id}
    left = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True
    )
    other = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, SWEEP_TAG_VAR: sweep_id + "-other"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert [p.stdout.readline() for p in (left, other)] == ["ignoring SIGTERM\n"] * 2
        argv = ["--resume", str(tmp_path / "s")]
        saved = open_saved(parse_request(argv), argv, StopPolicy(grace_s=0.5))
        assert saved is not None
        assert left.wait(timeout=10) == -9  # SIGTERM ignored: SIGKILL after the grace period
        assert other.poll() is None  # another sweep's process is left alone
    finally:
        for proc in (left, other):
            proc.kill()
            proc.wait()
            proc.stdout.close()
    err = capsys.readouterr().err
    assert f"stopped 1 process(es) an earlier controller left: {left.pid}" in err
    holder = read_holder(SweepPaths(tmp_path / "s").lock)
    assert holder is not None and holder.pid == os.getpid()
    saved.lock.release()
    assert not SweepPaths(tmp_path / "s").lock.exists()


def test_resume_runs_the_stop_script_on_every_host_of_the_sweep_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    saved_sweep(tmp_path / "s", "sweep-h1", CLUSTER)
    left = "stopping 4242 /venv/bin/python -m bench.rank.worker --spec abc\n"
    nodes = FakeNodes({"gpu01": (0, "", ""), "gpu02": (0, left, "")})
    saved = resume_with(nodes, tmp_path / "s", monkeypatch)
    assert saved is not None
    saved.lock.release()
    script = stop_script(SWEEP_TAG_VAR, "sweep-h1", QUICK, describe=True)
    assert sorted(c[:2] for c in nodes.calls[:2]) == [("gpu01", script), ("gpu02", script)]
    assert all(c[2].port == 2222 and c[2].user == "u" for c in nodes.calls[:2])  # its ssh
    assert nodes.calls[2][:2] == ("this machine", f"{SWEEP_TAG_VAR}=sweep-h1")  # then here
    err = capsys.readouterr().err
    assert "gpu02: an earlier controller left processes of this sweep there:" in err
    assert "gpu02:   stopping 4242 /venv/bin/python -m bench.rank.worker" in err
    assert "gpu01" not in err  # nothing was left there


def test_an_unreachable_host_refuses_the_resume_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved_sweep(tmp_path / "s", "sweep-h2", CLUSTER)
    refused = "ssh: connect to host gpu02 port 2222: No route to host"
    nodes = FakeNodes({"gpu01": (0, "", ""), "gpu02": (255, "", refused)})
    with pytest.raises(ConfigError) as raised:
        resume_with(nodes, tmp_path / "s", monkeypatch)
    message = str(raised.value)
    assert "no rank of this sweep is left on 1 of 2 host(s)" in message
    assert f"gpu02: rc=255: {refused}" in message
    assert f"{SWEEP_TAG_VAR}=sweep-h2" in message  # how to find them by hand
    assert "gpu01:" not in message
    assert [c[0] for c in nodes.calls if c[0] == "this machine"] == []  # refused before
    assert not SweepPaths(tmp_path / "s").lock.exists()  # the lock is given back


def test_a_single_machine_sweep_reaches_no_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved_sweep(tmp_path / "local", "sweep-local")
    nodes = FakeNodes({})
    saved = resume_with(nodes, tmp_path / "local", monkeypatch)
    assert saved is not None
    saved.lock.release()
    assert [c[0] for c in nodes.calls] == ["this machine"]


# Stand-in for Slurm's scontrol: `scontrol show hostnames LIST` prints one node name per line
# (scontrol(1), Slurm 22.05.8, Debian 12's slurm-client, checked 2026-11-25).
STANDIN_SCONTROL = '#!/bin/sh\n[ "$1 $2 $3" = "show hostnames n[1-2]" ] && printf "n1\\nn2\\n"\n'


def test_a_slurm_sweep_stops_its_leftovers_on_the_allocations_nodes_through_srun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resumed inside an allocation: the stop script runs as an srun step on each of its nodes
    (a sweep resumed in another allocation finds nothing there: Slurm ended the old one's
    steps with it)."""
    standin = tmp_path / "bin" / "scontrol"
    standin.parent.mkdir()
    standin.write_text(STANDIN_SCONTROL)
    standin.chmod(0o755)
    monkeypatch.setenv("PATH", f"{standin.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-2]")
    slurm = dataclasses.replace(CLUSTER, hosts=(), slurm=True)
    saved_sweep(tmp_path / "s", "sweep-s", slurm)
    left = "stopping 77 python -m bench.rank.worker\n"
    nodes = FakeNodes({"n1": (0, left, ""), "n2": (0, "", "")})
    saved = resume_with(nodes, tmp_path / "s", monkeypatch)
    assert saved is not None
    saved.lock.release()
    assert [c[0] for c in nodes.calls] == ["n1", "n2", "this machine"]
    assert {c[2] for c in nodes.calls[:2]} == {SlurmSite("4242")}
    assert f"{SWEEP_TAG_VAR}=sweep-s" in nodes.calls[0][1]
    monkeypatch.delenv("SLURM_JOB_ID")
    with pytest.raises(ConfigError, match="inside one Slurm allocation"):
        resume_with(FakeNodes({}), tmp_path / "s", monkeypatch)


def test_a_saved_configuration_is_admitted_as_a_request_is_before_anything_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sweep.jsonl edited by hand: values no machine could run, and a port out of range.
    config = config_for(["--out", str(tmp_path)], cpu_machine())
    edited = dataclasses.replace(
        config, repeats=0, timeout_s=float("nan"), cluster=dataclasses.replace(CLUSTER, ssh_port=0)
    )
    ResultStore(tmp_path / "edited").create({"sweep_id": "s", "config": edited.to_dict()})
    nodes = FakeNodes({})
    with pytest.raises(ConfigError) as refused:
        resume_with(nodes, tmp_path / "edited", monkeypatch)
    for problem in (
        "--repeats must be >= 1, got 0",
        "--timeout must be a finite number, got nan",
        "--ssh-port must be a port from 1 to 65535, got 0",
    ):
        assert problem in str(refused.value)
    assert nodes.calls == []  # no host reached, nothing stopped
    assert read_holder(SweepPaths(tmp_path / "edited").lock) is None  # the lock is released
