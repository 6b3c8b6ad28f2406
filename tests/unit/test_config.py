"""Options, machine-dependent defaults, and every impossible request rejected up front."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from bench_builders import MODELS, config_for, cpu_machine, gpu_machine

from bench import machine, scaling, stages
from bench.admission import admit, request_problems, unavailable_launchers
from bench.config import BenchConfig, ConfigError, refuse
from bench.machine import HorovodStatus
from bench.options import explicit_options, parse_request


def test_cpu_defaults_are_a_quick_smoke_test() -> None:
    config = config_for([], cpu_machine(cores=2))
    assert config.device == "cpu"
    assert config.gpu_counts == (1, 2)
    assert config.launchers == ("ddp", "horovod") and not config.launchers_explicit
    assert (config.batch_size, config.workload.image_size, config.axes["precision"]) == (
        8,
        32,
        ("fp32",),
    )
    assert (config.workload.warmup_steps, config.workload.timed_steps, config.repeats) == (2, 8, 3)
    assert config.workload.loader_workers == 0
    admit(config, cpu_machine(cores=2), MODELS)


def test_gpu_defaults() -> None:
    config = config_for([], gpu_machine(gpus=4))
    assert config.device == "cuda"
    assert config.gpu_counts == (1, 2, 4)
    assert (config.batch_size, config.workload.image_size, config.axes["precision"]) == (
        128,
        224,
        ("amp-bf16",),
    )
    assert (config.workload.warmup_steps, config.workload.timed_steps) == (20, 100)
    assert config.workload.loader_workers == 8  # 32 cores / 4 GPUs
    assert config_for([], gpu_machine(ampere=False)).axes["precision"] == ("amp-fp16",)
    admit(config, gpu_machine(gpus=4), MODELS)


def test_cpu_device_can_be_forced_on_a_gpu_machine() -> None:
    config = config_for(["--device", "cpu"], gpu_machine())
    assert (config.device, config.workload.image_size, config.axes["precision"]) == (
        "cpu",
        32,
        ("fp32",),
    )


def errors_for(argv: list[str], env=None) -> str:  # type: ignore[no-untyped-def]
    """The refusal of argv as bench.scaling gives it: the values tier, then the machine's."""
    env = env or cpu_machine()
    with pytest.raises(ConfigError) as caught:
        refuse(request_problems(parse_request(argv)))
        admit(config_for(argv, env), env, MODELS)
    return str(caught.value)


def test_more_ranks_than_the_machine_has() -> None:
    assert "64 requested but this machine has 4 GPUs" in errors_for(
        ["--gpus", "1,64"], gpu_machine()
    )
    assert "3 requested but this machine has 2 CPU ranks" in errors_for(["--gpus", "3"])


def test_no_gpu_for_device_cuda() -> None:
    assert "no CUDA GPU is visible" in errors_for(["--device", "cuda"])


def test_unknown_model_suggests_a_close_name() -> None:
    message = errors_for(["--model", "resnet5"])
    assert "unknown torchvision classification model 'resnet5'" in message
    assert "did you mean resnet50" in message


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--batch-size", "0"], "--batch-size must be >= 1"),
        (["--global-batch", "100", "--gpus", "1,2", "--device", "cpu"], None),
        (["--global-batch", "5", "--gpus", "1,2"], "does not split evenly over [2] GPUs"),
        (["--steps", "0"], "--steps must be >= 1"),
        (["--warmup-steps", "-1"], "--warmup-steps must be >= 0"),
        (["--repeats", "0"], "--repeats must be >= 1"),
        (["--image-size", "8"], "--image-size must be >= 16"),
        (["--timeout", "0"], "--timeout must be > 0"),
        (["--workers", "-2"], "--workers must be >= 0"),
        (["--bucket-cap-mb", "0"], "--bucket-cap-mb must be > 0"),
        (["--precision", "tf32"], "tf32 needs an NVIDIA Ampere or newer GPU"),
        (["--data", "/nonexistent/imagenet"], "is not a directory"),
    ],
)
def test_impossible_requests(argv: list[str], expected: str | None) -> None:
    if expected is None:
        config = config_for(argv, cpu_machine())
        admit(config, cpu_machine(), MODELS)
    else:
        assert expected in errors_for(argv)


def test_bf16_needs_a_gpu_with_bf16() -> None:
    old = gpu_machine(name="Tesla V100-SXM2-16GB", ampere=False)
    assert "no bfloat16 support" in errors_for(["--precision", "amp-bf16"], old)


def test_data_dir_needs_class_subdirectories(tmp_path: Path) -> None:
    assert "no class subdirectories" in errors_for(["--data", str(tmp_path)])
    (tmp_path / "cat").mkdir()
    admit(config_for(["--data", str(tmp_path)], cpu_machine()), cpu_machine(), MODELS)


def test_all_problems_of_a_tier_are_reported_at_once() -> None:
    message = errors_for(["--gpus", "8", "--model", "nosuchnet", "--precision", "tf32"])
    assert message.count("\n  - ") == 2  # three problems of the machine, one per line
    # a value no machine could run stops the request before the machine is asked
    assert (
        errors_for(["--gpus", "8", "--batch-size", "0"]) == "  - --batch-size must be >= 1, got 0"
    )


def test_horovod_asked_for_but_missing() -> None:
    missing = cpu_machine(horovod=HorovodStatus(False, reason="horovodrun not found"))
    assert "--launchers horovod: horovodrun not found" in errors_for(
        ["--launchers", "horovod"], missing
    )
    # not asked for by name: the sweep goes on and records Horovod's runs as unavailable
    config = config_for([], missing)
    admit(config, missing, MODELS)
    assert unavailable_launchers(config, missing) == {"horovod": "horovodrun not found"}


def test_horovod_without_nccl_on_a_gpu_host() -> None:
    gloo_only = gpu_machine(horovod=HorovodStatus(True, "0.28.1", nccl_built=False))
    assert "built without NCCL" in errors_for(["--launchers", "ddp,horovod"], gloo_only)
    # on a CPU sweep NCCL does not matter
    cpu = cpu_machine(horovod=HorovodStatus(True, "0.28.1", nccl_built=False))
    admit(config_for(["--launchers", "horovod"], cpu), cpu, MODELS)
    assert unavailable_launchers(config_for([], cpu), cpu) == {}


@pytest.mark.parametrize(
    "argv",
    [["--precision", "fp64"], ["--gpus", "one"], ["--launchers", "mpi"], ["--claim", "1-560"]],
)
def test_malformed_options_stop_argument_parsing(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_request(argv)


def test_list_options_parse() -> None:
    request = parse_request(
        [
            "--gpus",
            "4,1,2",
            "--claim",
            "1:560,4:148",
            "--compile",
            "off,on",
            "--precision",
            "fp32,fp32,amp-fp16",
        ]
    )
    assert request.values["gpu_counts"] == (4, 1, 2)
    assert request.values["claim"] == ((1, 560.0), (4, 148.0))
    assert request.values["compile"] == (False, True)
    assert request.values["precision"] == ("fp32", "amp-fp16")
    assert config_for(["--gpus", "4,1,2,2"], gpu_machine()).gpu_counts == (1, 2, 4)


def test_config_round_trips_through_json() -> None:
    config = config_for(["--claim", "1:560,4:148", "--global-batch", "64"], gpu_machine())
    assert BenchConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


def test_explicit_options() -> None:
    assert explicit_options(["--resume", "d", "--gpus=2", "-x"]) == ["--resume", "--gpus"]


def test_main_rejects_before_launching(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(machine, "local_environment", lambda **_: cpu_machine())
    monkeypatch.setattr(stages.models, "available_models", lambda: MODELS)
    launched: list[object] = []
    monkeypatch.setattr(stages.LocalLauncher, "run", lambda *a: launched.append(a))
    code = scaling.main(["--gpus", "16", "--model", "resnet5", "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert "16 requested" in err and "resnet5" in err
    assert launched == [] and list(tmp_path.iterdir()) == []


def test_resume_refuses_other_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "local_environment", lambda **_: cpu_machine())
    assert scaling.main(["--resume", str(tmp_path), "--gpus", "2"]) == 2
    assert scaling.main(["--resume", str(tmp_path / "missing")]) == 2


# ---- every knob declared once (bench.spec, BenchConfig): parser, row and the store follow


def test_every_knob_is_an_option_with_its_field_as_dest() -> None:
    from bench.config import all_knobs
    from bench.options import build_parser

    actions = {a.dest: a for a in build_parser()._actions}
    for name, k in all_knobs():
        assert k.flag in actions[name].option_strings, name
        assert actions[name].default is None  # unset: the declared or machine default applies


def test_every_recorded_knob_is_a_column_and_the_old_columns_remain() -> None:
    from bench.schema import Measurements, RunRow, columns, knob_columns
    from bench.spec import Variant, Workload, knobs

    names = columns(RunRow)
    recorded = [n for cls in (Variant, Workload) for n, k in knobs(cls) if k.row]
    assert [n for n, _ in knob_columns()] == recorded and set(recorded) <= set(names)
    assert "num_classes" not in names and "seed" not in names  # row=False
    before = {  # the columns of a row before the declarations existed
        "sweep_id",
        "run_id",
        "repeat",
        "launcher",
        "variant",
        "status",
        "error",
        "started_at",
        "launch_wall_s",
        "nodes",
        "gpus_per_node",
        "gpus",
        "hosts",
        "device",
        "device_name",
        "backend",
        "interconnect",
        "model",
        "scaling",
        "batch_per_gpu",
        "global_batch",
        "image_size",
        "precision",
        "channels_last",
        "compile",
        "bucket_cap_mb",
        "static_graph",
        "gradient_as_bucket_view",
        "broadcast_buffers",
        "fp16_allreduce",
        "data",
        "loader_workers",
        "threads_per_rank",
        "warmup_steps",
        "timed_steps",
        "images",
        "window_s",
        "throughput",
        "throughput_per_gpu",
        "step_time_median_s",
        "step_time_p90_s",
        "rank_imbalance",
        "data_wait_s",
        "data_wait_fraction",
        "peak_memory_gb",
        "gradient_mb",
        "sm_clock_mhz_mean",
        "sm_clock_mhz_min",
        "power_w_mean",
        "power_w_max",
        "temperature_c_max",
        "throttle_reasons",
    }
    assert before <= set(names)
    measured = {f.name for f in dataclasses.fields(Measurements)}
    assert set(names) - before - measured <= set(recorded)  # a new column is a knob or a measure


def test_switches_and_sweeps_parse_to_field_values() -> None:
    request = parse_request(
        [
            "--broadcast-buffers",
            "--no-gradient-as-bucket-view",
            "--static-graph",
            "--grad-accum",
            "1,4",
            "--memory-format",
            "channels_last,nchw",
        ]
    )
    assert request.values["broadcast_buffers"] is True
    assert request.values["gradient_as_bucket_view"] is False
    assert request.values["static_graph"] is True
    assert request.values["grad_accum"] == (1, 4)
    assert request.values["channels_last"] == (True, False)
    config = config_for(["--grad-accum", "1,4"], cpu_machine())
    assert [v.grad_accum for v in config.variants()] == [1, 4]
    assert config.workload.broadcast_buffers is False  # the declared defaults
    assert config.workload.gradient_as_bucket_view is True


def test_values_are_checked_without_a_machine() -> None:
    assert request_problems(parse_request(["--grad-accum", "0"])) == [
        "--grad-accum must be >= 1, got 0"
    ]
    assert request_problems(parse_request(["--grad-accum", "2"])) == []


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--timeout", "nan"], "--timeout must be a finite number, got nan"),
        (["--timeout", "inf"], "--timeout must be a finite number, got inf"),
        (["--probe-mb", "nan"], "--probe-mb must be a finite number, got nan"),
        (["--repeats", "100000000"], "--repeats must be <= 1000, got 100000000"),
        (["--out", ""], '--out must name a directory, got ""'),
        (["--slow-gpu-threshold", "5"], "--slow-gpu-threshold applies to --launchers per-gpu only"),
    ],
)
def test_values_no_machine_could_run_are_refused_as_typed(argv, expected) -> None:
    assert any(expected in problem for problem in request_problems(parse_request(argv)))


def test_the_values_tier_touches_neither_torch_nor_pandas_nor_the_machine() -> None:
    assert (
        request_problems(parse_request(["--launchers", "per-gpu", "--slow-gpu-threshold", "5"]))
        == []
    )
    code = (
        "import sys\n"
        "from bench.admission import request_problems\n"
        "from bench.options import parse_request\n"
        "assert request_problems(parse_request(['--timeout', 'nan']))\n"
        "heavy = {'torch', 'pandas', 'pynvml'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, timeout=60, cwd=Path(__file__).parents[2]
    )
