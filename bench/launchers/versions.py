"""Comparing the nodes' software before a multi-node launch: a run whose numbers mix torch,
NCCL, Horovod or driver versions is refused, naming which node has which."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from bench.launcher_kinds import HOROVOD_PACKAGE, TENSORFLOW_PACKAGE, TORCH_PACKAGE, launcher_kind
from bench.launchers import RemoteError
from bench.machine import NodeInfo

# The components that must agree across nodes before a launch, and their display names.
COMPARED_COMPONENTS: dict[str, str] = {
    TORCH_PACKAGE: "torch",
    "nccl": "NCCL",
    HOROVOD_PACKAGE: "Horovod",
    TENSORFLOW_PACKAGE: "TensorFlow",
    "driver_branch": "NVIDIA driver branch",
}


class VersionMismatchError(RemoteError):
    pass


def components_for(launcher: str, gpu: bool) -> tuple[str, ...]:
    """What must match for a run: the packages the launcher imports (torch, Horovod,
    TensorFlow), and NCCL and the driver branch on GPU nodes."""
    components = launcher_kind(launcher).components
    return (*components, "nccl", "driver_branch") if gpu else components


def check_versions(infos: Mapping[str, NodeInfo], components: Iterable[str]) -> None:
    """Raise VersionMismatchError naming each component whose value differs between nodes (a
    missing one counts as a value), or that no node has at all (the run needs every component
    it is compared on), and which nodes have which value; components_for() says which
    components a run depends on."""
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
            groups = "; ".join(f"{v} on {', '.join(hosts)}" for v, hosts in values.items())
            mismatches.append(f"  {COMPARED_COMPONENTS.get(component, component)}: {groups}")
    if mismatches:
        raise VersionMismatchError(
            "software differs between nodes (or is missing on all of them); refusing to launch "
            "a run whose numbers would mix versions:\n"
            + "\n".join(mismatches)
            + "\nRe-run the provisioning playbook (site.yml) on all nodes so they match."
        )
