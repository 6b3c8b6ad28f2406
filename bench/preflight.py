"""Checks of a sweep that need the file system and PATH but no machine facts: where results go
(--out), files named on the command line, ports, multi-node counts, flags that contradict each
other, and Slurm's tools. bench.config.validate lists their problems with the machine's in one
pass, before anything is created or launched.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.hosts import ClusterConfig

PORTS = range(1, 65536)
# (flag, its field, the flags it cannot go with: their fields, why)
CONFLICTS: tuple[tuple[str, str, dict[str, str], str], ...] = (
    (
        "--global-batch",
        "global_batch",
        {"--batch-size": "batch_size"},
        "--global-batch fixes the images per step (strong scaling); --batch-size fixes them per "
        "GPU (weak scaling): give one",
    ),
    (
        "--no-probe",
        "allreduce_probe",
        {"--probe-mb": "probe_mb", "--probe-iterations": "probe_iterations"},
        "the probe is off, so its size and iterations would not be used",
    ),
)


def out_problem(out_root: str) -> str:
    """Why results cannot be written under `out_root` ("" when they can): it is a plain file,
    lies under one, or its nearest existing directory is not writable (read-only file system
    included)."""
    path = Path(out_root).expanduser().absolute()
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        where = "is" if existing == path else f"lies under {existing}, which is"
        return f"--out {out_root}: {where} a plain file, not a directory"
    try:
        if os.statvfs(existing).f_flag & os.ST_RDONLY:
            return f"--out {out_root}: {existing} is on a read-only file system"
    except OSError as exc:
        return f"--out {out_root}: {existing}: {exc.strerror}"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"--out {out_root}: cannot write in {existing} (permissions)"
    return ""


def nccl_tests_problem(value: str) -> str:
    """--nccl-tests names an existing file or directory (or is empty or 'off')."""
    if value in ("", "off") or Path(value).exists():
        return ""
    return f"--nccl-tests {value}: no such file or directory ('off' skips nccl-tests)"


def cluster_problems(cluster: ClusterConfig | None) -> list[str]:
    """Ports in range, node and rank counts >= 1, Slurm's tools on PATH."""
    if cluster is None:
        return []
    errors = []
    ports = {"--ssh-port": cluster.ssh_port, "--rdzv-port": cluster.rdzv_port}
    for flag, port in ports.items():
        if port is not None and port not in PORTS:
            errors.append(f"{flag} must be a port from 1 to 65535, got {port}")
    for flag, counts in (
        ("--nodes", cluster.node_counts),
        ("--gpus-per-node", cluster.gpus_per_node),
    ):
        if any(n < 1 for n in counts):
            errors.append(f"{flag} must be >= 1, got {','.join(map(str, counts))}")
    if cluster.slurm:
        missing = [t for t in ("srun", "scontrol") if shutil.which(t) is None]
        if missing:
            errors.append(
                f"--slurm: {' and '.join(missing)} not found on PATH: run the sweep inside a "
                "Slurm allocation (sbatch or salloc; load Slurm's module), or use --hosts"
            )
    return errors


def conflicts(values: Mapping[str, Any]) -> list[str]:
    """Flags given together that contradict each other (None: not given)."""
    errors = []
    for flag, name, others, why in CONFLICTS:
        if values.get(name) is None:
            continue
        given = [other for other, field in others.items() if values.get(field) is not None]
        if given:
            errors.append(f"{flag} with {', '.join(given)}: {why}")
    return errors
