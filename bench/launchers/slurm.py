"""The Slurm backend (--slurm): each launch is one job, on the nodes Slurm picks.

`sbatch --wait` (or `salloc` for an interactive allocation) with --nodes=K. The job script first
surveys every node with `srun` (python -m bench.launchers.on_node) and refuses to launch when the
versions differ, then starts the same launchers as the other backends, with command lines from
the same builders (bench.launchers.argv); the values only the job knows are shell variables the
script fills in on its nodes:

- DDP: `srun` runs one torchrun per node; they meet at a c10d rendezvous on the first node of
  the allocation (${head}); each node advertises its own address toward it.
- Horovod: horovodrun on the batch host with `-H` built from the allocation's node list; it
  starts the other nodes' ranks over ssh, as on any cluster that allows ssh into one's own
  allocation (pam_slurm_adopt).

Rank 0 prints the result into the job's output (bench.rank.wire), so results come back the same
way as over ssh: the job output file is read where it was written (run_dir must be visible on
the submitting node, as Slurm's own output files usually are) or fetched over ssh from the batch
host when it is not. A job that outlives the bench's patience is stopped with the common stop
policy through scancel.
"""

from __future__ import annotations

import math
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from bench.hosts import ClusterConfig
from bench.launcher_kinds import Argv
from bench.launchers import (
    RUN_TAG_VAR,
    ExecResult,
    Launch,
    launch_of,
    rank_environment,
    socket_ifname_var,
    sweep_comment,
)
from bench.launchers.argv import (
    Tools,
    horovodrun_argv,
    rendezvous_endpoint,
    shell_join,
    torchrun_argv,
)
from bench.launchers.on_node import MODULE as NODE_MODULE
from bench.launchers.stop import STOP, StopPolicy, stop_slurm_job, stop_tree
from bench.launchers.transport import SshOptions, run_on_host, ssh_options_for
from bench.launchers.versions import components_for
from bench.spec import ProbeSpec, RunSpec

# Startup (imports, rendezvous, the survey step) on top of the run's own timeout when asking
# Slurm for a time limit.
STARTUP_ALLOWANCE_S = 180
SubmitMode = Literal["sbatch", "salloc"]
# The job script's shell variables that the launchers' command lines refer to.
JOB_VARIABLES = ("head", "is_host", "BENCH_NODE_ADDR", "hosts", "interfaces")


class SlurmError(RuntimeError):
    pass


@dataclass(frozen=True)
class SlurmOptions:
    """Site choices for every job of the sweep."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    # Benchmarks need whole nodes: a neighbour's job skews every number.
    exclusive: bool = True
    extra_args: tuple[str, ...] = ()  # more sbatch/salloc options, verbatim
    submit: SubmitMode = "sbatch"
    # How long a job may wait in the queue before the bench gives up on it (and stops it).
    queue_wait_s: float = 3600.0
    sbatch: str = "sbatch"
    salloc: str = "salloc"
    scancel: str = "scancel"

    def __post_init__(self) -> None:
        if self.submit not in ("sbatch", "salloc"):
            raise ValueError(f"submit must be sbatch or salloc, not {self.submit!r}")
        for arg in self.extra_args:
            if not arg.startswith("-"):
                raise ValueError(f"extra Slurm argument {arg!r} must be an option (--name=value)")


@dataclass(frozen=True)
class SlurmRun:
    """One launch to run as a job."""

    launch: Launch
    tools: Tools  # the nodes' python and horovodrun
    workdir: str
    run_dir: str  # job script and output; must exist on the batch host
    timeout_s: float
    gpu: bool
    env: Mapping[str, str] = field(default_factory=dict)
    rdzv_port: int = 29400
    ssh: SshOptions = field(default_factory=SshOptions)

    def __post_init__(self) -> None:
        kind = self.launch.kind
        if not kind.multi_node:  # bench.config refuses it with --slurm first
            raise ValueError(f"{kind.title} runs on one machine, not as a Slurm job")
        if kind.argv is Argv.HOROVODRUN and not self.tools.horovodrun:
            raise ValueError("a Horovod run needs the path of horovodrun")
        if len({h.slots for h in self.launch.placement}) != 1:
            raise ValueError("a Slurm job runs the same number of ranks on every node")
        for what, name in (("run id", self.run_id), ("sweep id", self.launch.sweep_id or "-")):
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
                raise ValueError(f"{what} {name!r} must be letters, digits, '.', '_' or '-'")

    @property
    def run_id(self) -> str:
        return self.launch.launch_id

    @property
    def nodes(self) -> int:
        return self.launch.nodes

    @property
    def ranks_per_node(self) -> int:
        return self.launch.ranks_per_node

    @property
    def time_limit_min(self) -> int:
        return max(1, math.ceil((self.timeout_s + STARTUP_ALLOWANCE_S) / 60))

    @property
    def output_pattern(self) -> str:
        return f"{self.run_dir}/slurm-{self.run_id}-%j.out"

    def output_path(self, job_id: str) -> str:
        return self.output_pattern.replace("%j", job_id)

    @property
    def components(self) -> tuple[str, ...]:
        return components_for(self.launch.launcher, self.gpu)


def allocation_args(run: SlurmRun, options: SlurmOptions) -> list[str]:
    """The job's resource request: #SBATCH lines for sbatch, command-line options for salloc."""
    args = [
        f"--job-name=bench-{run.run_id}",
        f"--nodes={run.nodes}",
        # ddp: one torchrun per node; horovod: horovodrun starts the ranks itself. Either way
        # one Slurm task per node, and --exclusive hands it the node's CPUs.
        "--ntasks-per-node=1",
        f"--time={run.time_limit_min}",
    ]
    if run.launch.sweep_id:
        # sbatch(1)/salloc(1) --comment=<string>: "An arbitrary comment" (Slurm 22.05.8, Debian
        # 12's slurm-client, checked 2026-11-24): how a resume finds the jobs of its sweep.
        args.append(f"--comment={sweep_comment(run.launch.sweep_id)}")
    if run.gpu:
        args.append(f"--gpus-per-node={run.ranks_per_node}")
    if options.exclusive:
        args.append("--exclusive")
    for flag, value in (
        ("partition", options.partition),
        ("account", options.account),
        ("qos", options.qos),
    ):
        if value:
            args.append(f"--{flag}={value}")
    args += list(options.extra_args)
    return args


def _q(word: str) -> str:
    return shlex.quote(word)


def job_torchrun_argv(run: SlurmRun) -> list[str]:
    """Each node's torchrun, as the job script runs it: ${head}, ${is_host} and
    ${BENCH_NODE_ADDR} are filled in on the node."""
    launch = run.launch
    return torchrun_argv(
        run.tools.python,
        nnodes=launch.nodes,
        nproc_per_node=launch.ranks_per_node,
        endpoint=rendezvous_endpoint("${head}", run.rdzv_port),
        rdzv_id=launch.launch_id,
        module=launch.module,
        args=launch.args,
        is_host="${is_host}",
        local_addr="${BENCH_NODE_ADDR}",
    )


def job_horovodrun_argv(run: SlurmRun) -> list[str]:
    """horovodrun on the batch host: ${hosts} and ${interfaces} come from the allocation."""
    launch = run.launch
    return horovodrun_argv(
        run.tools.horovodrun,
        run.tools.python,
        np=launch.world_size,
        hosts="${hosts}",
        module=launch.module,
        args=launch.args,
        network_interfaces="${interfaces}",
        ssh_port=run.ssh.port,
        ssh_identity_file=run.ssh.identity_file,
    )


def _preamble(run: SlurmRun, options: SlurmOptions) -> list[str]:
    """Header, environment, the allocation's nodes, and the survey that compares them."""
    py = _q(run.tools.python)
    lines = ["#!/bin/bash", f"# Written by python -m bench.scaling for run {run.run_id}."]
    if options.submit == "sbatch":
        lines += [f"#SBATCH {arg}" for arg in allocation_args(run, options)]
        lines.append(f"#SBATCH --output={run.output_pattern}")
    lines += [
        "set -euo pipefail",
        f"cd {_q(run.workdir)}",
        f"export {RUN_TAG_VAR}={_q(run.run_id)}",
        f"export PYTHONPATH={_q(run.workdir)}${{PYTHONPATH:+:$PYTHONPATH}}",
    ]
    lines += [f"export {key}={_q(value)}" for key, value in run.env.items()]
    lines += [
        'mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        'head="${nodes[0]}"',
        f'if [ "${{#nodes[@]}}" -ne {run.nodes} ]; then',
        f'  echo "bench: allocation has ${{#nodes[@]}} nodes, expected {run.nodes}" >&2; exit 2',
        "fi",
        'echo "bench: job $SLURM_JOB_ID on ${nodes[*]} (batch host $(hostname))"',
        "",
        "# Every node must run the same torch/NCCL/Horovod/driver branch before anything starts.",
        f"interfaces=$(srun --nodes={run.nodes} --ntasks={run.nodes} --ntasks-per-node=1 \\",
        f'    {py} -m {NODE_MODULE} survey "$head" \\',
        f"  | {py} -m {NODE_MODULE} check-versions --nodes {run.nodes} \\",
        f"    --components {','.join(run.components)} --print-interfaces)",
        'echo "bench: interfaces to $head: $interfaces"',
        "",
    ]
    return lines


def job_script(run: SlurmRun, options: SlurmOptions) -> str:
    """The bash job script: survey and compare every node, then launch the configuration."""
    lines = _preamble(run, options)
    if run.launch.kind.argv is Argv.HOROVODRUN:
        lines += [
            "# horovodrun on the batch host starts every rank, the other nodes' over ssh.",
            f"hosts=$(printf '%s:{run.ranks_per_node},' \"${{nodes[@]}}\")",
            'hosts="${hosts%,}"',
            "exec " + shell_join(job_horovodrun_argv(run), JOB_VARIABLES),
        ]
        return "\n".join(lines) + "\n"
    # Each node learns what only it knows (its interface and address toward the head, whether
    # it hosts the rendezvous), then runs its torchrun.
    ifname_var = socket_ifname_var(run.gpu)
    node_script = (
        'head="$1"; '
        f'eval "$({_q(run.tools.python)} -m {NODE_MODULE} survey "$head" --exports {ifname_var})"; '
        'is_host=0; [ "$SLURMD_NODENAME" = "$head" ] && is_host=1; '
        "exec " + shell_join(job_torchrun_argv(run), JOB_VARIABLES)
    )
    lines += [
        "# One torchrun per node, meeting at a c10d rendezvous on the first node.",
        f"srun --nodes={run.nodes} --ntasks={run.nodes} --ntasks-per-node=1 "
        "--kill-on-bad-exit=1 \\",
        f'  bash -c {_q(node_script)} bench-node "$head"',
    ]
    return "\n".join(lines) + "\n"


@dataclass
class SlurmOutcome:
    """How a job ended, with the output it wrote (the launchers' and the ranks')."""

    job_id: str | None
    returncode: int | None
    state: str  # Slurm's JobState (COMPLETED, FAILED, TIMEOUT, NODE_FAIL, ...) or ours
    output: str
    wall_s: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.state in ("COMPLETED", "")


def parse_job_id(text: str) -> str | None:
    """sbatch --parsable prints "jobid" or "jobid;cluster"; salloc says "Granted job
    allocation N"."""
    for line in text.splitlines():
        match = re.match(r"^\s*(\d+)(?:;\S+)?\s*$", line) or re.search(
            r"Granted job allocation (\d+)", line
        )
        if match:
            return match.group(1)
    return None


def parse_scontrol_record(text: str) -> dict[str, str]:
    """`scontrol show job -o ID`: one line of Key=Value pairs (values have no spaces except
    in a few fields we do not read)."""
    record: dict[str, str] = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep and key not in record:
            record[key] = value
    return record


def job_record(job_id: str, timeout_s: float = 30) -> dict[str, str]:
    try:
        done = subprocess.run(
            ["scontrol", "show", "job", "-o", job_id],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_scontrol_record(done.stdout) if done.returncode == 0 else {}


def _read_output(run: SlurmRun, job_id: str, record: Mapping[str, str], ssh: SshOptions) -> str:
    """The job's output file: where it was written, or from the batch host over ssh."""
    path = Path(run.output_path(job_id))
    if path.is_file():
        return path.read_text(errors="replace")
    batch_host = record.get("BatchHost")
    if not batch_host:
        return f"bench: job output {path} not found here and the batch host is unknown"
    done = run_on_host(batch_host, shlex.join(["cat", str(path)]), ssh, 120)
    if done.returncode != 0:
        return f"bench: cannot read {path} on {batch_host}: {done.stderr.strip()}"
    return done.stdout


def _ended(proc: subprocess.Popen, within_s: float) -> bool:
    try:
        proc.wait(timeout=within_s)
    except subprocess.TimeoutExpired:
        return False
    return True


def _submission(run: SlurmRun, options: SlurmOptions) -> list[str]:
    """The job script written into run_dir, and the sbatch (or salloc) command that runs it."""
    run_dir = Path(run.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    script = run_dir / f"job-{run.run_id}.sh"
    script.write_text(job_script(run, options))
    script.chmod(0o755)
    if options.submit == "sbatch":
        return [options.sbatch, "--wait", "--parsable", str(script)]
    return [options.salloc, *allocation_args(run, options), "bash", str(script)]


def submit(
    run: SlurmRun, options: SlurmOptions, ssh: SshOptions | None = None, policy: StopPolicy = STOP
) -> SlurmOutcome:
    """Write the job script into run_dir, run it to completion and return its outcome.

    sbatch --wait blocks until the job ends; salloc runs the script under a fresh allocation
    with its output on our stdout. Slurm's own --time limit stops a job that overruns; the
    queue_wait_s allowance on top bounds how long the bench waits for a busy cluster, after
    which the job (through scancel) and sbatch/salloc are stopped with `policy`.
    """
    ssh = ssh or run.ssh
    argv = _submission(run, options)
    limit = run.time_limit_min * 60 + options.queue_wait_s
    started = time.monotonic()
    lines: list[str] = []
    job_ids: list[str] = []
    with subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        start_new_session=True,
    ) as proc:

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if not job_ids:
                    found = parse_job_id(line)
                    if found:
                        job_ids.append(found)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        timed_out = not _ended(proc, limit)
        if timed_out:
            if job_ids:
                stop_slurm_job(job_ids[0], lambda s: _ended(proc, s), policy, options.scancel)
            stop_tree(proc, policy)
        reader.join(timeout=10)
    wall = time.monotonic() - started
    job_id = job_ids[0] if job_ids else None
    submit_output = "".join(lines)
    if job_id is None:
        return SlurmOutcome(None, proc.returncode, "NOT_SUBMITTED", submit_output, wall, timed_out)
    record = job_record(job_id)
    state = record.get("JobState", "")
    # salloc ran the script in the foreground: its output is what we read.
    sbatch = options.submit == "sbatch"
    output = _read_output(run, job_id, record, ssh) if sbatch else submit_output
    timed_out = timed_out or state == "TIMEOUT"
    return SlurmOutcome(job_id, proc.returncode, state, output, wall, timed_out)


# --------------------------------------------------------------------------------------------
# A sweep with --slurm

_JOB_NODES = re.compile(r"^bench: job \S+ on (.+?) \(batch host", re.MULTILINE)
_JOB_INTERFACES = re.compile(r"^bench: interfaces to \S+: (\S*)$", re.MULTILINE)


def slurm_options_for(cluster: ClusterConfig) -> SlurmOptions:
    return SlurmOptions(
        partition=cluster.slurm_partition,
        account=cluster.slurm_account,
        extra_args=cluster.slurm_args,
        submit="salloc" if cluster.slurm_submit == "salloc" else "sbatch",
    )


class SlurmLauncher:
    """Runs a sweep's launches as Slurm jobs, one job per launch; the job script does on the
    nodes Slurm picks what the ssh backend does from here."""

    def __init__(self, cluster: ClusterConfig, device: str, policy: StopPolicy = STOP) -> None:
        self.cluster = cluster
        self.options = slurm_options_for(cluster)
        self.ssh = ssh_options_for(cluster)
        self.tools = Tools.beside(cluster.remote_python)
        self.gpu = device == "cuda"
        self.policy = policy

    def slurm_run(self, launch: Launch, timeout_s: float, run_dir: Path) -> SlurmRun:
        # The job script sets PYTHONPATH to the checkout on the nodes; sbatch passes the rest of
        # the submitting environment through.
        env = rank_environment(launch.threads_per_rank, launch.device, launch.sweep_id)
        env.pop("PYTHONPATH")
        return SlurmRun(
            launch=launch,
            tools=self.tools,
            workdir=self.cluster.remote_workdir,
            run_dir=str(run_dir),
            timeout_s=timeout_s,
            gpu=self.gpu,
            env=env,
            rdzv_port=self.cluster.rdzv_port,
            ssh=self.ssh,
        )

    def run(self, spec: RunSpec | ProbeSpec, timeout_s: float, log_path: Path) -> ExecResult:
        if launch_of(spec).image:  # bench.image_check refuses --container with --slurm
            raise ValueError("--container is not supported with --slurm (pyxis/enroot's route)")
        run = self.slurm_run(launch_of(spec), timeout_s, log_path.parent.parent / "slurm")
        outcome = submit(run, self.options, policy=self.policy)
        header = f"bench: slurm job {outcome.job_id or '(not submitted)'}: {outcome.state}"
        output = f"{header}\n{outcome.output}"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(output)
        nodes = _JOB_NODES.search(outcome.output)
        hosts = (
            ",".join(f"{n}:{run.ranks_per_node}" for n in nodes.group(1).split()) if nodes else ""
        )
        interfaces = _JOB_INTERFACES.search(outcome.output)
        environ = {socket_ifname_var(self.gpu): interfaces.group(1)} if interfaces else {}
        returncode = None if outcome.timed_out else 0 if outcome.ok else outcome.returncode or 1
        return ExecResult(
            returncode,
            outcome.timed_out,
            outcome.wall_s,
            output,
            log_path,
            environ=environ,
            hosts=hosts,
        )
