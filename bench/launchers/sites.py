"""The site seam: one way to run a command on a machine of the sweep, whatever reaches it.

A site turns "run this sh command line on HOST" into a command line for this machine:

- `SshSite`: --hosts nodes over ssh (a node that is this machine through sh);
- `SlurmSite`: --slurm, the nodes of the Slurm allocation the sweep runs in, each command an
  `srun` step on its node.

The survey, the version check, the image check, the launches, the stop script and copying a
node's files back all go through a site (this machine's own commands, `run_here`, through sh);
the stop policy is bench.launchers.stop's, the same for each. A container is not a site of its own:
bench.launchers.docker wraps the command a site then runs.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from bench.hosts import ClusterConfig, host_names, is_local_host
from bench.launchers import RemoteError
from bench.launchers.stop import STOP, StopPolicy, node_timeout_argv
from bench.paths import REPO_ROOT, bench_pythonpath

# Scratch space on every node; the node name is part of the path so nodes sharing /tmp (or a
# shared filesystem, as the netns test hosts do) never write into each other's directory.
REMOTE_SCRATCH = "/tmp/gpurig-bench"

T = TypeVar("T")


class HostUnreachableError(RemoteError):
    pass


class FetchError(RemoteError):
    pass


def shell_command(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    workdir: str | None = None,
    timeout_s: float | None = None,
    policy: StopPolicy = STOP,
) -> str:
    """`cd WORKDIR && exec [timeout] env K=V ... ARGV`, each piece quoted for sh.

    The optional coreutils timeout runs on the node itself, so a node's processes stop even when
    the controlling bench (or the ssh connection to it) has gone away.
    """
    words: list[str] = []
    if timeout_s is not None:
        words += node_timeout_argv(timeout_s, policy)
    if env:
        for key in env:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"invalid environment variable name {key!r}")
        words += ["env", *(f"{k}={v}" for k, v in env.items())]
    words += list(argv)
    line = "exec " + shlex.join(words)
    if workdir:
        line = f"cd {shlex.quote(workdir)} && {line}"
    return line


class Site(Protocol):
    """Runs a sh command line on a host of the sweep."""

    how: str  # how the hosts are reached, for messages ("ssh", "srun")

    def argv(self, host: str, command: str) -> list[str]:
        """The command line, run here, that runs `command` on `host` (output on its stdout)."""
        ...


@dataclass(frozen=True)
class SshSite:
    """--hosts: each node over ssh, a node that is this machine through sh. The defaults suit a
    fleet: never prompt, fail fast, accept a new host's key once and refuse a changed one."""

    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    connect_timeout_s: int = 10
    # Notice a dead node within about a minute instead of waiting for TCP to give up.
    server_alive_interval_s: int = 15
    server_alive_count_max: int = 4
    config_file: str | None = None
    extra_options: tuple[str, ...] = ()
    how: str = "ssh"

    def argv(self, host: str, command: str) -> list[str]:
        """ssh HOST running one POSIX shell command line (whatever the login shell is)."""
        if is_local_host(host):
            return ["sh", "-c", command]
        # --ssh-option first: ssh keeps the first value it obtains for each option (ssh_config(5),
        # "For each parameter, the first obtained value will be used"; man.openbsd.org, checked
        # 2026-11-25), so a user's StrictHostKeyChecking=yes or ConnectTimeout=30 wins over ours.
        options = [
            *self.extra_options,
            "BatchMode=yes",
            f"ConnectTimeout={self.connect_timeout_s}",
            f"ServerAliveInterval={self.server_alive_interval_s}",
            f"ServerAliveCountMax={self.server_alive_count_max}",
            "StrictHostKeyChecking=accept-new",
        ]
        argv = ["ssh", *(["-F", self.config_file] if self.config_file else [])]
        if self.identity_file:
            argv += ["-i", self.identity_file]
            options.append("IdentitiesOnly=yes")
        if self.user:
            options.append(f"User={self.user}")
        argv += [word for option in options for word in ("-o", option)]
        if self.port is not None:
            argv += ["-p", str(self.port)]
        return [*argv, host, "--", f"sh -c {shlex.quote(command)}"]


# srun(1) of Slurm 22.05.8 (Debian 12's slurm-client, checked 2026-11-25): --jobid runs the
# step in an existing allocation; --overlap "allows steps to share all resources (CPUs, memory,
# and GRES) with all other steps", so a survey, a stop script or a copy runs beside a launch's
# step; "by default, a job step is allocated all of the generic resources that have been
# requested by the job", so each node's step sees the GPUs the allocation holds there.
@dataclass(frozen=True)
class SlurmSite:
    """--slurm: the nodes of the allocation `job_id`, each command one srun step on its node."""

    job_id: str
    srun: str = "srun"
    how: str = "srun"

    def __post_init__(self) -> None:
        if not re.fullmatch(r"\d+(?:_\d+)?", self.job_id):
            raise ValueError(f"not a Slurm job id: {self.job_id!r}")

    def argv(self, host: str, command: str) -> list[str]:
        return [
            self.srun,
            f"--jobid={self.job_id}",
            "--nodes=1",
            "--ntasks=1",
            f"--nodelist={host}",
            "--overlap",
            "--quiet",
            "sh",
            "-c",
            command,
        ]


class NoAllocationError(RemoteError):
    pass


def slurm_allocation(
    environ: Mapping[str, str] = os.environ, scontrol: str = "scontrol"
) -> tuple[str, list[str]]:
    """(job id, node names in order) of the Slurm allocation this process runs in.

    SLURM_JOB_ID and SLURM_JOB_NODELIST are set in a batch script and under salloc (sbatch(1),
    salloc(1), "OUTPUT ENVIRONMENT VARIABLES", Slurm 22.05.8, checked 2026-11-25); `scontrol show
    hostnames` expands the list, one name per line.
    """
    job_id, nodelist = environ.get("SLURM_JOB_ID", ""), environ.get("SLURM_JOB_NODELIST", "")
    if not job_id or not nodelist:
        raise NoAllocationError(
            "--slurm runs the sweep inside one Slurm allocation, and this process is in none "
            "(no SLURM_JOB_ID/SLURM_JOB_NODELIST): submit it with sbatch (bench/README.md has "
            "the script), or run it from `salloc --nodes=N --exclusive`"
        )
    done = run_here([scontrol, "show", "hostnames", nodelist], 60)
    nodes = done.stdout.split()
    if done.returncode != 0 or not nodes:
        why = last_line(done.stderr or done.stdout)
        raise NoAllocationError(f"scontrol show hostnames {nodelist}: rc={done.returncode}: {why}")
    return job_id, nodes


def site_for(
    cluster: ClusterConfig, environ: Mapping[str, str] = os.environ
) -> tuple[Site, list[str]]:
    """The site a multi-node sweep's hosts are reached through, and those hosts in order:
    --hosts', or the nodes of the Slurm allocation in Slurm's order."""
    if cluster.slurm:
        job_id, nodes = slurm_allocation(environ)
        return SlurmSite(job_id), nodes
    return ssh_site_for(cluster), host_names(cluster.placement)


def run_on_host(
    host: str, command: str, site: Site, timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """Run a short command on host and capture its output. A timeout is returned as rc 124."""
    return _captured(site.argv(host, command), timeout_s)


def run_here(
    argv: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """argv on this machine through sh, output captured: a timeout is rc 124, a program that is
    not there rc 127."""
    return _captured(["sh", "-c", shell_command(argv, env)], timeout_s)


def _captured(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as err:
        return subprocess.CompletedProcess(
            argv,
            124,
            text_of(err.stdout),
            text_of(err.stderr) + f"\ntimed out after {timeout_s:g}s",
        )
    except OSError as err:
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: {err.strerror}")


def probe_json(argv: Sequence[str], timeout_s: float) -> dict[str, Any] | str:
    """A child on this machine (run_here), the bench importable: its last stdout line parsed
    as JSON, or the reason it failed."""
    env = {"PYTHONPATH": bench_pythonpath(REPO_ROOT, os.environ.get("PYTHONPATH"))}
    done = run_here(argv, timeout_s, env)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return f"exit status {done.returncode}: {last_line(done.stderr)}"
    try:
        return dict(json.loads(lines[-1]))
    except ValueError:
        return f"unexpected output: {lines[-1][:200]}"


def text_of(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def ssh_site_for(cluster: ClusterConfig) -> SshSite:
    return SshSite(
        user=cluster.ssh_user,
        port=cluster.ssh_port,
        identity_file=cluster.ssh_identity_file,
        config_file=cluster.ssh_config,
        extra_options=cluster.ssh_options,
    )


def on_all(hosts: Sequence[str], fn: Callable[[str], T]) -> dict[str, T]:
    """fn(host) for every host in parallel (16 at most at once); results keyed by host, in host
    order."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(16, len(hosts)))) as pool:
        futures = {host: pool.submit(fn, host) for host in hosts}
        return {host: futures[host].result() for host in hosts}


def check_reachable(hosts: Sequence[str], site: Site, timeout_s: float = 30) -> None:
    """Every host answers a no-op, or one error lists each host that did not and why."""
    remote = [h for h in hosts if not is_local_host(h)] if isinstance(site, SshSite) else hosts
    results = on_all(remote, lambda h: run_on_host(h, "true", site, timeout_s))
    failed = {h: r for h, r in results.items() if r.returncode != 0}
    if not failed:
        return
    lines = [f"  {h}: {last_line(r.stderr or r.stdout)}" for h, r in failed.items()]
    if isinstance(site, SshSite):
        port = f" -p {site.port}" if site.port else ""
        hint = (
            f"Check with: ssh{port} -o BatchMode=yes HOST true. Every node needs key-based ssh "
            "from the invoking node (playbooks/bench.yml sets it up)."
        )
    else:
        hint = f"Check with: {shlex.join(site.argv('HOST', 'true'))}"
    raise HostUnreachableError(
        f"cannot reach {len(failed)} of {len(hosts)} host(s) through {site.how}:\n"
        + "\n".join(lines)
        + f"\n{hint}"
    )


def remote_run_dir(tag: str, host: str) -> str:
    """Where host's ranks write their output for the launch tagged `tag`."""
    return f"{REMOTE_SCRATCH}/{tag}/{host}"


def fetch_dir(
    host: str, remote_dir: str, local_dir: Path, site: Site, timeout_s: float = 300
) -> None:
    """Copy remote_dir's contents from host into local_dir (a tar stream through the site; a
    local copy for this machine)."""
    local_dir.mkdir(parents=True, exist_ok=True)
    if is_local_host(host):
        source = Path(remote_dir)
        if not source.is_dir():
            raise FetchError(f"{host}: no result directory {remote_dir}")
        if source.resolve() != local_dir.resolve():
            shutil.copytree(source, local_dir, dirs_exist_ok=True)
        return
    argv = site.argv(host, shlex.join(["tar", "-C", remote_dir, "-cf", "-", "."]))
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        broken = ""
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as archive:
                archive.extractall(local_dir, filter="data")
            proc.wait(timeout=timeout_s)
        except tarfile.TarError as err:
            proc.kill()
            broken = str(err)  # the reason when the node's side said nothing
        except subprocess.TimeoutExpired:
            proc.kill()
            raise FetchError(f"{host}: fetching {remote_dir} took over {timeout_s:g}s") from None
        if broken or proc.returncode != 0:
            stderr = text_of(proc.stderr.read())
            reason = last_line(stderr) if stderr.strip() or not broken else broken
            raise FetchError(f"{host}: cannot fetch {remote_dir}: {reason}")


def remove_remote_dir(host: str, remote_dir: str, site: Site, timeout_s: float = 60) -> None:
    """Delete a run's scratch directory on host (only paths under REMOTE_SCRATCH)."""
    if not remote_dir.startswith(REMOTE_SCRATCH + "/") or ".." in remote_dir.split("/"):
        raise ValueError(f"refusing to delete {remote_dir!r}: not a bench scratch directory")
    parent = remote_dir.rsplit("/", 1)[0]
    command = shlex.join(["rm", "-rf", "--", remote_dir])
    if parent != REMOTE_SCRATCH:
        # The run's directory goes too once its last node directory is gone.
        command += f" && (rmdir {shlex.quote(parent)} 2>/dev/null || true)"
    run_on_host(host, command, site, timeout_s)
