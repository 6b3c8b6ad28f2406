"""The launchers a sweep compares, declared once: how each one starts its ranks, what it needs on
every node, what it can do, and which rank engine trains under it.

Code outside this module asks a launcher's `LauncherKind` (`launcher_kind(name)`) and never
compares a launcher's name with a string: adding a launcher is one entry here, its rank module
(or its engine in bench.rank.engines) and, if it has a new command line, its builder in
bench.launchers.argv.

Imports nothing from the bench (nor torch): the controller and the ranks both read it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

# Components whose versions must agree across nodes (bench.launchers.versions) and that the
# admission checks on the machine that runs the ranks (bench.machine.HorovodStatus.problem).
TORCH_PACKAGE = "torch"
HOROVOD_PACKAGE = "horovod"
TENSORFLOW_PACKAGE = "tensorflow"
# The rank entry points (python -m MODULE --spec ...): PyTorch's, whatever engine wraps the
# model, and TensorFlow's.
TORCH_RANK = "bench.rank.worker"
TENSORFLOW_RANK = "bench.rank.keras_worker"


class Argv(enum.Enum):
    """Which command line starts a launch (the builders in bench.launchers.argv): the local,
    ssh and Slurm backends each dispatch on it once."""

    TORCHRUN = "torchrun"  # one torchrun agent per node, meeting at a c10d rendezvous
    HOROVODRUN = "horovodrun"  # one horovodrun that starts every rank (-H host:slots)
    PLAIN = "python"  # one process, no launcher
    # one process per node, no launcher; several nodes find each other through the TF_CONFIG
    # each process gets (bench.shared.tf_rules.tf_config)
    PER_NODE = "python-per-node"
    # one spawner per node (bench.launchers.per_gpu) that starts one rank per GPU of its node,
    # each a run of world size 1 on its own GPU: no process group, nothing exchanged
    PER_GPU = "python-per-gpu"


@dataclass(frozen=True)
class LauncherKind:
    """One launcher. Its capabilities default to a torch launcher's with one rank process per
    GPU (DDP's, less fp16 compression); each kind below states where it differs."""

    name: str  # the --launchers value and the rows' launcher column
    title: str  # how the report names it
    description: str  # what it is, in --help
    argv: Argv
    engine: str  # what wraps model and optimizer (torch: bench.rank.engines.ENGINES' name)
    components: tuple[str, ...] = (TORCH_PACKAGE,)  # what it imports on every node, framework first
    multi_node: bool = True  # can span --hosts/--hostfile/--slurm nodes
    process_per_gpu: bool = True  # one rank process per GPU; False: one process drives every GPU
    compile: bool = True  # --compile applies under it
    fp16_allreduce: bool = False  # --fp16-allreduce compresses the gradients it exchanges
    # Its launcher starts the other nodes' ranks itself, over ssh (horovodrun), rather than
    # one process per node being started through the sweep's site.
    ssh_to_other_nodes: bool = False
    # Gradients are exchanged once per optimizer step, after the last accumulated micro-batch;
    # False: after every backward pass (DataParallel sums the replicas' gradients onto GPU 0).
    exchange_per_step: bool = True
    default: bool = False  # in the sweep when --launchers is not given
    # The layout a CPU sweep runs it in when --memory-format is not given: the one its framework
    # is fast in there (torch's NCHW; on GPUs every launcher takes bench.gpu_defaults' layout).
    cpu_channels_last: bool = False
    module: str = TORCH_RANK  # its ranks' entry point

    @property
    def needs_horovod(self) -> bool:
        return HOROVOD_PACKAGE in self.components

    @property
    def framework(self) -> str:
        """The framework its ranks train with (a package name: torch, tensorflow)."""
        return self.components[0]

    @property
    def independent(self) -> bool:
        """Its ranks are separate one-GPU runs, measured at once: one result row per GPU."""
        return self.argv is Argv.PER_GPU

    def processes(self, gpus: int) -> int:
        """The processes it starts to drive `gpus` GPUs (on one node, or in all)."""
        return gpus if self.process_per_gpu else 1


DDP = LauncherKind(
    name="ddp",
    title="DDP",
    description="torchrun",
    argv=Argv.TORCHRUN,
    engine="DistributedDataParallel",
    fp16_allreduce=True,
    default=True,
)
HOROVOD = LauncherKind(
    name="horovod",
    title="Horovod",
    description="horovodrun",
    argv=Argv.HOROVODRUN,
    engine="DistributedOptimizer",
    components=(TORCH_PACKAGE, HOROVOD_PACKAGE),
    fp16_allreduce=True,
    ssh_to_other_nodes=True,
    default=True,
)
# torch.nn.DataParallel, the baseline DDP is measured against; opt-in.
DP = LauncherKind(
    name="dp",
    title="DataParallel",
    description="torch.nn.DataParallel: one process driving the GPUs of one machine",
    argv=Argv.PLAIN,
    engine="DataParallel",
    multi_node=False,
    process_per_gpu=False,
    compile=False,
    exchange_per_step=False,
)

# Keras 3 on tf.distribute: MirroredStrategy over a node's GPUs in one process, and
# MultiWorkerMirroredStrategy across nodes (bench.rank.keras_worker); opt-in.
TF = LauncherKind(
    name="tf",
    title="TensorFlow",
    description="Keras 3, tf.distribute: MirroredStrategy per node, MultiWorkerMirroredStrategy "
    "across nodes",
    argv=Argv.PER_NODE,
    engine="MirroredStrategy",
    components=(TENSORFLOW_PACKAGE,),
    process_per_gpu=False,
    compile=True,  # --compile on: XLA (jit_compile) per replica
    ssh_to_other_nodes=False,  # a worker on each node, started through the site
    # Keras' native layout, NHWC, is TensorFlow's fast one on CPU. 2026-11-28, 2-core CPU VM
    # (shared, load 2-4), TensorFlow 2.21.0, ResNet-50 at 32 px, batch 8, one worker, fp32:
    # `python -m bench.scaling --launchers tf --gpus 1 --memory-format nchw,channels_last
    # --warmup-steps 5 --steps 30 --repeats 5 --no-probe` (the two alternate in every repeat)
    # ran nchw at 17.4, 16.5, 16.5, 16.8, 17.0 img/s and channels_last at 22.3, 18.0, 18.9,
    # 19.5, 18.5 (runs.csv): channels_last / nchw = 1.13 (ratio of medians), 1.15 (geometric
    # mean of the pairs). The author had 0.75 and 1.05 of a plain Keras loop.
    cpu_channels_last=True,
    module=TENSORFLOW_RANK,
)

# The per-GPU throughput check: the same one-GPU workload on every GPU of every node at once,
# each GPU's img/s set against its node's median and the published figure for its model
# (bench.report.per_gpu), to find the slow GPU; opt-in.
PER_GPU = LauncherKind(
    name="per-gpu",
    title="per-GPU check",
    description="the one-GPU run on every GPU at once, no communication; flags slow GPUs",
    argv=Argv.PER_GPU,
    engine="Independent",
    ssh_to_other_nodes=False,  # a spawner on each node, started through the site
    exchange_per_step=False,  # nothing is exchanged
)

LAUNCHER_KINDS: dict[str, LauncherKind] = {k.name: k for k in (DDP, HOROVOD, DP, TF, PER_GPU)}
# Launchers users ask for that are deliberately not built, and why (--launchers says so).
NOT_BUILT: dict[str, str] = {
    "horovod-tf": (
        "Horovod 0.28.1 does not work with TensorFlow >= 2.16 / Keras 3 ('Variable' object has no "
        "attribute 'ref'; horovod/horovod#4290, open, its fix PR #4317 withdrawn; checked "
        "2026-11-25): compare TensorFlow through the tf launcher (tf.distribute)"
    ),
}
LAUNCHERS: tuple[str, ...] = tuple(LAUNCHER_KINDS)
DEFAULT_LAUNCHERS: tuple[str, ...] = tuple(k.name for k in LAUNCHER_KINDS.values() if k.default)


def launcher_kind(name: str) -> LauncherKind:
    """The launcher called `name`; ValueError for one the bench does not know."""
    try:
        return LAUNCHER_KINDS[name]
    except KeyError:
        raise ValueError(f"unknown launcher {name!r}") from None
