"""Running a multi-node configuration as a Slurm job instead of over ssh.

One configuration is one job: `sbatch --wait` (or `salloc` for an interactive allocation) with
--nodes=K. The job script first surveys every node with `srun` and refuses to launch when the
versions differ, then starts the same launchers as the ssh path:

- DDP: `srun` runs one torchrun per node; they meet at a c10d rendezvous on the first node of
  the allocation (torchrun starts the per-GPU ranks itself).
- Horovod: horovodrun on the batch host with `-H` built from the allocation's node list; it
  starts the other nodes' ranks over ssh, as on any cluster that allows ssh into one's own
  allocation (pam_slurm_adopt).

Rank 0 prints the result into the job's output (bench.wire), so results come back the same way
as over ssh: the job output file is read where it was written (run_dir must be visible on the
submitting node, as Slurm's own output files usually are) or fetched over ssh from the batch
host when it is not.
"""

from __future__ import annotations

import math
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from bench.hosts import ClusterConfig, parse_hosts
from bench.launch import ExecResult, NodeCommand, Tools
from bench.plan import Placement
from bench.remote import (
    RUN_TAG_VAR,
    SshOptions,
    components_for,
    run_on_host,
    socket_ifname_var,
    ssh_options_for,
)

# Startup (imports, rendezvous, the survey step) on top of the run's own timeout when asking
# Slurm for a time limit.
STARTUP_ALLOWANCE_S = 180
SubmitMode = Literal["sbatch", "salloc"]


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
    # How long a job may wait in the queue before the bench gives up on it (and scancels it).
    queue_wait_s: float = 3600.0
    sbatch: str = "sbatch"
    salloc: str = "salloc"

    def __post_init__(self) -> None:
        if self.submit not in ("sbatch", "salloc"):
            raise ValueError(f"submit must be sbatch or salloc, not {self.submit!r}")
        for arg in self.extra_args:
            if not arg.startswith("-"):
                raise ValueError(f"extra Slurm argument {arg!r} must be an option (--name=value)")


@dataclass(frozen=True)
class SlurmRun:
    """One configuration to run as a job."""

    run_id: str
    launcher: str  # "ddp" or "horovod"
    nodes: int
    ranks_per_node: int
    # ddp: what torchrun starts per rank (e.g. ["--module", "bench.worker", "--spec", S]);
    # horovod: the whole rank command (e.g. [python, "-m", "bench.worker", "--spec", S]).
    entry: tuple[str, ...]
    python: str
    workdir: str
    run_dir: str  # job script and output; must exist on the batch host
    timeout_s: float
    gpu: bool
    env: Mapping[str, str] = field(default_factory=dict)
    rdzv_port: int = 29400
    join_timeout_s: int = 300
    horovodrun: str = ""
    ssh: SshOptions = field(default_factory=SshOptions)

    def __post_init__(self) -> None:
        if self.launcher not in ("ddp", "horovod"):
            raise ValueError(f"unknown launcher {self.launcher!r}")
        if self.nodes < 1 or self.ranks_per_node < 1:
            raise ValueError(
                f"nodes and ranks per node must be >= 1: {self.nodes}, {self.ranks_per_node}"
            )
        if self.launcher == "horovod" and not self.horovodrun:
            raise ValueError("a Horovod run needs the path of horovodrun")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.run_id):
            raise ValueError(f"run id {self.run_id!r} must be letters, digits, '.', '_' or '-'")

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
        return components_for(self.launcher, self.gpu)


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
    if run.gpu:
        args.append(f"--gpus-per-node={run.ranks_per_node}")
    if options.exclusive:
        args.append("--exclusive")
    for flag, value in (("partition", options.partition), ("account", options.account),
                        ("qos", options.qos)):  # fmt: skip
        if value:
            args.append(f"--{flag}={value}")
    args += list(options.extra_args)
    return args


def _q(word: str) -> str:
    return shlex.quote(word)


def job_script(run: SlurmRun, options: SlurmOptions) -> str:
    """The bash job script: survey and compare every node, then launch the configuration."""
    py = _q(run.python)
    ifname_var = socket_ifname_var(run.gpu)
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
        f'    {py} -m bench.remote survey "$head" \\',
        f"  | {py} -m bench.remote check-versions --nodes {run.nodes} \\",
        f"    --components {','.join(run.components)} --print-interfaces)",
        'echo "bench: interfaces to $head: $interfaces"',
        "",
    ]
    if run.launcher == "ddp":
        torchrun = [
            "--nnodes", str(run.nodes),
            "--nproc-per-node", str(run.ranks_per_node),
            "--rdzv-backend", "c10d",
            "--rdzv-id", run.run_id,
            "--max-restarts", "0",
        ]  # fmt: skip
        # Each node's shell gets $0 = python, $1 = head node, $2 = how many torchrun options
        # follow, then those options, then the entry; it adds what only the node itself knows
        # (its interface and address toward the head, whether it hosts the rendezvous).
        node_script = (
            'head="$1"; n="$2"; shift 2; '
            f'eval "$("$0" -m bench.remote survey "$head" --exports {ifname_var})"; '
            'is_host=0; [ "$SLURMD_NODENAME" = "$head" ] && is_host=1; '
            'exec "$0" -m torch.distributed.run "${@:1:$n}" '
            f'--rdzv-endpoint="$head:{run.rdzv_port}" '
            f'--rdzv-conf="is_host=$is_host,join_timeout={run.join_timeout_s}" '
            '--local-addr="$BENCH_NODE_ADDR" "${@:$((n + 1))}"'
        )
        lines += [
            "# One torchrun per node, meeting at a c10d rendezvous on the first node.",
            f"srun --nodes={run.nodes} --ntasks={run.nodes} --ntasks-per-node=1 "
            "--kill-on-bad-exit=1 \\",
            f'  bash -c {_q(node_script)} {py} "$head" {len(torchrun)} \\',
            "  " + " ".join(_q(w) for w in (*torchrun, *run.entry)),
        ]
    else:
        horovod = [
            _q(run.horovodrun),
            "-np", str(run.nodes * run.ranks_per_node),
            "-H", '"$hosts"',
            "--start-timeout", str(run.join_timeout_s),
            "--network-interfaces", '"$interfaces"',
        ]  # fmt: skip
        if not run.gpu:
            horovod.append("--gloo")
        if run.ssh.port is not None:
            horovod += ["-p", str(run.ssh.port)]
        if run.ssh.identity_file:
            horovod += ["--ssh-identity-file", _q(run.ssh.identity_file)]
        lines += [
            "# horovodrun on the batch host starts every rank, the other nodes' over ssh.",
            f"hosts=$(printf '%s:{run.ranks_per_node},' \"${{nodes[@]}}\")",
            'hosts="${hosts%,}"',
            "exec " + " ".join(horovod) + " " + " ".join(_q(w) for w in run.entry),
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
            capture_output=True, text=True, timeout=timeout_s,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_scontrol_record(done.stdout) if done.returncode == 0 else {}


def scancel(job_id: str) -> None:
    subprocess.run(["scancel", job_id], capture_output=True, timeout=60, check=False)


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


def submit(run: SlurmRun, options: SlurmOptions, ssh: SshOptions | None = None) -> SlurmOutcome:
    """Write the job script into run_dir, run it to completion and return its outcome.

    sbatch --wait blocks until the job ends; salloc runs the script under a fresh allocation
    with its output on our stdout. Slurm's own --time limit stops a job that overruns; the
    queue_wait_s allowance on top bounds how long the bench waits for a busy cluster, after
    which the job is cancelled.
    """
    ssh = ssh or run.ssh
    run_dir = Path(run.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    script = run_dir / f"job-{run.run_id}.sh"
    script.write_text(job_script(run, options))
    script.chmod(0o755)
    if options.submit == "sbatch":
        argv = [options.sbatch, "--wait", "--parsable", str(script)]
    else:
        argv = [options.salloc, *allocation_args(run, options), "bash", str(script)]
    limit = run.time_limit_min * 60 + options.queue_wait_s
    started = time.monotonic()
    lines: list[str] = []
    job_ids: list[str] = []
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        text=True, errors="replace",
    ) as proc:  # fmt: skip

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
        timed_out = False
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            if job_ids:
                scancel(job_ids[0])
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
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
# A sweep with --slurm: the executor bench.scaling hands every launch to

_JOB_NODES = re.compile(r"^bench: job \S+ on (.+?) \(batch host", re.MULTILINE)
_JOB_INTERFACES = re.compile(r"^bench: interfaces to \S+: (\S*)$", re.MULTILINE)


def slurm_options_for(cluster: ClusterConfig) -> SlurmOptions:
    return SlurmOptions(
        partition=cluster.slurm_partition,
        account=cluster.slurm_account,
        extra_args=cluster.slurm_args,
        submit="salloc" if cluster.slurm_submit == "salloc" else "sbatch",
    )


class SlurmCluster:
    """Runs a sweep's launches as Slurm jobs, one job per launch.

    bench.launch builds the same commands as for --hosts; this executor takes from them what
    each rank runs and how many nodes and ranks per node the launch wants, and the job script
    does the rest on the nodes Slurm picks (it has no per-node arguments to add beforehand).
    """

    def __init__(self, cluster: ClusterConfig, device: str) -> None:
        self.cluster = cluster
        self.options = slurm_options_for(cluster)
        self.ssh = ssh_options_for(cluster)
        self.tools = Tools(
            python=cluster.remote_python,
            horovodrun=str(Path(cluster.remote_python).with_name("horovodrun")),
        )
        self.rdzv_port = cluster.rdzv_port
        self.gpu = device == "cuda"

    def torchrun_args(self, placement: Placement) -> dict[str, list[str]]:
        return {}

    def node_env(self, placement: Placement) -> dict[str, dict[str, str]]:
        return {}

    def horovodrun_args(self, placement: Placement) -> list[str]:
        return []

    def slurm_run(
        self, commands: Sequence[NodeCommand], timeout_s: float, log_path: Path
    ) -> SlurmRun:
        """The job for one launch, from the commands bench.launch built for it."""
        argv = list(commands[0].argv)
        # The job script sets PYTHONPATH to the checkout on the nodes; sbatch passes the rest of
        # the submitting environment through.
        env = {k: v for k, v in commands[0].env.items() if k != "PYTHONPATH"}
        if "torch.distributed.run" in argv:
            launcher, nodes = "ddp", len(commands)
            per_node = int(
                next(a.split("=", 1)[1] for a in argv if a.startswith("--nproc-per-node="))
            )
            entry = argv[argv.index("--module") :]
        else:
            launcher = "horovod"
            placement = parse_hosts(argv[argv.index("-H") + 1])
            nodes, per_node = len(placement), placement[0].slots
            entry = argv[argv.index(self.tools.python) :]
        return SlurmRun(
            run_id=log_path.stem, launcher=launcher, nodes=nodes, ranks_per_node=per_node,
            entry=tuple(entry), python=self.tools.python, workdir=self.cluster.remote_workdir,
            run_dir=str(log_path.parent.parent / "slurm"), timeout_s=timeout_s, gpu=self.gpu,
            env=env, rdzv_port=self.rdzv_port, horovodrun=self.tools.horovodrun, ssh=self.ssh,
        )  # fmt: skip

    def __call__(
        self, commands: Sequence[NodeCommand], timeout_s: float, log_path: Path
    ) -> ExecResult:
        run = self.slurm_run(commands, timeout_s, log_path)
        outcome = submit(run, self.options)
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
            returncode, outcome.timed_out, outcome.wall_s, output, log_path,
            environ=environ, hosts=hosts,
        )  # fmt: skip
