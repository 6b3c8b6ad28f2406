"""The container route without Docker: the knob, the one `docker run` every backend builds, the
checks that refuse a sweep before launch (against a scripted docker CLI), rows and the report.

The real containers run in tests/integration/test_container_route.py.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from bench_builders import config_for, cpu_machine, gpu_machine, run_row

from bench.admission import machine_problems
from bench.config import BenchConfig, ConfigError
from bench.hosts import ClusterConfig
from bench.launcher_kinds import DDP, HOROVOD
from bench.launchers import RUN_TAG_VAR, ExecResult, launch_of
from bench.launchers.argv import Tools
from bench.launchers.cluster import ClusterLauncher
from bench.launchers.docker import (
    BENCH_MOUNT,
    CheckedImage,
    DockerWrapper,
    RunningContainer,
    container_name,
    stop_container,
)
from bench.launchers.docker import check as docker
from bench.launchers.docker.check import Machine, check_image, pinned_digest, wrapper_for
from bench.launchers.local import LocalLauncher
from bench.launchers.stop import StopPolicy, stop_script
from bench.machine import HorovodStatus, NodeInfo, survey_line
from bench.options import parse_request
from bench.plan import local_placement, plan_sweep
from bench.report.document import container_section
from bench.report.summary import summarise
from bench.rows import run_row as row_of
from bench.scaling import wants_horovod_check
from bench.shared import wire
from bench.spec import NO_CONTAINER, NO_LOADER, HostSlots, Variant, container_label, runs_on_host
from bench.stages import Sweep, unavailable_reason

IMAGE = "nvcr.io/nvidia/pytorch:24.10-py3"
IMAGE_ID = "sha256:" + "ab" * 32
DIGEST = "nvcr.io/nvidia/pytorch@sha256:" + "cd" * 32
MODELS = ["resnet18", "resnet50"]


# ---------------------------------------------------------------- the knob


def test_container_is_a_swept_knob_that_enters_the_run_id() -> None:
    config = config_for(
        ["--container", f"host,{IMAGE}", "--gpus", "1", "--repeats", "1"], cpu_machine()
    )
    assert config.axes["container"] == ("host", IMAGE)
    assert config_for([], cpu_machine()).axes["container"] == (NO_CONTAINER,)
    runs = plan_sweep(config, "s", local_placement(1), 2)
    assert [r.run_id for r in runs] == [
        "ddp-n1-fp32-nchw-r0",
        "horovod-n1-fp32-nchw-r0",
        "ddp-n1-fp32-nchw@pytorch_24.10-py3-r0",
        "horovod-n1-fp32-nchw@pytorch_24.10-py3-r0",
    ]
    # --resume plans the same run ids from the store
    again = BenchConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert [r.run_id for r in plan_sweep(again, "s", local_placement(1), 2)] == [
        r.run_id for r in runs
    ]
    assert Variant("fp32", False, False, NO_LOADER, grad_accum=2, container=IMAGE).label == (
        "fp32-nchw-acc2@pytorch_24.10-py3"
    )


def test_container_labels_are_safe_and_short() -> None:
    assert container_label("local/bench:1.0") == "bench_1.0"
    assert (
        container_label("repo/x@sha256:" + "0123456789ab" * 5 + "cdef") == "x_sha256-0123456789ab"
    )
    assert container_label(IMAGE_ID) == "sha256-abababababab"


def test_container_values_and_ulimits_are_checked_when_parsed(capsys) -> None:  # type: ignore[no-untyped-def]
    for argv, expected in (
        (["--container=-v/:/host"], "--container: expected a valid value, got '-v/:/host'"),
        (["--container-ulimit", "memlock=lots"], "expected NAME=SOFT[:HARD]"),
        (["--container-ulimit", "cores=1"], "expected NAME=SOFT[:HARD]"),
    ):
        with pytest.raises(SystemExit):
            parse_request(argv)
        assert expected in capsys.readouterr().err
    request = parse_request(["--container-ulimit", "stack=67108864,nofile=1024:2048"])
    assert request.values["container_ulimits"] == ("stack=67108864", "nofile=1024:2048")


def test_a_container_only_sweep_does_not_ask_the_host_for_horovod() -> None:
    no_horovod = cpu_machine(horovod=HorovodStatus(False, reason="horovodrun not found"))
    inside = config_for(["--container", IMAGE, "--launchers", "horovod"], no_horovod)
    assert not runs_on_host(inside.axes)
    # the image is checked instead (bench.launchers.docker.check)
    assert machine_problems(inside, no_horovod, MODELS) == []
    both = config_for(["--container", f"host,{IMAGE}", "--launchers", "horovod"], no_horovod)
    assert "--launchers horovod: horovodrun not found" in machine_problems(both, no_horovod, MODELS)


def test_the_host_horovod_is_imported_only_for_runs_on_the_host() -> None:
    assert wants_horovod_check(parse_request([]))
    assert wants_horovod_check(parse_request(["--container", f"host,{IMAGE}"]))
    assert not wants_horovod_check(parse_request(["--container", IMAGE]))


# ---------------------------------------------------------------- the docker run command


def test_docker_run_argv() -> None:
    image = CheckedImage("img:1", "sha256:1", "img@sha256:1", "python3", pythonpath="/opt/x")
    wrapper = DockerWrapper({"img:1": image}, ulimits=("memlock=-1", "stack=67108864"), gpus=True)
    argv = wrapper.argv(
        image,
        ["python3", "-m", "torch.distributed.run"],
        name="gsb-x-1",
        bench_root="/src",
        passed=["OMP_NUM_THREADS"],
        data="/data",
        writable=["/tmp/logs"],
        label="x",
    )
    assert argv == [
        *("docker", "run", "--rm", "--pull", "never", "--init", "--name", "gsb-x-1"),
        *("--network", "host", "--ipc", "host", "--label", "org.gpurig.bench.launch=x"),
        *("--ulimit", "memlock=-1", "--ulimit", "stack=67108864", "--gpus", "all"),
        *("--volume", f"/src/bench:{BENCH_MOUNT}/bench:ro", "--volume", "/data:/data:ro"),
        *("--volume", "/tmp/logs:/tmp/logs"),
        *("--env", "CUDA_VISIBLE_DEVICES", "--env", RUN_TAG_VAR, "--env", "OMP_NUM_THREADS"),
        *("--env", f"PYTHONPATH={BENCH_MOUNT}:/opt/x"),
        *("img@sha256:1", "python3", "-m", "torch.distributed.run"),
    ]
    plain = DockerWrapper().argv(image, ["true"], name="n", bench_root="/src")
    assert "--gpus" not in plain and "--ulimit" not in plain and "--label" not in plain
    assert plain.count("--volume") == 1  # the bench only


def test_container_names_come_from_the_launch_id() -> None:
    name = container_name("ddp-n2-fp32-nchw@pytorch_24.10-py3-r0", "t-0")
    assert name == "gsb-ddp-n2-fp32-nchw_pytorch_24.10-py3-r0-t-0"
    assert container_name("r") != container_name("r")  # unique per launch


def image_spec(args: Sequence[str] = ("--gpus", "2", "--repeats", "1"), env=None):  # type: ignore[no-untyped-def]
    config = config_for(
        ["--launchers", "ddp,horovod", "--container", IMAGE, *args], env or cpu_machine()
    )
    checked = CheckedImage(
        IMAGE, IMAGE_ID, DIGEST, "/usr/bin/python3", "/usr/local/bin/horovodrun", "/opt/extra"
    )
    runs = wrapper_for({IMAGE: checked}, config).pin(plan_sweep(config, "s", local_placement(2), 2))
    return config, checked, runs


def test_the_local_launcher_runs_the_launch_in_the_pinned_image(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    monkeypatch.setenv("UNRELATED", "x")
    config, checked, runs = image_spec()
    wrapped = wrapper_for({IMAGE: checked}, config)
    launcher = LocalLauncher(Tools("/venv/bin/python", "/venv/bin/horovodrun"), wrapper=wrapped)
    ddp, hvd = (launcher.command(launch_of(s)) for s in runs)
    assert ddp.enclosure.name.startswith("gsb-ddp-n2-fp32-nchw_pytorch_24.10-py3-r0-")
    for command in (ddp, hvd):
        argv = list(command.argv)
        assert argv[:5] == ["docker", "run", "--rm", "--pull", "never"]
        assert command.enclosure == RunningContainer(argv[argv.index("--name") + 1])
        assert f"{Path(__file__).resolve().parents[2]}/bench:{BENCH_MOUNT}/bench:ro" in argv
        assert f"PYTHONPATH={BENCH_MOUNT}:/opt/extra" in argv
        passed = [argv[i + 1] for i, w in enumerate(argv) if w == "--env"]
        assert {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "NCCL_DEBUG", RUN_TAG_VAR} <= set(passed)
        assert "UNRELATED" not in passed and "PYTHONPATH" not in passed  # host paths stay out
        assert option(argv, "--ulimit") == ["--ulimit", "memlock=-1"]
        assert "--gpus" not in argv  # a CPU sweep
        inner = argv[argv.index(DIGEST) + 1 :]
        assert "/venv/bin/python" not in inner
        assert command.env["OMP_NUM_THREADS"] == "1"  # the values stay on the docker CLI
    assert argv_after(ddp.argv, DIGEST)[:3] == ["/usr/bin/python3", "-m", "torch.distributed.run"]
    assert argv_after(hvd.argv, DIGEST)[0] == "/usr/local/bin/horovodrun"
    assert "/usr/bin/python3" in argv_after(hvd.argv, DIGEST)
    host = LocalLauncher(Tools("/venv/bin/python", "h")).command(
        launch_of(
            plan_sweep(config_for(["--gpus", "1"], cpu_machine()), "s", local_placement(1), 2)[0]
        )
    )
    assert host.argv[0] == "/venv/bin/python" and host.enclosure is None


def argv_after(argv: Sequence[str], word: str) -> list[str]:
    return list(argv[list(argv).index(word) + 1 :])


def option(argv: Sequence[str], name: str) -> list[str]:
    """The first `name VALUE` pair of argv."""
    at = list(argv).index(name)
    return list(argv[at : at + 2])


def test_gpu_sweeps_pass_the_gpus_and_data_is_mounted_read_only(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    config, checked, runs = image_spec(
        ("--gpus", "2", "--repeats", "1", "--data", str(tmp_path)), gpu_machine()
    )
    argv = (
        LocalLauncher(wrapper=wrapper_for({IMAGE: checked}, config))
        .command(launch_of(runs[0]))
        .argv
    )
    assert option(argv, "--gpus") == ["--gpus", "all"]
    assert f"{tmp_path}:{tmp_path}:ro" in argv


def test_an_unchecked_image_is_never_run() -> None:
    _, _, runs = image_spec()
    with pytest.raises(ValueError, match="was not checked"):
        LocalLauncher().command(launch_of(runs[0]))


def ssh_launcher(image: CheckedImage, config) -> ClusterLauncher:  # type: ignore[no-untyped-def]
    cluster = ClusterConfig(
        hosts=(("node1", 2), ("node2", 2)),
        node_counts=(2,),
        gpus_per_node=(2,),
        remote_python="/env/bin/python",
        remote_workdir="/srv/bench",
    )
    nodes = ClusterLauncher(cluster, environ={"NCCL_IB_HCA": "mlx5"})
    nodes.infos = {
        h: NodeInfo(h, h, "3.11", address=f"10.0.0.{i}", interface="eth0")
        for i, h in enumerate(("node1", "node2"))
    }
    nodes.wrapper = wrapper_for({IMAGE: image}, config)
    return nodes


def test_ssh_runs_torchrun_in_the_image_on_every_node() -> None:
    config, checked, runs = image_spec()
    two_nodes = (HostSlots("node1", 2), HostSlots("node2", 2))
    launch = dataclasses.replace(launch_of(runs[0]), placement=two_nodes)
    commands = ssh_launcher(checked, config).commands(launch, "gsb-abc")
    assert [c.host for c in commands] == ["node1", "node2"]
    for index, command in enumerate(commands):
        argv = list(command.argv)
        assert command.enclosure.name == f"gsb-{launch.launch_id.replace('@', '_')}-gsb-abc-{index}"
        assert f"/srv/bench/bench:{BENCH_MOUNT}/bench:ro" in argv  # the node's checkout
        log_dir = f"/tmp/gpurig-bench/gsb-abc/{command.host}"
        assert f"{log_dir}:{log_dir}" in argv  # torchrun's rank logs, fetched after the run
        assert argv_after(argv, DIGEST)[0] == "/usr/bin/python3"
        assert "NCCL_IB_HCA" in [argv[i + 1] for i, w in enumerate(argv) if w == "--env"]
    hvd = dataclasses.replace(launch_of(runs[1]), placement=two_nodes)
    with pytest.raises(ValueError, match="sshd"):
        ssh_launcher(checked, config).commands(hvd, "gsb-abc")


# ---------------------------------------------------------------- stopping a container


def test_the_node_stop_script_also_stops_and_removes_the_container() -> None:
    policy = StopPolicy(grace_s=3)
    first = RunningContainer("gsb-r0-x").stop_lines(policy)
    script = stop_script(RUN_TAG_VAR, "gsb-abc", policy, first)
    assert "trap 'docker rm --force gsb-r0-x >/dev/null 2>&1' EXIT" in script
    assert "docker kill --signal=TERM gsb-r0-x" in script
    assert script.index("docker kill") < script.index("kill -TERM $pids")
    assert "docker" not in stop_script(RUN_TAG_VAR, "gsb-abc")
    with pytest.raises(ValueError):
        RunningContainer("x; rm -rf /")


def test_stop_container_signals_waits_then_removes(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    fake = tmp_path / "docker"
    # A container that keeps running through the grace period: docker wait never returns.
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n[ "$1" = wait ] && exec sleep 30\nexit 0\n')
    fake.chmod(0o755)
    started = time.monotonic()
    stop_container("gsb-r0-x", StopPolicy(grace_s=0.5), docker=str(fake))
    assert time.monotonic() - started < 10
    assert calls.read_text().splitlines() == [
        "kill --signal=TERM gsb-r0-x",
        "wait gsb-r0-x",
        "kill --signal=KILL gsb-r0-x",
        "rm --force gsb-r0-x",
    ]
    # one that exits within the grace period gets no second signal
    calls.unlink()
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n[ "$1" = wait ] && echo 0\nexit 0\n')
    stop_container("gsb-r0-x", StopPolicy(grace_s=5), docker=str(fake))
    assert "kill --signal=KILL gsb-r0-x" not in calls.read_text()


# ---------------------------------------------------------------- checks before launch


Reply = tuple[int, str, str]


class FakeDocker:
    """A scripted docker CLI: the first rule whose words all appear in argv answers."""

    def __init__(self, rules: Sequence[tuple[Sequence[str], Reply]]) -> None:
        self.rules = rules
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        for words, (rc, out, err) in self.rules:
            if all(w in argv for w in words):
                return subprocess.CompletedProcess(list(argv), rc, out, err)
        raise AssertionError(f"unexpected docker call {argv}")


INFO: Reply = (0, json.dumps({"ServerVersion": "28.2", "Runtimes": {"runc": {}}}), "")
ENV = ["PATH=/usr/bin", "PYTHONPATH=/opt/x"]
INSPECT: Reply = (
    0,
    json.dumps({"Id": IMAGE_ID, "RepoDigests": [DIGEST], "Config": {"Env": ENV}}),
    "",
)


def survey(**facts: object) -> Reply:
    base = {
        "hostname": "h",
        "python": "3.11.2",
        "torch": "2.13.0+cpu",
        "torch_cuda": None,
        "gpus": 0,
        "executable": "/usr/bin/python3",
        "horovodrun": "",
        "horovod_status": [False, "", None, "horovodrun not found"],
    }
    return 0, "NVIDIA banner\n" + survey_line({**base, **facts}) + "\n", ""


def check(argv: Sequence[str], docker: FakeDocker, env=None, hosts: int = 1):  # type: ignore[no-untyped-def]
    config = config_for(["--container", IMAGE, *argv], env or cpu_machine())
    machines = [Machine(f"node{i}", docker, "/srv") for i in range(hosts)]
    infos = [json.loads(INFO[1])] * hosts
    errors: list[str] = []
    image = check_image(IMAGE, config, machines, infos, errors)
    return image, errors


def test_a_good_image_is_pinned_and_surveyed_as_the_launches_start_it() -> None:
    docker = FakeDocker([(["info"], INFO), (["image", "inspect"], INSPECT), (["run"], survey())])
    image, errors = check(["--launchers", "ddp", "--container-ulimit", "stack=1"], docker)
    assert errors == [] and image is not None
    assert (image.image_id, image.digest, image.python) == (IMAGE_ID, DIGEST, "/usr/bin/python3")
    assert image.pythonpath == "/opt/x" and image.system()["torch"] == "2.13.0+cpu"
    (run,) = [c for c in docker.calls if "run" in c]
    assert run[:5] == ["docker", "run", "--rm", "--pull", "never"]
    assert option(run, "--ulimit") == ["--ulimit", "stack=1"]
    assert argv_after(run, IMAGE_ID)[:2] == ["python3", "-c"] and run[-1] != "horovod"


@pytest.mark.parametrize(
    ("rules", "argv", "expected"),
    [
        (
            [
                (
                    ["run"],
                    (
                        125,
                        "",
                        "docker: Error response from daemon: error setting rlimits for "
                        "ready process: error setting rlimit type 8: operation not permitted",
                    ),
                )
            ],
            [],
            [
                "docker cannot apply --container-ulimit memlock=-1,stack=67108864",
                "--container-ulimit stack=67108864, or none",
            ],
        ),
        (
            [
                (
                    ["run"],
                    (
                        125,
                        "",
                        "docker: Error response from daemon: could not select device "
                        'driver "" with capabilities: [[gpu]]',
                    ),
                )
            ],
            ["--device", "cuda"],
            ["Docker cannot pass the GPUs in", "runtimes: runc", "container_runtime role"],
        ),
        (
            [
                (
                    ["run", "python3"],
                    (127, "", 'exec: "python3": executable file not found in $PATH'),
                ),
                (
                    ["run", "python"],
                    (127, "", 'exec: "python": executable file not found in $PATH'),
                ),
            ],
            [],
            ["no python3 or python on the image's PATH", "--container-python"],
        ),
        ([(["run"], survey(torch=None))], [], ["no torch installed"]),
        (
            [(["run"], survey(gpus=0, torch_cuda="13.0", driver="535.1"))],
            ["--device", "cuda"],
            ["sees 0 GPU(s) with --gpus all, the sweep needs 2 (driver 535.1)"],
        ),
        (
            [(["run"], survey(gpus=4))],
            ["--device", "cuda", "--launchers", "horovod"],
            ["--launchers horovod in image", "horovodrun not found"],
        ),
        (
            [(["run"], survey(horovod_status=[True, "0.28.1", False, ""], gpus=4))],
            ["--device", "cuda", "--launchers", "horovod"],
            ["built without NCCL"],
        ),
    ],
)
def test_what_an_image_lacks_is_refused(rules, argv, expected) -> None:  # type: ignore[no-untyped-def]
    docker = FakeDocker([(["info"], INFO), (["image", "inspect"], INSPECT), *rules])
    env = gpu_machine(gpus=4) if "cuda" in argv else None
    _, errors = check(["--gpus", "2", *argv] if "cuda" in argv else argv, docker, env)
    text = "\n".join(errors)
    for words in expected:
        assert words in text


def test_horovod_not_asked_for_by_name_is_unavailable_in_the_image_only() -> None:
    docker = FakeDocker([(["info"], INFO), (["image", "inspect"], INSPECT), (["run"], survey())])
    image, errors = check([], docker)
    assert errors == [] and image is not None
    assert "horovodrun not found" in image.unavailable["horovod"]
    assert docker.calls[-1][-1] == "horovod"  # the survey checked horovod.torch in the image
    config = config_for(
        ["--container", f"host,{IMAGE}", "--gpus", "1", "--repeats", "1"], cpu_machine()
    )
    sweep = Sweep(config, None, {})  # type: ignore[arg-type]
    sweep.wrapper = wrapper_for({IMAGE: image}, config)
    runs = plan_sweep(sweep.config, "s", local_placement(1), 2)
    reasons = {r.run_id: unavailable_reason(sweep, r) for r in runs}
    assert (
        reasons["horovod-n1-fp32-nchw-r0"] == ""
        and reasons["ddp-n1-fp32-nchw@pytorch_24.10-py3-r0"] == ""
    )
    assert "horovodrun" in reasons["horovod-n1-fp32-nchw@pytorch_24.10-py3-r0"]


def test_a_missing_image_is_never_pulled() -> None:
    docker = FakeDocker([(["image", "inspect"], (1, "", "Error: No such image: " + IMAGE))])
    image, errors = check([], docker)
    assert image is None
    assert errors == [
        f"node0: image {IMAGE!r} is not present locally (Error: No such image: "
        f"{IMAGE}); a sweep never pulls: `docker pull {IMAGE}` (or `docker load -i "
        "FILE.tar`) on every node first"
    ]
    assert not [c for c in docker.calls if "pull" in c or "run" in c]


def test_nodes_must_hold_the_same_image() -> None:
    other = (0, json.dumps({"Id": "sha256:" + "ef" * 32}), "")
    answers = iter([INSPECT, other])

    def run(argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        rc, out, err = next(answers)
        return subprocess.CompletedProcess(list(argv), rc, out, err)

    config = config_for(["--container", IMAGE], cpu_machine())
    errors: list[str] = []
    machines = [Machine("node1", run, "/srv"), Machine("node2", run, "/srv")]
    assert check_image(IMAGE, config, machines, [{}, {}], errors) is None
    assert errors == [
        f"image {IMAGE} differs between nodes: {IMAGE_ID} on node1; sha256:{'ef' * 32} on node2"
    ]


def test_docker_itself_must_answer(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cases = {
        (127, "", "[Errno 2] No such file or directory: 'docker'"): "the docker CLI is not",
        (
            1,
            "",
            "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the "
            "docker daemon running?",
        ): "the Docker daemon does not answer (Cannot connect",
    }
    for reply, expected in cases.items():
        fake = FakeDocker([(["info"], reply)])
        monkeypatch.setattr(docker, "run_here", fake)
        config = config_for(["--container", f"host,{IMAGE}"], cpu_machine())
        with pytest.raises(ConfigError, match="this machine: " + expected.split(" (")[0]):
            docker.check_images(config)
    # a host-only sweep asks Docker nothing
    monkeypatch.setattr(docker, "run_here", FakeDocker([]))
    assert docker.check_images(config_for([], cpu_machine())).checked == {}


def test_slurm_and_clashing_short_names_are_refused() -> None:
    config = config_for(["--container", "a/bench:1,b/bench:1"], cpu_machine())
    with pytest.raises(ConfigError, match="share the short name 'bench_1'"):
        docker.check_images(config)
    slurm = parse_request(["--slurm", "--nodes", "1", "--container", IMAGE])
    from bench.machine_defaults import resolve

    with pytest.raises(ConfigError, match="pyxis/enroot"):
        docker.check_images(resolve(slurm, cpu_machine()))


def test_horovod_across_nodes_in_containers_is_unavailable() -> None:
    request = parse_request(["--hosts", "n1:1,n2:1", "--container", IMAGE])
    from bench.machine_defaults import resolve

    config = resolve(request, cpu_machine())
    problem = docker.launcher_in_image(HOROVOD, {}, config)
    assert "needs sshd inside the containers" in problem
    assert docker.launcher_in_image(DDP, {}, config) == ""


def test_the_registry_digest_of_the_named_repository_is_preferred() -> None:
    inspected = {"Id": IMAGE_ID, "RepoDigests": ["mirror.local/pytorch@sha256:1", DIGEST]}
    assert pinned_digest(IMAGE, inspected) == DIGEST
    assert pinned_digest("other:1", inspected) == "mirror.local/pytorch@sha256:1"
    assert pinned_digest("local/built:1", {"Id": IMAGE_ID, "RepoDigests": []}) == IMAGE_ID


# ---------------------------------------------------------------- rows and the report


def test_rows_record_the_image_and_what_the_ranks_saw(tmp_path: Path) -> None:
    _, _, runs = image_spec()
    report = wire.RunReport(
        run_id=runs[0].run_id,
        backend="gloo",
        world_size=2,
        gradient_bytes=4,
        images_per_rank=8,
        ranks=[
            wire.RankReport(
                rank=r,
                local_rank=r,
                host="h",
                device_name="cpu",
                window_s=1.0,
                step_s=[0.5, 0.5],
                data_wait_s=0.0,
                peak_memory_bytes=1,
                runtime={"python": "/usr/bin/python3", "torch": "2.13.0+cpu"},
            )
            for r in range(2)
        ],
    )
    output = "\n".join(wire.encode(runs[0].run_id, dataclasses.asdict(report)))
    row = row_of(runs[0], ExecResult(0, False, 3.0, output), "t")
    assert (row.status, row.container, row.container_digest) == ("ok", IMAGE, DIGEST)
    assert (row.rank_python, row.rank_torch) == ("/usr/bin/python3", "2.13.0+cpu")
    failed = row_of(runs[0], ExecResult(1, False, 3.0, "boom"), "t")
    assert failed.container_digest == DIGEST and failed.rank_python == ""


def test_the_report_sets_image_runs_beside_host_runs() -> None:
    label = "fp32-nchw@pytorch_24.10-py3"
    rows = [
        run_row(throughput=64.0, variant="fp32-nchw"),
        run_row(
            run_id=f"ddp-n1-{label}-r0",
            variant=label,
            container=IMAGE,
            container_digest=DIGEST,
            throughput=48.0,
        ),
    ]
    meta = {
        "system": {
            "containers": {
                IMAGE: {
                    "digest": DIGEST,
                    "torch": "2.13.0+cpu",
                    "executable": "/usr/bin/python3",
                    "python": "3.11.2",
                }
            }
        }
    }
    lines = container_section(summarise(rows, []), meta)
    assert f"| @pytorch_24.10-py3 | `{IMAGE}` | `{DIGEST}` | /usr/bin/python3 3.11.2 |" in (
        "\n".join(lines)
    )
    assert "| ddp | fp32-nchw | 1 | 1 | @pytorch_24.10-py3 | 64.0 | 48.0 | 0.750 |" in lines
    assert container_section(summarise(rows[:1], []), {"system": {}}) == []
