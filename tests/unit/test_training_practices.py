"""The training-side knobs, without launching: activation checkpointing on the model's
stages, the DataParallel engine and launch, the profiler's trace and summary, and how the
planner, the rows and the report treat them."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from bench_builders import config_for, cpu_machine, run_row
from torch.autograd import DeviceType

from bench import report
from bench.admission import admit
from bench.config import ConfigError
from bench.launchers import launch_of
from bench.launchers.local import LocalLauncher
from bench.plan import local_placement, plan_sweep, why_not_runnable
from bench.rank import engines, worker
from bench.rank.checkpointing import CheckpointedStage, checkpoint_stages, stage_names
from bench.rank.profiling import is_communication, profile_steps, summarise_events
from bench.results import ResultStore
from bench.shared.models import build_model
from bench.spec import NO_LOADER, Variant


def loss_and_grads(model: torch.nn.Module) -> tuple[float, list[torch.Tensor]]:
    torch.manual_seed(1)
    images, labels = torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))
    loss = torch.nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    return float(loss.detach()), [p.grad.clone() for p in model.parameters()]


def test_checkpointing_wraps_resnet_stages_and_recomputes_them_in_backward() -> None:
    torch.manual_seed(0)
    plain = build_model("resnet18", 10)
    torch.manual_seed(0)
    checkpointed = build_model("resnet18", 10)
    assert checkpoint_stages(checkpointed) == ["layer1", "layer2", "layer3", "layer4"]
    assert isinstance(checkpointed.layer3, CheckpointedStage)
    forwards: list[str] = []
    block = checkpointed.layer2.stage[0]  # a block inside a checkpointed stage
    block.register_forward_hook(lambda *_: forwards.append("layer2.0"))
    loss, grads = loss_and_grads(checkpointed)
    assert forwards == ["layer2.0", "layer2.0"]  # once in forward, again inside backward
    plain_loss, plain_grads = loss_and_grads(plain)
    assert loss == pytest.approx(plain_loss)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(grads, plain_grads, strict=True))


def test_a_single_trunk_is_split_into_its_blocks_and_no_stage_is_refused() -> None:
    trunk = torch.nn.Module()
    trunk.features = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
    trunk.head = torch.nn.Linear(4, 2)
    assert stage_names(trunk) == ["features.0", "features.1"]
    with pytest.raises(ValueError, match=r"no nn\.Sequential stages"):
        checkpoint_stages(torch.nn.Linear(3, 2))


def test_dataparallel_engine_on_cpu_is_one_process_with_one_device() -> None:
    engine = engines.create("dp", devices=4)
    info = engine.init("cpu")
    assert (info.rank, info.world_size, info.devices, info.backend) == (0, 1, 1, "none")
    model, _ = engine.wrap(torch.nn.Linear(3, 2), None)  # type: ignore[arg-type]
    assert isinstance(model, torch.nn.DataParallel)
    assert engine.gather("x") == ["x"]
    step = worker.make_train_step(
        model, torch.optim.SGD(model.parameters(), lr=0.1), engine, "fp32", info.device
    )
    before = model.module.weight.detach().clone()
    step(torch.randn(4, 3), torch.randint(0, 2, (4,)))
    assert not torch.equal(before, model.module.weight)


def test_dataparallel_launches_one_plain_process_with_every_core() -> None:
    config = config_for(["--gpus", "1,2", "--launchers", "dp,ddp"], cpu_machine(cores=2))
    specs = {s.run_id: s for s in plan_sweep(config, "s", local_placement(2), 2)}
    dp = specs["dp-n1-fp32-nchw-r0"]
    assert dp.threads_per_rank == 2 and dp.processes == 1
    command = LocalLauncher().command(launch_of(dp))
    assert "torch.distributed.run" not in command.argv and "horovodrun" not in command.argv[0]
    assert command.argv[1:3] == ("-m", "bench.rank.worker")
    assert why_not_runnable(dp) == ""
    assert "one device" in why_not_runnable(specs["dp-n2-fp32-nchw-r0"])
    assert why_not_runnable(specs["ddp-n2-fp32-nchw-r0"]) == ""


def test_dataparallel_never_runs_compiled_and_never_across_nodes() -> None:
    config = config_for(["--gpus", "1", "--launchers", "dp", "--compile", "on"], cpu_machine())
    spec = plan_sweep(config, "s", local_placement(1), 2)[0]
    assert "torch.compile is not applied" in why_not_runnable(spec)
    multi = config_for(["--hosts", "a:1,b:1", "--launchers", "dp"], cpu_machine())
    with pytest.raises(ConfigError, match="--launchers dp: DataParallel runs on one machine only"):
        admit(multi, cpu_machine(), ["resnet18"])


def test_profile_traces_the_steps_and_summarises_them(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 4))
    engine = engines.create("dp")
    engine.init("cpu")
    step = worker.make_train_step(
        model, torch.optim.SGD(model.parameters(), lr=0.1), engine, "fp32", torch.device("cpu")
    )
    batch = (torch.randn(8, 3, 2, 2), torch.randint(0, 4, (8,)))
    batches = iter(lambda: batch, None)
    path = tmp_path / "deep" / "run.trace.json"
    summary = profile_steps(step, batches, torch.device("cpu"), str(path), steps=3)
    assert summary is not None and summary["trace"] == str(path) and summary["steps"] == 3
    events = json.loads(path.read_text())["traceEvents"]
    assert sum(1 for e in events if e.get("name") == "aten::addmm") == 3  # one Linear per step
    assert summary["top"] and {"name", "ms_per_step", "share"} <= set(summary["top"][0])
    assert summary["communication_share"] is None  # one process: no collective recorded
    assert profile_steps(step, batches, torch.device("cpu"), "", steps=2) is None  # takes part


def test_gpu_summary_counts_each_kernel_once() -> None:
    # key_averages() of a CUDA trace holds the kernels (device CUDA), the CPU ops that launched
    # them (device CPU, with the same time as "self device time") and user annotations on the GPU
    # timeline. On the H100 (2026-11-25) counting all three put "DistributedDataParallel.forward"
    # and aten ops at the top of the "kernel time" table. Entries shaped like key_averages()'s,
    # with names from that trace:
    def event(key: str, us: float, device: DeviceType, annotation: bool = False) -> Any:
        return SimpleNamespace(
            key=key,
            count=5,
            device_type=device,
            is_user_annotation=annotation,
            self_device_time_total=us,
            self_cpu_time_total=1.0,
        )

    events = [
        event("DistributedDataParallel.forward", 152_800, DeviceType.CUDA, annotation=True),
        event("aten::native_batch_norm", 72_500, DeviceType.CPU),
        event("batch_norm_collect_statistics_channels_last_kernel", 45_000, DeviceType.CUDA),
        event("sm90_xmma_fprop_implicit_gemm_bf16", 30_000, DeviceType.CUDA),
        event("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 25_000, DeviceType.CUDA),
    ]
    summary = summarise_events(events, torch.device("cuda"), wall_s=0.33, steps=5)
    assert [row["name"] for row in summary["top"]] == [
        "batch_norm_collect_statistics_channels_last_kernel",
        "sm90_xmma_fprop_implicit_gemm_bf16",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    ]
    assert summary["top"][0]["share"] == pytest.approx(0.45)
    assert summary["top"][0]["ms_per_step"] == pytest.approx(9.0)
    assert summary["communication_share"] == pytest.approx(0.25)


def test_collectives_are_recognised_in_traces() -> None:
    for name in (
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
        "gloo:all_reduce",
        "c10d::allreduce_",
        "nccl:all_reduce",
    ):
        assert is_communication(name)
    assert not is_communication("aten::convolution_backward")


def test_plan_profiles_the_first_repeat_of_each_configuration() -> None:
    config = config_for(
        ["--gpus", "1,2", "--launchers", "ddp", "--repeats", "2", "--profile"], cpu_machine()
    )
    traced = {s.run_id: s.trace_path for s in plan_sweep(config, "s", local_placement(2), 2)}
    assert traced == {
        "ddp-n1-fp32-nchw-r0": "ddp-n1-fp32-nchw-r0.trace.json",
        "ddp-n2-fp32-nchw-r0": "ddp-n2-fp32-nchw-r0.trace.json",
        "ddp-n1-fp32-nchw-r1": "",
        "ddp-n2-fp32-nchw-r1": "",
    }


def test_report_appendix_lists_each_profile(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    trace = tmp_path / "logs" / "ddp-n2-fp32-nchw-r0.trace.json"
    store.write_profile(
        "ddp-n2-fp32-nchw-r0",
        {
            "trace": str(trace),
            "host": "vm",
            "steps": 5,
            "wall_s": 1.5,
            "basis": "share of the GPU's kernel time",
            "communication_share": 0.25,
            "top": [
                {
                    "name": "ncclDevKernel_AllReduce",
                    "ms_per_step": 3.0,
                    "share": 0.25,
                    "calls_per_step": 2.0,
                    "communication": True,
                }
            ],
        },
    )
    points = report.summarise([run_row()], [])
    text = report.markdown({"config": {}}, [run_row()], [], points, [], store.profiles(), tmp_path)
    assert "## Appendix: where a step's time goes (--profile)" in text
    assert "[ddp-n2-fp32-nchw-r0.trace.json](logs/ddp-n2-fp32-nchw-r0.trace.json)" in text
    assert "- communication: 25.0 % (share of the GPU's kernel time)" in text
    assert "| ncclDevKernel_AllReduce | 3.00 | 25.0 % | 2.0 | yes |" in text


def test_report_sets_each_knob_value_beside_the_default_and_dp_beside_ddp() -> None:
    def rows(launcher: str, variant: Variant, gpus: int, tput: float, memory: float) -> list:
        return [
            run_row(
                run_id=f"{launcher}-{variant.label}-{gpus}-{i}",
                repeat=i,
                launcher=launcher,
                variant=variant.label,
                gpus=gpus,
                gpus_per_node=gpus,
                activation_checkpointing=variant.activation_checkpointing,
                throughput=tput + i,
                peak_memory_gb=memory,
                allreduce_mb_per_image=1.5,
            )
            for i in range(2)
        ]

    plain, ckpt = (
        Variant("fp32", False, False, NO_LOADER),
        Variant("fp32", False, False, NO_LOADER, activation_checkpointing=True),
    )
    runs = [
        *rows("ddp", plain, 1, 100, 9.0),
        *rows("ddp", ckpt, 1, 70, 4.0),
        *rows("dp", plain, 1, 80, 9.0),
    ]
    text = report.markdown({"config": {"device": "cpu"}}, runs, [], report.summarise(runs, []), [])
    assert "### Activation checkpointing" in text
    assert "| ddp | fp32-nchw | 1 | on | 8 | 70.5 | 100.0 % | 1.500 | 4.00 |" in text
    assert "| ddp | fp32-nchw | 1 | off | 8 | 100.5 | 100.0 % | 1.500 | 9.00 |" in text
    assert "DDP / DataParallel" in text
    assert "| fp32-nchw | 1 | 100.5 | 80.5 | 1.248 |" in text


def test_ddp_compile_is_one_graph_unless_split_at_buckets_is_asked() -> None:
    import torch._dynamo

    for split in (False, True):
        config = config_for(["--compile-ddp-split"] if split else [], cpu_machine())
        assert config.workload.compile_ddp_split is split
        engines.create("ddp", config.workload).compile(torch.nn.Linear(2, 2))
        assert torch._dynamo.config.optimize_ddp is split
    torch._dynamo.config.optimize_ddp = True  # torch's own default, for the tests that follow
