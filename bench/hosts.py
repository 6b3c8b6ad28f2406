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
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from bench.spec import LOCAL_HOST, HostSlots, Placement, knob, knobs

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
    return tuple(sorted({2**i for i in range(max_ranks.bit_length())} | {max_ranks}))


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
        name, close, rest = token[1:].partition("]")
        if not close:
            raise HostSpecError(f"{where}: unclosed '[' in {token!r}")
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
    has. A count the hosts cannot supply is an error, not silently dropped; counts below 1 are
    bench.admission's to refuse.
    """
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
            if short:
                raise HostSpecError(
                    f"{g} ranks per node requested but these hosts have fewer slots: "
                    + ", ".join(short)
                )
            plans.append(tuple(HostSlots(h.host, g) for h in chosen))
    return plans


def local_addresses() -> set[str]:
    """The IPv4 and IPv6 addresses of this machine's interfaces."""
    families = (socket.AF_INET, socket.AF_INET6)
    interfaces = psutil.net_if_addrs().values()
    return {a.address for addrs in interfaces for a in addrs if a.family in families}


def is_local_host(name: str) -> bool:
    """Whether `name` is one of the names and addresses by which this machine refers to itself."""
    names = {LOCAL_HOST, "127.0.0.1", "::1", "localhost.localdomain", *local_addresses()}
    for own in (socket.gethostname(), socket.getfqdn()):
        if own:
            names |= {own, own.split(".", 1)[0]}
    return name in names


# --------------------------------------------------------------------------------------------
# The multi-node part of a sweep's configuration (saved in sweep.jsonl with the rest)


def _ssh_option(text: str) -> str:
    """One --ssh-option: an ssh -o KEY=VALUE."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return text


@dataclass(frozen=True, kw_only=True)
class ClusterConfig:
    """Where a multi-node sweep runs and how the bench reaches the nodes: the multi-node options
    of python -m bench.scaling, each declared here as a knob (bench.options makes the parser's
    multi-node group from them; `cluster_from_options` resolves what was typed into this).

    Either hosts (reached over ssh) or slurm (the nodes of the Slurm allocation the sweep runs
    in, reached with srun). Plain data, so it round-trips through sweep.jsonl for --resume;
    bench.launchers.sites turns it into the site that reaches the nodes.
    """

    # --hosts text (or --hostfile's lines) -> the hosts and their slots
    hosts: tuple[tuple[str, int], ...] = knob(
        "--hosts",
        "nodes and their GPUs (ranks), e.g. node1:8,node2:8",
        words="this machine only",
        exclusive="where",
    )
    hostfile: str | None = knob(
        "--hostfile",
        "MPI/Horovod hostfile: 'node1 slots=8' or 'node1:8' lines",
        words="none",
        exclusive="where",
        optional=True,
    )
    slurm: bool = knob(
        "--slurm",
        "run inside a Slurm allocation (sbatch or salloc): each configuration on its first "
        "--nodes nodes, one srun step per node",
        default=False,
        switch=True,
        words="no Slurm",
        exclusive="where",
        optional=True,
    )
    node_counts: tuple[int, ...] = knob(
        "--nodes",
        "node counts to sweep, required with --slurm",
        parse=int,
        many=True,
        at_least=1,
        words="1,2,4,... up to all hosts",
    )
    gpus_per_node: tuple[int, ...] = knob(
        "--gpus-per-node",
        "ranks per node to sweep",
        parse=int,
        many=True,
        at_least=1,
        words="1,2,4,... up to the smallest host's slots; 1 with --slurm",
    )
    # How the nodes of --hosts/--hostfile are reached (and horovodrun reaches the other nodes,
    # under --slurm too).
    ssh_user: str | None = knob(
        "--ssh-user", "ssh user on the nodes", words="yours, or ~/.ssh/config's", optional=True
    )
    ssh_port: int | None = knob(
        "--ssh-port",
        "sshd port of every node",
        parse=int,
        words="22 or ~/.ssh/config's",
        optional=True,
    )
    ssh_identity_file: str | None = knob(
        "--ssh-identity-file",
        "private key for ssh to the nodes, also given to horovodrun",
        words="ssh's own choice",
        optional=True,
    )
    ssh_config: str | None = knob(
        "--ssh-config", "ssh client config file, ssh -F", words="~/.ssh/config", optional=True
    )
    ssh_options: tuple[str, ...] = knob(
        "--ssh-option",
        "extra ssh -o KEY=VALUE option, repeatable, e.g. UserKnownHostsFile=/path",
        parse=_ssh_option,
        repeat=True,
        default=(),
        words="none",
        optional=True,
    )
    network_interface: str | None = knob(
        "--network-interface",
        "interface for NCCL/Gloo traffic on every node",
        words="the one routing to the first node, found on each node",
        optional=True,
    )
    remote_python: str = knob(
        "--remote-python",
        "Python on the nodes",
        default="",
        words="this interpreter's path",
        optional=True,
    )
    remote_workdir: str = knob(
        "--remote-workdir",
        "bench checkout on the nodes",
        default="",
        words="this checkout's path",
        optional=True,
    )
    rdzv_port: int = knob(
        "--rdzv-port",
        "c10d rendezvous port on the first node",
        parse=int,
        default=29400,
        optional=True,
    )

    @property
    def placement(self) -> Placement:
        return tuple(HostSlots(h, s) for h, s in self.hosts)

    def placements(self) -> list[Placement]:
        """Every configuration's placement: the node-count x ranks-per-node grid. Under Slurm
        the hosts are stand-ins, slurm-node1, ...: the first nodes of whichever allocation runs
        the launch (bench.launchers.cluster)."""
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
        for name in ("node_counts", "gpus_per_node", "ssh_options"):
            fields[name] = tuple(fields[name])
        return cls(**fields)


SLURM_NODE_PREFIX = "slurm-node"


def cluster_from_options(
    typed: Mapping[str, Any], python: str, workdir: str
) -> ClusterConfig | None:
    """The ClusterConfig the multi-node options describe (field name -> the parsed value, None
    where not given), None for a single-node sweep. The nodes run `python` in `workdir` unless
    --remote-python/--remote-workdir say otherwise.

    Raises HostSpecError for a host list, hostfile or grid that cannot work.
    """
    declared = dict(knobs(ClusterConfig))
    given = {n: k.default if typed.get(n) is None else typed[n] for n, k in declared.items()}
    if not (given["hosts"] or given["hostfile"] or given["slurm"]):
        # Every other multi-node option, given on a sweep of this machine alone, would be ignored.
        unused = [
            k.flag
            for n, k in declared.items()
            if n not in ("hosts", "hostfile", "slurm") and typed.get(n) is not None
        ]
        if unused:
            raise HostSpecError(
                f"{', '.join(unused)} {'apply' if len(unused) > 1 else 'applies'} to a multi-node "
                "sweep only: give --hosts, --hostfile or --slurm, or leave it out"
            )
        return None
    if given["slurm"]:
        if not given["node_counts"]:
            raise HostSpecError("--slurm needs --nodes (the node counts to sweep, e.g. 1,2)")
        hosts: Placement = ()
        node_counts = tuple(sorted(set(given["node_counts"])))
        gpus = tuple(sorted(set(given["gpus_per_node"] or (1,))))
    else:
        hostfile = given["hostfile"]
        # A host given without a slot count has as many as the most --gpus-per-node asks for.
        bare = max(given["gpus_per_node"]) if given["gpus_per_node"] else None
        hosts = parse_hostfile(hostfile, bare) if hostfile else parse_hosts(given["hosts"], bare)
        plans = plan_node_sweep(hosts, given["node_counts"], given["gpus_per_node"])
        node_counts = tuple(sorted({len(p) for p in plans}))
        gpus = tuple(sorted({p[0].slots for p in plans}))
    return ClusterConfig(
        **{
            **given,
            "hosts": tuple((h.host, h.slots) for h in hosts),
            "node_counts": node_counts,
            "gpus_per_node": gpus,
            "ssh_options": tuple(given["ssh_options"]),  # --ssh-option repeated: a list
            "remote_python": given["remote_python"] or python,
            "remote_workdir": given["remote_workdir"] or workdir,
        }
    )
