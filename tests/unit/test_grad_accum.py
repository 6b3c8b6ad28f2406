"""Gradient accumulation in the per-rank step (bench.rank.worker): K micro-batches of b images
give the gradient of one batch of K x b, with the allreduce skipped on all but the last."""

from __future__ import annotations

import itertools
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest
import torch

from bench.rank import worker
from bench.spec import NO_LOADER, Variant


class LocalEngine:
    """One process, no collectives: records which backward passes ran under no_sync."""

    def __init__(self) -> None:
        self.synced: list[bool] = []

    def no_sync(self, model: torch.nn.Module) -> AbstractContextManager[Any]:
        @contextmanager
        def held() -> Any:
            self.synced.append(False)
            yield

        return held()

    def step(self, optimizer: torch.optim.Optimizer, scaler: Any) -> None:
        optimizer.step()


def trained(micro: int) -> tuple[torch.Tensor, list[bool]]:
    torch.manual_seed(0)
    images, labels = torch.randn(8, 5), torch.randint(0, 3, (8,))
    model = torch.nn.Linear(5, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    engine = LocalEngine()
    step = worker.make_train_step(model, optimizer, engine, "fp32", torch.device("cpu"))  # type: ignore[arg-type]
    batches = iter([(x, y) for x, y in zip(images.chunk(micro), labels.chunk(micro), strict=True)])
    step(*next(worker.micro_batches(batches, micro)))
    return model.weight.detach().clone(), engine.synced


@pytest.mark.parametrize("micro", [2, 4])
def test_accumulated_step_equals_one_large_batch(micro: int) -> None:
    whole, _ = trained(1)
    accumulated, held = trained(micro)
    assert torch.allclose(accumulated, whole, atol=1e-6)
    assert held == [False] * (micro - 1)  # every backward but the last skipped the allreduce


def test_micro_batches_groups_consecutive_batches() -> None:
    source = ((torch.full((2,), i), torch.full((2,), -i)) for i in itertools.count())
    images, labels = next(worker.micro_batches(source, 3))
    assert [int(x[0]) for x in images] == [0, 1, 2] and [int(y[0]) for y in labels] == [0, -1, -2]


def test_run_id_names_the_accumulation() -> None:
    assert Variant("fp32", False, False, NO_LOADER).label == "fp32-nchw"
    assert Variant("fp32", False, False, NO_LOADER, grad_accum=4).label == "fp32-nchw-acc4"
