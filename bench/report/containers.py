"""The host-and-containers section (--container host,IMAGE): which image each short name in the
variant labels stands for (digest and versions, from sweep.json), and every configuration's
img/s in an image beside the same configuration on the host."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench.report.summary import ScalingPoint
from bench.report.tables import num, table
from bench.spec import container_label


def image_table(images: Mapping[str, Mapping[str, Any]]) -> list[str]:
    rows = []
    for reference, facts in images.items():
        torch = f"{facts.get('torch')} (CUDA {facts.get('torch_cuda')}, NCCL {facts.get('nccl')})"
        rows.append(
            [
                f"@{container_label(reference)}",
                f"`{reference}`",
                f"`{facts.get('digest')}`",
                f"{facts.get('executable')} {facts.get('python')}",
                torch,
                str(facts.get("horovod") or "none"),
            ]
        )
    return table(["label", "image", "digest (what ran)", "python", "torch", "Horovod"], rows)


def side_by_side(points: Sequence[ScalingPoint]) -> list[str]:
    """Each configuration run in an image beside the same one on the host, where both ran."""
    host = {(p.launcher, p.variant, p.gpus, p.nodes): p for p in points if "@" not in p.variant}
    rows = []
    for p in points:
        base, inside, short = p.variant.partition("@")
        on_host = host.get((p.launcher, base, p.gpus, p.nodes))
        if not inside or on_host is None:
            continue
        ratio = p.throughput / on_host.throughput if on_host.throughput else float("nan")
        rows.append(
            [
                p.launcher,
                base,
                str(p.gpus),
                str(p.nodes),
                f"@{short}",
                num(on_host.throughput),
                num(p.throughput),
                num(ratio, 3),
            ]
        )
    if not rows:
        return []
    header = [
        "launcher",
        "variant",
        "ranks" if points[0].cpu else "GPUs",
        "nodes",
        "image",
        "host img/s (mean of launches)",
        "image img/s (mean of launches)",
        "image / host",
    ]
    return table(header, rows)


def container_section(points: Sequence[ScalingPoint], meta: Mapping[str, Any]) -> list[str]:
    """The section's lines, or none for a sweep that ran no image."""
    images = meta.get("system", {}).get("containers") or {}
    if not images:
        return []
    lines = [
        "Each `@name` variant ran every rank in that image (docker run: host network and IPC, "
        "the bench mounted read-only); the variant without it ran on the host. The allreduce "
        "probe runs on the host.",
        "",
        *image_table(images),
    ]
    pairs = side_by_side(points)
    return [*lines, "", *pairs] if pairs else lines
