"""--activation-checkpointing: recompute each stage's activations during backward.

The model's stages are its top-level `nn.Sequential` children (ResNet's layer1 to layer4, each a
run of bottleneck blocks); a model whose only such child is one long trunk (VGG's or
MobileNet's `features`) has that trunk's blocks as stages. Each stage is wrapped so that its
forward pass keeps only its input and runs again inside backward (torch.utils.checkpoint,
non-reentrant: it works under DDP, Horovod's hooks, autocast and torch.compile). Memory for
activations drops to about one stage's worth; compute grows by about one forward pass.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class CheckpointedStage(nn.Module):
    """A stage whose activations are recomputed in backward instead of kept."""

    def __init__(self, stage: nn.Module) -> None:
        super().__init__()
        self.stage = stage

    def forward(self, *inputs: Any) -> Any:
        if not torch.is_grad_enabled():
            return self.stage(*inputs)
        return checkpoint(self.stage, *inputs, use_reentrant=False)


def stages(model: nn.Module) -> list[tuple[nn.Module, str]]:
    """(parent, attribute name) of each stage (see the module docstring); [] if none."""
    top = [
        (model, name)
        for name, child in model.named_children()
        if isinstance(child, nn.Sequential) and len(child) > 0
    ]
    if len(top) == 1:
        trunk = getattr(*top[0])
        return [(trunk, name) for name, _ in trunk.named_children()]
    return top


def stage_names(model: nn.Module) -> list[str]:
    """Dotted names of the stages `checkpoint_stages` would wrap."""
    names = {id(m): n for n, m in model.named_modules()}
    return [f"{names[id(parent)]}.{attr}".lstrip(".") for parent, attr in stages(model)]


def checkpoint_stages(model: nn.Module) -> list[str]:
    """Wrap every stage of `model` in place; returns their names. Raises ValueError for a
    model with no stages (nothing to checkpoint: the request would silently do nothing)."""
    found = stages(model)
    if not found:
        raise ValueError(
            f"{type(model).__name__} has no nn.Sequential stages to checkpoint "
            "(--activation-checkpointing)"
        )
    names = stage_names(model)
    for parent, attr in found:
        setattr(parent, attr, CheckpointedStage(getattr(parent, attr)))
    return names
