"""The Slurm health check verify.yml installs, run by a real slurmd: it drains and resumes.

verify.yml (over a local connection, its tools pointed at tests/standin/tools) installs the fast
checks with verify_healthcheck_dir. tests/infra/slurm.sh then starts a one-node Slurm on this
machine (its own munge, state directory and ports) whose slurm.conf names the installed program as
HealthCheckProgram, run every HealthCheckInterval=1 s on the node in any state. The test swaps the
program's healthcheck.json between a healthy stand-in root and one with an Xid in the kernel log,
and watches the node as sinfo shows it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from integration_support import INFRA, unavailable
from test_verify_checks import standin, verify_process

pytestmark = pytest.mark.slurm
PORT = "6947"


def wait_for(what: str, probe, seconds: float = 60):
    deadline = time.monotonic() + seconds
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"not within {seconds:.0f} s: {what}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The health check as verify.yml installs it, on a healthy stand-in node."""
    tmp = tmp_path_factory.mktemp("verify")
    directory = tmp / "healthcheck"
    given = json.dumps({"verify_healthcheck_dir": str(directory)})
    proc = verify_process(tmp, set(), "--tags", "driver", "-e", given)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return directory


def test_verify_installs_the_checks_with_its_thresholds(installed):
    settings = json.loads((installed / "healthcheck.json").read_text())
    assert settings["verify_expected_gpus"] == 4  # what the stand-in PCI bus showed
    assert settings["verify_dcgm"] is True and settings["verify_xid_allowed_codes"] == []
    done = subprocess.run(
        [str(installed / "gpurig-healthcheck"), "--report"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {row["check"]: row for row in json.loads(done.stdout)["checks"]}
    assert len(rows) == 6 and {"gpu_count", "remapped_rows", "dcgm_health"} <= set(rows)
    assert all(row["passed"] for row in rows.values()), rows
    assert rows["nvlink_links"]["figures"]["links_per_gpu"] == {"0": 18}


@pytest.fixture(scope="module")
def cluster(installed, tmp_path_factory: pytest.TempPathFactory):
    """One node, HealthCheckProgram the installed check (through a wrapper that gives it the
    test cluster's SLURM_CONF, which slurmd does not pass on); yields (env, node, settings, log)."""
    if os.geteuid() != 0:
        unavailable("slurmd and munged need root")
    if not shutil.which("slurmd"):
        unavailable("slurmd is not installed (scripts/test.sh installs it)")
    base = tmp_path_factory.mktemp("slurm")
    state, log = base / "state", base / "healthcheck.log"
    wrapper = base / "healthcheck.sh"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"export SLURM_CONF={state / 'slurm.conf'} PATH={os.environ['PATH']}\n"
        f'exec {installed / "gpurig-healthcheck"} "$@" >>{log} 2>&1\n'
    )
    wrapper.chmod(0o755)
    env = {
        **os.environ,
        "GSB_SLURM_STATE": str(state),
        "GSB_SLURM_PORT": PORT,
        "GSB_SLURM_CONF_EXTRA": f"HealthCheckProgram={wrapper}\nHealthCheckInterval=1\n"
        "HealthCheckNodeState=ANY",
    }

    def slurm_sh(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(INFRA / "slurm.sh"), *args], env=env, capture_output=True, text=True, timeout=300
        )

    slurm_sh("down")
    try:
        up = slurm_sh("up")
        assert up.returncode == 0, up.stderr
        node = (state / "nodes").read_text().split()[0]
        yield {**env, "SLURM_CONF": str(state / "slurm.conf")}, node, installed, log
    finally:
        slurm_sh("down")


def sinfo(env: dict, node: str) -> tuple[str, str]:
    shown = subprocess.run(
        ["sinfo", "--noheader", "--Node", f"--nodes={node}", "--format=%T|%E"],
        env=env, capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    state, _, reason = shown.splitlines()[0].partition("|")
    return state, reason


def use_root(installed: Path, root: Path, faults: set[str]) -> None:
    """Point healthcheck.json's tools at a stand-in root with these faults (written whole, then
    renamed, so the program never reads half a file)."""
    settings = json.loads((installed / "healthcheck.json").read_text())
    built = standin.build_root(root, faults)
    settings.update({name: built[name] for name in settings if name in built})
    settings["verify_expected_gpus"] = 4
    partial = installed / "healthcheck.json.new"
    partial.write_text(json.dumps(settings))
    partial.rename(installed / "healthcheck.json")


def test_a_failed_check_drains_the_node_and_passing_again_resumes_it(cluster, tmp_path):
    env, node, installed, _ = cluster
    assert sinfo(env, node) == ("idle", "none")
    use_root(installed, tmp_path / "xid", {"xid_errors"})
    _, reason = wait_for(
        "the node drained", lambda: "drain" in sinfo(env, node)[0] and sinfo(env, node)
    )
    assert reason.startswith("gpurig: xid_errors: 1 Xid error(s) since boot, codes [79]"), reason
    use_root(installed, tmp_path / "healthy", set())
    wait_for("the node resumed", lambda: sinfo(env, node)[0] == "idle")
    assert sinfo(env, node) == ("idle", "none")


def test_a_drain_by_someone_else_is_left_as_it_is(cluster, tmp_path):
    env, node, installed, log = cluster
    subprocess.run(
        ["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=maintenance"],
        env=env, check=True, timeout=30,
    )  # fmt: skip
    try:
        for faults, said in (
            ({"nvlink_links"}, "already drained by someone else (maintenance)"),
            (set(), ": nothing to change"),
        ):
            seen = len(log.read_text().splitlines())
            use_root(installed, tmp_path / (",".join(faults) or "healthy"), faults)
            wait_for(f"the check saying {said!r}", lambda: logged_since(log, seen, said))  # noqa: B023
            assert sinfo(env, node) == ("drained", "maintenance")
    finally:
        subprocess.run(
            ["scontrol", "update", f"NodeName={node}", "State=RESUME"], env=env, timeout=30
        )


def logged_since(log: Path, seen: int, said: str) -> bool:
    return any(said in line for line in log.read_text().splitlines()[seen:])
