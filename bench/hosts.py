"""Which hosts a run uses and how many ranks each one starts: parsing and node-count sweeps.

A placement (bench.spec.Placement: a tuple of HostSlots) is the ordered hosts of one run with
their slots (ranks, normally GPUs). The first host is where the rendezvous lives (torchrun's c10d
endpoint, horovodrun itself). Hosts come from `--hosts node1:8,node2:8` or from a hostfile in
the formats MPI and Horovod use:

    # comments and blank lines are ignored
    node1 slots=8          # Open MPI / horovodrun --hostfile
    node2 slots=8 max_slots=8
    node3:8                # horovodrun -H style
    node4                  # slots default to the --gpus-per-node given, else 1

IPv6 addresses go in brackets when a slot count follows: `[fd00::5]:8`.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import re
import shlex
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.argtypes import int_list
from bench.spec import LOCAL_HOST, HostSlots, Placement

# Hostnames (RFC 1123 labels, underscores tolerated as many fleets use them) and IPv4/IPv6
# addresses. Nothing here may reach a shell unquoted, but a strict check turns a typo such as
# "node1;8" into a clear error instead of an ssh failure later.
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})(\.[A-Za-z0-9_-]{1,63})*$")
_SLOTS_FIELD = re.compile(r"^(slots|max_slots|max-slots)=(\S*)$")


class HostSpecError(ValueError):
    """A host list or hostfile that cannot be understood."""


def default_rank_counts(max_ranks: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to `max_ranks`, ending with `max_ranks` itself if it is not a power of 2."""
    if max_ranks < 1:
        raise ValueError(f"need at least one rank, got {max_ranks}")
    counts = []
    n = 1
    while n <= max_ranks:
        counts.append(n)
        n *= 2
    if counts[-1] != max_ranks:
        counts.append(max_ranks)
    return tuple(counts)


def check_placement(placement: Sequence[HostSlots]) -> Placement:
    """A usable placement: at least one host, each once, each with at least one slot."""
    if not placement:
        raise HostSpecError("a placement needs at least one host")
    seen: set[str] = set()
    for entry in placement:
        validate_host_name(entry.host)
        if entry.slots < 1:
            raise HostSpecError(f"host {entry.host!r}: slots must be >= 1, got {entry.slots}")
        if entry.host in seen:
            raise HostSpecError(f"host {entry.host!r} is listed twice")
        seen.add(entry.host)
    return tuple(placement)


def host_names(placement: Sequence[HostSlots]) -> list[str]:
    return [h.host for h in placement]


def validate_host_name(name: str) -> str:
    if not name:
        raise HostSpecError("empty host name")
    try:
        ipaddress.ip_address(name)
        return name
    except ValueError:
        pass
    if not _HOSTNAME.match(name):
        raise HostSpecError(
            f"invalid host name {name!r}: use a hostname or IP address "
            "(letters, digits, '-', '_', '.'); the ssh user goes in --ssh-user, not user@host"
        )
    return name


def _parse_slots(text: str, where: str) -> int:
    try:
        slots = int(text)
    except ValueError:
        raise HostSpecError(f"{where}: slot count {text!r} is not an integer") from None
    if slots < 1:
        raise HostSpecError(f"{where}: slot count must be >= 1, got {slots}")
    return slots


def _split_token(token: str, where: str) -> tuple[str, str | None]:
    """`name`, `name:N`, `[v6addr]` or `[v6addr]:N` -> (name, slot text or None)."""
    if token.startswith("["):
        close = token.find("]")
        if close < 0:
            raise HostSpecError(f"{where}: unclosed '[' in {token!r}")
        name, rest = token[1:close], token[close + 1 :]
        if rest and not rest.startswith(":"):
            raise HostSpecError(f"{where}: expected ':SLOTS' after ']' in {token!r}")
        return name, (rest[1:] if rest else None)
    if token.count(":") == 1:
        name, slots_text = token.split(":")
        return name, slots_text
    # A bare name, or a bare IPv6 address (which cannot carry a slot count without brackets).
    return token, None


def parse_host_token(token: str, default_slots: int | None = None, where: str = "") -> HostSlots:
    """One `name`, `name:N`, `[v6addr]` or `[v6addr]:N`; slots default to default_slots or 1."""
    token = token.strip()
    where = where or repr(token)
    name, slots_text = _split_token(token, where)
    if slots_text is None:
        slots = default_slots if default_slots is not None else 1
    else:
        slots = _parse_slots(slots_text, where)
    try:
        return HostSlots(validate_host_name(name), slots)
    except HostSpecError as err:
        raise HostSpecError(f"{where}: {err}") from None


def parse_hosts(text: str, default_slots: int | None = None) -> Placement:
    """`--hosts node1:8,node2:8`: comma-separated entries, each named when it is malformed."""
    tokens = [t.strip() for t in text.split(",")]
    if not any(tokens):
        raise HostSpecError("--hosts is empty")
    if not all(tokens):
        raise HostSpecError(f"--hosts {text!r}: an empty entry between commas")
    return check_placement(
        [parse_host_token(t, default_slots, where=f"--hosts entry {t!r}") for t in tokens]
    )


def parse_hostfile_text(
    text: str, default_slots: int | None = None, source: str = "hostfile"
) -> Placement:
    """Hostfile lines `host slots=N [max_slots=M]`, `host:N` or `host`; `#` starts a comment."""
    hosts: list[HostSlots] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{source}:{number}"
        first, *fields = line.split()
        slots: int | None = None
        for field in fields:
            match = _SLOTS_FIELD.match(field)
            if not match:
                raise HostSpecError(
                    f"{where}: unexpected {field!r}; expected 'host slots=N' or 'host:N'"
                )
            if match.group(1) == "slots":
                slots = _parse_slots(match.group(2), where)
            # max_slots only caps oversubscription in MPI; the bench never oversubscribes.
        if slots is not None and _split_token(first, where)[1] is not None:
            raise HostSpecError(f"{where}: give the slot count once ('host:N' or 'slots=N')")
        host = parse_host_token(first, default_slots if slots is None else slots, where=where)
        hosts.append(host)
    if not hosts:
        raise HostSpecError(f"{source}: no hosts listed")
    return check_placement(hosts)


def parse_hostfile(path: str | Path, default_slots: int | None = None) -> Placement:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise HostSpecError(f"cannot read hostfile {path}: {err.strerror}") from None
    return parse_hostfile_text(text, default_slots, source=str(path))


def plan_node_sweep(
    placement: Sequence[HostSlots],
    node_counts: Sequence[int] | None = None,
    gpus_per_node: Sequence[int] | None = None,
) -> list[Placement]:
    """Placements for a sweep over node counts x ranks per node: 1 node at 1, 2, ... ranks per
    node, then 2 nodes, and so on.

    Node count k takes the first k hosts, so every run includes the rendezvous host. Defaults:
    node counts 1, 2, 4, ... up to all hosts; ranks per node 1, 2, 4, ... up to what every host
    has. A count the hosts cannot supply is an error, not silently dropped.
    """
    placement = check_placement(placement)
    smallest = min(h.slots for h in placement)
    nodes_list = sorted(set(node_counts)) if node_counts else default_rank_counts(len(placement))
    gpus_list = sorted(set(gpus_per_node)) if gpus_per_node else default_rank_counts(smallest)
    for k in nodes_list:
        if not 1 <= k <= len(placement):
            raise HostSpecError(f"node count {k} is outside 1..{len(placement)} (hosts given)")
    plans: list[Placement] = []
    for k in nodes_list:
        chosen = placement[:k]
        for g in gpus_list:
            short = [str(h) for h in chosen if h.slots < g]
            if g < 1:
                raise HostSpecError(f"ranks per node must be >= 1, got {g}")
            if short:
                raise HostSpecError(
                    f"{g} ranks per node requested but these hosts have fewer slots: "
                    + ", ".join(short)
                )
            plans.append(tuple(HostSlots(h.host, g) for h in chosen))
    return plans


def local_names() -> set[str]:
    """Names and addresses by which this machine refers to itself."""
    names = {LOCAL_HOST, "127.0.0.1", "::1", "localhost.localdomain"}
    for name in (socket.gethostname(), socket.getfqdn()):
        if name:
            names.add(name)
            names.add(name.split(".", 1)[0])
    names.update(local_addresses())
    return names


def local_addresses() -> set[str]:
    """IPv4 addresses of this machine's interfaces (from /proc/net/fib_trie's local entries)."""
    addresses: set[str] = set()
    try:
        lines = Path("/proc/net/fib_trie").read_text().splitlines()
    except OSError:
        return addresses
    previous = ""
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("/32 host LOCAL") and previous.startswith("|-- "):
            addresses.add(previous[4:].strip())
        previous = stripped
    return addresses


def is_local_host(name: str) -> bool:
    return name in local_names()


# --------------------------------------------------------------------------------------------
# The multi-node part of a sweep's configuration (saved in sweep.json with the rest)


@dataclass(frozen=True)
class ClusterConfig:
    """Where a multi-node sweep runs and how the bench reaches the nodes.

    Either hosts (reached over ssh) or slurm (nodes allocated per configuration by Slurm). Plain
    data, so it round-trips through sweep.json for --resume; bench.launchers.ssh and .slurm turn
    it into ssh and Slurm options.
    """

    hosts: tuple[tuple[str, int], ...]
    node_counts: tuple[int, ...]
    gpus_per_node: tuple[int, ...]
    slurm: bool = False
    ssh_user: str | None = None
    ssh_port: int | None = None
    ssh_identity_file: str | None = None
    ssh_config: str | None = None
    ssh_options: tuple[str, ...] = ()
    network_interface: str | None = None
    remote_python: str = ""
    remote_workdir: str = ""
    rdzv_port: int = 29400
    slurm_partition: str | None = None
    slurm_account: str | None = None
    slurm_args: tuple[str, ...] = ()
    slurm_submit: str = "sbatch"

    @property
    def placement(self) -> Placement:
        return tuple(HostSlots(h, s) for h, s in self.hosts)

    def placements(self) -> list[Placement]:
        """Every configuration's placement: the node-count x ranks-per-node grid. Slurm picks
        the nodes when the job starts, so there the hosts are stand-ins, slurm-node1, ..."""
        if self.slurm:
            return [
                tuple(HostSlots(f"{SLURM_NODE_PREFIX}{i + 1}", g) for i in range(k))
                for k in self.node_counts
                for g in self.gpus_per_node
            ]
        return plan_node_sweep(self.placement, self.node_counts, self.gpus_per_node)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterConfig:
        fields = dict(data)
        fields["hosts"] = tuple((str(h), int(s)) for h, s in fields["hosts"])
        for name in ("node_counts", "gpus_per_node", "ssh_options", "slurm_args"):
            fields[name] = tuple(fields[name])
        return cls(**fields)


SLURM_NODE_PREFIX = "slurm-node"


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """The multi-node options of python -m bench.scaling."""
    group = parser.add_argument_group(
        "multi-node",
        "Sweep node counts as well as GPUs per node: torchrun on every node with a c10d "
        "rendezvous on the first (started over ssh), horovodrun -H from the first node, or one "
        "Slurm job per configuration with --slurm.",
    )
    add = group.add_argument
    where = group.add_mutually_exclusive_group()
    where.add_argument(
        "--hosts",
        help="nodes and their GPUs (ranks), e.g. node1:8,node2:8 (default: this machine only)",
    )
    where.add_argument("--hostfile", type=Path,
                       help="MPI/Horovod hostfile: 'node1 slots=8' or 'node1:8' lines "
                       "(default: none)")  # fmt: skip
    where.add_argument("--slurm", action="store_true",
                       help="one Slurm job per configuration (default: no Slurm)")  # fmt: skip
    add(
        "--nodes",
        dest="node_counts",
        type=int_list,
        help="node counts to sweep, required with --slurm (default: 1,2,4,... up to all hosts)",
    )
    add(
        "--gpus-per-node",
        dest="gpus_per_node",
        type=int_list,
        help="ranks per node to sweep (default: 1,2,4,... up to the smallest host's slots; "
        "1 with --slurm)",
    )
    _add_ssh_options(add)
    _add_slurm_options(add)


def _add_ssh_options(add: Any) -> None:
    """How the nodes of --hosts/--hostfile are reached (and Slurm jobs' horovodrun reaches
    the other nodes)."""
    add("--ssh-user", help="ssh user on the nodes (default: yours, or ~/.ssh/config's)")
    add("--ssh-port", type=int, help="sshd port of every node (default: 22 or ~/.ssh/config's)")
    add(
        "--ssh-identity-file",
        help="private key for ssh to the nodes, also given to horovodrun "
        "(default: ssh's own choice)",
    )
    add("--ssh-config", help="ssh client config file, ssh -F (default: ~/.ssh/config)")
    add(
        "--ssh-option",
        dest="ssh_options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra ssh -o option, repeatable, e.g. UserKnownHostsFile=/path (default: none)",
    )
    add(
        "--network-interface",
        help="interface for NCCL/Gloo traffic on every node (default: the one routing to the "
        "first node, found on each node)",
    )
    add("--remote-python", help="Python on the nodes (default: this interpreter's path)")
    add("--remote-workdir", help="bench checkout on the nodes (default: this checkout's path)")
    add(
        "--rdzv-port",
        type=int,
        default=29400,
        help="c10d rendezvous port on the first node (default: 29400)",
    )


def _add_slurm_options(add: Any) -> None:
    add("--slurm-partition", help="partition the jobs go to (default: Slurm's)")
    add("--slurm-account", help="account charged for the jobs (default: Slurm's)")
    add(
        "--slurm-args",
        default="",
        help="more sbatch options, e.g. '--qos=bench --exclusive' (default: none)",
    )
    add("--slurm-submit", choices=("sbatch", "salloc"), default="sbatch",
        help="sbatch --wait (batch) or salloc (interactive) (default: sbatch)")  # fmt: skip


def cluster_from_args(args: argparse.Namespace, python: str, workdir: str) -> ClusterConfig | None:
    """The ClusterConfig the options describe, None for a single-node sweep.

    Raises HostSpecError for a host list, hostfile or grid that cannot work.
    """
    if not (args.hosts or args.hostfile or args.slurm):
        options = {"node_counts": "--nodes", "gpus_per_node": "--gpus-per-node"}
        given = [flag for dest, flag in options.items() if getattr(args, dest)]
        if given:
            raise HostSpecError(f"{', '.join(given)} need --hosts, --hostfile or --slurm")
        return None
    if args.slurm:
        if not args.node_counts:
            raise HostSpecError("--slurm needs --nodes (the node counts to sweep, e.g. 1,2)")
        hosts: Placement = ()
        node_counts = tuple(sorted(set(args.node_counts)))
        gpus = tuple(sorted(set(args.gpus_per_node or (1,))))
        if min(node_counts) < 1 or min(gpus) < 1:
            raise HostSpecError("--nodes and --gpus-per-node must be >= 1")
    else:
        hosts = parse_hostfile(args.hostfile) if args.hostfile else parse_hosts(args.hosts)
        plans = plan_node_sweep(hosts, args.node_counts, args.gpus_per_node)
        node_counts = tuple(sorted({len(p) for p in plans}))
        gpus = tuple(sorted({p[0].slots for p in plans}))
    for option in args.ssh_options:
        if "=" not in option:
            raise HostSpecError(f"--ssh-option {option!r}: expected KEY=VALUE")
    return ClusterConfig(
        hosts=tuple((h.host, h.slots) for h in hosts),
        node_counts=node_counts,
        gpus_per_node=gpus,
        slurm=bool(args.slurm),
        ssh_user=args.ssh_user,
        ssh_port=args.ssh_port,
        ssh_identity_file=args.ssh_identity_file,
        ssh_config=args.ssh_config,
        ssh_options=tuple(args.ssh_options),
        network_interface=args.network_interface,
        remote_python=args.remote_python or python,
        remote_workdir=args.remote_workdir or workdir,
        rdzv_port=args.rdzv_port,
        slurm_partition=args.slurm_partition,
        slurm_account=args.slurm_account,
        slurm_args=tuple(shlex.split(args.slurm_args)),
        slurm_submit=args.slurm_submit,
    )
