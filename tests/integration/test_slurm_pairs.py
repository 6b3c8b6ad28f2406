"""playbooks/files/slurm_pairs.py through a real Slurm: the node-to-node pairs as one job step.

tests/infra/netns.sh makes three hosts (gsp1..gsp3 on 10.213.7.0/24, their own subnet, ports and
state so this module depends on no other) and tests/infra/slurm.sh starts munge, slurmctld and one
slurmd per host. One `srun --nodes=3 --ntasks-per-node=1` step runs the program, one Gloo rank
per node on CPU; with gsp3's link rate-limited (a `tc tbf` on both ends of its veth), pairs.json
names gsp3, and with no limit it names no one.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from integration_support import REPO, slurm_on_netns

pytestmark = pytest.mark.slurm
SCRIPT = REPO / "playbooks" / "files" / "slurm_pairs.py"
PREFIX, SUBNET, SSH_PORT, SLURM_PORT = "gsp", "10.213.7", 2234, 6957
NODES = ["gsp1", "gsp2", "gsp3"]
PAIRS = {"gsp1 <-> gsp2", "gsp2 <-> gsp3", "gsp1 <-> gsp3"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """Three-node Slurm; yields the environment srun needs (SLURM_CONF, this Python on PATH)."""
    base = tmp_path_factory.mktemp("slurm")
    with slurm_on_netns(base, PREFIX, SUBNET, SSH_PORT, SLURM_PORT, hosts=3) as env:
        yield env


@contextlib.contextmanager
def slowed_link(host: str, rate: str = "100mbit"):
    """A token-bucket rate limit on both ends of one host's veth link: the bridge's end (traffic
    to the host) and the host's eth0 (traffic from it)."""
    ends = [["tc"], ["ip", "netns", "exec", host, "tc"]]
    devices = [f"{PREFIX}v{host.removeprefix(PREFIX)}", "eth0"]
    limit = ["root", "tbf", "rate", rate, "burst", "32kbit", "latency", "400ms"]
    try:
        for tc, device in zip(ends, devices, strict=True):
            subprocess.run([*tc, "qdisc", "add", "dev", device, *limit], check=True, timeout=30)
        yield
    finally:
        for tc, device in zip(ends, devices, strict=True):
            subprocess.run([*tc, "qdisc", "del", "dev", device, "root"], timeout=30)


def pairs_step(env: dict[str, str], out: Path, *more: str) -> tuple[int, dict, str]:
    """One srun step of slurm_pairs.py over the three nodes: its exit status, pairs.json, output."""
    began = time.monotonic()
    done = subprocess.run(
        ["srun", "--nodes=3", "--ntasks-per-node=1", "--time=10", sys.executable, str(SCRIPT),
         "--out", str(out), "--mib", "1", "--timeout", "240", *more],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    said = f"{done.stdout}\n{done.stderr[-6000:]}\n({time.monotonic() - began:.0f} s)"
    assert (out / "pairs.json").exists(), said
    return done.returncode, json.loads((out / "pairs.json").read_text()), said


def test_the_pairs_name_the_node_behind_a_slowed_link(cluster, tmp_path: Path) -> None:
    with slowed_link("gsp3"):
        rc, pairs, said = pairs_step(cluster, tmp_path / "slow")
    rates = {" <-> ".join(p["pair"]): p["busbw_gbs"] for p in pairs["pairs"]}
    assert set(rates) == PAIRS, said
    assert all(r is not None and r > 0 for r in rates.values()), said
    assert rates["gsp1 <-> gsp2"] > 2 * max(rates["gsp2 <-> gsp3"], rates["gsp1 <-> gsp3"]), said
    assert {" <-> ".join(p["pair"]) for p in pairs["pairs"] if p["slow"]} == PAIRS - {
        "gsp1 <-> gsp2"
    }, said
    assert pairs["reasons"]["gsp1"] == pairs["reasons"]["gsp2"] == [], said
    (reason,) = pairs["reasons"]["gsp3"]
    assert reason.startswith("node-to-node all-reduce slow with every partner (with gsp1 "), said
    assert "check this node's network link" in reason
    assert rc == 1, said  # a slow pair fails the step
    assert "gsp3: node-to-node all-reduce slow with every partner" in said
    # every node's runs, as its task wrote them in the shared directory
    assert sorted(p.name for p in (tmp_path / "slow" / "pair-runs").iterdir()) == [
        f"{n}.json" for n in NODES
    ]
    assert {p["backend"] for p in pairs["pairs"]} == {"gloo"} and {
        p["ranks"] for p in pairs["pairs"]
    } == {2}


def test_without_a_slowed_link_no_node_is_named(cluster, tmp_path: Path) -> None:
    # CPU ranks on a 2-core machine, beside the rest of the suite: CI runs measured one node's
    # even pairs at 0.30 and at 0.12 of the reference. A slowed link measures about 0.035 of it.
    # --slow-fraction 0.95 calls a pair slow below 5 % of the reference: an even fleet names no
    # one, and a slowed link would still be named.
    rc, pairs, said = pairs_step(cluster, tmp_path / "even", "--slow-fraction", "0.95")
    assert {" <-> ".join(p["pair"]) for p in pairs["pairs"]} == PAIRS, said
    assert all(p["busbw_gbs"] and p["busbw_gbs"] > 0 for p in pairs["pairs"]), said
    named = [w for said in pairs["reasons"].values() for w in said if "every partner" in w]
    assert named == [], said
    assert rc == (1 if any(p["slow"] for p in pairs["pairs"]) else 0), said


def test_one_node_is_refused_before_anything_runs(cluster, tmp_path: Path) -> None:
    done = subprocess.run(
        ["srun", "--nodes=1", "--ntasks-per-node=1", "--time=5", sys.executable, str(SCRIPT),
         "--out", str(tmp_path / "one")],
        env=cluster, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "the step has 1 node (gsp" in done.stderr and "srun --nodes=N" in done.stderr
    assert not (tmp_path / "one").exists()
