"""The few lines where the launchers differ: start-up, wrapping, the optimizer step, gathering.

DDP (torchrun) and Horovod (horovodrun) run one process per GPU; DataParallel (dp) one process
that drives every GPU of the machine; the per-gpu check one process per GPU, each a run of its
own with nothing wrapped and nothing exchanged. Everything else in the per-rank loop
(bench.rank.worker) is shared, so a difference between the launchers' numbers comes from these
lines and the libraries under them.
"""

from __future__ import annotations

import inspect
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from bench.launcher_kinds import launcher_kind
from bench.rank import layout
from bench.shared import wire
from bench.spec import Workload


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str  # "nccl" or "gloo"; DataParallel: "nccl" on GPUs (torch.cuda.comm), "none" on CPU
    devices: int = 1  # GPUs this process drives: 1, or all of them under DataParallel
    # per-gpu: this GPU's slot in the launch (bench.shared.wire.SLOT_VAR), which keys its result
    # and its faults; None where the ranks make one run together
    slot: int | None = None
    # processes on this node (local ranks 0..local_size-1 drive CUDA devices in that order):
    # whom --cpu-affinity shares a NUMA node's cores with
    local_size: int = 1


class Engine(ABC):
    """What the shared loop asks of a launcher's collectives. The defaults are a lone process's
    (IndependentEngine): no process group, nothing to reduce or hold back. Each engine sets up
    its own world in `init`, and wraps for the workload it was made for: `load` (its DDP and
    allreduce knobs; None for one that wraps nothing, the allreduce probe's), `grad_accum`
    backward passes per optimizer step, `devices` the GPUs a DataParallel process drives."""

    def __init__(self, load: Workload | None = None, grad_accum: int = 1, devices: int = 1) -> None:
        self.load, self.grad_accum, self.devices = load, grad_accum, devices

    @abstractmethod
    def init(self, device_type: str) -> DistInfo:
        """This process's place in the world (and the process group, where there is one)."""

    def wrap(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        return model, optimizer

    def no_sync(self, model: torch.nn.Module) -> AbstractContextManager[Any]:
        """Around the backward passes of a step but its last: accumulate, do not allreduce."""
        return nullcontext()

    def compile(self, model: torch.nn.Module) -> torch.nn.Module:
        """torch.compile the wrapped model in the arrangement that is fastest for this engine."""
        return torch.compile(model)

    def step(self, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None) -> None:
        """Apply the (reduced) gradients; with a GradScaler for fp16 AMP."""
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)

    def barrier(self) -> None:
        return  # a world of one: nobody to wait for

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order (on every rank)."""
        return [obj]

    def shutdown(self) -> None:
        """Release the collectives (a rank process then ends with lifeline.exit_rank)."""
        return  # a lone process holds none


def _device(device_type: str, local_rank: int) -> torch.device:
    if device_type == "cuda":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


class DdpEngine(Engine):
    """torch.distributed + DistributedDataParallel, started by torchrun. Its step is a plain
    local step: DDP reduced the gradients during backward."""

    def init(self, device_type: str) -> DistInfo:
        local_rank = int(os.environ["LOCAL_RANK"])
        device = _device(device_type, local_rank)
        backend = "nccl" if device_type == "cuda" else "gloo"
        dist.init_process_group(backend, device_id=device if device_type == "cuda" else None)
        # torchrun's LOCAL_WORLD_SIZE: its workers on this node (torch/distributed/run.py's
        # docstring, "Environment Variables", torch 2.13.0, read 2026-11-27)
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        rank, size = dist.get_rank(), dist.get_world_size()
        self._info = DistInfo(rank, size, local_rank, device, backend, local_size=local)
        return self._info

    def wrap(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        from torch.nn.parallel import DistributedDataParallel

        ddp = DistributedDataParallel(
            model,
            device_ids=[self._info.local_rank] if self._info.device.type == "cuda" else None,
            **ddp_options(vars(self.load)),
        )
        if self.load.fp16_allreduce:
            ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return ddp, optimizer

    def no_sync(self, model: torch.nn.Module) -> AbstractContextManager[Any]:
        # DDP allreduces in every backward unless told not to; torch.compile's wrapper keeps
        # the DDP module as _orig_mod.
        return getattr(model, "_orig_mod", model).no_sync()

    def compile(self, model: torch.nn.Module) -> torch.nn.Module:
        # Dynamo's DDPOptimizer (torch's default) cuts the compiled graph at every DDP bucket
        # boundary, so each bucket's allreduce can start while the rest of backward runs. The
        # cuts stop Inductor fusing across them and add graph launches (pytorch#108966); on one
        # H100, ResNet-50 amp-bf16 channels_last batch 128 ran 4,877 img/s compiled without DDP
        # and 3,502 compiled under DDP with the cuts. Whether one graph recovers the difference is
        # not yet measured (no GPU so far; `--compile-ddp-split` run both ways measures it).
        # By default the model is one graph (optimize_ddp = False): its compiled backward
        # hands all gradients over at its end, and DDP's reducer allreduces the buckets then,
        # without overlap. That costs the allreduce time once per step: small over NVLink (about
        # 1 ms for ResNet-50's 102 MB), not across nodes over a slower network, where
        # --compile-ddp-split restores torch's arrangement. Set before the first compiled call.
        import torch._dynamo

        torch._dynamo.config.optimize_ddp = bool(self.load and self.load.compile_ddp_split)
        return torch.compile(model)

    def barrier(self) -> None:
        dist.barrier()

    def gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self._info.world_size
        dist.all_gather_object(out, obj)
        return out

    def shutdown(self) -> None:
        dist.destroy_process_group()


class HorovodEngine(Engine):
    """horovod.torch's DistributedOptimizer, started by horovodrun. It compiles as a lone
    process does: Horovod wraps the optimizer, not the model, and its gradient hooks sit on the
    parameters' AccumulateGrad nodes, which still run (after the compiled backward) under
    torch.compile."""

    def init(self, device_type: str) -> DistInfo:
        import horovod.torch as hvd

        self._hvd = hvd
        hvd.init()
        device = _device(device_type, hvd.local_rank())
        backend = "nccl" if device_type == "cuda" and hvd.nccl_built() else "gloo"
        self._info = DistInfo(
            hvd.rank(), hvd.size(), hvd.local_rank(), device, backend, local_size=hvd.local_size()
        )
        return self._info

    def wrap(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        hvd = self._hvd
        # Horovod's collectives take only row-major tensors; channels_last weights and their
        # gradients are not. bench.rank.layout hands it row-major views of the same memory.
        layout.broadcast_in_place(hvd, model.state_dict(), root_rank=0)
        compression = hvd.Compression.fp16 if self.load.fp16_allreduce else hvd.Compression.none
        optimizer = hvd.DistributedOptimizer(
            optimizer,
            named_parameters=model.named_parameters(),
            compression=layout.RowMajorCompression(compression),
            backward_passes_per_step=self.grad_accum,  # allreduce after the step's last backward
        )
        # Every rank built the same fresh optimizer: its state is empty everywhere, so there is
        # nothing to broadcast. hvd.broadcast_optimizer_state would first create the state with a
        # zero-gradient step, in row-major layout even for channels_last parameters (slower
        # element-wise updates); state that does exist goes through the layout-safe broadcast.
        layout.broadcast_in_place(hvd, optimizer_state_tensors(optimizer), root_rank=0)
        return model, optimizer

    def no_sync(self, model: torch.nn.Module) -> AbstractContextManager[Any]:
        return nullcontext()  # backward_passes_per_step already holds the allreduce back

    def step(self, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None) -> None:
        if scaler is None:
            optimizer.step()  # waits for the allreduces started during backward
            return
        # GradScaler must unscale reduced gradients: finish the allreduces first, then let
        # scaler.step call optimizer.step without synchronizing a second time.
        optimizer.synchronize()  # type: ignore[attr-defined]
        skip: Any = getattr(optimizer, "skip_synchronize", nullcontext)
        with skip():
            scaler.step(optimizer)

    def barrier(self) -> None:
        self._hvd.barrier()

    def gather(self, obj: Any) -> list[Any]:
        return list(self._hvd.allgather_object(obj))

    def shutdown(self) -> None:
        self._hvd.shutdown()


class IndependentEngine(Engine):
    """One process alone on its GPU (the per-gpu check, bench.launchers.per_gpu): the plain
    model and optimizer, no process group; the shared loop trains it as any one-GPU run."""

    def init(self, device_type: str) -> DistInfo:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        device = _device(device_type, local_rank)
        slot = int(os.environ.get(wire.SLOT_VAR, str(local_rank)))
        local_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))  # bench.launchers.per_gpu's
        self._info = DistInfo(0, 1, local_rank, device, "none", slot=slot, local_size=local_size)
        return self._info


class DataParallelEngine(IndependentEngine):
    """torch.nn.DataParallel: one process, started directly (no torchrun), that splits each
    batch over the machine's GPUs, replicates the model onto them on every forward pass (in
    threads) and sums the gradients onto GPU 0. The baseline DDP is measured against. Its step,
    barrier and gather are a lone process's."""

    def init(self, device_type: str) -> DistInfo:
        device = _device(device_type, 0)
        # On CPU DataParallel has no devices to split over: it runs the module as it is.
        devices = self.devices if device_type == "cuda" else 1
        backend = "nccl" if device_type == "cuda" else "none"
        self._info = DistInfo(0, 1, 0, device, backend, devices)
        return self._info

    def wrap(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        if self._info.device.type != "cuda":
            return torch.nn.DataParallel(model), optimizer  # no GPUs: calls the module as is
        return torch.nn.DataParallel(model, device_ids=list(range(self._info.devices))), optimizer

    def no_sync(self, model: torch.nn.Module) -> AbstractContextManager[Any]:
        return nullcontext()  # gradients land on GPU 0 in every backward; nothing to hold back

    def compile(self, model: torch.nn.Module) -> torch.nn.Module:
        # The planner never sends a compiled variant to dp (bench.plan.why_not_runnable).
        raise ValueError("torch.compile is not applied under nn.DataParallel")


DDP_KNOBS = ("bucket_cap_mb", "static_graph", "gradient_as_bucket_view", "broadcast_buffers")


def ddp_options(values: Mapping[str, Any]) -> dict[str, Any]:
    """DistributedDataParallel's keyword arguments for the DDP knobs in `values`, a workload's
    fields by name (the DDP engine, benchmarks/overhead.py; benchmarks/step_variants.py sets
    them per variant): each knob is named after the DDP argument it sets."""
    from torch.nn.parallel import DistributedDataParallel

    options = {name: values[name] for name in DDP_KNOBS}
    # torch 2.13 renamed broadcast_buffers (per-forward buffer sync) to forward_sync_buffers
    # and warns on the old name; older releases only know the old one.
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters:
        options["forward_sync_buffers"] = options.pop("broadcast_buffers")
    return options


def optimizer_state_tensors(optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """The optimizer's state tensors (momentum buffers, ...) under names every rank agrees on."""
    named = {}
    for g, group in enumerate(optimizer.param_groups):
        for i, param in enumerate(group["params"]):
            for key, value in optimizer.state.get(param, {}).items():
                if isinstance(value, torch.Tensor):
                    named[f"{g}.{i}.{key}"] = value
    return named


# Each engine by the name the launcher registry gives it (LauncherKind.engine).
ENGINES: dict[str, type[Engine]] = {
    "DistributedDataParallel": DdpEngine,
    "DistributedOptimizer": HorovodEngine,
    "DataParallel": DataParallelEngine,
    "Independent": IndependentEngine,
}


def create(
    launcher: str, load: Workload | None = None, grad_accum: int = 1, devices: int = 1
) -> Engine:
    """The engine of a launcher, wrapping for `load` (see Engine)."""
    return ENGINES[launcher_kind(launcher).engine](load, grad_accum, devices)
