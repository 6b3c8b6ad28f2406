"""Reaching the nodes: ssh command lines, running a short command on a node, checking that
every node answers, and copying a directory back (or deleting it) on a node.

A node that is this machine is reached through sh instead of ssh.
"""

from __future__ import annotations

import concurrent.futures
import re
import shlex
import shutil
import subprocess
import tarfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from bench.hosts import ClusterConfig, is_local_host
from bench.launchers import RemoteError
from bench.launchers.stop import STOP, StopPolicy, node_timeout_argv

# Scratch space on every node; the node name is part of the path so nodes sharing /tmp (or a
# shared filesystem, as the netns test hosts do) never write into each other's directory.
REMOTE_SCRATCH = "/tmp/gpustack-bench"

HostKeyPolicy = Literal["yes", "accept-new", "no"]
T = TypeVar("T")


class HostUnreachableError(RemoteError):
    pass


class FetchError(RemoteError):
    pass


@dataclass(frozen=True)
class SshOptions:
    """How to reach the nodes. Defaults suit a fleet: never prompt, fail fast, accept a new
    host's key once and refuse a changed one."""

    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    known_hosts_file: str | None = None
    host_key_checking: HostKeyPolicy = "accept-new"
    connect_timeout_s: int = 10
    # Notice a dead node within about a minute instead of waiting for TCP to give up.
    server_alive_interval_s: int = 15
    server_alive_count_max: int = 4
    config_file: str | None = None
    extra_options: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.host_key_checking not in ("yes", "accept-new", "no"):
            raise ValueError(
                f"host_key_checking must be yes, accept-new or no, not {self.host_key_checking!r}"
            )
        if self.port is not None and not 1 <= self.port <= 65535:
            raise ValueError(f"ssh port {self.port} is out of range")
        for option in self.extra_options:
            if "=" not in option:
                raise ValueError(f"ssh option {option!r} must look like Key=Value")

    def option_args(self) -> list[str]:
        """The options common to ssh and scp (both take -o/-i/-F; the port flag differs)."""
        args: list[str] = []
        if self.config_file:
            args += ["-F", self.config_file]
        args += [
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={self.connect_timeout_s}",
            "-o",
            f"ServerAliveInterval={self.server_alive_interval_s}",
            "-o",
            f"ServerAliveCountMax={self.server_alive_count_max}",
            "-o",
            f"StrictHostKeyChecking={self.host_key_checking}",
        ]
        if self.known_hosts_file:
            args += ["-o", f"UserKnownHostsFile={self.known_hosts_file}"]
        if self.identity_file:
            args += ["-i", self.identity_file, "-o", "IdentitiesOnly=yes"]
        if self.user:
            args += ["-o", f"User={self.user}"]
        for option in self.extra_options:
            args += ["-o", option]
        return args


def ssh_argv(host: str, remote_command: str, options: SshOptions) -> list[str]:
    """ssh HOST running one POSIX shell command line (whatever the login shell is)."""
    argv = ["ssh", *options.option_args()]
    if options.port is not None:
        argv += ["-p", str(options.port)]
    return [*argv, host, "--", f"sh -c {shlex.quote(remote_command)}"]


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


def host_argv(host: str, command: str, options: SshOptions) -> list[str]:
    """Run a shell command line on host: locally through sh when host is this machine."""
    if is_local_host(host):
        return ["sh", "-c", command]
    return ssh_argv(host, command, options)


def run_on_host(
    host: str, command: str, options: SshOptions, timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """Run a short command on host and capture its output. A timeout is returned as rc 124."""
    argv = host_argv(host, command, options)
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


def text_of(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def ssh_options_for(cluster: ClusterConfig) -> SshOptions:
    return SshOptions(
        user=cluster.ssh_user,
        port=cluster.ssh_port,
        identity_file=cluster.ssh_identity_file,
        config_file=cluster.ssh_config,
        extra_options=cluster.ssh_options,
    )


def on_all(hosts: Sequence[str], fn: Callable[[str], T], max_workers: int = 16) -> dict[str, T]:
    """fn(host) for every host in parallel; results keyed by host, in host order."""
    if not hosts:
        return {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(max_workers, len(hosts))) as pool:
        futures = {host: pool.submit(fn, host) for host in hosts}
        return {host: futures[host].result() for host in hosts}


def check_reachable(hosts: Sequence[str], options: SshOptions, timeout_s: float = 30) -> None:
    """Every host answers a no-op over ssh, or one error lists each host that did not and why."""
    remote = [h for h in hosts if not is_local_host(h)]
    results = on_all(remote, lambda h: run_on_host(h, "true", options, timeout_s))
    failed = {h: r for h, r in results.items() if r.returncode != 0}
    if not failed:
        return
    lines = [f"  {h}: {last_line(r.stderr or r.stdout)}" for h, r in failed.items()]
    port = f" -p {options.port}" if options.port else ""
    raise HostUnreachableError(
        f"cannot reach {len(failed)} of {len(hosts)} host(s) over ssh (BatchMode, no prompts):\n"
        + "\n".join(lines)
        + f"\nCheck with: ssh{port} -o BatchMode=yes HOST true. Every node needs key-based ssh "
        "from the invoking node (playbooks/bench.yml sets it up)."
    )


def remote_run_dir(tag: str, host: str) -> str:
    """Where host's ranks write their output for the launch tagged `tag`."""
    return f"{REMOTE_SCRATCH}/{tag}/{host}"


def fetch_dir(
    host: str, remote_dir: str, local_dir: Path, options: SshOptions, timeout_s: float = 300
) -> list[Path]:
    """Copy remote_dir's contents from host into local_dir (a tar stream over ssh; a local copy
    for this machine). Returns the files now in local_dir that came from it."""
    local_dir.mkdir(parents=True, exist_ok=True)
    if is_local_host(host):
        source = Path(remote_dir)
        if not source.is_dir():
            raise FetchError(f"{host}: no result directory {remote_dir}")
        if source.resolve() != local_dir.resolve():
            shutil.copytree(source, local_dir, dirs_exist_ok=True)
        return sorted(p for p in local_dir.rglob("*") if p.is_file())
    argv = ssh_argv(host, shlex.join(["tar", "-C", remote_dir, "-cf", "-", "."]), options)
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    ) as proc:
        assert proc.stdout is not None
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as archive:
                names = []
                for member in archive:
                    archive.extract(member, local_dir, filter="data")
                    if member.isfile():
                        names.append(local_dir / member.name)
        except tarfile.TarError as err:
            proc.kill()
            stderr = text_of(proc.stderr.read() if proc.stderr else b"")
            reason = last_line(stderr) if stderr.strip() else str(err)
            raise FetchError(f"{host}: cannot fetch {remote_dir}: {reason}") from None
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise FetchError(f"{host}: fetching {remote_dir} took over {timeout_s:g}s") from None
        if proc.returncode != 0:
            stderr = text_of(proc.stderr.read() if proc.stderr else b"")
            raise FetchError(f"{host}: cannot fetch {remote_dir}: {last_line(stderr)}")
    return sorted(p.resolve() for p in names)


def remove_remote_dir(
    host: str, remote_dir: str, options: SshOptions, timeout_s: float = 60
) -> None:
    """Delete a run's scratch directory on host (only paths under REMOTE_SCRATCH)."""
    if not remote_dir.startswith(REMOTE_SCRATCH + "/") or ".." in remote_dir.split("/"):
        raise ValueError(f"refusing to delete {remote_dir!r}: not a bench scratch directory")
    parent = remote_dir.rsplit("/", 1)[0]
    command = shlex.join(["rm", "-rf", "--", remote_dir])
    if parent != REMOTE_SCRATCH:
        # The run's directory goes too once its last node directory is gone.
        command += f" && (rmdir {shlex.quote(parent)} 2>/dev/null || true)"
    run_on_host(host, command, options, timeout_s)
