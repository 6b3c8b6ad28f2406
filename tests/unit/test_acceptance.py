"""playbooks/acceptance.yml's verdicts (filter_plugins/gpurig_acceptance.py): a node passes only
with every verify check passed and every GPU measured and within the per-GPU threshold; the fleet
summary names each failing node and GPU, slowest first."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "gpurig_acceptance", REPO / "filter_plugins/gpurig_acceptance.py"
)
acceptance = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(acceptance)

# The per-GPU table's columns as bench writes per_gpu.csv (bench.report.per_gpu.GpuVerdict).
from bench.report.per_gpu import GpuVerdict  # noqa: E402

COLUMNS = list(GpuVerdict.__dataclass_fields__)


def table(*rows: dict) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS)
    writer.writeheader()
    for row in rows:
        writer.writerow({c: row.get(c, "") for c in COLUMNS})
    return out.getvalue()


def gpu(node, index, rate, verdict="ok", median=None, vs_median=None, **extra):
    return {
        "node": node,
        "gpu_index": index,
        "model": "NVIDIA H100 80GB HBM3",
        "throughput": "" if rate is None else rate,
        "node_median": median,
        "vs_node_median": vs_median,
        "verdict": verdict,
        "status": "ok" if rate is not None else "failed",
        **extra,
    }


def host(name, report, address=None, gpus=None):
    return {"host": name, "summary": report, "address": address, "gpus": gpus}


def summary(host, failed=()):
    checks = [{"check": "driver_branch", "passed": True, "figures": {}, "message": ""}]
    checks += [
        {"check": c, "passed": False, "figures": {}, "message": f"{c} is bad"} for c in failed
    ]
    return {"host": host, "passed": not failed, "checks": checks}


HEALTHY_ROWS = (gpu("10.0.0.1", 0, 3000.0), gpu("10.0.0.1", 1, 2990.0))
HEALTHY = table(*HEALTHY_ROWS)


def test_a_healthy_node_passes():
    [node] = acceptance.acceptance_nodes([host("n1", summary("n1"), "10.0.0.1")], HEALTHY)
    assert node["passed"] and node["reasons"] == []
    assert [g["gpu_index"] for g in node["gpus"]] == [0, 1]


def test_a_failed_verify_check_fails_the_node_and_names_the_check():
    [node] = acceptance.acceptance_nodes(
        [host("n1", json.dumps(summary("n1", failed=["xid_errors"])), "10.0.0.1")], HEALTHY
    )
    assert not node["passed"]
    assert node["failed_checks"] == [
        {"check": "xid_errors", "message": "xid_errors is bad", "verdict": "fail"}
    ]
    assert "check xid_errors failed: xid_errors is bad" in node["reasons"]
    assert node["verdict"] == "fail"


def test_an_inconclusive_check_alone_makes_the_node_inconclusive_and_the_fleet_counts_it():
    report = summary("n1")
    report["checks"].append(
        {
            "check": "hardware_floors",
            "passed": False,
            "verdict": "inconclusive",
            "figures": {},
            "message": "Inconclusive, the floor inside the interval",
        }
    )
    nodes = acceptance.acceptance_nodes(
        [host("n1", report, "10.0.0.1"), host("n2", summary("n2"), "10.0.0.2")],
        table(*HEALTHY_ROWS, gpu("10.0.0.2", 0, 3000.0)),
    )
    assert [n["verdict"] for n in nodes] == ["inconclusive", "pass"]
    assert not nodes[0]["passed"]  # inconclusive is not a pass
    assert nodes[0]["reasons"] == [
        "check hardware_floors was inconclusive: Inconclusive, the floor inside the interval"
    ]
    fleet = acceptance.acceptance_fleet(nodes)
    assert fleet.startswith(
        "# Fleet acceptance: FAILED\n\n1 of 2 nodes passed, 0 failed, 1 inconclusive"
    )
    assert "| n1 | INCONCLUSIVE | 1 of 2 |" in fleet
    # The same node with a slow GPU besides is a failure, not inconclusive.
    rows = table(gpu("10.0.0.1", 0, 3000.0), gpu("10.0.0.1", 1, 2000.0, "SLOW vs node median"))
    [node] = acceptance.acceptance_nodes([host("n1", report, "10.0.0.1")], rows)
    assert node["verdict"] == "fail"


def test_a_slow_gpu_fails_its_node_and_is_listed_in_the_fleet_summary():
    rows = table(
        gpu("10.0.0.1", 0, 3000.0),
        gpu("10.0.0.1", 1, 2000.0, "SLOW vs node median", 2500.0, -0.2),
        gpu("10.0.0.2", 0, 3010.0),
    )
    nodes = acceptance.acceptance_nodes(
        [host("n1", summary("n1"), "10.0.0.1"), host("n2", summary("n2"), "10.0.0.2")], rows
    )
    assert [n["passed"] for n in nodes] == [False, True]
    assert nodes[0]["reasons"] == [
        "GPU 1 SLOW vs node median: 2000.0 img/s (-20.0 % vs node median)"
    ]
    fleet = acceptance.acceptance_fleet(nodes)
    assert fleet.startswith("# Fleet acceptance: FAILED")
    assert "1 of 2 nodes passed, 1 failed, 0 inconclusive" in fleet
    flagged = fleet.split("## Flagged GPUs, slowest first")[1]
    assert "| n1 | 1 | NVIDIA H100 80GB HBM3 | 2000.0 | -20.0 % |" in flagged
    assert "n2" not in flagged


def test_the_flagged_table_puts_failed_gpus_first_then_the_slowest():
    rows = table(
        gpu("a", 0, 2500.0, "SLOW vs published"),
        gpu("a", 1, None, "FAILED", error="CUDA error: an illegal memory access"),
        gpu("a", 2, 1500.0, "SLOW vs node median"),
    )
    [node] = acceptance.acceptance_nodes([host("a", summary("a"))], rows)
    flagged = acceptance.acceptance_fleet([node]).split("slowest first")[1].splitlines()
    order = [line.split("|")[2].strip() for line in flagged if line.startswith("| a |")]
    assert order == ["1", "2", "0"]
    assert "GPU 1 FAILED: no rate: CUDA error: an illegal memory access" in node["reasons"]


def test_a_host_without_a_verify_summary_or_per_gpu_rows_fails():
    [node] = acceptance.acceptance_nodes([host("n9", "")], table())
    assert not node["passed"]
    assert any("verify.yml wrote no summary" in r for r in node["reasons"])
    assert any("no row for this host" in r for r in node["reasons"])


def test_fewer_gpus_measured_than_the_host_has_fails():
    rows = table(gpu("n1", 0, 3000.0))
    [node] = acceptance.acceptance_nodes([host("n1", summary("n1"), gpus="2")], rows)
    assert node["reasons"] == ["the per-GPU throughput check measured 1 of 2 GPUs"]


def test_repeats_of_one_gpu_count_once_by_their_worst_row():
    rows = table(gpu("n1", 0, 3000.0), gpu("n1", 0, 2100.0, "SLOW vs node median"))
    [node] = acceptance.acceptance_nodes([host("n1", summary("n1"))], rows)
    assert len(node["gpus"]) == 1 and node["gpus"][0]["throughput"] == 2100.0
    assert not node["passed"]


@pytest.mark.parametrize("passed", [True, False])
def test_the_fleet_verdict_follows_its_nodes(passed):
    report = summary("n1", failed=() if passed else ["xid_errors"])
    nodes = acceptance.acceptance_nodes([host("n1", report, "10.0.0.1")], HEALTHY)
    fleet = acceptance.acceptance_fleet(nodes, "Rack 2")
    assert fleet.splitlines()[0] == f"# Rack 2: {'PASSED' if passed else 'FAILED'}"


# ---- The node-to-node all-reduce, in pairs -------------------------------------------------------
@pytest.mark.parametrize("count", [2, 3, 4, 5, 8])
def test_every_host_has_two_partners_where_the_fleet_allows_and_rounds_are_disjoint(count):
    hosts = [f"h{i}" for i in range(count)]
    rounds = acceptance.pair_rounds(hosts)
    flat = [tuple(p) for r in rounds for p in r]
    assert len(flat) == len(set(flat))  # no pair twice
    for host in hosts:
        assert sum(host in p for p in flat) >= min(2, count - 1)
    for round_ in rounds:  # a host in at most one pair per round
        members = [h for p in round_ for h in p]
        assert len(members) == len(set(members))
    assert acceptance.pair_rounds(["a"]) == []


def test_each_host_knows_its_partner_rank_and_master_per_round():
    rounds = acceptance.pair_rounds(["g1", "g2", "g3"])
    assert rounds == [[["g1", "g2"]], [["g2", "g3"]], [["g1", "g3"]]]
    assert acceptance.pair_roles(rounds, "g3") == [
        None,
        {"pair": ["g2", "g3"], "rank": 1, "partner": "g2", "master": "g2"},
        {"pair": ["g1", "g3"], "rank": 1, "partner": "g1", "master": "g1"},
    ]


def allreduce(rate: float | list[float], ranks: int = 2) -> str:
    """verify_allreduce.py's JSON for a pair at this bus bandwidth (five equal samples), or with
    these samples."""
    samples = rate if isinstance(rate, list) else [rate] * 5
    return json.dumps(
        {"tool": "verify_allreduce", "ranks": ranks, "backend": "gloo", "bytes": 4194304,
         "busbw_gbs": samples, "busbw_median_gbs": sorted(samples)[len(samples) // 2]}
    )  # fmt: skip


def runs(rates: dict[tuple[str, str], float | list[float] | None]) -> list[dict]:
    """Each host's registered loop results, as Ansible keeps them, for these pairs."""
    out: dict[str, list] = {}
    for pair, rate in rates.items():
        for rank, host in enumerate(pair):
            result = {
                "item": {"pair": list(pair), "rank": rank},
                "rc": 0,
                "stdout": "",
                "stderr": "",
            }
            if rank == 0:
                ok = rate is not None
                result.update(
                    rc=0 if ok else 1,
                    stdout=allreduce(rate) if ok else "",
                    stderr="" if ok else "RuntimeError: Connection reset by peer",
                )
            out.setdefault(host, []).append(result)
    return [{"results": results} for results in out.values()]


def test_the_node_common_to_the_slow_pairs_is_named():
    judged = acceptance.pair_verdicts(
        runs({("g1", "g2"): 1.0, ("g2", "g3"): 0.1, ("g1", "g3"): 0.12})
    )
    assert judged["fleet_reference_gbs"] == 1.0  # the median of each node's fastest pair
    assert judged["reasons"]["g1"] == [] and judged["reasons"]["g2"] == []
    (reason,) = judged["reasons"]["g3"]
    assert reason == (
        "node-to-node all-reduce slow with every partner (with g1 0.12 GB/s, with g2 0.10 GB/s; "
        "fleet reference 1.0 GB/s, no floor set): check this node's network link"
    )
    [node1, node3] = acceptance.acceptance_nodes(
        [host("g1", summary("g1"), "g1"), host("g3", summary("g3"), "g3")],
        table(gpu("g1", 0, 3000.0), gpu("g3", 0, 3000.0)),
        judged,
    )
    assert node1["verdict"] == "pass" and node3["verdict"] == "fail"
    assert node3["reasons"] == [reason]
    fleet = acceptance.acceptance_fleet([node1, node3], pairs=judged)
    assert "| g2 <-> g3 | 2 | 0.10 | -90.0 % | yes |" in fleet


def test_the_median_cannot_hide_a_slow_node_below_the_floor():
    # Two of three pairs slow makes the fleet's median pair a slow one: the floor still catches it.
    judged = acceptance.pair_verdicts(
        runs({("g1", "g2"): 20.0, ("g2", "g3"): 2.0, ("g1", "g3"): 2.2}), floor=10
    )
    assert [p["slow"] for p in judged["pairs"]] == [False, True, True]
    assert "floor 10 GB/s" in judged["reasons"]["g3"][0]


def test_a_pair_whose_interval_holds_the_floor_leaves_its_nodes_inconclusive():
    # g1 <-> g2 clear of the floor of 10; g2 <-> g3 and g1 <-> g3 noisy around it: their 95 %
    # intervals hold 10, so they are neither slow nor fine, and g3 (and g1, g2 with it) are unsure.
    noisy = [6.0, 14.0, 8.0, 13.0, 9.5]
    judged = acceptance.pair_verdicts(
        runs({("g1", "g2"): [12.0, 12.2, 11.9, 12.1, 12.0], ("g2", "g3"): noisy,
              ("g1", "g3"): noisy}),
        floor=10,
    )  # fmt: skip
    pairs = {" <-> ".join(p["pair"]): p for p in judged["pairs"]}
    assert not any(p["slow"] for p in pairs.values())
    assert {k for k, p in pairs.items() if p["floor_unclear"]} == {"g2 <-> g3", "g1 <-> g3"}
    low, high = pairs["g2 <-> g3"]["interval"]
    assert low < 10 < high
    assert judged["reasons"] == {"g1": [], "g2": [], "g3": []}
    assert len(judged["unsure"]["g3"]) == 2
    assert sorted(judged["unsure"]["g3"])[1] == (
        "node-to-node all-reduce g2 <-> g3 9.50 GB/s: the floor 10 GB/s lies inside the 95 % "
        "interval 5.93 to 14.27 of its 5 samples: rerun on idle nodes"
    )
    assert "inconclusive when the floor lies inside it" in judged["rule"]
    nodes = acceptance.acceptance_nodes(
        [host(h, summary(h), h) for h in ("g1", "g2", "g3")],
        table(*(gpu(h, 0, 3000.0) for h in ("g1", "g2", "g3"))),
        judged,
    )
    assert [n["verdict"] for n in nodes] == ["inconclusive"] * 3
    assert not any(n["passed"] for n in nodes)
    fleet = acceptance.acceptance_fleet(nodes, pairs=judged)
    assert "0 of 3 nodes passed, 0 failed, 3 inconclusive" in fleet
    # Without a floor the same samples are judged against the fleet only: no one is unsure.
    judged = acceptance.pair_verdicts(runs({("g1", "g2"): noisy, ("g2", "g3"): noisy}))
    assert judged["unsure"] == {"g1": [], "g2": [], "g3": []}
    assert [p["interval"] for p in judged["pairs"]] != [None, None]


def test_a_failed_pair_is_slow_and_says_why():
    judged = acceptance.pair_verdicts(
        runs({("g1", "g2"): 1.0, ("g2", "g3"): None, ("g1", "g3"): None})
    )
    (reason,) = judged["reasons"]["g3"]
    assert "with g2 rc 1: RuntimeError: Connection reset by peer" in reason


def test_a_slow_pair_between_two_healthy_nodes_names_the_path():
    judged = acceptance.pair_verdicts(
        runs({("a", "b"): 1.0, ("b", "c"): 1.0, ("c", "d"): 1.0, ("a", "d"): 1.0, ("a", "c"): 0.1})
    )
    assert judged["reasons"]["b"] == [] and judged["reasons"]["d"] == []
    assert judged["reasons"]["a"] == [
        "node-to-node all-reduce a <-> c slow (0.10 GB/s): the path between them"
    ]


def test_no_pairs_leave_the_verdicts_alone():
    judged = acceptance.pair_verdicts([{"results": []}, {}])
    assert judged["pairs"] == [] and judged["fleet_reference_gbs"] is None


# ---- The fleet's medians and each node's history -------------------------------------------------
def with_hardware(host_name: str, bf16: float, name: str = "NVIDIA H100 80GB HBM3") -> dict:
    """A verify summary whose hardware_floors check measured this bf16 GEMM mean on GPU 0."""
    report = summary(host_name)
    figure = {"mean": bf16, "unit": "TFLOPS", "verdict": "pass"}
    gpus = [{"index": 0, "name": name, "figures": {"gemm_bf16_tflops": figure}}]
    report["checks"].append(
        {"check": "hardware_floors", "passed": True, "figures": {"gpus": gpus}, "message": ""}
    )
    return report


def fleet(*bf16: float, fraction: float = 0.1) -> list[dict]:
    inputs = [host(f"n{i}", with_hardware(f"n{i}", v), f"n{i}") for i, v in enumerate(bf16)]
    rows = table(*(gpu(f"n{i}", 0, 3000.0) for i in range(len(bf16))))
    return acceptance.acceptance_nodes(inputs, rows, None, fraction)


def test_a_gpu_far_below_the_fleets_median_for_its_model_fails_its_node():
    nodes = fleet(760.0, 755.0, 620.0)  # each passed its floor; the third is 17.9 % below
    assert [n["verdict"] for n in nodes] == ["pass", "pass", "fail"]
    assert nodes[2]["reasons"] == [
        "GPU 0 gemm_bf16_tflops 620.0 TFLOPS is 17.9 % below the fleet's median for NVIDIA H100 "
        "80GB HBM3 (755.0; 3 GPUs, acceptance_fleet_outlier_fraction 0.1)"
    ]
    assert [n["verdict"] for n in fleet(760.0, 755.0, 620.0, fraction=0.2)] == ["pass"] * 3


def test_two_gpus_of_a_model_are_not_enough_for_a_fleet_median():
    assert [n["verdict"] for n in fleet(760.0, 380.0)] == ["pass", "pass"]


def test_the_history_shows_what_moved_since_each_nodes_last_accepted_run():
    first = acceptance.acceptance_history(fleet(760.0, 755.0, 750.0), "", "run1")
    assert first["changes"] == [] and len(first["append"]) == 3
    # A driver upgrade later: n1 lost 8 %, n2 moved 1 % (below the 2 % shown); a torn line is
    # skipped; n0's last run failed, so its last accepted run is the first one.
    failed = json.dumps({"time": "run2", "host": "n0", "verdict": "fail", "metrics": {}})
    history = "\n".join([*first["append"], failed, '{"time": "run'])
    later = acceptance.acceptance_history(fleet(760.0, 694.6, 742.5), history, "run3")
    assert later["changes"] == [
        {
            "host": "n1",
            "since": "run1",
            "metric": "GPU 0 gemm_bf16_tflops",
            "before": 755.0,
            "now": 694.6,
            "change": pytest.approx(-0.08),
        }
    ]
    nodes = fleet(760.0, 694.6, 742.5)
    text = acceptance.acceptance_fleet(nodes, history=later)
    assert "| n1 | run1 | GPU 0 gemm_bf16_tflops | 755.0 | 694.6 | -8.0 % |" in text
    assert json.loads(later["append"][1])["metrics"]["GPU 0 img/s"] == 3000.0


def test_the_history_keeps_the_all_reduce_inside_each_node():
    report = with_hardware("n0", 760.0)
    figures = {"gpus": 8, "busbw_gbs_at_largest_size": 300.5, "busbw_gbs_at_floor_size": 471.2}
    report["checks"].append({"check": "nccl_tests_allreduce", "passed": True, "figures": figures})
    one_gpu = with_hardware("n1", 760.0)
    figures = {"gpus": 1, "busbw_gbs_at_largest_size": 0.0}
    one_gpu["checks"].append({"check": "nccl_tests_allreduce", "passed": True, "figures": figures})
    inputs = [host("n0", report, "n0"), host("n1", one_gpu, "n1")]
    nodes = acceptance.acceptance_nodes(inputs, table(gpu("n0", 0, 3000.0), gpu("n1", 0, 3000.0)))
    assert nodes[0]["metrics"]["all-reduce inside the node GB/s"] == 471.2  # at the floor's size
    assert "all-reduce inside the node GB/s" not in nodes[1]["metrics"]  # one GPU moves nothing
