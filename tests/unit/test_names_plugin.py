"""filter_plugins/gpustack_names.py: what the preflight suggests for an undeclared variable."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("names", ROOT / "filter_plugins/gpustack_names.py")
names = importlib.util.module_from_spec(spec)
spec.loader.exec_module(names)

DECLARED = ["nvidia_driver_branch", "nvidia_driver_allow_eol_branch", "cuda_toolkit_version"]


def test_a_typing_slip_suggests_only_the_name_with_the_same_letters():
    assert names.did_you_mean("nvidia_drvier_branch", DECLARED) == ["nvidia_driver_branch"]


def test_without_one_the_same_first_and_last_word_are_offered():
    assert names.did_you_mean("nvidia_drv_branch", DECLARED) == [
        "nvidia_driver_allow_eol_branch",
        "nvidia_driver_branch",
    ]


def test_nothing_alike_suggests_nothing():
    assert names.did_you_mean("nccl_version", DECLARED) == []
