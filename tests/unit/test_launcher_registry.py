"""The launcher registry (bench.launcher_kinds): the one place that names launchers, and
capabilities that match what the planner, the backends, the rows and the engines do."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from bench_builders import MODELS, config_for, cpu_machine, gpu_machine

from bench.admission import machine_problems
from bench.config import BenchConfig
from bench.launcher_kinds import (
    DEFAULT_LAUNCHERS,
    HOROVOD_PACKAGE,
    LAUNCHER_KINDS,
    LAUNCHERS,
    TENSORFLOW_PACKAGE,
    TORCH_PACKAGE,
    Argv,
    LauncherKind,
    launcher_kind,
)
from bench.launchers import launch_of
from bench.launchers.argv import Tools
from bench.launchers.local import LocalLauncher
from bench.launchers.versions import components_for
from bench.machine import Environment, HorovodStatus
from bench.plan import local_placement, plan_sweep, why_not_runnable
from bench.rank import engines
from bench.rows import allreduce_mb_per_image
from bench.spec import RunSpec, knobs

BENCH = Path(__file__).resolve().parents[2] / "bench"
REGISTRY = BENCH / "launcher_kinds.py"
TOOLS = Tools(python="/venv/bin/python", horovodrun="/venv/bin/horovodrun")
KINDS = list(LAUNCHER_KINDS.values())


def _names_in(node: ast.AST) -> list[str]:
    """The launcher names `node` spells as string literals (directly or in a literal tuple,
    list or set)."""
    elements = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [
        e.value
        for e in elements
        if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value in LAUNCHERS
    ]


def launcher_name_comparisons(source: str) -> list[str]:
    """Each `x == "ddp"`, `"dp" != x`, `x in ("ddp", ...)` or `case "horovod":` in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                found += [f"{node.lineno}: {name!r}" for name in _names_in(side)]
        elif isinstance(node, ast.MatchValue):
            found += [f"{node.lineno}: case {name!r}" for name in _names_in(node.value)]
    return found


def test_the_detector_finds_every_form_of_comparison() -> None:
    source = (
        'if spec.launcher == "dp": pass\n'
        'if "horovod" != name: pass\n'
        'if name in ("ddp", "other"): pass\n'
        'if name not in {"dp"}: pass\n'
        'match name:\n    case "horovod": pass\n'
        'if name == "torchrun" or name in ("a", "b"): pass\n'  # not launcher names
    )
    assert launcher_name_comparisons(source) == [
        "1: 'dp'",
        "2: 'horovod'",
        "3: 'ddp'",
        "4: 'dp'",
        "6: case 'horovod'",
    ]


def test_no_module_but_the_registry_compares_a_launcher_name_with_a_string() -> None:
    offenders = {
        str(path.relative_to(BENCH.parent)): found
        for path in sorted(BENCH.rglob("*.py"))
        if path != REGISTRY and (found := launcher_name_comparisons(path.read_text()))
    }
    assert offenders == {}


def test_names_are_the_cli_choices_and_lookup_refuses_others() -> None:
    assert LAUNCHERS == ("ddp", "horovod", "dp", "tf", "per-gpu")
    assert DEFAULT_LAUNCHERS == ("ddp", "horovod")  # dp, tf and the per-gpu check are opt-in
    choices = dict(knobs(BenchConfig))["launchers"].values
    assert choices is not None and tuple(choices) == LAUNCHERS
    assert config_for([], cpu_machine()).launchers == DEFAULT_LAUNCHERS
    assert all(launcher_kind(name).name == name for name in LAUNCHERS)
    with pytest.raises(ValueError, match="unknown launcher 'mpi'"):
        launcher_kind("mpi")


def test_horovod_for_tensorflow_is_refused_with_the_upstream_reason(capsys) -> None:
    with pytest.raises(SystemExit):
        config_for(["--launchers", "ddp,horovod-tf"], cpu_machine())
    error = capsys.readouterr().err
    assert "'horovod-tf' is not built" in error and "horovod/horovod#4290" in error


def _spec(name: str, *argv: str, gpus: int = 2) -> RunSpec:
    config = config_for(["--gpus", str(gpus), "--launchers", name, *argv], gpu_machine())
    return plan_sweep(config, "s", local_placement(gpus), 32)[0]


@pytest.mark.parametrize("kind", KINDS, ids=LAUNCHERS)
def test_the_local_command_is_the_kinds_argv(kind: LauncherKind) -> None:
    argv = LocalLauncher(TOOLS).command(launch_of(_spec(kind.name)), port=29500).argv
    starts = {
        Argv.TORCHRUN: ("/venv/bin/python", "-m", "torch.distributed.run"),
        Argv.HOROVODRUN: ("/venv/bin/horovodrun",),
        Argv.PLAIN: ("/venv/bin/python", "-m", "bench.rank.worker"),
        Argv.PER_NODE: ("/venv/bin/python", "-m", "bench.rank.keras_worker"),
        Argv.PER_GPU: ("/venv/bin/python", "-m", "bench.launchers.per_gpu"),
    }[kind.argv]
    assert argv[: len(starts)] == starts


@pytest.mark.parametrize("kind", KINDS, ids=LAUNCHERS)
def test_processes_per_gpu_and_compile_match_the_plan(kind: LauncherKind) -> None:
    spec = _spec(kind.name, gpus=4)
    assert spec.processes == (4 if kind.process_per_gpu else 1)
    assert kind.process_per_gpu or kind.name in ("dp", "tf")  # one process drives the GPUs
    compiled = _spec(kind.name, "--compile", "on")
    assert (why_not_runnable(compiled) == "") == kind.compile


@pytest.mark.parametrize("kind", KINDS, ids=LAUNCHERS)
def test_the_layout_is_the_frameworks_own_on_cpu_unless_memory_format_is_given(
    kind: LauncherKind,
) -> None:
    def layouts(env: Environment, *argv: str) -> set[bool]:
        config = config_for(["--gpus", "1", "--launchers", kind.name, *argv], env)
        return {s.variant.channels_last for s in plan_sweep(config, "s", local_placement(1), 2)}

    # on CPU Keras' NHWC for tf, NCHW for torch's launchers; the run id names it
    tf = kind.framework == TENSORFLOW_PACKAGE
    assert layouts(cpu_machine()) == {tf} and kind.cpu_channels_last == tf
    config = config_for(["--gpus", "1", "--launchers", kind.name, "--repeats", "1"], cpu_machine())
    [spec] = plan_sweep(config, "s", local_placement(1), 2)
    assert spec.run_id == f"{kind.name}-n1-fp32-{'channels_last' if tf else 'nchw'}-r0"
    # on a GPU bench.gpu_defaults' layout for every launcher: channels_last on an H100
    h100 = dataclasses.replace(gpu_machine(), gpu_capability=(9, 0), gpu_memory_gb=85.0)
    assert layouts(h100) == {True}
    # --memory-format applies to every launcher
    assert layouts(cpu_machine(), "--memory-format", "nchw") == {False}
    assert layouts(cpu_machine(), "--memory-format", "channels_last") == {True}
    assert layouts(cpu_machine(), "--memory-format", "nchw,channels_last") == {False, True}


@pytest.mark.parametrize("kind", KINDS, ids=LAUNCHERS)
def test_multi_node_is_what_validation_allows(kind: LauncherKind) -> None:
    config = config_for(["--hosts", "a:1,b:1", "--launchers", kind.name], gpu_machine())
    refused = [
        e for e in machine_problems(config, gpu_machine(), MODELS) if "cannot span nodes" in e
    ]
    assert bool(refused) != kind.multi_node
    assert kind.ssh_to_other_nodes == (kind.argv is Argv.HOROVODRUN)  # horovodrun's own ssh


@pytest.mark.parametrize("kind", KINDS, ids=LAUNCHERS)
def test_components_are_the_version_check_and_the_preflight(kind: LauncherKind) -> None:
    assert components_for(kind.name, gpu=False) == kind.components
    assert components_for(kind.name, gpu=True) == (*kind.components, "nccl", "driver_branch")
    assert kind.framework in (TORCH_PACKAGE, TENSORFLOW_PACKAGE)
    assert kind.needs_horovod == (kind.name == "horovod")
    no_horovod = gpu_machine(horovod=HorovodStatus(False, reason="horovodrun not found"))
    config = config_for(["--launchers", kind.name], no_horovod)
    refused = [
        e for e in machine_problems(config, no_horovod, MODELS) if "horovodrun not found" in e
    ]
    assert bool(refused) == (HOROVOD_PACKAGE in kind.components)
    no_tf = dataclasses.replace(gpu_machine(), tensorflow=None)
    config = config_for(["--launchers", kind.name], no_tf)
    refused = [
        e for e in machine_problems(config, no_tf, MODELS) if "TensorFlow is not installed" in e
    ]
    assert bool(refused) == (TENSORFLOW_PACKAGE in kind.components)


@pytest.mark.parametrize("kind", KINDS, ids=LAUNCHERS)
def test_gradient_exchange_capabilities_shape_the_wire_column(kind: LauncherKind) -> None:
    grads = 100_000_000  # bytes; per GPU batch 8 on 2 GPUs
    plain = allreduce_mb_per_image(_spec(kind.name, "--batch-size", "8"), grads)
    if kind.independent:  # each GPU alone: nothing on the wire, whatever the knobs
        assert plain == 0.0 and not kind.fp16_allreduce and not kind.exchange_per_step
        return
    assert plain == pytest.approx(100 / 8)
    fp16 = allreduce_mb_per_image(_spec(kind.name, "--batch-size", "8", "--fp16-allreduce"), grads)
    assert fp16 == pytest.approx(plain / 2 if kind.fp16_allreduce else plain)
    spec = _spec(kind.name, "--batch-size", "8", "--grad-accum", "4")
    accumulated = allreduce_mb_per_image(spec, grads)
    assert accumulated == pytest.approx(plain / 4 if kind.exchange_per_step else plain)


def test_every_torch_kind_has_its_engine_and_nothing_else_does() -> None:
    torch_kinds = [k for k in KINDS if k.framework == TORCH_PACKAGE]
    assert set(engines.ENGINES) == {k.engine for k in torch_kinds}
    assert {k.module for k in torch_kinds} == {"bench.rank.worker"}
    expected = {
        "ddp": engines.DdpEngine,
        "horovod": engines.HorovodEngine,
        "dp": engines.DataParallelEngine,
        "per-gpu": engines.IndependentEngine,
    }
    for name, cls in expected.items():
        assert isinstance(engines.create(name, devices=2), cls)
    dp = engines.create("dp", devices=2)  # the one kind without compile refuses it
    assert not launcher_kind("dp").compile
    with pytest.raises(ValueError, match=r"torch\.compile is not applied"):
        dp.compile(object())  # type: ignore[arg-type]
