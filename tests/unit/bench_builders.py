"""Shared builders for the bench unit tests: machines, configurations and result rows.

Imported by the test modules (pytest puts this directory on sys.path)."""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.config import BenchConfig
from bench.machine import Environment, HorovodStatus
from bench.machine_defaults import resolve
from bench.options import parse_request
from bench.plan import launcher_variant
from bench.schema import RunRow, knob_values
from bench.spec import SYNTHETIC

MODELS = ["resnet18", "resnet50", "vgg16"]


def cpu_machine(cores: int = 2, horovod: HorovodStatus | None = None) -> Environment:
    return Environment(
        device="cpu",
        gpu_count=0,
        gpu_name="",
        bf16_supported=False,
        tf32_supported=False,
        cores=cores,
        horovod=horovod or HorovodStatus(False, reason="horovodrun not found"),
        tensorflow="2.21.0",
    )


def gpu_machine(
    gpus: int = 4,
    name: str = "NVIDIA H100 80GB HBM3",
    ampere: bool = True,
    horovod: HorovodStatus | None = None,
) -> Environment:
    return Environment(
        device="cuda",
        gpu_count=gpus,
        gpu_name=name,
        bf16_supported=ampere,
        tf32_supported=ampere,
        cores=32,
        horovod=horovod or HorovodStatus(True, "0.28.1", nccl_built=True),
        tensorflow="2.21.0",
    )


def config_for(argv: list[str], env: Environment) -> BenchConfig:
    return resolve(parse_request(argv), env)


def run_row(**overrides: Any) -> RunRow:
    """A successful 1-GPU DDP row on CPU; override any column. The knob columns are the CPU
    defaults of the declarations (bench.spec), so a new knob needs no edit here."""
    defaults = config_for([], cpu_machine())
    variant = launcher_variant("ddp", defaults.variants()[0], SYNTHETIC)
    base: dict[str, Any] = {
        **knob_values(defaults.workload, variant),
        "sweep_id": "s",
        "run_id": "ddp-n1-fp32-nchw-r0",
        "repeat": 0,
        "launcher": "ddp",
        "variant": "fp32-nchw",
        "status": "ok",
        "error": "",
        "started_at": "2026-01-01T00:00:00+00:00",
        "launch_wall_s": 10.0,
        "nodes": 1,
        "gpus_per_node": 1,
        "gpus": 1,
        "hosts": "localhost:1",
        "device_name": "cpu",
        "backend": "gloo",
        "interconnect": "none (1 rank)",
        "scaling": "weak",
        "batch_per_gpu": 8,
        "global_batch": 8,
        "threads_per_rank": 2,
        "images": 64,
        "window_s": 1.0,
        "throughput": 64.0,
        "throughput_per_gpu": 64.0,
        "step_time_median_s": 0.125,
        "step_time_p90_s": 0.13,
        "rank_imbalance": 0.0,
        "data_wait_s": 0.0,
        "data_wait_fraction": 0.0,
        "peak_memory_gb": 1.0,
        "gradient_mb": 102.228128,
    }
    base.update(overrides)
    return RunRow(**base)


def with_status(row: RunRow, status: str, error: str = "") -> RunRow:
    measured = {
        f.name: None
        for f in dataclasses.fields(RunRow)
        if f.default is None  # the measurement columns
    }
    return dataclasses.replace(row, status=status, error=error, **measured)
