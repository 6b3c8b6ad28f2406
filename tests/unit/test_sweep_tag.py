"""Every process of a launch carries the sweep's tag (GPURIG_BENCH_SWEEP=<sweep id>),
wherever it runs: this machine, a node (over ssh or an srun step, in a container). The
tag is set in one place, bench.launchers.rank_environment; a resume finds what an earlier
controller left by it (tests/unit/test_resume.py)."""

from __future__ import annotations

import dataclasses
import shlex

from bench_builders import config_for, cpu_machine
from test_image_check import image_spec
from test_image_check import ssh_launcher as container_launcher
from test_ssh import ssh_launcher, two_node_specs

from bench.launchers import RUN_TAG_VAR, SWEEP_TAG_VAR, launch_of, rank_environment
from bench.launchers.local import LocalLauncher
from bench.launchers.sites import shell_command
from bench.plan import plan_sweep
from bench.spec import HostSlots


def test_the_tag_is_part_of_every_rank_environment() -> None:
    assert rank_environment(1, "cpu", "sweep-1")[SWEEP_TAG_VAR] == "sweep-1"
    assert SWEEP_TAG_VAR not in rank_environment(1, "cpu")  # a probe of no sweep


def test_every_node_command_over_ssh_carries_the_sweep_tag() -> None:
    launcher = ssh_launcher()
    launcher.check(["ddp", "horovod"], "cpu")
    ddp, horovod = two_node_specs(launcher)  # planned for sweep "s"
    commands = [
        *launcher.commands(launch_of(ddp), "gsb-t1"),
        *launcher.commands(launch_of(horovod), "gsb-t2"),
    ]
    assert [c.host for c in commands] == ["gpu01", "gpu02", "gpu01"]
    for command in commands:
        assert command.env[SWEEP_TAG_VAR] == "s"
        # the line ssh runs on the node (bench.launchers.multinode adds the launch's own tag)
        line = shell_command(command.argv, {RUN_TAG_VAR: "gsb-t1", **command.env})
        assert f"{SWEEP_TAG_VAR}=s" in shlex.split(line)


def test_ranks_in_a_container_on_a_node_get_the_tag_passed_in() -> None:
    config, checked, runs = image_spec()
    two_nodes = (HostSlots("node1", 2), HostSlots("node2", 2))
    launch = dataclasses.replace(launch_of(runs[0]), placement=two_nodes)
    assert launch.sweep_id
    for command in container_launcher(checked, config).commands(launch, "gsb-abc"):
        argv = list(command.argv)
        passed = [argv[i + 1] for i, word in enumerate(argv) if word == "--env"]
        assert SWEEP_TAG_VAR in passed  # by name, from the docker CLI's environment
        assert command.env[SWEEP_TAG_VAR] == launch.sweep_id


def test_local_launches_carry_the_tag() -> None:
    config = config_for(["--model", "resnet18", "--launchers", "ddp"], cpu_machine())
    spec = plan_sweep(config, "sweep-7", (HostSlots("localhost", 2),), 2)[0]
    assert LocalLauncher().command(launch_of(spec)).env[SWEEP_TAG_VAR] == "sweep-7"
