"""Running the bench on other nodes over ssh: checks before launching, the launch, cleanup, results.

The launchers are the ones the field uses: torchrun on every node meeting at a c10d rendezvous on
the first node (each torchrun started here over ssh), and horovodrun -H on the first node, which
starts the other nodes' ranks over ssh itself. This module builds those commands, runs them with
a deadline, kills what is left on every node when a run fails or overruns, and copies each node's
result files back.

Every process a run starts carries GPUSTACK_BENCH_RUN=<run id> in its environment (horovodrun
forwards its environment to remote ranks). Cleanup finds processes by that exact value on each
node, so it never touches anything else and also reaches workers that left their launcher's
process group (torchrun starts each worker in a new session).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import fcntl
import json
import os
import platform
import re
import shlex
import shutil
import socket
import struct
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from bench.config import Environment, HorovodStatus
from bench.hosts import ClusterConfig, host_names, is_local_host, parse_hosts
from bench.launch import ExecResult, NodeCommand, Tools
from bench.plan import Placement

RUN_TAG_VAR = "GPUSTACK_BENCH_RUN"
# Scratch space on every node; the node name is part of the path so nodes sharing /tmp (or a
# shared filesystem, as the netns test hosts do) never write into each other's directory.
REMOTE_SCRATCH = "/tmp/gpustack-bench"

HostKeyPolicy = Literal["yes", "accept-new", "no"]


class RemoteError(RuntimeError):
    """A problem with the other nodes that stops a multi-node run before or after it ran."""


class HostUnreachableError(RemoteError):
    pass


class VersionMismatchError(RemoteError):
    pass


class FetchError(RemoteError):
    pass


# --------------------------------------------------------------------------------------------
# ssh


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
            "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={self.connect_timeout_s}",
            "-o", f"ServerAliveInterval={self.server_alive_interval_s}",
            "-o", f"ServerAliveCountMax={self.server_alive_count_max}",
            "-o", f"StrictHostKeyChecking={self.host_key_checking}",
        ]  # fmt: skip
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
) -> str:
    """`cd WORKDIR && exec [timeout] env K=V ... ARGV`, each piece quoted for sh.

    The optional coreutils timeout runs on the node itself, so a node's processes stop even when
    the controlling bench (or the ssh connection to it) has gone away.
    """
    words: list[str] = []
    if timeout_s is not None:
        words += ["timeout", "--kill-after=15", f"{max(1, int(timeout_s))}s"]
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
            argv, 124, _text(err.stdout), _text(err.stderr) + f"\ntimed out after {timeout_s:g}s"
        )


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


_SEPARATOR = re.compile(r"^[\s=\-*]*$")
_ERROR_LINE = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Exit)\b:?\s.*")
_HOROVOD_FIELD = re.compile(r"^(Process name|Exit code):\s*(.+?)\s*$")
_TORCHRUN_FIELD = re.compile(r"^\s*(host|rank|exitcode|traceback)\s*:\s*(.+?)\s*$")


def failure_reason(text: str, limit: int = 400) -> str:
    """The most telling line of a failed launcher's output, for the results table.

    torchrun ends with a root-cause table (host, rank, exitcode, signal) after the traceback,
    horovodrun with the first failed process's name and exit code; ranks print
    "SomethingError: ..." (prefixed "[rank0]:" by torchrun, "[1]<stderr>:" by horovodrun).
    Prefer the last exception line, add the launcher's root cause, else the last line.
    """
    lines = [line.strip() for line in text.splitlines() if not _SEPARATOR.match(line)]
    error = ""
    for line in lines:
        match = _ERROR_LINE.search(line)
        if match and "ChildFailedError" not in line:
            error = match.group(0)
    fields: dict[str, str] = {}
    for line in lines:
        match = _TORCHRUN_FIELD.match(line)
        if match:
            fields[match.group(1)] = match.group(2)
    cause = ""
    if "exitcode" in fields:
        where = " ".join(f"{k} {fields[k]}" for k in ("rank", "host") if k in fields)
        cause = f"{where}: exitcode {fields['exitcode']}".strip(": ")
    horovod = dict(m.groups() for m in map(_HOROVOD_FIELD.match, lines) if m)
    if horovod:
        # horovodrun names the first rank to fail on the lines after its RuntimeError.
        cause = ", ".join(f"{k.lower()} {v}" for k, v in horovod.items())
    reason = "; ".join(part for part in (error, cause) if part) or (lines[-1] if lines else "")
    reason = reason or "(no output)"
    return reason if len(reason) <= limit else reason[: limit - 3] + "..."


def _on_all(hosts: Sequence[str], fn, max_workers: int = 16) -> dict:
    """fn(host) for every host in parallel; results keyed by host, in host order."""
    if not hosts:
        return {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(max_workers, len(hosts))) as pool:
        futures = {host: pool.submit(fn, host) for host in hosts}
        return {host: futures[host].result() for host in hosts}


def check_reachable(hosts: Sequence[str], options: SshOptions, timeout_s: float = 30) -> None:
    """Every host answers a no-op over ssh, or one error lists each host that did not and why."""
    remote = [h for h in hosts if not is_local_host(h)]
    results = _on_all(remote, lambda h: run_on_host(h, "true", options, timeout_s))
    failed = {h: r for h, r in results.items() if r.returncode != 0}
    if not failed:
        return
    lines = [f"  {h}: {_last_line(r.stderr or r.stdout)}" for h, r in failed.items()]
    port = f" -p {options.port}" if options.port else ""
    raise HostUnreachableError(
        f"cannot reach {len(failed)} of {len(hosts)} host(s) over ssh (BatchMode, no prompts):\n"
        + "\n".join(lines)
        + f"\nCheck with: ssh{port} -o BatchMode=yes HOST true. Every node needs key-based ssh "
        "from the invoking node (playbooks/bench.yml sets it up)."
    )


# --------------------------------------------------------------------------------------------
# What each node has: versions, and its network path to the rendezvous host


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def nvidia_driver_version() -> str | None:
    """The loaded kernel module's version (what CUDA will actually talk to), else nvidia-smi's."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
        match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
        if match:
            return match.group(1)
    except OSError:
        pass
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    words = done.stdout.split()
    return words[0] if done.returncode == 0 and words else None


def route_to(target: str) -> tuple[str | None, str | None]:
    """(source address, interface) this node uses to reach target.

    A UDP connect picks the route without sending anything. The interface is the one holding
    that address, so on the target itself it is the real NIC, not lo.
    """
    family, _, _, _, sockaddr = socket.getaddrinfo(target, 9, 0, socket.SOCK_DGRAM)[0]
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect(sockaddr)
        address = s.getsockname()[0]
    if family != socket.AF_INET:
        return address, None
    for _, name in socket.if_nameindex():
        request = struct.pack("256s", name[:15].encode())
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                reply = fcntl.ioctl(s.fileno(), 0x8915, request)  # SIOCGIFADDR
            except OSError:
                continue
        if socket.inet_ntoa(reply[20:24]) == address:
            return address, name
    return address, None


def survey(target: str = "", versions: bool = True) -> dict[str, Any]:
    """This node's facts that must agree across nodes, and its route to the rendezvous host."""
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "cores": len(os.sched_getaffinity(0)),
    }
    if versions:
        info.update(torch=_dist_version("torch"), horovod=_dist_version("horovod"))
        info.update(torch_cuda=None, nccl=None, gpus=0, gpu_name="", gpu_capability=None)
        if info["torch"]:
            try:
                import torch

                info["torch"] = torch.__version__
                info["torch_cuda"] = torch.version.cuda
                if torch.version.cuda:
                    # NCCL's version is compiled into torch's CUDA builds; no GPU needed.
                    info["nccl"] = ".".join(str(p) for p in torch.cuda.nccl.version())
                    info["gpus"] = torch.cuda.device_count()
                    if info["gpus"]:
                        info["gpu_name"] = torch.cuda.get_device_name(0)
                        info["gpu_capability"] = list(torch.cuda.get_device_capability(0))
            except Exception as err:
                info["torch_error"] = f"{type(err).__name__}: {err}"
        info["driver"] = nvidia_driver_version()
        info["driver_branch"] = info["driver"].split(".")[0] if info["driver"] else None
    if target:
        try:
            info["address"], info["interface"] = route_to(target)
        except OSError as err:
            info["route_error"] = f"cannot route to {target}: {err}"
    return info


SURVEY_MARKER = "@@bench-node"

# The components that must agree across nodes before a launch, and their display names.
COMPARED_COMPONENTS: dict[str, str] = {
    "torch": "torch",
    "nccl": "NCCL",
    "horovod": "Horovod",
    "driver_branch": "NVIDIA driver branch",
}


@dataclass(frozen=True)
class NodeInfo:
    """What the survey found on one node."""

    host: str
    hostname: str
    python: str
    torch: str | None = None
    torch_cuda: str | None = None
    nccl: str | None = None
    horovod: str | None = None
    driver: str | None = None
    driver_branch: str | None = None
    gpus: int = 0
    gpu_name: str = ""
    gpu_capability: tuple[int, int] | None = None
    cores: int = 0
    address: str | None = None
    interface: str | None = None
    route_error: str | None = None

    @classmethod
    def from_survey(cls, host: str, data: Mapping[str, Any]) -> NodeInfo:
        known = {f.name for f in dataclasses.fields(cls)} - {"host"}
        fields = {k: v for k, v in data.items() if k in known}
        fields["hostname"] = str(fields.get("hostname") or host)
        fields["python"] = str(fields.get("python") or "")
        fields["gpus"] = int(fields.get("gpus") or 0)
        fields["cores"] = int(fields.get("cores") or 0)
        fields["gpu_name"] = str(fields.get("gpu_name") or "")
        capability = fields.get("gpu_capability")
        fields["gpu_capability"] = tuple(capability) if capability else None
        return cls(host=host, **fields)


def parse_survey_output(host: str, stdout: str) -> NodeInfo:
    for line in stdout.splitlines():
        _, marker, payload = line.partition(SURVEY_MARKER + " ")
        if marker:
            return NodeInfo.from_survey(host, json.loads(payload))
    raise RemoteError(f"{host}: the node survey printed no result:\n{stdout[-2000:]}")


def survey_command(python: str, target: str, workdir: str | None, versions: bool = True) -> str:
    """`python -m bench.remote survey TARGET` from the bench checkout on a node."""
    argv = [python, "-m", "bench.remote", "survey", target]
    if not versions:
        argv.append("--route-only")
    env = {"PYTHONPATH": workdir} if workdir else None
    return shell_command(argv, env, workdir)


def collect_node_info(
    hosts: Sequence[str],
    options: SshOptions,
    python: str,
    *,
    workdir: str | None,
    rendezvous_host: str | None = None,
    timeout_s: float = 120,
) -> dict[str, NodeInfo]:
    """Survey every node at once; a node that cannot run the survey is a RemoteError."""
    command = survey_command(python, rendezvous_host or hosts[0], workdir)
    results = _on_all(hosts, lambda h: run_on_host(h, command, options, timeout_s))
    failed = {h: r for h, r in results.items() if r.returncode != 0}
    if failed:
        lines = [
            f"  {h}: rc={r.returncode}: {_last_line(r.stderr or r.stdout)}"
            for h, r in failed.items()
        ]
        raise RemoteError(
            f"cannot run the bench on {len(failed)} node(s) ({python} -m bench.remote in "
            f"{workdir or 'the login directory'}):\n" + "\n".join(lines)
            + "\nEvery node needs the same Python environment and bench checkout at the same "
            "paths (playbooks/bench.yml puts them there; see --remote-python/--remote-workdir)."
        )  # fmt: skip
    infos = {h: parse_survey_output(h, r.stdout) for h, r in results.items()}
    unrouted = {h: i.route_error for h, i in infos.items() if i.route_error}
    if unrouted:
        raise HostUnreachableError(
            "nodes without a route to the rendezvous host:\n"
            + "\n".join(f"  {h}: {e}" for h, e in unrouted.items())
        )
    return infos


@dataclass(frozen=True)
class Mismatch:
    component: str
    values: dict[str, list[str]]  # shown value -> hosts having it

    def describe(self) -> str:
        groups = "; ".join(f"{value} on {', '.join(hosts)}" for value, hosts in self.values.items())
        return f"{COMPARED_COMPONENTS.get(self.component, self.component)}: {groups}"


def compare_versions(infos: Mapping[str, NodeInfo], components: Iterable[str]) -> list[Mismatch]:
    """Components whose value differs between nodes (a missing one counts as a value), or that
    no node has at all (the run needs every component it is compared on)."""
    mismatches = []
    for component in components:
        values: dict[str, list[str]] = {}
        for host, info in infos.items():
            value = getattr(info, component)
            shown = str(value) if value is not None else "not installed"
            if component == "driver_branch" and value is None:
                shown = "no NVIDIA driver"
            values.setdefault(shown, []).append(host)
        missing_everywhere = all(getattr(i, component) is None for i in infos.values())
        if len(values) > 1 or (infos and missing_everywhere):
            mismatches.append(Mismatch(component, values))
    return mismatches


def check_versions(infos: Mapping[str, NodeInfo], components: Iterable[str]) -> None:
    """Raise VersionMismatchError naming each component and which nodes have which value;
    components_for() says which components a run depends on."""
    mismatches = compare_versions(infos, components)
    if mismatches:
        raise VersionMismatchError(
            "software differs between nodes (or is missing on all of them); refusing to launch "
            "a run whose numbers would mix versions:\n"
            + "\n".join(f"  {m.describe()}" for m in mismatches)
            + "\nRe-run the provisioning playbook (site.yml) on all nodes so they match."
        )  # fmt: skip


def components_for(engine: str, gpu: bool) -> tuple[str, ...]:
    """What must match for a run: torch always, Horovod for Horovod runs, NCCL and the driver
    branch on GPU nodes."""
    components = ["torch"]
    if engine == "horovod":
        components.append("horovod")
    if gpu:
        components += ["nccl", "driver_branch"]
    return tuple(components)


def new_run_id(prefix: str = "gsb") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def socket_ifname_var(gpu: bool) -> str:
    """The variable that pins the collective library to an interface."""
    return "NCCL_SOCKET_IFNAME" if gpu else "GLOO_SOCKET_IFNAME"


# --------------------------------------------------------------------------------------------
# Running, killing, fetching


def kill_script(run_id: str, grace_s: float) -> str:
    """sh: TERM every process of this run on this node, KILL what is left after grace_s.

    Only processes in the same network namespace as the script count: on real nodes that is all
    of them; on test hosts sharing one kernel it keeps one host's cleanup off the others.
    """
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", run_id):
        raise ValueError(f"unsafe run id {run_id!r}")
    rounds = max(1, int(grace_s * 5))
    return f"""
tag={RUN_TAG_VAR}={run_id}
ns=$(readlink /proc/$$/ns/net)
find_run() {{
  for d in /proc/[0-9]*; do
    [ "${{d#/proc/}}" = "$$" ] && continue
    [ "$(readlink "$d/ns/net" 2>/dev/null)" = "$ns" ] || continue
    grep -qzxF "$tag" "$d/environ" 2>/dev/null && echo "${{d#/proc/}}"
  done
}}
pids=$(find_run)
[ -z "$pids" ] && exit 0
kill -TERM $pids 2>/dev/null
i=0
while [ $i -lt {rounds} ]; do
  pids=$(find_run)
  [ -z "$pids" ] && exit 0
  sleep 0.2
  i=$((i + 1))
done
kill -KILL $pids 2>/dev/null
echo "killed after {grace_s:g}s grace: $pids"
"""


def kill_run(
    hosts: Sequence[str], run_id: str, options: SshOptions, grace_s: float = 10
) -> dict[str, subprocess.CompletedProcess[str]]:
    """Stop every process of run_id on each host (a host that is down is reported, not fatal)."""
    script = kill_script(run_id, grace_s)
    return _on_all(hosts, lambda h: run_on_host(h, script, options, grace_s + 60))


@dataclass
class NodeOutcome:
    """How one node's launcher ended."""

    host: str
    returncode: int | None
    log_path: Path
    timed_out: bool = False
    stopped: bool = False  # killed by us because another node failed or the run overran

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.stopped

    def output(self, limit: int = 200_000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-limit:].decode(errors="replace")


@dataclass
class MultiNodeResult:
    run_id: str
    outcomes: list[NodeOutcome]
    wall_s: float
    cleanup: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes)

    @property
    def timed_out(self) -> bool:
        return any(o.timed_out for o in self.outcomes)

    def failure_summary(self) -> str:
        """One line per node that did not finish cleanly: the first node to fail comes first."""
        lines = []
        for o in self.outcomes:
            if o.ok:
                continue
            if o.timed_out:
                what = "timed out"
            elif o.stopped:
                what = "stopped after another node failed"
            else:
                what = f"exited with rc={o.returncode}"
            lines.append(f"{o.host}: {what}: {failure_reason(o.output(50_000))}")
        return "\n".join(lines)


def run_on_nodes(
    commands: Sequence[NodeCommand],
    options: SshOptions,
    *,
    run_id: str,
    timeout_s: float,
    log_dir: Path,
    workdir: str | None = None,
    failure_grace_s: float = 20,
    kill_grace_s: float = 10,
    poll_s: float = 0.2,
) -> MultiNodeResult:
    """Start every node's command at once (in workdir, tagged with run_id) and wait for all.

    When one node fails (its launcher exits non-zero, or its ssh connection drops because the
    node died), the others get failure_grace_s to notice and exit by themselves; then they, and
    everything of the run on every node, are killed. The whole run never exceeds timeout_s plus
    the two graces. Node i's output goes to log_dir/node<i>-<host>.log.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    # The node-side timeout is a backstop should this process die; ours fires first.
    remote_timeout = timeout_s + failure_grace_s + kill_grace_s + 30
    procs: list[tuple[NodeCommand, subprocess.Popen, NodeOutcome]] = []
    try:
        for index, command in enumerate(commands):
            log_path = log_dir / f"node{index}-{command.host}.log"
            with log_path.open("wb") as log:
                env = {RUN_TAG_VAR: run_id, **command.env}
                line = shell_command(command.argv, env, workdir, remote_timeout)
                proc = subprocess.Popen(
                    host_argv(command.host, line, options),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            procs.append((command, proc, NodeOutcome(command.host, None, log_path)))

        deadline = started + timeout_s
        failed_at: float | None = None
        while True:
            now = time.monotonic()
            for _, proc, outcome in procs:
                if outcome.returncode is None and proc.poll() is not None:
                    outcome.returncode = proc.returncode
                    if proc.returncode != 0 and failed_at is None:
                        failed_at = now
            running = [(c, p, o) for c, p, o in procs if o.returncode is None]
            if not running:
                break
            if now >= deadline:
                for _, _, outcome in running:
                    outcome.timed_out = True
                break
            if failed_at is not None and now >= failed_at + failure_grace_s:
                for _, _, outcome in running:
                    outcome.stopped = True
                break
            time.sleep(poll_s)
    finally:
        leftovers = [(c, p, o) for c, p, o in procs if p.poll() is None]
        cleanup: dict[str, str] = {}
        if leftovers or any(o.returncode not in (0, None) for _, _, o in procs):
            # Clean every node of the placement, not only those still attached: a node whose
            # ssh dropped may still run ranks. Include hosts horovodrun reached by itself.
            hosts = list(dict.fromkeys([c.host for c, _, _ in procs] + _extra_hosts(commands)))
            for host, result in kill_run(hosts, run_id, options, kill_grace_s).items():
                if result.returncode != 0:
                    cleanup[host] = f"cleanup failed: {_last_line(result.stderr or result.stdout)}"
                elif result.stdout.strip():
                    cleanup[host] = result.stdout.strip()
        for _, proc, outcome in leftovers:
            _terminate_local(proc, kill_grace_s)
            if outcome.returncode is None:
                outcome.returncode = proc.returncode
    outcomes = [o for _, _, o in procs]
    return MultiNodeResult(run_id, outcomes, time.monotonic() - started, cleanup)


def _extra_hosts(commands: Sequence[NodeCommand]) -> list[str]:
    """Hosts named in a horovodrun -H list: it starts their ranks itself."""
    hosts: list[str] = []
    for command in commands:
        argv = list(command.argv)
        if "-H" in argv and argv.index("-H") + 1 < len(argv):
            hosts += host_names(parse_hosts(argv[argv.index("-H") + 1]))
    return hosts


def _terminate_local(proc: subprocess.Popen, grace_s: float) -> None:
    """Stop a local launcher (an ssh client or a local torchrun) and its process group."""
    for sig, wait_s in ((15, grace_s), (9, 5.0)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue


def remote_run_dir(run_id: str, host: str) -> str:
    """Where host's ranks write their result files for run_id."""
    return f"{REMOTE_SCRATCH}/{run_id}/{host}"


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
            stderr = _text(proc.stderr.read() if proc.stderr else b"")
            reason = _last_line(stderr) if stderr.strip() else str(err)
            raise FetchError(f"{host}: cannot fetch {remote_dir}: {reason}") from None
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise FetchError(f"{host}: fetching {remote_dir} took over {timeout_s:g}s") from None
        if proc.returncode != 0:
            stderr = _text(proc.stderr.read() if proc.stderr else b"")
            raise FetchError(f"{host}: cannot fetch {remote_dir}: {_last_line(stderr)}")
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


# --------------------------------------------------------------------------------------------
# A sweep over --hosts: the executor bench.scaling hands every launch to

# Variables of the sweep's own environment that reach every rank on every node, as they would
# reach local ranks: the collective libraries' settings and the bench's test switches.
FORWARDED_PREFIXES = ("NCCL_", "GLOO_", "HOROVOD_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "UCX_",
                      "BENCH_")  # fmt: skip


def ssh_options_for(cluster: ClusterConfig) -> SshOptions:
    return SshOptions(
        user=cluster.ssh_user,
        port=cluster.ssh_port,
        identity_file=cluster.ssh_identity_file,
        config_file=cluster.ssh_config,
        extra_options=cluster.ssh_options,
    )


class SshCluster:
    """Runs a sweep's launches across --hosts over ssh.

    Before the sweep: every host answers over ssh and runs the bench's Python, and the software
    that must match does (survey). For each launch it supplies what bench.launch cannot know
    from here (each node's address and interface toward the rendezvous host, horovodrun's ssh
    options), runs the commands on their nodes with run_on_nodes, copies each node's per-rank
    logs back, and returns one ExecResult whose output holds every node's output.
    """

    def __init__(self, cluster: ClusterConfig, environ: Mapping[str, str] = os.environ) -> None:
        self.cluster = cluster
        self.ssh = ssh_options_for(cluster)
        self.tools = Tools(
            python=cluster.remote_python,
            horovodrun=str(Path(cluster.remote_python).with_name("horovodrun")),
        )
        self.rdzv_port = cluster.rdzv_port
        self.infos: dict[str, NodeInfo] = {}
        self.gpu = False
        self.forwarded = {k: v for k, v in environ.items() if k.startswith(FORWARDED_PREFIXES)}
        self.session = new_run_id("sweep")
        self.launches = 0

    # ---- before the sweep

    def survey(self, timeout_s: float = 180) -> dict[str, NodeInfo]:
        """Reachability, then every node's versions and route to the first host."""
        names = host_names(self.cluster.placement)
        check_reachable(names, self.ssh)
        self.infos = collect_node_info(
            names, self.ssh, self.cluster.remote_python,
            workdir=self.cluster.remote_workdir, timeout_s=timeout_s,
        )  # fmt: skip
        return self.infos

    def environment(self, local: Environment) -> Environment:
        """What the nodes offer, in the shape validation expects (the smallest node counts)."""
        infos = list(self.infos.values())
        gpus = min(i.gpus for i in infos)
        capability = min((i.gpu_capability or (0, 0)) for i in infos)
        missing = [i.host for i in infos if not i.horovod]
        horovod = (
            HorovodStatus(False, reason=f"Horovod is not installed on {', '.join(missing)}")
            if missing
            else HorovodStatus(True, infos[0].horovod or "", nccl_built=None)
        )
        return dataclasses.replace(
            local,
            device="cuda" if gpus > 0 else "cpu",
            gpu_count=gpus,
            gpu_name=infos[0].gpu_name,
            bf16_supported=capability >= (8, 0),
            tf32_supported=capability >= (8, 0),
            cores=min(i.cores for i in infos) or local.cores,
            horovod=horovod,
        )

    def check(self, launchers: Sequence[str], device: str) -> None:
        """Refuse to launch when the nodes differ in what these launchers depend on."""
        self.gpu = device == "cuda"
        components = dict.fromkeys(c for x in launchers for c in components_for(x, self.gpu))
        check_versions(self.infos, components)

    # ---- what bench.launch adds per launch

    def _interface(self, host: str) -> str | None:
        return self.cluster.network_interface or self.infos[host].interface

    def torchrun_args(self, placement: Placement) -> dict[str, list[str]]:
        """Per node: whether it hosts the c10d store, and the address it advertises (the one
        the other nodes reach it on, rather than whatever its hostname resolves to)."""
        self.launches += 1
        args = {}
        for index, node in enumerate(placement):
            extra = [f"--rdzv-conf=is_host={1 if index == 0 else 0}"]
            address = self.infos[node.host].address
            if address:
                extra.append(f"--local-addr={address}")
            # Each rank's output also goes to a file on its node (fetched after the run);
            # the console copy is what carries rank 0's result back over ssh.
            log_dir = remote_run_dir(f"{self.session}-{self.launches}", node.host)
            args[node.host] = [*extra, f"--log-dir={log_dir}", "--tee=3"]
        return args

    def node_env(self, placement: Placement) -> dict[str, dict[str, str]]:
        """Per node: the interface NCCL/Gloo use, the checkout on the node, forwarded settings."""
        env = {}
        for node in placement:
            values = {**self.forwarded, "PYTHONPATH": self.cluster.remote_workdir}
            interface = self._interface(node.host)
            if interface:
                values.setdefault(socket_ifname_var(self.gpu), interface)
            env[node.host] = values
        return env

    def horovodrun_args(self, placement: Placement) -> list[str]:
        """horovodrun's own ssh to the other nodes: port, key, and the interfaces to use."""
        args: list[str] = []
        if self.ssh.port is not None:
            args += ["-p", str(self.ssh.port)]
        if self.ssh.identity_file:
            args += ["--ssh-identity-file", self.ssh.identity_file]
        interfaces = [i for i in dict.fromkeys(self._interface(n.host) for n in placement) if i]
        if interfaces:
            args += ["--network-interfaces", ",".join(interfaces)]
        return args

    def interfaces_seen(self, placement: Placement) -> dict[str, str]:
        """The interface variable as the ranks got it, for the interconnect column."""
        names = [i for i in dict.fromkeys(self._interface(n.host) for n in placement) if i]
        return {socket_ifname_var(self.gpu): ",".join(names)} if names else {}

    # ---- the executor

    def fetch_rank_logs(self, commands: Sequence[NodeCommand], into: Path) -> list[str]:
        """Copy each node's per-rank log directory (torchrun --log-dir) to into/<host>/ and
        delete it on the node; returns the problems (a dead node cannot hand its logs over)."""
        problems = []
        for command in commands:
            log_dir = next(
                (a.split("=", 1)[1] for a in command.argv if a.startswith("--log-dir=")), None
            )
            if not log_dir:
                continue
            try:
                fetch_dir(command.host, log_dir, into / command.host, self.ssh, timeout_s=120)
            except FetchError as err:
                problems.append(f"rank logs not fetched: {err}")
            remove_remote_dir(command.host, log_dir, self.ssh)
        return problems

    def __call__(
        self, commands: Sequence[NodeCommand], timeout_s: float, log_path: Path
    ) -> ExecResult:
        run_id = new_run_id()
        node_dir = log_path.with_suffix(".nodes")
        result = run_on_nodes(
            commands, self.ssh, run_id=run_id, timeout_s=timeout_s, log_dir=node_dir,
            workdir=self.cluster.remote_workdir,
        )  # fmt: skip
        parts = []
        for command, outcome in zip(commands, result.outcomes, strict=True):
            parts.append(f"$ [{command.host}] {shlex.join(command.argv)}\n{outcome.output()}")
        summary = result.failure_summary()
        if summary:
            parts.append("".join(f"bench: {line}\n" for line in summary.splitlines()))
        parts += [f"bench: cleanup on {h}: {what}\n" for h, what in result.cleanup.items()]
        parts += [f"bench: {problem}\n" for problem in self.fetch_rank_logs(commands, node_dir)]
        output = "".join(parts)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(output)
        if result.timed_out:
            returncode = None
        elif result.ok:
            returncode = 0
        else:
            failed = [o.returncode for o in result.outcomes if o.returncode not in (0, None)]
            returncode = failed[0] if failed else 1
        hosts = [c.host for c in commands] + _extra_hosts(commands)
        environ = self.interfaces_seen(tuple(h for h in self.cluster.placement if h.host in hosts))
        return ExecResult(returncode, result.timed_out, result.wall_s, output, log_path,
                          environ=environ)  # fmt: skip


# --------------------------------------------------------------------------------------------
# Entry points run on the nodes themselves (over ssh, or as Slurm job steps)


def _read_surveys(lines: Iterable[str]) -> dict[str, NodeInfo]:
    """Survey lines as collected by srun (each possibly prefixed by a task label)."""
    infos: dict[str, NodeInfo] = {}
    for line in lines:
        _, marker, payload = line.partition(SURVEY_MARKER + " ")
        if marker:
            data = json.loads(payload)
            host = str(data.get("hostname"))
            infos[host] = NodeInfo.from_survey(host, data)
    return infos


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.remote")
    commands = parser.add_subparsers(dest="command", required=True)
    p_survey = commands.add_parser("survey", help="print this node's versions and route")
    p_survey.add_argument("target", nargs="?", default="", help="the rendezvous host")
    p_survey.add_argument("--route-only", action="store_true", help="skip the versions")
    p_survey.add_argument(
        "--exports", metavar="VAR",
        help="print sh exports instead: VAR (unless set) = the interface to target, and "
        "BENCH_NODE_ADDR = this node's address on it",
    )  # fmt: skip
    p_check = commands.add_parser(
        "check-versions", help="compare survey lines read from stdin; exit 3 on a mismatch"
    )
    p_check.add_argument(
        "--components", default="torch",
        help=f"comma list from {','.join(COMPARED_COMPONENTS)} (see components_for)",
    )  # fmt: skip
    p_check.add_argument("--nodes", type=int, help="fail unless this many nodes answered")
    p_check.add_argument(
        "--print-interfaces", action="store_true",
        help="print the nodes' interfaces to the rendezvous host, comma-separated",
    )  # fmt: skip
    args = parser.parse_args(argv)

    if args.command == "survey":
        info = survey(args.target, versions=not (args.route_only or args.exports))
        if args.exports:
            if not info.get("interface"):
                print(f"bench: {info.get('route_error') or 'no interface found'}", file=sys.stderr)
                return 2
            # A value the user exported already wins over the detected interface.
            default = info["interface"].replace('"', "")
            print(f'export {args.exports}="${{{args.exports}:-{default}}}"')
            print(f"export BENCH_NODE_ADDR={shlex.quote(info['address'])}")
        else:
            print(f"{SURVEY_MARKER} {json.dumps(info)}", flush=True)
        return 0

    infos = _read_surveys(sys.stdin)
    if args.nodes is not None and len(infos) != args.nodes:
        print(f"bench: {len(infos)} of {args.nodes} nodes answered the survey", file=sys.stderr)
        return 3
    try:
        check_versions(infos, [c for c in args.components.split(",") if c])
    except VersionMismatchError as err:
        print(f"bench: {err}", file=sys.stderr)
        return 3
    print(f"bench: {len(infos)} node(s) agree on {args.components}", file=sys.stderr)
    if args.print_interfaces:
        print(",".join(dict.fromkeys(i.interface for i in infos.values() if i.interface)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
