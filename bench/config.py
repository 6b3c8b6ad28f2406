"""Command-line options, machine-dependent defaults, and validation before anything launches.

`parse_request` turns argv into a `Request` (what the user typed, None where they typed
nothing); `resolve` fills the gaps from the detected `Environment` (GPU or CPU defaults);
`validate` lists every impossible request at once, so a sweep never launches only to fail on
its fifth configuration.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.argtypes import int_list
from bench.hosts import (
    CLUSTER_DESTS,
    ClusterConfig,
    HostSpecError,
    add_cluster_arguments,
    cluster_from_args,
)
from bench.plan import LAUNCHERS, MEMORY_FORMATS, PRECISIONS, SYNTHETIC, default_rank_counts

IMAGENET_TRAIN_IMAGES = 1_281_167


class ConfigError(Exception):
    """An impossible request; the message lists every problem found."""


@dataclass(frozen=True)
class HorovodStatus:
    available: bool
    version: str = ""
    nccl_built: bool | None = None
    reason: str = ""  # why it is unavailable


@dataclass(frozen=True)
class Environment:
    """What this machine offers, detected once by bench.sysinfo.detect_environment."""

    device: str  # "cuda" when GPUs are visible, else "cpu"
    gpu_count: int
    gpu_name: str
    bf16_supported: bool
    tf32_supported: bool
    cores: int
    horovod: HorovodStatus


@dataclass(frozen=True)
class BenchConfig:
    """A complete, validated sweep description (saved in sweep.json; --resume reloads it)."""

    device: str
    gpu_counts: tuple[int, ...]
    launchers: tuple[str, ...]
    launchers_explicit: bool
    model: str
    batch_size: int
    global_batch: int | None
    image_size: int
    num_classes: int
    precisions: tuple[str, ...]
    memory_formats: tuple[str, ...]
    compile_modes: tuple[bool, ...]
    bucket_cap_mb: float
    static_graph: bool
    gradient_as_bucket_view: bool
    broadcast_buffers: bool
    fp16_allreduce: bool
    data: str
    loader_workers: int
    warmup_steps: int
    steps: int
    repeats: int
    timeout_s: float
    seed: int
    probe: bool
    probe_mb: float
    probe_iterations: int
    dataset_size: int
    claim: tuple[tuple[int, float], ...]
    out_root: str
    cluster: ClusterConfig | None = None  # multi-node: --hosts/--hostfile/--slurm

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchConfig:
        fields = dict(data)
        for name in ("gpu_counts", "launchers", "precisions", "memory_formats", "compile_modes"):
            fields[name] = tuple(fields[name])
        fields["claim"] = tuple((int(n), float(s)) for n, s in fields["claim"])
        cluster = fields.get("cluster")
        fields["cluster"] = ClusterConfig.from_dict(cluster) if cluster else None
        return cls(**fields)


@dataclass(frozen=True)
class Request:
    """Parsed argv; None means "use the default for this machine"."""

    resume: Path | None
    device: str
    gpu_counts: tuple[int, ...] | None
    launchers: tuple[str, ...] | None
    model: str
    batch_size: int | None
    global_batch: int | None
    image_size: int | None
    num_classes: int
    precisions: tuple[str, ...] | None
    memory_formats: tuple[str, ...]
    compile_modes: tuple[bool, ...]
    bucket_cap_mb: float
    static_graph: bool
    gradient_as_bucket_view: bool
    broadcast_buffers: bool
    fp16_allreduce: bool
    data: str
    loader_workers: int | None
    warmup_steps: int | None
    steps: int | None
    repeats: int
    timeout_s: float | None
    seed: int
    probe: bool
    probe_mb: float
    probe_iterations: int | None
    dataset_size: int
    claim: tuple[tuple[int, float], ...]
    out_root: str
    progress: bool
    cluster: ClusterConfig | None = None


def _choice_list(choices: Sequence[str]) -> Any:
    def parse(text: str) -> tuple[str, ...]:
        values = tuple(v.strip() for v in text.split(",") if v.strip())
        bad = [v for v in values if v not in choices]
        if bad or not values:
            raise argparse.ArgumentTypeError(
                f"{', '.join(bad) or 'nothing'}: choose from {', '.join(choices)}"
            )
        return tuple(dict.fromkeys(values))

    return parse


def _compile_modes(text: str) -> tuple[bool, ...]:
    return tuple(v == "on" for v in _choice_list(("off", "on"))(text))


def _claim(text: str) -> tuple[tuple[int, float], ...]:
    """ "1:560,4:148" -> ((1, 560.0), (4, 148.0)): claimed seconds per epoch by GPU count."""
    pairs = []
    for item in text.split(","):
        try:
            n, seconds = item.split(":")
            pairs.append((int(n), float(seconds)))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected GPUS:SECONDS[,GPUS:SECONDS...], got {item!r}"
            ) from None
    return tuple(pairs)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.scaling",
        description="Measure ResNet-50 (or any torchvision classifier) training throughput on "
        "1, 2, 4, ... GPUs with DDP (torchrun) and Horovod (horovodrun), and report scaling "
        "efficiency with confidence intervals, an allreduce ceiling and published references.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = p.add_argument
    add("--resume", type=Path, help="continue the sweep in this results directory")
    add(
        "--device",
        choices=("auto", "cuda", "cpu"),
        default="auto",
        help="cpu runs gloo CPU processes (smoke figures) even where GPUs exist",
    )
    add(
        "--gpus",
        dest="gpu_counts",
        type=int_list,
        help="GPU (rank) counts to sweep [default: 1,2,4,... up to all visible GPUs; 1,2 on CPU]",
    )
    add(
        "--launchers",
        type=_choice_list(LAUNCHERS),
        help="ddp,horovod [default: both; Horovod missing -> rows marked unavailable]",
    )
    add("--model", default="resnet50", help="torchvision classification model name")
    add("--batch-size", type=int, help="per-GPU batch: weak scaling [default: 128 GPU, 8 CPU]")
    add(
        "--global-batch",
        type=int,
        help="fixed global batch split over the GPUs: strong scaling (instead of --batch-size)",
    )
    add("--image-size", type=int, help="square input size [default: 224 GPU, 32 CPU]")
    add("--num-classes", type=int, default=1000)
    add(
        "--precision",
        dest="precisions",
        type=_choice_list(PRECISIONS),
        help="comma list, each swept: fp32,tf32,amp-fp16,amp-bf16 "
        "[default: amp-bf16 (amp-fp16 before Ampere) on GPU, fp32 on CPU]",
    )
    add(
        "--memory-format",
        dest="memory_formats",
        type=_choice_list(MEMORY_FORMATS),
        default=("nchw",),
        help="comma list, each swept: nchw,channels_last",
    )
    add(
        "--compile",
        dest="compile_modes",
        type=_compile_modes,
        default=(False,),
        help="torch.compile: off, on, or off,on to A/B it",
    )
    add("--bucket-cap-mb", type=float, default=25.0, help="DDP gradient bucket size")
    add("--static-graph", action="store_true", help="DDP static_graph=True")
    add("--gradient-as-bucket-view", action="store_true", help="DDP gradient_as_bucket_view")
    add(
        "--no-broadcast-buffers",
        dest="broadcast_buffers",
        action="store_false",
        help="DDP broadcast_buffers=False",
    )
    add(
        "--fp16-allreduce",
        action="store_true",
        help="compress gradients to fp16 for the allreduce (DDP comm hook / hvd.Compression.fp16)",
    )
    add("--data", default=SYNTHETIC, help="'synthetic' or an ImageFolder root (class subdirs)")
    add(
        "--workers",
        dest="loader_workers",
        type=int,
        help="DataLoader workers per rank [default: cores/GPUs up to 8 on GPU, 0 on CPU]",
    )
    add("--warmup-steps", type=int, help="untimed steps per run [default: 20 GPU, 2 CPU]")
    add("--steps", type=int, help="timed steps per run [default: 100 GPU, 8 CPU]")
    add("--repeats", type=int, default=3, help="launches per configuration")
    add(
        "--timeout",
        dest="timeout_s",
        type=float,
        help="seconds before a run is killed [default: 1200 GPU, 300 CPU]",
    )
    add("--seed", type=int, default=0)
    add("--no-probe", dest="probe", action="store_false", help="skip the allreduce probe")
    add(
        "--probe-mb",
        type=float,
        default=100.0,
        help="allreduce probe size (ResNet-50's fp32 gradients are ~102 MB)",
    )
    add("--probe-iterations", type=int, help="timed allreduces [default: 20 GPU, 5 CPU]")
    add(
        "--dataset-size",
        type=int,
        default=IMAGENET_TRAIN_IMAGES,
        help="images per epoch for the epoch-time projection (ImageNet-1k train)",
    )
    add(
        "--claim",
        type=_claim,
        default=(),
        help="claimed epoch seconds to check, GPUS:SECONDS pairs, e.g. 1:560,4:148",
    )
    add("--out", dest="out_root", default="results", help="results root; a sweep dir is made in it")
    add("--no-progress", dest="progress", action="store_false", help="no progress bar")
    add_cluster_arguments(p)
    return p


REPO_ROOT = Path(__file__).resolve().parent.parent


def parse_request(argv: Sequence[str] | None) -> Request:
    args = build_parser().parse_args(argv)
    try:
        # The nodes run the same interpreter and checkout paths unless told otherwise.
        cluster = cluster_from_args(args, python=sys.executable, workdir=str(REPO_ROOT))
    except HostSpecError as exc:
        raise ConfigError(f"  - {exc}") from None
    if cluster is not None and args.gpu_counts:
        raise ConfigError(
            "  - --gpus counts ranks on this machine; with --hosts/--hostfile/--slurm "
            "give --nodes and --gpus-per-node"
        )
    values = {k: v for k, v in vars(args).items() if k not in CLUSTER_DESTS}
    return Request(**values, cluster=cluster)


def explicit_options(argv: Sequence[str]) -> list[str]:
    """Long options present on the command line (to refuse them beside --resume)."""
    return [a.split("=")[0] for a in argv if a.startswith("--")]


def resolve(request: Request, env: Environment) -> BenchConfig:
    """Fill machine-dependent defaults: GPU sweeps are real benchmarks, CPU sweeps smoke tests."""
    device = env.device if request.device == "auto" else request.device
    gpu = device == "cuda"
    max_ranks = env.gpu_count if gpu else min(2, env.cores)
    if request.cluster is not None:
        gpu_counts = tuple({sum(h.slots for h in p) for p in request.cluster.placements()})
    else:
        gpu_counts = request.gpu_counts or default_rank_counts(max(1, max_ranks))
    if request.precisions:
        precisions = request.precisions
    elif gpu:
        precisions = ("amp-bf16",) if env.bf16_supported else ("amp-fp16",)
    else:
        precisions = ("fp32",)
    if request.loader_workers is not None:
        workers = request.loader_workers
    else:
        workers = min(8, max(1, env.cores // max(1, env.gpu_count))) if gpu else 0

    def pick(value: Any, on_gpu: Any, on_cpu: Any) -> Any:
        if value is not None:
            return value
        return on_gpu if gpu else on_cpu

    return BenchConfig(
        device=device,
        gpu_counts=tuple(sorted(set(gpu_counts))),
        launchers=request.launchers or LAUNCHERS,
        launchers_explicit=request.launchers is not None,
        model=request.model,
        batch_size=pick(request.batch_size, 128, 8),
        global_batch=request.global_batch,
        image_size=pick(request.image_size, 224, 32),
        num_classes=request.num_classes,
        precisions=precisions,
        memory_formats=request.memory_formats,
        compile_modes=request.compile_modes,
        bucket_cap_mb=request.bucket_cap_mb,
        static_graph=request.static_graph,
        gradient_as_bucket_view=request.gradient_as_bucket_view,
        broadcast_buffers=request.broadcast_buffers,
        fp16_allreduce=request.fp16_allreduce,
        data=request.data,
        loader_workers=workers,
        warmup_steps=pick(request.warmup_steps, 20, 2),
        steps=pick(request.steps, 100, 8),
        repeats=request.repeats,
        timeout_s=pick(request.timeout_s, 1200.0, 300.0),
        seed=request.seed,
        probe=request.probe,
        probe_mb=request.probe_mb,
        probe_iterations=pick(request.probe_iterations, 20, 5),
        dataset_size=request.dataset_size,
        claim=request.claim,
        out_root=request.out_root,
        cluster=request.cluster,
    )


def horovod_problem(env: Environment, device: str) -> str:
    """Why Horovod cannot run this sweep, or "" if it can."""
    if not env.horovod.available:
        return env.horovod.reason or "Horovod is not installed"
    if device == "cuda" and env.horovod.nccl_built is False:
        return (
            f"Horovod {env.horovod.version} was built without NCCL: GPU allreduce would go "
            "through host memory (about half the per-GPU throughput, horovod#2686); rebuild "
            "with HOROVOD_GPU_OPERATIONS=NCCL"
        )
    return ""


def validate(config: BenchConfig, env: Environment, models: Sequence[str]) -> None:
    """Raise ConfigError listing every impossible request in `config` on this machine."""
    errors: list[str] = []
    gpu = config.device == "cuda"
    # With --hosts, env describes the smallest node; with --slurm the nodes are unknown until
    # each job starts, and Slurm itself refuses what no node can supply.
    slurm = config.cluster is not None and config.cluster.slurm
    if gpu and env.gpu_count == 0 and not slurm:
        errors.append("--device cuda: no CUDA GPU is visible")
    limit = env.gpu_count if gpu else env.cores
    unit = "GPUs" if gpu else "CPU ranks (one core each at least)"
    if min(config.gpu_counts) < 1:
        errors.append(f"--gpus: counts must be >= 1, got {list(config.gpu_counts)}")
    if config.cluster is None and max(config.gpu_counts) > limit:
        errors.append(
            f"--gpus: {max(config.gpu_counts)} requested but this machine has {limit} {unit}"
        )
    if config.cluster is not None and not slurm and max(config.cluster.gpus_per_node) > limit:
        errors.append(
            f"--gpus-per-node: {max(config.cluster.gpus_per_node)} requested but the smallest "
            f"node has {limit} {unit}"
        )
    if config.model not in models:
        close = difflib.get_close_matches(config.model, models, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        errors.append(f"--model: unknown torchvision classification model {config.model!r}{hint}")
    if config.global_batch is not None:
        if config.global_batch < 1:
            errors.append(f"--global-batch must be >= 1, got {config.global_batch}")
        else:
            uneven = [n for n in config.gpu_counts if config.global_batch % n]
            if uneven:
                errors.append(
                    f"--global-batch {config.global_batch} does not split evenly over {uneven} GPUs"
                )
    elif config.batch_size < 1:
        errors.append(f"--batch-size must be >= 1, got {config.batch_size}")
    checks = [
        (config.image_size >= 16, f"--image-size must be >= 16, got {config.image_size}"),
        (config.num_classes >= 2, f"--num-classes must be >= 2, got {config.num_classes}"),
        (config.steps >= 1, f"--steps must be >= 1, got {config.steps}"),
        (config.warmup_steps >= 0, f"--warmup-steps must be >= 0, got {config.warmup_steps}"),
        (config.repeats >= 1, f"--repeats must be >= 1, got {config.repeats}"),
        (config.timeout_s > 0, f"--timeout must be > 0, got {config.timeout_s}"),
        (config.loader_workers >= 0, f"--workers must be >= 0, got {config.loader_workers}"),
        (config.bucket_cap_mb > 0, f"--bucket-cap-mb must be > 0, got {config.bucket_cap_mb}"),
        (config.probe_mb > 0, f"--probe-mb must be > 0, got {config.probe_mb}"),
        (config.probe_iterations >= 1, "--probe-iterations must be >= 1"),
        (config.dataset_size >= 1, f"--dataset-size must be >= 1, got {config.dataset_size}"),
        (all(n >= 1 and s > 0 for n, s in config.claim), "--claim: GPUs >= 1 and seconds > 0"),
    ]
    errors.extend(message for ok, message in checks if not ok)
    if "tf32" in config.precisions and not (gpu and env.tf32_supported):
        errors.append("--precision tf32 needs an NVIDIA Ampere or newer GPU")
    if "amp-bf16" in config.precisions and gpu and not env.bf16_supported:
        errors.append(f"--precision amp-bf16: {env.gpu_name} has no bfloat16 support")
    if config.data != SYNTHETIC:
        root = Path(config.data)
        if not root.is_dir():
            errors.append(f"--data: {root} is not a directory (ImageFolder root expected)")
        elif not any(p.is_dir() for p in root.iterdir()):
            errors.append(f"--data: {root} has no class subdirectories (ImageFolder layout)")
    if "horovod" in config.launchers and config.launchers_explicit:
        problem = horovod_problem(env, config.device)
        if problem:
            errors.append(f"--launchers horovod: {problem}")
    if errors:
        raise ConfigError("\n".join(f"  - {e}" for e in errors))
