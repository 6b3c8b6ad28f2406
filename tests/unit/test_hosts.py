"""Host lists, hostfiles and node-count sweep plans."""

from __future__ import annotations

import dataclasses
import json
import socket
import sys
from pathlib import Path

import pytest
from bench_builders import cpu_machine

from bench.admission import admit, cluster_problems
from bench.config import BenchConfig, ConfigError
from bench.hosts import (
    ClusterConfig,
    HostSpecError,
    check_placement,
    cluster_from_options,
    host_names,
    is_local_host,
    local_addresses,
    parse_hostfile,
    parse_hostfile_text,
    parse_hosts,
    plan_node_sweep,
    validate_host_name,
)
from bench.machine_defaults import resolve
from bench.options import build_parser, default_words, parse_request
from bench.spec import HostSlots, format_hosts, knobs


def test_hosts_option_keeps_order_and_slots() -> None:
    placement = parse_hosts("node2:8,node1:4")
    assert placement == (HostSlots("node2", 8), HostSlots("node1", 4))
    assert format_hosts(placement) == "node2:8,node1:4"
    assert host_names(placement) == ["node2", "node1"]


def test_hosts_option_accepts_spaces_addresses_and_default_slots() -> None:
    placement = parse_hosts(" 10.0.0.1:2 , gpu-02.cluster.example, [fd00::7]:2 ", default_slots=2)
    assert placement == (
        HostSlots("10.0.0.1", 2),
        HostSlots("gpu-02.cluster.example", 2),
        HostSlots("fd00::7", 2),
    )


def test_host_without_count_gets_one_slot_unless_told() -> None:
    assert parse_hosts("a,b") == (HostSlots("a", 1), HostSlots("b", 1))
    assert parse_hosts("a,b:3", default_slots=4) == (HostSlots("a", 4), HostSlots("b", 3))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        (" , ", "empty"),
        ("node1:x", "not an integer"),
        ("node1:0", ">= 1"),
        ("node1:-2", ">= 1"),
        ("node1:2,node1:2", "listed twice"),
        ("node1;reboot:2", "invalid host name"),
        ("root@node1:2", "--ssh-user"),
        ("[fd00::1", "unclosed"),
        ("[fd00::1]x", "expected ':SLOTS'"),
        ("node1:", "not an integer"),
    ],
)
def test_bad_host_lists_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(HostSpecError, match=message):
        parse_hosts(text)


def test_hostfile_in_mpi_and_horovod_formats() -> None:
    text = """
    # the rack
    node1 slots=8 max_slots=8   # MPI style
    node2:8                     # horovodrun -H style

    node3                       # no count: the default
    10.1.0.4 slots=2
    """
    placement = parse_hostfile_text(text, default_slots=4)
    assert placement == (
        HostSlots("node1", 8),
        HostSlots("node2", 8),
        HostSlots("node3", 4),
        HostSlots("10.1.0.4", 2),
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("node1 slots=8\nnode2 cpus=8\n", r"hostfile:2: unexpected 'cpus=8'"),
        ("node1:8 slots=8\n", r"hostfile:1: give the slot count once"),
        ("node1 slots=zero\n", r"hostfile:1: slot count 'zero' is not an integer"),
        ("# nothing here\n\n", "no hosts listed"),
        ("node1\nnode1 slots=2\n", "listed twice"),
    ],
)
def test_bad_hostfiles_name_the_line(text: str, message: str) -> None:
    with pytest.raises(HostSpecError, match=message):
        parse_hostfile_text(text)


def test_hostfile_from_disk(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text("a slots=2\nb slots=2\n")
    assert parse_hostfile(path) == (HostSlots("a", 2), HostSlots("b", 2))
    with pytest.raises(HostSpecError, match=f"cannot read hostfile {tmp_path / 'missing'}"):
        parse_hostfile(tmp_path / "missing")
    with pytest.raises(HostSpecError, match=r"hosts:2: slot count must be >= 1"):
        path.write_text("a slots=2\nb slots=0\n")
        parse_hostfile(path)


def test_check_placement_rejects_what_parsing_would() -> None:
    with pytest.raises(HostSpecError, match="at least one host"):
        check_placement(())
    with pytest.raises(HostSpecError, match="slots must be >= 1"):
        check_placement((HostSlots("a", 0),))
    assert validate_host_name("10.213.0.11") == "10.213.0.11"
    assert validate_host_name("fd00::1") == "fd00::1"


def test_default_sweep_is_powers_of_two_of_nodes_times_gpus() -> None:
    hosts = parse_hosts("n1:8,n2:8,n3:8")
    plans = plan_node_sweep(hosts)
    assert [format_hosts(p) for p in plans] == [
        "n1:1",
        "n1:2",
        "n1:4",
        "n1:8",
        "n1:1,n2:1",
        "n1:2,n2:2",
        "n1:4,n2:4",
        "n1:8,n2:8",
        "n1:1,n2:1,n3:1",
        "n1:2,n2:2,n3:2",
        "n1:4,n2:4,n3:4",
        "n1:8,n2:8,n3:8",
    ]
    assert all(len({h.slots for h in p}) == 1 for p in plans)


def test_explicit_sweep_takes_the_first_hosts_and_the_smallest_host_limits_defaults() -> None:
    hosts = parse_hosts("n1:8,n2:4")
    assert [format_hosts(p) for p in plan_node_sweep(hosts, node_counts=[2, 1, 2])] == [
        "n1:1",
        "n1:2",
        "n1:4",
        "n1:1,n2:1",
        "n1:2,n2:2",
        "n1:4,n2:4",
    ]
    assert [format_hosts(p) for p in plan_node_sweep(hosts, [2], [3])] == ["n1:3,n2:3"]


@pytest.mark.parametrize(
    ("nodes", "gpus", "message"),
    [
        ([3], None, r"node count 3 is outside 1..2"),
        ([0], None, r"node count 0 is outside"),
        ([2], [8], r"these hosts have fewer slots: n2:4"),
    ],
)
def test_impossible_sweeps_are_errors(
    nodes: list[int], gpus: list[int] | None, message: str
) -> None:
    with pytest.raises(HostSpecError, match=message):
        plan_node_sweep(parse_hosts("n1:8,n2:4"), nodes, gpus)


def test_this_machine_is_recognised_by_name_and_address() -> None:
    assert is_local_host("localhost")
    assert is_local_host(socket.gethostname())
    assert "127.0.0.1" in local_addresses()
    assert is_local_host("127.0.0.1")
    assert not is_local_host("node-that-is-not-this-machine.invalid")


def cluster_args(argv: list[str]) -> ClusterConfig | None:
    args = vars(build_parser().parse_args(argv))
    return cluster_from_options(args, python="/env/bin/python", workdir="/srv/b")


def test_no_hosts_means_a_single_node_sweep() -> None:
    assert cluster_args([]) is None
    with pytest.raises(HostSpecError, match="--nodes, --gpus-per-node apply to a multi-node"):
        cluster_args(["--nodes", "2", "--gpus-per-node", "1"])


@pytest.mark.parametrize(
    "argv",
    [
        ["--ssh-port", "2222"],
        ["--ssh-user", "ops"],
        ["--ssh-option", "BatchMode=yes"],
        ["--network-interface", "eth0"],
        ["--remote-python", "/env/bin/python"],
    ],
)
def test_a_multi_node_option_on_a_single_node_sweep_is_refused_not_ignored(argv) -> None:
    with pytest.raises(
        HostSpecError,
        match=f"^{argv[0]} applies to a multi-node sweep only: give --hosts, --hostfile or --slurm",
    ):
        cluster_args(argv)


def test_hosts_make_a_grid_that_survives_the_store(tmp_path: Path) -> None:
    cluster = cluster_args(
        [
            "--hosts",
            "n1:4,n2:4",
            "--gpus-per-node",
            "1,4",
            "--ssh-port",
            "2222",
            "--ssh-option",
            "UserKnownHostsFile=/k",
            "--ssh-option",
            "Ciphers=aes128-ctr,aes256-ctr",
            "--network-interface",
            "ib0",
        ]
    )
    assert cluster is not None
    assert (cluster.node_counts, cluster.gpus_per_node) == ((1, 2), (1, 4))
    assert cluster.ssh_options == ("UserKnownHostsFile=/k", "Ciphers=aes128-ctr,aes256-ctr")
    assert (cluster.ssh_port, cluster.rdzv_port) == (2222, 29400)
    assert (cluster.ssh_user, cluster.hostfile) == (None, None)
    assert (cluster.remote_python, cluster.remote_workdir) == ("/env/bin/python", "/srv/b")
    assert [format_hosts(p) for p in cluster.placements()] == [
        "n1:1",
        "n1:4",
        "n1:1,n2:1",
        "n1:4,n2:4",
    ]
    again = ClusterConfig.from_dict(json.loads(json.dumps(cluster.to_dict())))
    assert again == cluster
    hostfile = tmp_path / "hosts"
    hostfile.write_text("n1 slots=2\nn2 slots=2\n")
    from_file = cluster_args(["--hostfile", str(hostfile), "--nodes", "2"])
    assert from_file is not None and from_file.hosts == (("n1", 2), ("n2", 2))
    assert from_file.hostfile == str(hostfile)  # where the hosts came from, in the store
    assert ClusterConfig.from_dict(json.loads(json.dumps(from_file.to_dict()))) == from_file


def test_hosts_without_slots_take_the_most_gpus_per_node_asked(tmp_path: Path) -> None:
    # The module's docstring: "node4  # slots default to the --gpus-per-node given, else 1".
    cluster = cluster_args(["--hosts", "a,b:1", "--gpus-per-node", "1,2", "--nodes", "1"])
    assert cluster is not None and cluster.hosts == (("a", 2), ("b", 1))
    assert [format_hosts(p) for p in cluster.placements()] == ["a:1", "a:2"]
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a\nb slots=4\n")
    from_file = cluster_args(["--hostfile", str(hostfile), "--gpus-per-node", "2"])
    assert from_file is not None and from_file.hosts == (("a", 2), ("b", 4))
    bare = cluster_args(["--hosts", "a,b"])
    assert bare is not None and bare.hosts == (("a", 1), ("b", 1))


def test_slurm_grid_uses_stand_in_hosts_until_a_launch_runs() -> None:
    with pytest.raises(HostSpecError, match="--slurm needs --nodes"):
        cluster_args(["--slurm"])
    cluster = cluster_args(["--slurm", "--nodes", "2,1"])
    assert cluster is not None and cluster.slurm and cluster.hosts == ()
    assert [format_hosts(p) for p in cluster.placements()] == [
        "slurm-node1:1",
        "slurm-node1:1,slurm-node2:1",
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--hosts", "a:1", "--ssh-option", "BatchMode"], "expected KEY=VALUE, got 'BatchMode'"),
        (["--hosts", "a:1", "--nodes", "1,x"], "expected an integer, got 'x'"),
        (["--hosts", "a:1", "--slurm"], "not allowed with argument --hosts"),
        (["--hostfile", "f", "--hosts", "a:1"], "not allowed with argument --hostfile"),
    ],
)
def test_malformed_cluster_options_are_refused_by_the_parser(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cluster_args(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_bad_cluster_options_are_errors() -> None:
    with pytest.raises(HostSpecError, match=r"node count 3 is outside 1\.\.2"):
        cluster_args(["--hosts", "a:1,b:1", "--nodes", "3"])
    # counts below 1 are refused with the other cluster problems, before anything starts
    slurm = cluster_args(["--slurm", "--nodes", "0"])
    assert "--nodes must be >= 1, got 0" in cluster_problems(slurm)
    assert cluster_problems(cluster_args(["--hosts", "a:2", "--gpus-per-node", "0"])) == [
        "--gpus-per-node must be >= 1, got 0"
    ]


def test_the_bench_command_line_takes_the_multi_node_options() -> None:
    request = parse_request(["--hosts", "n1:2,n2:2", "--nodes", "2", "--launchers", "ddp"])
    assert request.cluster is not None and request.cluster.hosts == (("n1", 2), ("n2", 2))
    assert request.cluster.remote_python == sys.executable
    config = resolve(request, cpu_machine())
    assert config.gpu_counts == (2, 4)  # 2 nodes x 1 and x 2 ranks
    assert BenchConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(ConfigError, match="give --nodes and --gpus-per-node"):
        parse_request(["--hosts", "n1:2", "--gpus", "2"])
    with pytest.raises(ConfigError, match="invalid host name"):
        parse_request(["--hosts", "n1;2"])


def test_nodes_smaller_than_the_request_are_refused_before_launch() -> None:
    request = parse_request(["--hosts", "n1:4,n2:4", "--gpus-per-node", "4", "--model", "resnet18"])
    two_core_nodes = cpu_machine(cores=2)
    with pytest.raises(ConfigError, match="--gpus-per-node: 4 requested but the smallest node"):
        admit(resolve(request, two_core_nodes), two_core_nodes, ["resnet18"])


def test_every_cluster_option_is_generated_from_a_clusterconfig_field() -> None:
    # The multi-node options are declared once, as knobs on ClusterConfig's fields (stored in
    # the store for --resume): the parser's multi-node group is exactly those knobs, in order,
    # each with its field as dest, its flag, its help and one default stated in words.
    parser = build_parser()
    (group,) = [g for g in parser._action_groups if g.title == "multi-node"]
    declared = list(knobs(ClusterConfig))
    assert [f.name for f in dataclasses.fields(ClusterConfig)] == [n for n, _ in declared]
    assert [a.dest for a in group._group_actions] == [n for n, _ in declared]
    for action, (name, k) in zip(group._group_actions, declared, strict=True):
        assert action.option_strings == [k.flag] and action.default is None, name
        assert action.help == f"{k.help} (default: {default_words(k)})", name
    (where,) = [g for g in parser._mutually_exclusive_groups if g._group_actions[0].dest == "hosts"]
    assert [a.option_strings for a in where._group_actions] == [
        ["--hosts"],
        ["--hostfile"],
        ["--slurm"],
    ]


def test_an_ssh_option_without_a_value_is_refused_by_the_parser(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--hosts", "a,b", "--ssh-option", "Foo"])
    assert "expected KEY=VALUE, got 'Foo'" in capsys.readouterr().err
