"""The vocabulary the controller and the ranks share: what a run is, as pure data.

`bench.rank` (the per-rank code started by torchrun/horovodrun) imports this module, the launcher
registry and `bench.shared` and nothing else of the controller, so a rank process never loads the
planner, the launchers or the report.
A `RunSpec` (or `ProbeSpec`) travels to the ranks as one shell-safe `--spec` argument.

Every knob is declared once, as a field of `Variant` (the axes a sweep may A/B, each a comma
list) or `Workload` (fixed for a sweep) with a `Knob` in its metadata. bench.options generates
the command-line option from it, bench.admission checks its value, bench.machine_defaults fills
its default; bench.schema makes it a column of the results row (unless `row=False`);
sweep.jsonl stores it for --resume.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import inspect
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from bench.launcher_kinds import launcher_kind
from bench.shared.loaders import LOADERS  # input pipelines for --data DIR (torch-free registry)

PRECISIONS = ("fp32", "tf32", "amp-fp16", "amp-bf16")
LOCAL_HOST = "localhost"
SYNTHETIC = "synthetic"
NO_LOADER = "none"  # the loader of synthetic data (made on the device)
NO_CONTAINER = "host"  # the --container value that runs the ranks in this machine's environment


@dataclass(frozen=True)
class HostSlots:
    """One host of a placement and how many ranks (GPUs, or CPU processes) it runs."""

    host: str
    slots: int

    def __str__(self) -> str:
        return f"{self.host}:{self.slots}"


Placement = tuple[HostSlots, ...]


def total_slots(hosts: Iterable[HostSlots]) -> int:
    """Ranks on these hosts together: a placement's world size."""
    return sum(h.slots for h in hosts)


def most_slots(hosts: Iterable[HostSlots]) -> int:
    """The most ranks any one of these hosts runs (ranks per node of an even placement)."""
    return max(h.slots for h in hosts)


def format_hosts(placement: Sequence[HostSlots]) -> str:
    """The horovodrun -H spelling of a placement: "node1:8,node2:8"."""
    return ",".join(str(h) for h in placement)


class Placed:
    """What the placement of a run, a probe or a launch says about it."""

    placement: Placement

    @property
    def world_size(self) -> int:
        return total_slots(self.placement)

    @property
    def nodes(self) -> int:
        return len(self.placement)

    @property
    def gpus_per_node(self) -> int:
        return most_slots(self.placement)

    @property
    def hosts(self) -> str:
        return format_hosts(self.placement)


@dataclass(frozen=True)
class Knob:
    """How one option appears on the command line, is checked, defaults and is recorded.

    default: the value when the option is not given; None means the machine decides, from
    `gpu`/`cpu` or, when those are None too, by a rule in bench.config (bench.options'
    default_words then says which). words: the default as --help states it, when not `default`.
    values: the accepted words and the value each stands for (choices); else `parse` reads one.
    refused: words that look like choices but are not built, each with the reason it says.
    switch: an option without a value that sets `not default`. many: a comma list (a Variant
    field's values are each a separate run). repeat: the option may be given again, each value
    kept (a value that may hold commas, such as an ssh -o option). at_least/above: the smallest
    allowed value; at_most: the largest. A number must be finite whatever its range. exclusive:
    knobs naming the same set may not be given together.
    """

    flag: str
    help: str
    default: Any = None
    gpu: Any = None
    cpu: Any = None
    words: str = ""
    values: Mapping[str, Any] | None = None
    refused: Mapping[str, str] = field(default_factory=dict)
    parse: Callable[[str], Any] | None = None
    switch: bool = False
    many: bool = False
    repeat: bool = False
    at_least: float | None = None
    above: float | None = None
    at_most: float | None = None
    row: bool = True
    exclusive: str = ""


def knob(
    flag: str, help: str, *, optional: bool = False, one: Any = dataclasses.MISSING, **options: Any
) -> Any:
    """A dataclass field declared as a knob (see `Knob`). An optional field defaults to the
    knob's default; a Variant field holds one value of its axis, so its default is `one`: the
    report's effect tables set each configuration beside itself with the knob at that value."""
    k = Knob(flag, help, **options)
    return field(default=k.default if optional else one, metadata={"knob": k})


def knobs(cls: type) -> Iterator[tuple[str, Knob]]:
    """(field name, Knob) of every knob field of a dataclass, in declaration order: its own,
    then those it inherits (BenchConfig's ImageKnobs, after the sweep's other options)."""
    own = inspect.get_annotations(cls)
    for f in sorted(dataclasses.fields(cls), key=lambda f: f.name not in own):
        if "knob" in f.metadata:
            yield f.name, f.metadata["knob"]


_ON_OFF = {"off": False, "on": True}
# A local image as Docker names it (repo[:tag][@sha256:...], an image ID); never an option.
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")
ULIMITS = (  # docker run --ulimit's resources (--container-ulimit NAME=SOFT[:HARD])
    *("core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice", "nofile", "nproc"),
    *("rss", "rtprio", "rttime", "sigpending", "stack"),
)


def container_value(text: str) -> str:
    """One --container value: host, or the name of a local Docker image."""
    if text != NO_CONTAINER and not _IMAGE.fullmatch(text):
        raise ValueError(f"not a Docker image name: {text!r}")
    return text


def _ulimit(text: str) -> str:
    """ "memlock=-1", "stack=67108864", "nofile=1024:2048" (docker run --ulimit), or "none"."""
    if text == "none" or re.fullmatch(rf"({'|'.join(ULIMITS)})=-?\d+(:-?\d+)?", text):
        return text
    raise argparse.ArgumentTypeError(
        f"expected NAME=SOFT[:HARD] with NAME one of {', '.join(ULIMITS)}, or none; got {text!r}"
    )


def runs_on_host(axes: Mapping[str, Any]) -> bool:
    """Whether some runs of these swept values (a request's or a configuration's) use this
    environment itself rather than a --container image."""
    return NO_CONTAINER in (axes.get("container") or (NO_CONTAINER,))


def container_label(image: str) -> str:
    """An image's short name in run ids and variant labels: its last path component, the tag
    or a 12-digit digest after '_' ("nvcr.io/nvidia/pytorch:24.10-py3" -> "pytorch_24.10-py3")."""
    name = re.sub(r"sha256:([0-9a-f]{12})[0-9a-f]*", r"sha256-\1", image.rsplit("/", 1)[-1])
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def layout(channels_last: bool) -> str:
    """The --memory-format word of a layout, as run ids, labels and the report write it."""
    return "channels_last" if channels_last else "nchw"


@dataclass(frozen=True)
class ImageKnobs:
    """How --container images run: knobs BenchConfig inherits, bench.launchers.docker reads."""

    container_python: str = knob(
        "--container-python",
        "the interpreter inside the --container images",
        default="",
        words="python3, else python, on the image's PATH",
    )
    container_ulimits: tuple[str, ...] = knob(
        "--container-ulimit",
        "docker run --ulimit for the --container images, comma list, or "
        "none (NVIDIA's settings for PyTorch; raising memlock needs CAP_SYS_RESOURCE in dockerd)",
        parse=_ulimit,
        many=True,
        default=("memlock=-1", "stack=67108864"),
    )


@dataclass(frozen=True)
class Variant:
    """The knobs a sweep may A/B (each a comma list on the command line); part of the run id."""

    precision: str = knob(
        "--precision",
        "floating-point mode, comma list, each swept",
        values={p: p for p in PRECISIONS},
        many=True,
        words="amp-bf16 (amp-fp16 before Ampere) on GPU, fp32 on CPU",
    )
    # None in a CPU sweep's axes without --memory-format: each launcher's own (bench.plan)
    channels_last: bool = knob(
        "--memory-format",
        "activation layout, comma list, each swept",
        values={"nchw": False, "channels_last": True},
        many=True,
        words="channels_last on GPUs with tensor cores (compute capability 7.0+), nchw on "
        "other GPUs; on CPU the one each launcher's framework is fast in: nchw for torch, "
        "channels_last for tf",
    )
    compile: bool = knob(
        "--compile",
        "torch.compile: off, on, or off,on to A/B it",
        values=_ON_OFF,
        many=True,
        words="on on GPUs of compute capability 8.0+ (bench.gpu_defaults), else off",
    )
    loader: str = knob(
        "--loader",
        "input pipeline for --data DIR, comma list, each swept: "
        + ", ".join(f"{x.name} ({x.summary})" for x in LOADERS.values()),
        values={x: x for x in LOADERS},
        many=True,
        words="the first runnable of dali, nvimgcodec, nvjpeg, torch on GPU; torch on CPU; "
        "none with synthetic data",
    )
    grad_accum: int = knob(
        "--grad-accum",
        "gradient accumulation: micro-batches of --batch-size per optimizer step, one "
        "allreduce per step (DDP no_sync, Horovod backward_passes_per_step); comma list, "
        "each swept",
        parse=int,
        many=True,
        default=(1,),
        at_least=1,
        one=1,
    )
    activation_checkpointing: bool = knob(
        "--activation-checkpointing",
        "recompute each stage's activations in backward (torch.utils.checkpoint on the "
        "model's stages: less memory, more compute): off, on, or off,on to A/B it",
        values=_ON_OFF,
        many=True,
        default=(False,),
        one=False,
    )
    container: str = knob(
        "--container",
        "where the ranks run, comma list, each swept: host (this environment) or a local "
        "Docker image (repo:tag, repo@sha256:..., an image ID) every rank runs in, with "
        "host networking and IPC, the GPUs and the bench mounted in; never pulled",
        parse=container_value,
        many=True,
        default=(NO_CONTAINER,),
        one=NO_CONTAINER,
    )
    # Off by default: the published figures beside ours (bench.reference) were measured
    # unpinned. DeepLearningExamples' ConvNets main.py defaults --gpu-affinity to none, and its
    # README's figures (pytorch-21.03) predate the option (added 2021-11); only its launch.py
    # DGX platform configs pin (configs.yml: socket_unique_contiguous). NVIDIA/
    # DeepLearningExamples PyTorch/Classification/ConvNets, read 2026-11-27. Lambda's harness
    # runs that main.py without the option (lambdal/deeplearning-benchmark
    # pytorch/scripts/benchmark_pytorch.sh and config_v1/, read 2026-11-27).
    cpu_affinity: bool = knob(
        "--cpu-affinity",
        "pin each GPU rank to its own share of the cores of its GPU's NUMA node (NVML's CPU "
        "affinity, split among the ranks on that node): off, on, or off,on to A/B it",
        values=_ON_OFF,
        many=True,
        default=(False,),
        one=False,
        words="off, as the published reference runs were measured",
    )

    @property
    def label(self) -> str:
        label = f"{self.precision}-{layout(self.channels_last)}"
        label += "-compile" if self.compile else ""
        label += f"-{self.loader}" if self.loader != NO_LOADER else ""
        label += f"-acc{self.grad_accum}" if self.grad_accum > 1 else ""
        label += "-ckpt" if self.activation_checkpointing else ""
        label += "-pinned" if self.cpu_affinity else ""
        return label + (
            f"@{container_label(self.container)}" if self.container != NO_CONTAINER else ""
        )


@dataclass(frozen=True)
class Workload:
    """What every run of a sweep trains, and the knobs that are fixed for the whole sweep."""

    model: str = knob("--model", "torchvision classification model name", default="resnet50")
    image_size: int = knob(
        "--image-size", "square input size in pixels", parse=int, gpu=224, cpu=32, at_least=16
    )
    num_classes: int = knob(
        "--num-classes",
        "classes of the model's output layer",
        parse=int,
        default=1000,
        at_least=2,
        row=False,
    )
    data: str = knob(
        "--data",
        "'synthetic' (random tensors) or an ImageFolder root (class subdirectories)",
        default=SYNTHETIC,
    )
    loader_workers: int = knob(
        "--workers",
        "DataLoader worker processes per rank",
        parse=int,
        at_least=0,
        words="cores per GPU, at most 8, on GPU; 0 on CPU",
    )
    warmup_steps: int = knob(
        "--warmup-steps", "untimed steps per run", parse=int, gpu=20, cpu=2, at_least=0
    )
    timed_steps: int = knob("--steps", "timed steps per run", parse=int, gpu=100, cpu=8, at_least=1)
    bucket_cap_mb: float = knob(
        "--bucket-cap-mb", "DDP gradient bucket size in MB", parse=float, default=25.0, above=0
    )
    static_graph: bool = knob(
        "--static-graph", "DDP static_graph=True", default=False, switch=True, words="off"
    )
    # DDP's gradient_as_bucket_view and broadcast_buffers: on by default and off by default,
    # not torch's defaults (False and True in DistributedDataParallel's signature,
    # docs.pytorch.org torch.nn.parallel.DistributedDataParallel, checked 2026-11-26). On one
    # H100 (docs/results/2026-11-26-h100, benchmarks/step_variants.py) DDP with torch's defaults
    # ran 5.2 % under the same loop without DDP, with these two 1.1 %: gradients stay in DDP's
    # buckets (no copy in and out of them each step) and the batch-norm buffers are not
    # broadcast before every forward, which Horovod does not do either.
    gradient_as_bucket_view: bool = knob(
        "--no-gradient-as-bucket-view",
        "DDP gradient_as_bucket_view=False (torch's default): gradients copied into DDP's "
        "buckets and back each step",
        default=True,
        switch=True,
        words="gradients are views of DDP's buckets",
    )
    broadcast_buffers: bool = knob(
        "--broadcast-buffers",
        "DDP broadcast_buffers=True (torch's default): rank 0's buffers (batch-norm running "
        "statistics) broadcast before every forward",
        default=False,
        switch=True,
        words="not broadcast, as with Horovod",
    )
    fp16_allreduce: bool = knob(
        "--fp16-allreduce",
        "compress gradients to fp16 for the allreduce (DDP comm hook / hvd.Compression.fp16)",
        default=False,
        switch=True,
        words="off",
    )
    device: str = knob(
        "--device",
        "cpu runs gloo CPU processes (smoke figures) even where GPUs exist",
        values={"auto": "auto", "cuda": "cuda", "cpu": "cpu"},
        default="auto",
        words="auto: cuda when a GPU is visible, else cpu",
    )
    seed: int = knob(
        "--seed",
        "seed of the model's initial weights and the synthetic data",
        parse=int,
        default=0,
        at_least=0,
        row=False,
    )
    timed_seconds: float = knob(
        "--timed-seconds",
        "length of the timed window: warm-up runs until the median step time of "
        "consecutive ~1 s windows agrees within 2 %% (at most this long again), then the "
        "window lasts this long; --warmup-steps and --steps become minimums. 0: exactly "
        "--warmup-steps and --steps",
        parse=float,
        gpu=15.0,
        cpu=0.0,
        at_least=0,
    )
    compile_ddp_split: bool = knob(
        "--compile-ddp-split",
        "DDP with --compile on: let Dynamo split the compiled graph at DDP's gradient "
        "buckets (torch's own default) so each bucket's allreduce overlaps the rest of "
        "backward, instead of one graph whose allreduces start when backward ends",
        default=False,
        switch=True,
        words="off: one graph",
    )
    profile: bool = knob(
        "--profile",
        "after the timed window, trace a few more steps of one rank per configuration with "
        "torch.profiler (Chrome/Perfetto JSON beside the logs; the report's appendix lists "
        "the top kernels and the share of time in communication)",
        default=False,
        switch=True,
        words="off",
    )


class Sent(Placed):
    """A spec a rank is started with (--spec, one shell-safe argument): a run or a probe."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        return cls(**{**data, "placement": tuple(HostSlots(**h) for h in data["placement"])})

    def encode(self) -> str:
        """One shell-safe argument (URL-safe base64 of JSON): survives ssh and horovodrun."""
        raw = json.dumps(dataclasses.asdict(self), separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode("ascii")

    @classmethod
    def decode(cls, text: str) -> Self:
        return cls.from_dict(json.loads(base64.urlsafe_b64decode(text.encode("ascii"))))

    @classmethod
    def from_argv(cls, argv: Sequence[str] | None, description: str | None) -> Self:
        """The spec a rank process was started with, its one option (bench.launchers.launch_of)."""
        parser = argparse.ArgumentParser(description=description)
        parser.add_argument("--spec", required=True, help=f"{cls.__name__}.encode() of the launch")
        return cls.decode(parser.parse_args(argv).spec)


@dataclass(frozen=True)
class RunSpec(Sent):
    """One launch: a launcher, a placement, a variant and a repeat index."""

    sweep_id: str
    run_id: str
    launcher: str
    repeat: int
    placement: Placement
    variant: Variant
    workload: Workload
    batch_per_gpu: int
    scaling: str  # "weak": per-GPU batch fixed; "strong": global batch fixed
    threads_per_rank: int
    # --profile: where rank 0 writes its torch.profiler trace ("" = no trace for this launch;
    # the planner asks for one per configuration).
    trace_path: str
    # The image of variant.container pinned by content (repo@sha256:..., else the local image
    # ID): what `docker run` starts and the row records. "" on the host.
    container_digest: str = ""

    @property
    def image(self) -> str:
        """What the launchers hand the sweep's wrapper: the pinned image, "" on the host."""
        return self.container_digest

    @property
    def processes(self) -> int:
        """Processes the launch starts: one per GPU, or one per node for a launcher whose one
        process drives every GPU of its node (DataParallel, TensorFlow)."""
        return launcher_kind(self.launcher).processes(self.gpus_per_node) * self.nodes

    @property
    def global_batch(self) -> int:
        """Images per optimizer step over all GPUs: per-GPU batch x GPUs x accumulation."""
        return self.batch_per_gpu * self.world_size * self.variant.grad_accum

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        nested = {"variant": Variant(**data["variant"]), "workload": Workload(**data["workload"])}
        return super().from_dict({**data, **nested})


@dataclass(frozen=True)
class ProbeSpec(Sent):
    """An allreduce bandwidth probe over the same placement as the runs with that many ranks."""

    sweep_id: str
    probe_id: str
    placement: Placement
    nbytes: int
    iterations: int
    device: str
    threads_per_rank: int
