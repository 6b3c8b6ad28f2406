"""The multi-node backend: --hosts nodes reached over ssh, or --slurm, the nodes of the Slurm
allocation the sweep runs in, each command an srun step on its node (bench.launchers.sites).

torchrun on every node, meeting at a c10d rendezvous on the first node; a TensorFlow worker on
every node, the nodes named in each one's TF_CONFIG; or horovodrun on the first node, which
starts the other nodes' ranks over ssh itself (under Slurm too, as on any cluster that lets a
job ssh into its own nodes: pam_slurm_adopt).

Before the sweep every host must answer through its site and run the bench's Python, and the
software that must match does (the survey, bench.machine, run on each node). Each launch's
commands come from the shared argv builders with what only the survey can tell (each node's
address and interface toward the rendezvous host); bench.launchers.multinode runs them with a
deadline and stops what is left on every node; each node's per-rank logs are copied back.

Under Slurm the sweep is planned on stand-in hosts (slurm-node1, ...: the allocation is not
known when a sweep is planned, and a resumed sweep may run in another one); each launch runs on
the first nodes of the allocation, and its row records the nodes it ran on.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.hosts import ClusterConfig, host_names
from bench.launcher_kinds import Argv
from bench.launchers import (
    FORWARDED_PREFIXES,
    ExecResult,
    Launch,
    RemoteError,
    launch_of,
    new_tag,
    rank_environment,
    socket_ifname_var,
)
from bench.launchers.argv import NodeCommand, Tools, node_argv, rendezvous_endpoint
from bench.launchers.docker import DockerWrapper, InImage, Unwrapped
from bench.launchers.multinode import run_on_nodes
from bench.launchers.sites import (
    FetchError,
    HostUnreachableError,
    SlurmSite,
    check_reachable,
    fetch_dir,
    last_line,
    on_all,
    remote_run_dir,
    remove_remote_dir,
    run_on_host,
    shell_command,
    site_for,
    ssh_site_for,
)
from bench.launchers.stop import STOP, StopPolicy
from bench.launchers.versions import check_versions, components_for
from bench.machine import Environment, HorovodStatus, NodeInfo, environment_of, survey_records
from bench.paths import SweepPaths, bench_pythonpath
from bench.shared.tf_rules import TF_CONFIG_VAR, tf_config
from bench.spec import HostSlots, Placement, ProbeSpec, RunSpec, format_hosts

# Run on each node (through its site, from its bench checkout) before a sweep: the node's facts
# (bench.machine.survey) as one marked JSON line, with its interface and address toward the first
# host, the rendezvous host.
NODE_SURVEY = (
    "import sys; from bench.machine import survey, survey_line; "
    "print(survey_line(survey(sys.argv[1])), flush=True)"
)


def parse_survey_output(host: str, stdout: str) -> NodeInfo:
    records = survey_records(stdout.splitlines())
    if not records:
        raise RemoteError(f"{host}: the node survey printed no result:\n{stdout[-2000:]}")
    return NodeInfo.from_survey(host, records[0])


class ClusterLauncher:
    """Runs a sweep's launches across --hosts nodes or a Slurm allocation's (see the module
    docstring)."""

    def __init__(
        self,
        cluster: ClusterConfig,
        environ: Mapping[str, str] = os.environ,
        policy: StopPolicy = STOP,
    ) -> None:
        self.cluster = cluster
        self.ssh = ssh_site_for(cluster)  # horovodrun's, under Slurm too
        self.site, self.hosts = site_for(cluster, environ)
        python = cluster.remote_python  # and the horovodrun beside it
        self.tools = Tools(python, str(Path(python).with_name("horovodrun")))
        self.policy = policy
        self.infos: dict[str, NodeInfo] = {}
        self.gpu = False
        self.wrapper = DockerWrapper()  # what wraps each launch, set before the sweep
        self.forwarded = {k: v for k, v in environ.items() if k.startswith(FORWARDED_PREFIXES)}

    # ---- before the sweep

    def survey(self, timeout_s: float = 180) -> dict[str, NodeInfo]:
        """Reachability, then every node's versions and route to the first host, surveyed on
        every node at once; a node that cannot run the survey is a RemoteError."""
        check_reachable(self.hosts, self.site)
        python, workdir = self.cluster.remote_python, self.cluster.remote_workdir
        env = {"PYTHONPATH": bench_pythonpath(workdir)} if workdir else None
        command = shell_command([python, "-c", NODE_SURVEY, self.hosts[0]], env, workdir)
        results = on_all(self.hosts, lambda h: run_on_host(h, command, self.site, timeout_s))
        failed = {h: r for h, r in results.items() if r.returncode != 0}
        if failed:
            lines = [
                f"  {h}: rc={r.returncode}: {last_line(r.stderr or r.stdout)}"
                for h, r in failed.items()
            ]
            raise RemoteError(
                f"cannot run the bench on {len(failed)} node(s) (its survey, {python} -c "
                f"'from bench.machine import survey ...', in {workdir or 'the login directory'}):\n"
                + "\n".join(lines)
                + "\nEvery node needs the same Python environment and bench checkout at the same "
                "paths (playbooks/bench.yml puts them there; see --remote-python/--remote-workdir)."
            )
        infos = {h: parse_survey_output(h, r.stdout) for h, r in results.items()}
        unrouted = {h: i.route_error for h, i in infos.items() if i.route_error}
        if unrouted:
            raise HostUnreachableError(
                "nodes without a route to the rendezvous host:\n"
                + "\n".join(f"  {h}: {e}" for h, e in unrouted.items())
            )
        self.infos = infos
        return infos

    def environment(self, local: Environment) -> Environment:
        """What the nodes offer, in the shape validation expects (the smallest node counts)."""
        infos = list(self.infos.values())
        missing = [i.host for i in infos if not i.horovod]
        horovod = (
            HorovodStatus(False, reason=f"Horovod is not installed on {', '.join(missing)}")
            if missing
            else HorovodStatus(True, infos[0].horovod or "", nccl_built=None)
        )
        env = environment_of(infos, horovod)
        return env if env.cores else Environment(**{**vars(env), "cores": local.cores})

    def check(self, launchers: Sequence[str], device: str) -> None:
        """Refuse to launch when the nodes differ in what these launchers depend on, or the
        allocation has fewer nodes than the sweep needs."""
        self.gpu = device == "cuda"
        needed = max(self.cluster.node_counts, default=1)
        if isinstance(self.site, SlurmSite) and needed > len(self.hosts):
            raise RemoteError(
                f"--nodes {needed}: the allocation (job {self.site.job_id}) has "
                f"{len(self.hosts)} node(s): {', '.join(self.hosts)}"
            )
        components = dict.fromkeys(c for x in launchers for c in components_for(x, self.gpu))
        check_versions(self.infos, components)

    def placed(self, launch: Launch) -> Launch:
        """The launch on the hosts it runs on: under Slurm, its stand-ins (slurm-node1, ...)
        become the allocation's first nodes."""
        if not isinstance(self.site, SlurmSite):
            return launch
        hosts = [HostSlots(h, n.slots) for h, n in zip(self.hosts, launch.placement, strict=False)]
        return dataclasses.replace(launch, placement=tuple(hosts))

    # ---- what each launch's commands get from the survey

    def _interface(self, host: str) -> str | None:
        return self.cluster.network_interface or self.infos[host].interface

    def _interfaces(self, placement: Placement) -> list[str]:
        return [i for i in dict.fromkeys(self._interface(n.host) for n in placement) if i]

    def node_env(self, placement: Placement) -> dict[str, dict[str, str]]:
        """Per node: the interface NCCL/Gloo use, the checkout on the node, forwarded settings."""
        env = {}
        for node in placement:
            values = {**self.forwarded, "PYTHONPATH": bench_pythonpath(self.cluster.remote_workdir)}
            interface = self._interface(node.host)
            if interface:
                values.setdefault(socket_ifname_var(self.gpu), interface)
            env[node.host] = values
        return env

    def interfaces_seen(self, placement: Placement) -> dict[str, str]:
        """The interface variable as the ranks got it, for the interconnect column."""
        names = self._interfaces(placement)
        return {socket_ifname_var(self.gpu): ",".join(names)} if names else {}

    def rank_log_dirs(self, launch: Launch, tag: str) -> dict[str, str]:
        """Where each node's torchrun also writes its ranks' output (fetched after the run)."""
        if launch.kind.argv is not Argv.TORCHRUN:  # horovodrun gathers its ranks' output itself
            return {}
        return {node.host: remote_run_dir(tag, node.host) for node in launch.placement}

    def commands(self, launch: Launch, tag: str) -> list[NodeCommand]:
        """The launch's commands: one torchrun per node (the first hosts the c10d store; each
        advertises the address the others reach it on), one TensorFlow worker per node, or
        horovodrun on the first node."""
        kind = launch.kind
        if not kind.multi_node:  # bench.config refuses it with --hosts first
            raise ValueError(f"{kind.title} runs on one machine, not across --hosts nodes")
        placement = launch.placement
        base = rank_environment(launch.threads_per_rank, launch.device, launch.sweep_id)
        env = self.node_env(placement)
        wrap = self.wrapper.around(launch, across_nodes=True)
        log_dirs = self.rank_log_dirs(launch, tag)
        commands = []
        # horovodrun runs on the first node only, and starts every rank
        nodes = placement[:1] if kind.argv is Argv.HOROVODRUN else placement
        for index, node in enumerate(nodes):
            argv, own = self.node_argv(launch, index, wrap, log_dirs.get(node.host, ""))
            command = NodeCommand(node.host, tuple(argv), {**base, **env[node.host], **own})
            wrapped = wrap.command(  # its rank logs stay in the node's scratch
                command,
                bench_root=self.cluster.remote_workdir,
                unique=f"{tag}-{index}",
                writable=[log_dirs[node.host]] if node.host in log_dirs else [],
                environ=self.forwarded,
            )
            commands.append(wrapped)
        return commands

    def node_argv(
        self, launch: Launch, index: int, wrap: InImage | Unwrapped, log_dir: str
    ) -> tuple[list[str], dict[str, str]]:
        """Node `index`'s command line (bench.launchers.argv.node_argv) and the variables only
        it gets: a TensorFlow worker's TF_CONFIG, naming every node's worker at the address the
        others reach it on (on one node none: MirroredStrategy)."""
        placement, own = launch.placement, {}
        host = placement[index].host
        tools = wrap.tools(self.tools)
        if launch.kind.argv is Argv.PER_NODE:
            # the node's TensorFlow environment, as its survey found it (wrapped: the wrap's)
            found = self.infos[host].tensorflow_python or ""
            tools = wrap.tools(dataclasses.replace(self.tools, tensorflow=found))
            if launch.nodes > 1:
                workers = [self.infos[n.host].address or n.host for n in placement]
                own[TF_CONFIG_VAR] = tf_config(workers, self.cluster.rdzv_port, index)
        # On one node horovodrun's hosts are all local, and horovod 0.28.1 then looks for the
        # interface holding 127.0.0.1 among --network-interfaces (runner/driver/
        # driver_service.py, get_local_interfaces): naming the node's own interface fails.
        nics = ",".join(self._interfaces(placement)) if len(placement) > 1 else ""
        argv = node_argv(
            launch,
            index,
            tools,
            endpoint=rendezvous_endpoint(placement[0].host, self.cluster.rdzv_port),
            local_addr=self.infos[host].address or "",  # toward the first node
            log_dir=log_dir,
            network_interfaces=nics,
            ssh_port=self.ssh.port,
            ssh_identity_file=self.ssh.identity_file,
        )
        return argv, own

    # ---- the launch

    def run(self, spec: RunSpec | ProbeSpec, timeout_s: float, log_path: Path) -> ExecResult:
        launch = self.placed(launch_of(spec))
        tag = new_tag()
        commands = self.commands(launch, tag)
        node_dir = SweepPaths.nodes(log_path)
        result = run_on_nodes(
            commands,
            self.site,
            tag=tag,
            timeout_s=timeout_s,
            log_dir=node_dir,
            hosts=host_names(launch.placement),
            workdir=self.cluster.remote_workdir,
            policy=self.policy,
        )
        # every node's output under its command line, then what went wrong and what was cleaned
        parts = [
            f"$ [{command.host}] {shlex.join(command.argv)}\n{outcome.output()}"
            for command, outcome in zip(commands, result.outcomes, strict=True)
        ]
        parts += [f"bench: {line}\n" for line in result.failure_summary().splitlines()]
        parts += [f"bench: cleanup on {h}: {what}\n" for h, what in result.cleanup.items()]
        for host, log_dir in self.rank_log_dirs(launch, tag).items():
            try:
                fetch_dir(host, log_dir, node_dir / host, self.site, timeout_s=120)
            except FetchError as err:  # a dead node cannot hand its rank logs over
                parts.append(f"bench: rank logs not fetched: {err}\n")
            remove_remote_dir(host, log_dir, self.site)
        output = "".join(parts)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(output)
        failed = [o.returncode for o in result.outcomes if o.returncode not in (0, None)]
        return ExecResult(
            None if result.timed_out else 0 if result.ok else next(iter(failed), 1),
            result.timed_out,
            result.wall_s,
            output,
            environ=self.interfaces_seen(launch.placement),
            hosts=format_hosts(launch.placement),
        )
