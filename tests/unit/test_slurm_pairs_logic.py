"""playbooks/files/slurm_pairs.py's own logic, without Slurm: the step it reads from srun's
variables, the options it refuses, and task 0 judging the nodes' files into pairs.json. The run
through a real Slurm is tests/integration/test_slurm_pairs.py."""

from __future__ import annotations

import importlib.util
import json
from argparse import Namespace
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "slurm_pairs", REPO / "playbooks/files/slurm_pairs.py"
)
pairs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pairs)

NODES = ["n1", "n2", "n3"]
STEP = {
    "SLURM_JOB_ID": "7",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "1",
    "SLURM_NODEID": "1",
    "SLURM_STEP_NODELIST": "n[1-3]",
    "SLURM_STEP_NUM_TASKS": "3",
}


def expand(nodelist: str) -> list[str]:
    return {"n[1-3]": NODES, "n1": ["n1"]}[nodelist]


def test_a_task_finds_its_node_among_the_steps_nodes():
    assert pairs.step_nodes(STEP, expand) == (NODES, 1, "7.0")


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"SLURM_PROCID": ""}, "not a task of a Slurm job step (SLURM_PROCID unset)"),
        ({"SLURM_STEP_NODELIST": "n1", "SLURM_STEP_NUM_TASKS": "1"}, "the step has 1 node (n1)"),
        ({"SLURM_STEP_NUM_TASKS": "6"}, "the step has 6 tasks on 3 nodes"),
        ({"SLURM_NODEID": "3"}, "SLURM_NODEID=3 is not one of the step's 3 nodes"),
    ],
)
def test_a_step_that_cannot_run_the_pairs_is_refused(change, said):
    with pytest.raises(pairs.Refused, match=r"^" + said.replace("(", r"\(").replace(")", r"\)")):
        pairs.step_nodes({**STEP, **change}, expand)


@pytest.mark.parametrize(
    ("option", "value"),
    [("--mib", "0"), ("--mib", "nan"), ("--port", "80"), ("--slow-fraction", "1"),
     ("--timeout", "x"), ("--ranks-per-node", "0")],
)  # fmt: skip
def test_bad_values_are_refused_naming_them(option, value, capsys):
    with pytest.raises(SystemExit) as stopped:
        pairs.parse(["--out", "x", option, value])
    assert stopped.value.code == 2
    assert f"argument {option}: {value!r} is not usable" in capsys.readouterr().err


def test_outside_a_step_nothing_runs_and_nothing_is_written(tmp_path, capsys):
    assert pairs.main(["--out", str(tmp_path / "out")], environ={}) == 2
    assert "slurm_pairs.py: error: not a task of a Slurm job step" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def report(rate: float) -> str:
    """verify_allreduce.py's line for a pair measuring `rate` GB/s in every sample."""
    samples = [rate * x for x in (0.98, 1.0, 1.02)]
    return json.dumps({"busbw_gbs": samples, "busbw_median_gbs": rate, "ranks": 2})


def write_node(out: Path, node: str, step: str, rates: dict) -> None:
    """A node's file as its task writes it: per round its role and its run (rank 0 printed)."""
    results = []
    for role in pairs.acceptance.pair_roles(pairs.acceptance.pair_rounds(NODES), node):
        if role is None:
            results.append({"item": None, "skipped": True})
            continue
        stdout = report(rates[tuple(role["pair"])]) if role["rank"] == 0 else ""
        results.append({"item": role, "rc": 0, "stdout": stdout, "stderr": ""})
    pairs.write_runs(out, node, step, results)


ARGS = Namespace(timeout=1, min_busbw_gbs=None, slow_fraction=0.5)
RATES = {("n1", "n2"): 10.0, ("n2", "n3"): 1.0, ("n1", "n3"): 1.2}


def test_task_0_judges_every_nodes_file_and_names_the_node_of_the_slow_pairs(tmp_path):
    for node in NODES:
        write_node(tmp_path, node, "7.0", RATES)
    judged = pairs.judge(tmp_path, NODES, "7.0", ARGS, wait=0.01)
    assert json.loads((tmp_path / "pairs.json").read_text()) == judged
    assert {tuple(p["pair"]): (p["busbw_gbs"], p["slow"]) for p in judged["pairs"]} == {
        ("n1", "n2"): (10.0, False), ("n2", "n3"): (1.0, True), ("n1", "n3"): (1.2, True)
    }  # fmt: skip
    assert judged["reasons"]["n1"] == judged["reasons"]["n2"] == []
    (reason,) = judged["reasons"]["n3"]
    assert reason.startswith("node-to-node all-reduce slow with every partner (with n1 1.20 GB/s")
    assert "n3: node-to-node all-reduce slow with every partner" in pairs.summary(judged)


def test_a_pair_neither_of_whose_nodes_wrote_a_file_of_this_step_is_failed(tmp_path):
    even = dict.fromkeys(RATES, 5.0)
    write_node(tmp_path, "n1", "7.0", even)
    write_node(tmp_path, "n2", "6.0", even)  # an earlier step's file: not this step's
    judged = pairs.judge(tmp_path, NODES, "7.0", ARGS, wait=0.01)
    by_pair = {tuple(p["pair"]): p for p in judged["pairs"]}
    assert by_pair[("n1", "n2")]["busbw_gbs"] == by_pair[("n1", "n3")]["busbw_gbs"] == 5.0
    failed = by_pair[("n2", "n3")]
    assert failed["slow"] and failed["busbw_gbs"] is None
    said = (
        "rc None: no result: n2 and n3 wrote none within 1 s of task 0's rounds (is --out on a "
        "filesystem every node sees?)"
    )
    assert failed["error"] == said
    assert judged["reasons"]["n2"] == [
        f"node-to-node all-reduce n2 <-> n3 slow ({said}): the path between them"
    ]
