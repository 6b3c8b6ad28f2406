"""Admission: can this sweep run here? Every check of a sweep, run once, torch-free, in two tiers;
each lists every problem it finds in one ConfigError (exit status 2).

1. The values (`request_problems`; `saved_problems` for a --resume): ranges, finite numbers, paths
   and ports, contradicting flags, unused options, Slurm's tools. No machine facts: bench.scaling
   runs it in well under a second, before torch, pandas or the machine is touched.
2. The machine (`admit`): --out, capacity, features, launchers (refused when named, else recorded
   unavailable), loaders, the nodes agreeing, then the --container images, checked only for a
   sweep that is otherwise possible. A run impossible in one configuration is recorded, not
   refused (plan.why_not_runnable).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.config import BenchConfig, Request, all_knobs, refuse
from bench.hosts import ClusterConfig
from bench.launcher_kinds import PER_GPU, TENSORFLOW_PACKAGE, launcher_kind
from bench.launchers import RemoteError
from bench.launchers.cluster import ClusterLauncher
from bench.launchers.docker import DockerWrapper
from bench.launchers.docker.check import check_images
from bench.loader_support import loader_errors
from bench.machine import Environment
from bench.spec import SYNTHETIC, Knob, knobs, runs_on_host

PORTS = range(1, 65536)
# (a knob's field, the fields of the knobs it cannot go with, why)
CONFLICTS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "global_batch",
        ("batch_size",),
        "--global-batch fixes the images per step (strong scaling); --batch-size fixes them per "
        "GPU (weak scaling): give one",
    ),
    (
        "allreduce_probe",
        ("probe_mb", "probe_iterations"),
        "the probe is off, so its size and iterations would not be used",
    ),
)


# --------------------------------------------------------------------------------------------
# Tier 1: the values, as typed (or as saved); no machine


def check_values(
    values: Mapping[str, Any], declared: Iterable[tuple[str, Knob]] | None = None
) -> list[str]:
    """Every value out of its knob's range (None values are not given and not checked); the
    knobs of the sweep, or those `declared`."""
    errors = []
    for name, k in all_knobs() if declared is None else declared:
        value = values.get(name)
        if value is None:
            continue
        items = value if k.many else (value,)
        if any(isinstance(v, float) and not math.isfinite(v) for v in items):
            errors.append(f"{k.flag} must be a finite number, got {_shown(value)}")
            continue
        if k.at_least is not None and any(v < k.at_least for v in items):
            errors.append(f"{k.flag} must be >= {k.at_least:g}, got {_shown(value)}")
        if k.above is not None and any(v <= k.above for v in items):
            errors.append(f"{k.flag} must be > {k.above:g}, got {_shown(value)}")
        if k.at_most is not None and any(v > k.at_most for v in items):
            errors.append(f"{k.flag} must be <= {k.at_most:g}, got {_shown(value)}")
    if values.get("out_root") is not None and not str(values["out_root"]).strip():
        errors.append('--out must name a directory, got ""')
    if any(n < 1 or s <= 0 for n, s in values.get("claim") or ()):
        errors.append("--claim: GPUs >= 1 and seconds > 0")
    data = values.get("data")
    if data not in (None, SYNTHETIC):
        root = Path(data)
        if not root.is_dir():
            errors.append(f"--data: {root} is not a directory (ImageFolder root expected)")
        elif not any(p.is_dir() for p in root.iterdir()):
            errors.append(f"--data: {root} has no class subdirectories (ImageFolder layout)")
    nccl_tests = values.get("nccl_tests")
    if nccl_tests not in (None, "", "off") and not Path(nccl_tests).exists():
        errors.append(
            f"--nccl-tests {nccl_tests}: no such file or directory ('off' skips nccl-tests)"
        )
    return errors


def _shown(value: Any) -> str:
    items = value if isinstance(value, tuple) else (value,)
    return ",".join(str(v) if isinstance(v, int) else f"{v:g}" for v in items)


def cluster_problems(cluster: ClusterConfig | None) -> list[str]:
    """Ports in range, node and rank counts >= 1, Slurm's tools on PATH."""
    if cluster is None:
        return []
    errors = check_values(dataclasses.asdict(cluster), knobs(ClusterConfig))
    for flag, port in {"--ssh-port": cluster.ssh_port, "--rdzv-port": cluster.rdzv_port}.items():
        if port is not None and port not in PORTS:
            errors.append(f"{flag} must be a port from 1 to 65535, got {port}")
    missing = [t for t in ("srun", "scontrol") if cluster.slurm and shutil.which(t) is None]
    if missing:
        errors.append(
            f"--slurm: {' and '.join(missing)} not found on PATH: run the sweep inside a "
            "Slurm allocation (sbatch or salloc; load Slurm's module), or use --hosts"
        )
    return errors


def request_problems(request: Request) -> list[str]:
    """Values no machine could run, flags that contradict each other and options nothing would
    read (as typed: a resolved config has defaults; None: not given)."""
    values = request.values
    errors = check_values(values) + cluster_problems(request.cluster)
    flags = {name: k.flag for name, k in all_knobs()}
    for name, others, why in CONFLICTS:
        given = [flags[other] for other in others if values.get(other) is not None]
        if values.get(name) is not None and given:
            errors.append(f"{flags[name]} with {', '.join(given)}: {why}")
    launchers = values.get("launchers") or ()
    if values.get("slow_gpu_threshold") is not None and PER_GPU.name not in launchers:
        errors.append(
            f"--slow-gpu-threshold applies to --launchers {PER_GPU.name} only (the per-GPU "
            "check), which this sweep does not run"
        )
    return errors


def saved_problems(config: BenchConfig) -> list[str]:
    """A saved configuration's values (--resume: edited by hand, or saved with looser ranges)."""
    values = {name: getattr(config, name) for name, _ in knobs(BenchConfig)}
    return check_values(
        {**values, **config.axes, **dataclasses.asdict(config.workload)}
    ) + cluster_problems(config.cluster)


# --------------------------------------------------------------------------------------------
# Tier 2: the machine (this one, or the nodes)


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


def unavailable_launchers(config: BenchConfig, env: Environment) -> dict[str, str]:
    """Launchers in the sweep that cannot run here, and why (a package they need): their runs
    are recorded as unavailable (one asked for by name is refused instead: `machine_problems`)."""
    if not runs_on_host(config.axes):
        return {}
    problems = {}
    for name in config.launchers:
        kind = launcher_kind(name)
        if kind.needs_horovod and (problem := env.horovod.problem(config.device)):
            problems[name] = problem
        elif kind.framework == TENSORFLOW_PACKAGE and not env.tensorflow:
            problems[name] = (
                "TensorFlow is not installed in this environment (the python_env role adds it "
                "when asked: roles/python_env/README.md)"
            )
    return problems


def _capacity_problems(config: BenchConfig, env: Environment) -> list[str]:
    """Too few GPUs or cores (with --hosts or --slurm, env describes the smallest node:
    bench.launchers.cluster), or a --global-batch that does not split evenly."""
    errors = []
    gpu = config.device == "cuda"
    if gpu and env.gpu_count == 0:
        errors.append("--device cuda: no CUDA GPU is visible")
    limit = env.gpu_count if gpu else env.cores
    unit = "GPUs" if gpu else "CPU ranks (one core each at least)"
    if config.cluster is None and max(config.gpu_counts) > limit:
        errors.append(
            f"--gpus: {max(config.gpu_counts)} requested but this machine has {limit} {unit}"
        )
    if config.cluster is not None and max(config.cluster.gpus_per_node) > limit:
        errors.append(
            f"--gpus-per-node: {max(config.cluster.gpus_per_node)} requested but the smallest "
            f"node has {limit} {unit}"
        )
    if config.global_batch is not None:
        for accum in sorted({v.grad_accum for v in config.variants()} - {0}):
            uneven = [n for n in config.gpu_counts if n and config.global_batch % (n * accum)]
            if uneven:
                over = f"{uneven} GPUs" + (f" x {accum} micro-batches" if accum > 1 else "")
                errors.append(
                    f"--global-batch {config.global_batch} does not split evenly over {over}"
                )
    return errors


def machine_problems(
    config: BenchConfig,
    env: Environment,
    models: Sequence[str],
    nodes: ClusterLauncher | None = None,
) -> list[str]:
    """Every request in `config` that this machine (or the nodes) cannot serve: --out, capacity,
    features, launchers, loaders, and the nodes differing in what the sweep's launchers depend
    on, or too few."""
    errors = [e for e in [out_problem(config.out_root)] if e]
    errors += _capacity_problems(config, env)
    gpu = config.device == "cuda"
    model = config.workload.model
    if model not in models:
        close = difflib.get_close_matches(model, models, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        errors.append(f"--model: unknown torchvision classification model {model!r}{hint}")
    precisions = config.axes["precision"]
    if "tf32" in precisions and not (gpu and env.tf32_supported):
        errors.append("--precision tf32 needs an NVIDIA Ampere or newer GPU")
    if "amp-bf16" in precisions and gpu and not env.bf16_supported:
        errors.append(f"--precision amp-bf16: {env.gpu_name} has no bfloat16 support")
    unavailable = unavailable_launchers(config, env)
    for name in config.launchers:
        kind = launcher_kind(name)
        if config.launchers_explicit and name in unavailable:
            errors.append(f"--launchers {name}: {unavailable[name]}")
        if not kind.multi_node and config.cluster is not None:
            errors.append(
                f"--launchers {name}: {kind.title} runs on one machine only; it cannot span nodes "
                f"(--hosts/--hostfile/--slurm). Sweep {name} on one node"
            )
    errors += loader_errors(
        config.axes["loader"], config.workload.data, config.device, launchers=config.launchers
    )
    if nodes is not None:
        try:
            nodes.check([x for x in config.launchers if x not in unavailable], config.device)
        except RemoteError as exc:
            errors.append(str(exc).replace("\n", "\n    "))
    return errors


@dataclass(frozen=True)
class Admitted:
    """The launchers recorded as unavailable, and the checked --container images."""

    unavailable: dict[str, str]
    wrapper: DockerWrapper


def admit(
    config: BenchConfig,
    env: Environment,
    models: Sequence[str],
    nodes: ClusterLauncher | None = None,
) -> Admitted:
    """The machine tier: raises ConfigError listing every problem at once; the images are
    checked only for a sweep that is otherwise possible."""
    refuse(machine_problems(config, env, models, nodes))
    return Admitted(unavailable_launchers(config, env), check_images(config))
