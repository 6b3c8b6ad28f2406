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
    host: str, summary: Mapping | None, gpu_rows: Sequence[dict], expected_gpus: int | None
) -> dict:
    """One node's verdict from its verify summary and its per-GPU rows."""
    reasons = []
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
    # interval still held its floor at the most repeats allowed): not a pass, not a failure.
    conclusive = len(reasons) > sum(c["verdict"] == INCONCLUSIVE for c in failed)
    return {
        "host": host,
        "passed": not reasons,
        "verdict": PASS if not reasons else FAIL if conclusive else INCONCLUSIVE,
        "reasons": reasons,
        "failed_checks": failed,
        "checks": len(summary.get("checks", [])) if summary else 0,
        "gpus": gpus,
    }


def _summary(value: Mapping | str | None) -> Mapping | None:
    """verify.yml's report of a host: a dict, its JSON text, or ""/None where it wrote none."""
    if isinstance(value, str):
        return json.loads(value) if value.strip() else None
    return value or None


def acceptance_nodes(inputs: Sequence[Mapping], per_gpu_csv: str) -> list[dict]:
    """Every host's verdict, in the order given. Each input is {host, summary (verify.yml's report:
    dict or JSON text, empty where missing), address (how the per-GPU rows name the host; default
    the host), gpus (how many GPUs the check should have measured there; None: not known)}."""
    rows = per_gpu_rows(per_gpu_csv)
    out = []
    for item in inputs:
        host = item["host"]
        name = item.get("address") or host
        mine = [r for r in rows if r["node"] == name]
        expected = item.get("gpus")
        out.append(
            node_verdict(
                host,
                _summary(item.get("summary")),
                mine,
                None if expected in (None, "") else int(expected),
            )
        )
    return out


def acceptance_fleet(nodes: Sequence[Mapping], title: str = "Fleet acceptance") -> str:
    """The fleet summary in markdown: the verdict, every node, the flagged GPUs slowest first."""
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
    return "\n".join(lines) + "\n"


class FilterModule:
    def filters(self):
        return {
            "gpurig_acceptance_nodes": acceptance_nodes,
            "gpurig_acceptance_fleet": acceptance_fleet,
        }
