"""A sweep's machine-dependent defaults: what `resolve` fills in where nothing was typed, from
the detected `Environment` (bench.gpu_defaults on a known GPU; a short smoke sweep on CPU), and why
(`chosen_defaults`, for the sweep log and the report)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.config import BenchConfig, Request
from bench.gpu_defaults import GpuDefaults, GpuDescription, gpu_defaults
from bench.hosts import default_rank_counts
from bench.launcher_kinds import DEFAULT_LAUNCHERS
from bench.loader_support import resolve_loaders
from bench.machine import Environment
from bench.spec import SYNTHETIC, Knob, Variant, Workload, knobs, total_slots


def _default_gpu_counts(request: Request, env: Environment, gpu: bool) -> tuple[int, ...]:
    if request.cluster is not None:
        return tuple({total_slots(p) for p in request.cluster.placements()})
    max_ranks = env.gpu_count if gpu else min(2, env.cores)
    return default_rank_counts(max(1, max_ranks))


def _gpu_defaults(env: Environment) -> GpuDefaults | None:
    """bench.gpu_defaults for the (smallest node's) GPU; None where its capability is not
    known."""
    if env.gpu_capability is None:
        return None
    return gpu_defaults(
        GpuDescription(env.gpu_name, tuple(env.gpu_capability), env.gpu_memory_gb)  # type: ignore[arg-type]
    )


def _default_precision(request: Request, env: Environment, gpu: bool) -> tuple[str, ...]:
    if not gpu:
        return ("fp32",)
    chosen = _gpu_defaults(env)
    if chosen is not None:
        return (chosen.precision,)
    return ("amp-bf16",) if env.bf16_supported else ("amp-fp16",)


def _gpu_rule(
    name: str, unknown_gpu: Any, cpu: Any, axis: bool = False
) -> Callable[[Request, Environment, bool], Any]:
    """A knob's default from bench.gpu_defaults on a GPU (`unknown_gpu` where the GPU is not
    known), `cpu` on a CPU sweep; a one-value tuple for a swept (Variant) knob."""

    def rule(request: Request, env: Environment, gpu: bool) -> Any:
        chosen = _gpu_defaults(env) if gpu else None
        value = cpu if not gpu else unknown_gpu if chosen is None else getattr(chosen, name)
        return (value,) if axis else value

    return rule


def _default_workers(request: Request, env: Environment, gpu: bool) -> int:
    return min(8, max(1, env.cores // max(1, env.gpu_count))) if gpu else 0


def _default_loader(request: Request, env: Environment, gpu: bool) -> tuple[str, ...]:
    data = request.values.get("data") or SYNTHETIC
    return resolve_loaders(None, data, "cuda" if gpu else "cpu")


# Knobs whose default is a rule (their Knob.words say it in the help).
MACHINE_RULES: dict[str, Callable[[Request, Environment, bool], Any]] = {
    "gpu_counts": _default_gpu_counts,
    "launchers": lambda request, env, gpu: DEFAULT_LAUNCHERS,
    "precision": _default_precision,
    # None on CPU: each launcher its own (LauncherKind.cpu_channels_last, bench.plan)
    "channels_last": _gpu_rule("channels_last", False, None, axis=True),
    "compile": _gpu_rule("compile", False, False, axis=True),
    "batch_size": _gpu_rule("batch_per_gpu", 128, 8),
    "loader_workers": _default_workers,
    "loader": _default_loader,
}


def chosen_defaults(request: Request, env: Environment) -> list[str]:
    """Why each GPU default the user left to the machine has its value (bench.gpu_defaults),
    for the sweep log and the report; [] on CPU or where the GPU is not known."""
    asked = request.values.get("device")
    if (env.device if asked in (None, "auto") else asked) != "cuda":
        return []
    chosen = _gpu_defaults(env)
    if chosen is None:
        return []
    return [why for name, why in chosen.reasons.items() if request.values.get(name) is None]


def resolve(request: Request, env: Environment) -> BenchConfig:
    """Fill machine-dependent defaults: GPU sweeps are real benchmarks, CPU sweeps smoke tests."""
    asked = request.values.get("device")
    device = env.device if asked in (None, "auto") else asked
    gpu = device == "cuda"

    def pick(name: str, k: Knob) -> Any:
        value = request.values.get(name)
        if value is not None:
            return value
        if name in MACHINE_RULES:
            return MACHINE_RULES[name](request, env, gpu)
        if k.default is not None:
            return k.default
        return k.gpu if gpu else k.cpu

    workload = Workload(**{**{n: pick(n, k) for n, k in knobs(Workload)}, "device": device})
    sweep = {name: pick(name, k) for name, k in knobs(BenchConfig)}
    sweep["gpu_counts"] = tuple(sorted(set(sweep["gpu_counts"])))
    return BenchConfig(
        **sweep,
        workload=workload,
        axes={name: tuple(pick(name, k)) for name, k in knobs(Variant)},
        launchers_explicit=request.values.get("launchers") is not None,
        cluster=request.cluster,
    )
