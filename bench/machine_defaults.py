"""A sweep's machine-dependent defaults: what `resolve` fills in where nothing was typed, from
the detected `Environment` (bench.gpu_defaults on a known GPU; a short smoke sweep on CPU), and why
(`chosen_defaults`, for the sweep log and the report)."""

from __future__ import annotations

from typing import Any

from bench.config import BenchConfig, Request
from bench.gpu_defaults import GpuDefaults, GpuDescription, gpu_defaults
from bench.hosts import default_rank_counts
from bench.launcher_kinds import DEFAULT_LAUNCHERS
from bench.loader_support import resolve_loaders
from bench.machine import Environment
from bench.spec import SYNTHETIC, Knob, Variant, Workload, knobs, total_slots


def _gpu_defaults(env: Environment) -> GpuDefaults | None:
    """bench.gpu_defaults for the (smallest node's) GPU; None where its capability is not
    known."""
    if env.gpu_capability is None:
        return None
    return gpu_defaults(
        GpuDescription(env.gpu_name, tuple(env.gpu_capability), env.gpu_memory_gb)  # type: ignore[arg-type]
    )


def machine_default(name: str, request: Request, env: Environment, gpu: bool) -> Any:
    """The default of a knob whose default is a rule (its Knob.words say it in the help): from
    bench.gpu_defaults on a known GPU, else a rule of thumb; None for any other knob."""
    chosen = _gpu_defaults(env) if gpu else None
    match name:
        case "gpu_counts" if request.cluster is not None:
            return tuple({total_slots(p) for p in request.cluster.placements()})
        case "gpu_counts":
            return default_rank_counts(max(1, env.gpu_count if gpu else min(2, env.cores)))
        case "launchers":
            return DEFAULT_LAUNCHERS
        case "precision" if chosen is not None:
            return (chosen.precision,)
        case "precision":
            return ("amp-bf16" if env.bf16_supported else "amp-fp16",) if gpu else ("fp32",)
        case "channels_last":  # None on CPU: each launcher its own (bench.plan)
            return (chosen.channels_last if chosen else False if gpu else None,)
        case "compile":
            return (chosen.compile if chosen else False,)
        case "batch_size":
            return chosen.batch_per_gpu if chosen else 128 if gpu else 8
        case "loader_workers":
            return min(8, max(1, env.cores // max(1, env.gpu_count))) if gpu else 0
        case "loader":
            data = request.values.get("data") or SYNTHETIC
            return resolve_loaders(None, data, "cuda" if gpu else "cpu")
    return None


def _device(request: Request, env: Environment) -> str:
    """--device, where auto (or not given) is this machine's (the smallest node's) device."""
    asked = request.values.get("device")
    return env.device if asked in (None, "auto") else asked


def chosen_defaults(request: Request, env: Environment) -> list[str]:
    """Why each GPU default the user left to the machine has its value (bench.gpu_defaults),
    for the sweep log and the report; [] on CPU or where the GPU is not known."""
    if _device(request, env) != "cuda":
        return []
    chosen = _gpu_defaults(env)
    if chosen is None:
        return []
    return [why for name, why in chosen.reasons.items() if request.values.get(name) is None]


def resolve(request: Request, env: Environment) -> BenchConfig:
    """Fill machine-dependent defaults: GPU sweeps are real benchmarks, CPU sweeps smoke tests."""
    device = _device(request, env)
    gpu = device == "cuda"

    def pick(name: str, k: Knob) -> Any:
        value = request.values.get(name)
        if value is not None:
            return value
        if k.default is not None:
            return k.default
        if k.gpu is not None:
            return k.gpu if gpu else k.cpu
        return machine_default(name, request, env, gpu)

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
