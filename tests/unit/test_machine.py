"""What a machine has (bench.machine), the version comparison over it, and the node-side CLI
the multi-node backends run on every node."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bench import machine
from bench.launchers.cluster import NODE_SURVEY, parse_survey_output
from bench.launchers.sites import probe_json
from bench.launchers.versions import (
    VersionMismatchError,
    check_versions,
    components_for,
)
from bench.machine import HorovodStatus, NodeInfo
from bench.paths import REPO_ROOT


def node(host: str, **fields: object) -> NodeInfo:
    base: dict[str, object] = {"hostname": host, "python": "3.11.7", "torch": "2.13.0"}
    base.update(fields)
    return NodeInfo.from_survey(host, base)


def test_importing_the_facts_and_the_node_cli_loads_no_torch() -> None:
    code = (
        "import sys, bench.machine, bench.launchers.cluster, "
        "bench.launchers.sites, bench.launchers.local; print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr


# ---------------------------------------------------------------- facts


def test_bf16_and_tf32_come_from_the_capability_alone() -> None:
    assert machine.bf16_supported((8, 0)) and machine.tf32_supported((9, 0))
    assert not machine.bf16_supported((7, 5)) and not machine.tf32_supported((7, 0))
    assert not machine.bf16_supported(None)


def test_the_smallest_node_decides_what_a_sweep_may_use() -> None:
    hvd = HorovodStatus(True, "0.28.1")
    h100 = node("a", gpus=8, gpu_name="H100", gpu_capability=[9, 0], cores=64)
    v100 = node("b", gpus=4, gpu_name="V100", gpu_capability=[7, 0], cores=32)
    env = machine.environment_of([h100, v100], hvd)
    assert (env.device, env.gpu_count, env.cores) == ("cuda", 4, 32)
    assert not env.bf16_supported and not env.tf32_supported  # the V100 has neither
    assert machine.environment_of([h100], hvd).bf16_supported
    cpu = machine.environment_of([node("c", cores=2)], hvd)
    assert (cpu.device, cpu.gpu_count, cpu.gpu_name, cpu.bf16_supported) == ("cpu", 0, "", False)


def test_local_environment_of_this_cpu_machine() -> None:
    env = machine.local_environment(check_horovod=False)
    assert (env.device, env.gpu_count, env.cores) == ("cpu", 0, machine.cpu_cores())
    assert env.horovod.reason == "not checked: not in this sweep"


def test_a_horovod_that_does_not_import_is_reported_with_the_child_s_error(tmp_path: Path) -> None:
    # An interpreter outside this venv (no pyvenv.cfg beside it): the base Python, no Horovod.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(Path(sys.executable).resolve())
    (bin_dir / "horovodrun").touch()
    status = machine.horovod_status(str(bin_dir / "python"))
    assert not status.available
    assert status.reason == (
        "import horovod.torch failed: exit status 1: ModuleNotFoundError: No module named 'horovod'"
    )


def test_a_probe_runs_on_this_machine_with_the_bench_importable_and_a_time_limit() -> None:
    probe = "import json, bench.paths; print(json.dumps({'from': bench.paths.__file__}))"
    found = probe_json([sys.executable, "-c", probe], timeout_s=60)
    assert found == {"from": str(REPO_ROOT / "bench" / "paths.py")}
    assert probe_json(["sleep", "5"], timeout_s=0.5) == "exit status 124: timed out after 0.5s"


def test_survey_of_this_machine() -> None:
    info = machine.survey("127.0.0.1")
    assert info["hostname"] == socket.gethostname()
    assert info["python"] == ".".join(map(str, sys.version_info[:3]))
    assert (info["address"], info["interface"]) == ("127.0.0.1", "lo")
    import torch

    assert info["torch"] == torch.__version__
    parsed = parse_survey_output("here", f"noise\n{machine.survey_line(info)}\n")
    assert parsed.host == "here" and parsed.torch == torch.__version__
    with pytest.raises(RuntimeError, match="printed no result"):
        parse_survey_output("here", "Traceback ...")


def test_unknown_survey_fields_are_ignored() -> None:
    info = NodeInfo.from_survey("h", {"hostname": "h", "python": "3.12", "new_field": 1})
    assert info.torch is None and info.gpus == 0


# ---------------------------------------------------------------- versions


def test_matching_nodes_pass() -> None:
    infos = {h: node(h, horovod="0.28.1") for h in ("a", "b", "c")}
    check_versions(infos, ["torch", "horovod"])


def test_mismatch_names_component_values_and_nodes() -> None:
    nccl = "2.20.5"
    infos = {
        "gpu01": node("gpu01", torch="2.4.1", nccl=nccl, driver="535.183.01", driver_branch="535"),
        "gpu02": node("gpu02", torch="2.4.1", nccl=nccl, driver="550.54.15", driver_branch="550"),
        "gpu03": node("gpu03", torch="2.3.0", nccl=nccl, driver="535.161.08", driver_branch="535"),
    }
    gpu_ddp = components_for("ddp", gpu=True)
    with pytest.raises(VersionMismatchError) as err:
        check_versions(infos, gpu_ddp)
    message = str(err.value)
    assert "torch: 2.4.1 on gpu01, gpu02; 2.3.0 on gpu03" in message
    assert "NVIDIA driver branch: 535 on gpu01, gpu03; 550 on gpu02" in message
    assert "NCCL" not in message  # same everywhere; driver patch levels do not count


def test_a_component_no_node_has_is_an_error_when_the_run_needs_it() -> None:
    infos = {"a": node("a"), "b": node("b")}
    check_versions(infos, ["torch"])
    with pytest.raises(VersionMismatchError, match="Horovod: not installed on a, b"):
        check_versions(infos, ["torch", "horovod"])


def test_a_missing_component_is_a_mismatch_only_when_it_matters() -> None:
    infos = {"a": node("a", horovod="0.28.1"), "b": node("b")}
    assert components_for("ddp", gpu=False) == ("torch",)
    check_versions(infos, components_for("ddp", gpu=False))
    with pytest.raises(VersionMismatchError, match=r"Horovod: 0\.28\.1 on a; not installed on b"):
        check_versions(infos, components_for("horovod", gpu=False))
    assert components_for("horovod", gpu=True) == ("torch", "horovod", "nccl", "driver_branch")
    gpu = {"a": node("a", driver_branch="535"), "b": node("b")}
    with pytest.raises(VersionMismatchError, match="535 on a; no NVIDIA driver on b"):
        check_versions(gpu, ["driver_branch"])


# ---------------------------------------------------------------- the node-side CLI


def test_the_node_survey_prints_one_marked_survey_line_with_the_route() -> None:
    done = subprocess.run(
        [sys.executable, "-c", NODE_SURVEY, "127.0.0.1"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    info = parse_survey_output("here", out)
    assert (info.interface, info.address) == ("lo", "127.0.0.1")
    assert out.startswith(machine.SURVEY_MARKER + " ") and len(out.splitlines()) == 1


def _environment(prefix: Path, *wheels: tuple[str, str]) -> str:
    """An environment's layout as venv and pip make it: bin/python and, per installed wheel,
    its NAME-VERSION.dist-info/METADATA (core metadata: Name and Version headers)."""
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").touch()
    site = prefix / "lib" / "python3.12" / "site-packages"
    for name, version in wheels:
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return str(prefix / "bin" / "python")


def test_tensorflow_is_found_in_the_environment_or_in_the_roles_one_beside_it(
    tmp_path: Path,
) -> None:
    torch_env = _environment(tmp_path / "train", ("torch", "2.13.0"))
    assert machine.tensorflow_env(torch_env) == (torch_env, None)
    # python_env's own TensorFlow environment, <env>-tf, written as pip writes tensorflow-cpu
    beside = _environment(tmp_path / "train-tf", ("tensorflow_cpu", "2.21.0"))
    assert machine.tensorflow_env(torch_env) == (beside, "2.21.0")
    both = _environment(tmp_path / "both", ("torch", "2.13.0"), ("tensorflow", "2.21.0"))
    assert machine.tensorflow_env(both) == (both, "2.21.0")  # its own first
