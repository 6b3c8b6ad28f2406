"""The verdicts of playbooks/acceptance.yml: one per node and one for the fleet.

Inputs are what the two earlier steps left on the controller:
- verify.yml's summary per host (<report dir>/verify/<host>.json: host, passed, checks, each check
  {check, passed, figures, message}); a host whose summary is missing did not finish verify.yml;
- the per-GPU throughput check's table (bench's per_gpu.csv: one row per GPU and repeat, columns
  as bench.report.per_gpu.GpuVerdict; `node` is the address the bench reached the host by).

    {{ inputs | gpurig_acceptance_nodes(per_gpu_csv) }}  -> [node verdict], one per input
    {{ nodes | gpurig_acceptance_fleet(title) }}         -> the fleet summary in markdown

A node passes when every verify check passed, every one of its GPUs has a measured rate in the
per-GPU check, and no GPU is flagged there. Unit tests: tests/unit/test_acceptance.py.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

OK = "ok"  # bench.report.per_gpu.OK: the verdict of a GPU within the threshold
# A node's verdict, and a verify check's where it says one (filter_plugins/gpurig_health.py).
PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
SAID = {FAIL: "failed", INCONCLUSIVE: "was inconclusive"}
SHOWN = {PASS: "pass", FAIL: "FAIL", INCONCLUSIVE: "INCONCLUSIVE"}  # the fleet table's column


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def per_gpu_rows(per_gpu_csv: str) -> list[dict]:
    """The per-GPU table's rows, numbers parsed; [] for an empty or missing table."""
    rows = []
    for raw in csv.DictReader(io.StringIO(per_gpu_csv or "")):
        rows.append(
            {
                "node": raw.get("node", ""),
                "gpu_index": int(raw["gpu_index"]) if raw.get("gpu_index") else None,
                "model": raw.get("model", ""),
                "throughput": _float(raw.get("throughput")),
                "vs_node_median": _float(raw.get("vs_node_median")),
                "vs_published": _float(raw.get("vs_published")),
                "published": _float(raw.get("published")),
                "verdict": raw.get("verdict", ""),
                "error": raw.get("error", ""),
            }
        )
    return rows


def _worst(rows: Sequence[dict]) -> dict:
    """A GPU's row that speaks against it most: a flagged one first, then the slowest."""
    return min(rows, key=lambda r: (r["verdict"] == OK, r["throughput"] or 0.0))


def _gpus(rows: Iterable[dict]) -> list[dict]:
    by_gpu: dict[int | None, list[dict]] = {}
    for row in rows:
        by_gpu.setdefault(row["gpu_index"], []).append(row)
    return sorted((_worst(r) for r in by_gpu.values()), key=lambda r: r["gpu_index"] or 0)


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value * 100:+.1f} %"


def node_verdict(
    host: str,
    summary: Mapping | None,
    gpu_rows: Sequence[dict],
    expected_gpus: int | None,
    more_reasons: Sequence[str] = (),
    unsure: Sequence[str] = (),
) -> dict:
    """One node's verdict from its verify summary, its per-GPU rows and what the fleet-wide
    comparisons say about it (the node-to-node pairs, the fleet's medians)."""
    reasons = [*more_reasons, *unsure]
    failed = []
    if summary is None:
        reasons.append(
            "verify.yml wrote no summary for this host (unreachable, or it stopped early)"
        )
    else:
        failed = [
            {
                "check": c.get("check", "?"),
                "message": c.get("message", ""),
                "verdict": c.get("verdict", FAIL),
            }
            for c in summary.get("checks", [])
            if not c.get("passed")
        ]
        reasons += [
            f"check {c['check']} {SAID[c['verdict']]}: {c['message']}".rstrip(": ") for c in failed
        ]
    gpus = _gpus(gpu_rows)
    if not gpus:
        reasons.append("the per-GPU throughput check has no row for this host")
    elif expected_gpus is not None and len(gpus) < expected_gpus:
        reasons.append(f"the per-GPU throughput check measured {len(gpus)} of {expected_gpus} GPUs")
    for gpu in gpus:
        if gpu["verdict"] != OK:
            gap = ", ".join(
                f"{_pct(gpu[key])} vs {name}"
                for key, name in (("vs_node_median", "node median"), ("vs_published", "published"))
                if gpu[key] is not None
            )
            rate = "no rate" if gpu["throughput"] is None else f"{gpu['throughput']:.1f} img/s"
            detail = f" ({gap})" if gap else (f": {gpu['error']}" if gpu["error"] else "")
            reasons.append(f"GPU {gpu['gpu_index']} {gpu['verdict']}: {rate}{detail}")
    # Inconclusive where the only reasons are checks that could not tell (a measured figure whose
    # interval still held its floor at the most repeats allowed; `unsure`, the same of a pair's
    # all-reduce): not a pass, not a failure.
    conclusive = len(reasons) > sum(c["verdict"] == INCONCLUSIVE for c in failed) + len(unsure)
    return {
        "host": host,
        "passed": not reasons,
        "verdict": PASS if not reasons else FAIL if conclusive else INCONCLUSIVE,
        "reasons": reasons,
        "failed_checks": failed,
        "checks": len(summary.get("checks", [])) if summary else 0,
        "gpus": gpus,
        "metrics": {
            **{k: v["value"] for k, v in hardware_means(summary).items()},
            **allreduce_inside(summary),
            **{
                f"GPU {g['gpu_index']} img/s": g["throughput"]
                for g in gpus
                if g["throughput"] is not None
            },
        },
    }


def allreduce_inside(summary: Mapping | None) -> dict[str, float]:
    """The node's all-reduce bus bandwidth across its GPUs (check nccl_tests_allreduce: at its
    floor's size where it has one, else at the largest size), for the history; none with one GPU."""
    for check in (summary or {}).get("checks", []):
        figures = check.get("figures") or {}
        if check.get("check") == "nccl_tests_allreduce" and int(figures.get("gpus") or 0) >= 2:
            value = figures.get("busbw_gbs_at_floor_size") or figures.get(
                "busbw_gbs_at_largest_size"
            )
            return {"all-reduce inside the node GB/s": float(value)} if value else {}
    return {}


def hardware_means(summary: Mapping | None) -> dict[str, dict]:
    """The hardware_floors check's figures of one node: {"GPU i figure": {value (the mean), unit,
    name (the GPU's name, its model)}}."""
    found = {}
    for check in (summary or {}).get("checks", []):
        if check.get("check") != "hardware_floors":
            continue
        for gpu in check.get("figures", {}).get("gpus", []):
            for key, figure in gpu.get("figures", {}).items():
                if figure.get("mean") is not None:
                    found[f"GPU {gpu.get('index')} {key}"] = {
                        "value": float(figure["mean"]),
                        "unit": figure.get("unit", ""),
                        "name": gpu.get("name", "?"),
                        "figure": key,
                    }
    return found


def fleet_outliers(summaries: Mapping[str, Mapping | None], fraction: float) -> dict[str, list]:
    """Per host, the hardware figures more than `fraction` below the fleet's median for the same
    GPU model and figure (this run's fleet: three GPUs of the model or more), as SuperBench's
    baseline rule does, without a baseline file."""
    values: dict[tuple[str, str], list[float]] = {}
    means = {host: hardware_means(summary) for host, summary in summaries.items()}
    for found in means.values():
        for item in found.values():
            values.setdefault((item["name"], item["figure"]), []).append(item["value"])
    reasons: dict[str, list] = {host: [] for host in summaries}
    for host, found in means.items():
        for label, item in found.items():
            peers = values[(item["name"], item["figure"])]
            if len(peers) < 3:
                continue
            median = statistics.median(peers)
            if median > 0 and item["value"] < (1 - fraction) * median:
                reasons[host].append(
                    f"{label} {item['value']:,.1f} {item['unit']} is "
                    f"{100 * (1 - item['value'] / median):.1f} % below the fleet's median for "
                    f"{item['name']} ({median:,.1f}; {len(peers)} GPUs, "
                    f"acceptance_fleet_outlier_fraction {fraction:g})"
                )
    return reasons


def _summary(value: Mapping | str | None) -> Mapping | None:
    """verify.yml's report of a host: a dict, its JSON text, or ""/None where it wrote none."""
    if isinstance(value, str):
        return json.loads(value) if value.strip() else None
    return value or None


def acceptance_nodes(
    inputs: Sequence[Mapping],
    per_gpu_csv: str,
    pairs: Mapping | None = None,
    outlier_fraction: float = 0.1,
) -> list[dict]:
    """Every host's verdict, in the order given. Each input is {host, summary (verify.yml's report:
    dict or JSON text, empty where missing), address (how the per-GPU rows name the host; default
    the host), gpus (how many GPUs the check should have measured there; None: not known)}; pairs
    is pair_verdicts' result (None: no node-to-node all-reduce ran)."""
    rows = per_gpu_rows(per_gpu_csv)
    named = (pairs or {}).get("reasons", {})
    unsure = (pairs or {}).get("unsure", {})
    summaries = {item["host"]: _summary(item.get("summary")) for item in inputs}
    outliers = fleet_outliers(summaries, float(outlier_fraction))
    out = []
    for item in inputs:
        host = item["host"]
        name = item.get("address") or host
        mine = [r for r in rows if r["node"] == name]
        expected = item.get("gpus")
        node = node_verdict(
            host,
            summaries[host],
            mine,
            None if expected in (None, "") else int(expected),
            [*named.get(host, []), *outliers.get(host, [])],
            unsure.get(host, []),
        )
        for p in (pairs or {}).get("pairs", []):
            if host in p["pair"] and p["busbw_gbs"] is not None:
                partner = next(h for h in p["pair"] if h != host)
                node["metrics"][f"all-reduce with {partner} GB/s"] = p["busbw_gbs"]
        out.append(node)
    return out


def acceptance_history(nodes: Sequence[Mapping], history: str, stamp: str, change=0.02) -> dict:
    """Each node's figures against its last accepted run in the history (JSON lines, one per node
    and run, as this returns them to append): {"append": [line], "changes": [{host, since,
    metric, before, now, change}]} for the figures that moved by `change` (a fraction) or more."""
    last: dict[str, dict] = {}
    for line in (history or "").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut by a crash is skipped, not fatal
        if isinstance(entry, dict) and entry.get("verdict") == PASS and entry.get("host"):
            last[entry["host"]] = entry
    changes = []
    for node in nodes:
        before = last.get(node["host"])
        if not before:
            continue
        for metric, now in node.get("metrics", {}).items():
            old = before.get("metrics", {}).get(metric)
            if old and now is not None and abs(now / old - 1) >= change:
                changes.append(
                    {
                        "host": node["host"],
                        "since": before.get("time"),
                        "metric": metric,
                        "before": old,
                        "now": now,
                        "change": now / old - 1,
                    }
                )
    append = [
        json.dumps(
            {
                "time": stamp,
                "host": node["host"],
                "verdict": node.get("verdict", PASS if node["passed"] else FAIL),
                "metrics": node.get("metrics", {}),
            },
            sort_keys=True,
        )
        for node in nodes
    ]
    return {"append": append, "changes": changes, "threshold": change}


def acceptance_fleet(
    nodes: Sequence[Mapping],
    title: str = "Fleet acceptance",
    pairs: Mapping | None = None,
    history: Mapping | None = None,
) -> str:
    """The fleet summary in markdown: the verdict, every node, the flagged GPUs slowest first,
    and the node-to-node all-reduce's pairs (pair_verdicts' result) where it ran."""
    failing = [n for n in nodes if not n["passed"]]
    unsure = sum(n.get("verdict") == INCONCLUSIVE for n in nodes)
    verdict = "PASSED" if nodes and not failing else "FAILED"
    lines = [
        f"# {title}: {verdict}",
        "",
        f"{len(nodes) - len(failing)} of {len(nodes)} nodes passed, "
        f"{len(failing) - unsure} failed, {unsure} inconclusive (not a pass: rerun them idle).",
        "",
        "| node | verdict | checks failed | GPUs | slowest GPU img/s | why |",
        "|---|---|---|---|---|---|",
    ]
    for node in nodes:
        rates = [g["throughput"] for g in node["gpus"] if g["throughput"] is not None]
        slowest = f"{min(rates):.1f}" if rates else ""
        why = "; ".join(node["reasons"]).replace("|", "\\|")
        lines.append(
            f"| {node['host']} | {SHOWN[node.get('verdict', PASS if node['passed'] else FAIL)]} | "
            f"{len(node['failed_checks'])} of {node['checks']} | {len(node['gpus'])} | "
            f"{slowest} | {why} |"
        )
    flagged = sorted(
        ((n["host"], g) for n in nodes for g in n["gpus"] if g["verdict"] != OK),
        key=lambda hg: (hg[1]["throughput"] is not None, hg[1]["throughput"] or 0.0),
    )
    if flagged:
        lines += [
            "",
            "## Flagged GPUs, slowest first",
            "",
            "| node | GPU | model | img/s | vs node median | vs published | verdict |",
            "|---|---|---|---|---|---|---|",
        ]
        for host, g in flagged:
            rate = "" if g["throughput"] is None else f"{g['throughput']:.1f}"
            lines.append(
                f"| {host} | {g['gpu_index']} | {g['model']} | {rate} | "
                f"{_pct(g['vs_node_median'])} | {_pct(g['vs_published'])} | {g['verdict']} |"
            )
    if history is not None:
        lines += [
            "",
            "## Since each node's last accepted run",
            "",
        ]
        if history["changes"]:
            lines += [
                f"The figures that moved by {100 * history['threshold']:g} % or more:",
                "",
                "| node | since | figure | then | now | change |",
                "|---|---|---|---|---|---|",
            ]
            lines += [
                f"| {c['host']} | {c['since']} | {c['metric']} | {c['before']:,.1f} | "
                f"{c['now']:,.1f} | {_pct(c['change'])} |"
                for c in history["changes"]
            ]
        else:
            lines.append(
                f"No figure moved by {100 * history['threshold']:g} % or more (nodes without an "
                "accepted run before have nothing to compare)."
            )
    if pairs and pairs.get("pairs"):
        lines += [
            "",
            "## Node-to-node all-reduce, in pairs",
            "",
            f"Rule: {pairs['rule']}. Fleet reference: "
            + (
                "n/a"
                if pairs["fleet_reference_gbs"] is None
                else f"{pairs['fleet_reference_gbs']:.2f} GB/s bus bandwidth"
            )
            + ".",
            "",
            "| pair | ranks | busbw GB/s | vs fleet reference | slow |",
            "|---|---|---|---|---|",
        ]
        for p in pairs["pairs"]:
            rate = p["error"] if p["busbw_gbs"] is None else f"{p['busbw_gbs']:.2f}"
            lines.append(
                f"| {' <-> '.join(p['pair'])} | {p['ranks'] or ''} | {rate} | "
                f"{_pct(p['vs_fleet'])} | {'yes' if p['slow'] else ''} |"
            )
    return "\n".join(lines) + "\n"


# ---- Node-to-node all-reduce, in pairs (playbooks/files/verify_allreduce.py) ---------------------
def pair_rounds(hosts: Sequence[str], partners: int = 2) -> list[list[list[str]]]:
    """Pairs over the fleet, each host with `partners` others where the fleet has that many (host i
    with hosts i+1 .. i+partners around the ring), grouped into rounds in which no host is in two
    pairs, so that a round's pairs can run at once: [[[a, b], [c, d]], [[a, c], ...], ...]."""
    hosts = list(hosts)
    count = len(hosts)
    wanted = []
    for offset in range(1, min(partners, count - 1) + 1):
        for i in range(count):
            pair = sorted((hosts[i], hosts[(i + offset) % count]))
            if pair not in wanted:
                wanted.append(pair)
    rounds: list[list[list[str]]] = []
    for pair in wanted:
        for round_ in rounds:
            if not {*pair} & {h for p in round_ for h in p}:
                round_.append(pair)
                break
        else:
            rounds.append([pair])
    return rounds


def pair_roles(rounds: Sequence[Sequence[Sequence[str]]], host: str) -> list[dict | None]:
    """For one host, per round: {partner, rank (0 for the pair's first host), master} or None."""
    roles: list[dict | None] = []
    for round_ in rounds:
        mine = next((pair for pair in round_ if host in pair), None)
        roles.append(
            None
            if mine is None
            else {
                "pair": list(mine),
                "rank": list(mine).index(host),
                "partner": mine[1 - list(mine).index(host)],
                "master": mine[0],
            }
        )
    return roles


def pair_runs(runs: Sequence[Mapping]) -> list[dict]:
    """One entry per pair, {pair, rc, stdout, stderr}, from each host's registered loop results
    ([{host, results}]): the pair's rank 0 printed the JSON; where it has none, the run that failed
    says why."""
    found: dict[tuple, dict] = {}
    for run in runs:
        for result in run.get("results") or []:
            role = result.get("item")
            if not role or result.get("skipped"):
                continue
            key = tuple(role["pair"])
            entry = {
                "pair": list(role["pair"]),
                "rc": result.get("rc"),
                "stdout": result.get("stdout", ""),
                "stderr": result.get("stderr") or result.get("msg", ""),
            }
            if (role.get("rank") == 0 and result.get("rc") == 0) or key not in found:
                found[key] = entry
    return list(found.values())


def _interval(samples: Sequence[float], level: float) -> list[float]:
    """The Student-t interval of the samples' mean at `level` (NaN with fewer than two)."""
    if len(samples) < 2:
        return [math.nan, math.nan]
    from scipy import stats  # on the controller: the project's environment carries SciPy

    centre, spread = statistics.fmean(samples), float(stats.sem(samples))
    if spread == 0:
        return [centre, centre]
    return [float(x) for x in stats.t.interval(level, len(samples) - 1, centre, spread)]


def pair_verdicts(measured: Sequence[Mapping], floor=None, slow_fraction=0.5, level=0.95) -> dict:
    """Each pair's bus bandwidth (the median of its samples) against the fleet's reference (the
    median over nodes of each node's fastest pair), slow below (1 - slow_fraction) of it, and
    against the floor (GB/s; None: none set, judged against the fleet only) by the Student-t
    interval of its samples' mean at `level`: slow when the interval lies below the floor,
    unsure when the floor lies inside it. A node is named as the cause when every one of its
    pairs (two or more) is slow while some pair is not; an unsure pair makes both its nodes
    inconclusive (`unsure`), which is not a pass. Input: one entry per pair, {pair: [a, b], rc,
    stdout (verify_allreduce.py's JSON), stderr}, or each host's registered runs
    ([{host, results}], read by pair_runs)."""
    measured = [item for item in measured or [] if item]
    if any("results" in item for item in measured):
        measured = pair_runs(measured)
    pairs = []
    for item in measured:
        try:
            report = json.loads(str(item.get("stdout") or "").strip().splitlines()[-1])
            median = float(report["busbw_median_gbs"])
        except (ValueError, KeyError, IndexError, TypeError):
            report, median = {}, None
        said = (str(item.get("stderr") or "").strip().splitlines() or ["no output"])[-1]
        pairs.append(
            {
                "pair": list(item["pair"]),
                "busbw_gbs": median,
                "samples": report.get("busbw_gbs", []),
                "ranks": report.get("ranks"),
                "backend": report.get("backend"),
                "bytes": report.get("bytes"),
                "error": None if median is not None else f"rc {item.get('rc')}: {said}",
            }
        )
    rates = [p["busbw_gbs"] for p in pairs if p["busbw_gbs"] is not None]
    # The fleet's reference: the median over nodes of each node's fastest pair. One bad node slows
    # every pair it is in, most pairs of a small fleet, but not the fastest pair of the others.
    fastest = [
        max((p["busbw_gbs"] for p in pairs if h in p["pair"] and p["busbw_gbs"] is not None),
            default=None)
        for h in sorted({h for p in pairs for h in p["pair"]})
    ]  # fmt: skip
    fastest = [rate for rate in fastest if rate is not None]
    fleet = statistics.median(fastest) if fastest else None
    for p in pairs:
        rate = p["busbw_gbs"]
        p["vs_fleet"] = None if rate is None or not fleet else rate / fleet - 1
        low, high = interval = _interval(p["samples"], float(level))
        p["interval"] = interval if all(map(math.isfinite, interval)) else None  # JSON has no NaN
        below_floor = floor is not None and rate is not None and high < float(floor)
        slow = rate is not None and fleet and len(rates) > 1 and rate < fleet * (1 - slow_fraction)
        p["slow"] = bool(rate is None or below_floor or slow)
        p["floor_unclear"] = bool(
            floor is not None and not p["slow"] and not low >= float(floor)  # NaN: unclear
        )
    hosts = sorted({h for p in pairs for h in p["pair"]})
    reasons: dict[str, list[str]] = {h: [] for h in hosts}
    for host in hosts:
        mine = [p for p in pairs if host in p["pair"]]
        others_fine = any(not p["slow"] for p in pairs if host not in p["pair"])
        if len(mine) >= 2 and all(p["slow"] for p in mine) and (others_fine or len(hosts) == 2):
            detail = ", ".join(
                f"with {next(h for h in p['pair'] if h != host)} "
                + (p["error"] if p["busbw_gbs"] is None else f"{p['busbw_gbs']:.2f} GB/s")
                for p in mine
            )
            reasons[host].append(
                f"node-to-node all-reduce slow with every partner ({detail}; fleet reference "
                f"{fleet if fleet is None else round(fleet, 2)} GB/s"
                + (f", floor {float(floor):g} GB/s" if floor is not None else ", no floor set")
                + "): check this node's network link"
            )
    # A slow pair whose two nodes are otherwise fine names the link between them.
    for p in pairs:
        if p["slow"] and not any(reasons[h] for h in p["pair"]):
            a, b = p["pair"]
            rate = p["error"] if p["busbw_gbs"] is None else f"{p['busbw_gbs']:.2f} GB/s"
            for host in p["pair"]:
                reasons[host].append(
                    f"node-to-node all-reduce {a} <-> {b} slow ({rate}): the path between them"
                )
    unsure: dict[str, list[str]] = {h: [] for h in hosts}
    for p in pairs:
        if p["floor_unclear"]:
            low, high = p["interval"] or (math.nan, math.nan)
            for host in p["pair"]:
                unsure[host].append(
                    f"node-to-node all-reduce {' <-> '.join(p['pair'])} "
                    f"{p['busbw_gbs']:.2f} GB/s: the floor {float(floor):g} GB/s lies inside the "
                    f"{100 * float(level):g} % interval {low:.2f} to {high:.2f} of its "
                    f"{len(p['samples'])} samples: rerun on idle nodes"
                )
    return {
        "rule": (
            f"a pair is slow below {100 * (1 - slow_fraction):g} % of the fleet's reference (the "
            "median over nodes of each node's fastest pair)"
            + (
                f" or when the {100 * float(level):g} % Student-t interval of its samples' mean "
                f"lies below the floor {float(floor):g} GB/s (inconclusive when the floor lies "
                "inside it)"
                if floor is not None
                else ""
            )
            + "; a node is named when all its pairs (2 or more) are slow"
        ),
        "fleet_reference_gbs": fleet,
        "pairs": pairs,
        "reasons": reasons,
        "unsure": unsure,
    }


class FilterModule:
    def filters(self):
        return {
            "gpurig_acceptance_nodes": acceptance_nodes,
            "gpurig_acceptance_fleet": acceptance_fleet,
            "gpurig_acceptance_history": acceptance_history,
            "gpurig_acceptance_pair_rounds": pair_rounds,
            "gpurig_acceptance_pair_roles": pair_roles,
            "gpurig_acceptance_pair_verdicts": pair_verdicts,
        }
