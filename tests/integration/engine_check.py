"""Run under torchrun or horovodrun: bench.rank.engines must broadcast and reduce correctly.

    python engine_check.py {ddp,horovod} {nchw,channels_last} {eager,compile}

Each rank builds the model from its own seed, so only a working broadcast makes them equal.
After the engine's wrap every rank must hold rank 0's parameters, in the layout asked for; after
a few data-parallel steps (each rank on its slice of one global batch) every rank must hold the
same parameters, with gradients in the parameters' layout, and rank 0 checks them against one
process training the same model on the whole batch. The model has no BatchNorm, whose
per-rank statistics would make the data-parallel result differ from the single-process one.
Prints ENGINE_CHECK_OK on success; any mismatch raises (non-zero exit).
"""

from __future__ import annotations

import sys

import torch

from bench.rank import engines, worker
from bench.shared.lifeline import exit_rank
from bench.spec import Workload

STEPS = 3
GLOBAL_BATCH = 8
IMAGE = 16
CLASSES = 5
ROOT_SEED = 100


def small_net(seed: int, memory_format: torch.memory_format) -> torch.nn.Module:
    torch.manual_seed(seed)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 16, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 1),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, CLASSES),
    )
    return net.to(memory_format=memory_format)


def workload() -> Workload:
    return Workload(
        model="small",
        image_size=IMAGE,
        num_classes=CLASSES,
        data="synthetic",
        loader_workers=0,
        warmup_steps=0,
        timed_steps=STEPS,
        bucket_cap_mb=25.0,
        static_graph=False,
        gradient_as_bucket_view=False,
        broadcast_buffers=True,
        fp16_allreduce=False,
        device="cpu",
        seed=0,
        timed_seconds=0.0,
        compile_ddp_split=False,
        profile=False,
    )


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def in_layout(tensor: torch.Tensor, memory_format: torch.memory_format) -> bool:
    return tensor.dim() != 4 or tensor.is_contiguous(memory_format=memory_format)


def global_batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    images = torch.randn(GLOBAL_BATCH, 3, IMAGE, IMAGE, generator=generator)
    return images, torch.randint(0, CLASSES, (GLOBAL_BATCH,), generator=generator)


def main(launcher: str, layout: str, mode: str) -> None:
    memory_format = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    torch.set_num_threads(1)
    engine = engines.create(launcher, workload())
    info = engine.init("cpu")
    model = small_net(ROOT_SEED + info.rank, memory_format)  # differs per rank until broadcast
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = engine.wrap(model, optimizer)
    module = getattr(model, "module", model)  # DDP keeps the network as .module
    root = small_net(ROOT_SEED, memory_format)
    values = engine.gather(flat(module))
    for rank, value in enumerate(values):
        assert torch.equal(value, flat(root)), f"rank {rank} does not hold rank 0's parameters"
    assert all(in_layout(p, memory_format) for p in module.parameters()), "layout lost"

    if mode == "compile":
        model = engine.compile(model)
    step = worker.make_train_step(model, optimizer, engine, "fp32", info.device)
    images, labels = global_batch()
    share = GLOBAL_BATCH // info.world_size
    mine = slice(info.rank * share, (info.rank + 1) * share)
    for _ in range(STEPS):
        step(images[mine].contiguous(memory_format=memory_format), labels[mine])
    grads = [p.grad for p in module.parameters()]
    assert all(g is not None and in_layout(g, memory_format) for g in grads), "gradient layout"
    assert all(in_layout(p, memory_format) for p in module.parameters()), "layout lost in training"

    values = engine.gather(flat(module))
    for rank, value in enumerate(values):
        assert torch.equal(value, values[0]), f"rank {rank} diverged from rank 0"
    if info.rank == 0:
        reference = small_net(ROOT_SEED, memory_format)
        ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
        for _ in range(STEPS):
            ref_optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(
                reference(images.contiguous(memory_format=memory_format)), labels
            )
            loss.backward()
            ref_optimizer.step()
        difference = (values[0] - flat(reference)).abs().max().item()
        moved = (flat(reference) - flat(root)).abs().max().item()
        assert moved > 1e-3, "the reference did not train"
        assert torch.allclose(values[0], flat(reference), rtol=1e-4, atol=1e-5), difference
        print(f"ENGINE_CHECK_OK world={info.world_size} max_abs_diff={difference:.2e}", flush=True)
    engine.barrier()  # no rank leaves while rank 0 still computes the reference
    engine.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:4])
    exit_rank(0)  # as bench.rank.worker ends
