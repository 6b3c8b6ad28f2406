"""The container route (--container IMAGE): a wrapper around whatever site runs a launch.

This module is the one place that knows what a container is. The rest of the bench asks the
sweep's wrapper (`DockerWrapper`, built by `check.check_images` before
anything launches) for a launch's
wrap (`around`): every backend builds its torchrun/horovodrun argv as on the host
(bench.launchers.argv), with the tools the wrap names, and the wrap turns it into one
`docker run`:

- `--rm --pull never`: nothing is pulled during a sweep (the check found the image there);
  `--init` hands the stop policy's signals to the launcher and reaps its ranks;
- `--network host --ipc host`: the ranks see the node's interfaces, ports and /dev/shm as on the
  host (NCCL's shared-memory transport, torchrun's rendezvous); `--ulimit memlock=-1
  --ulimit stack=67108864` as NVIDIA recommends for PyTorch containers (--container-ulimit);
- `--gpus all` on a GPU sweep (CUDA_VISIBLE_DEVICES, when set, still narrows them);
- the bench package mounted read-only and first on PYTHONPATH, a --data directory read-only at
  its own path, scratch directories the launcher writes (torchrun's --log-dir) read-write;
- the rank environment (threads, NCCL_*, ... ) passed by name with -e, so the values are the
  ones the launcher set on the docker CLI;
- `--name` from the launch id: the command's enclosure (`RunningContainer`) stops and removes
  the container, here or in the node's stop script (stopping the docker CLI alone would leave
  the container and its ranks running).
"""

from __future__ import annotations

import dataclasses
import os
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.launchers import FORWARDED_PREFIXES, RUN_TAG_VAR, Launch
from bench.launchers.argv import NodeCommand, Tools
from bench.launchers.sites import run_here
from bench.launchers.stop import STOP, StopPolicy
from bench.paths import bench_pythonpath
from bench.spec import RunSpec

BENCH_MOUNT = "/opt/gpurig-bench"  # the bench package appears as BENCH_MOUNT/bench
LABEL = "org.gpurig.bench.launch"  # docker ps --filter label=org.gpurig.bench.launch
# Passed whenever set on the docker CLI (-e NAME), besides what the launcher sets.
PASSED_NAMES = (RUN_TAG_VAR, "CUDA_VISIBLE_DEVICES")


def container_name(launch_id: str, unique: str = "") -> str:
    """A Docker container name for a launch: its id, made safe, and a unique suffix."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", launch_id)[:150]
    return f"gsb-{safe}-{unique or uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------- stopping a launch's container


def stop_container(name: str, policy: StopPolicy = STOP, docker: str = "docker") -> None:
    """Stop a launch's container: the first signal (its init hands it to torchrun/horovodrun,
    which stop their ranks), up to the grace period for it to exit (`docker wait`), then the
    last signal and `docker rm --force`, so no container outlives its launch (docker run --rm
    removes it only when it exits; killing the docker CLI does not stop it)."""
    first, last = policy.signal_names()
    run_here([docker, "kill", f"--signal={first}", name], 60)  # a failure is seen below
    if run_here([docker, "wait", name], policy.grace_s).returncode != 0:  # still running
        run_here([docker, "kill", f"--signal={last}", name], 60)
    run_here([docker, "rm", "--force", name], 60)


@dataclass(frozen=True)
class RunningContainer:
    """The container a wrapped command starts (bench.launchers.argv.Enclosure)."""

    name: str
    docker: str = "docker"

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.name):
            raise ValueError(f"unsafe container name {self.name!r}")

    def stop(self, policy: StopPolicy) -> None:
        stop_container(self.name, policy, self.docker)

    def stop_lines(self, policy: StopPolicy) -> str:
        """Signalled first (its ranks carry the launch's tag as well and share the node's
        network namespace), removed by force when the node's stop script ends."""
        first, _ = policy.signal_names()
        return (
            f"trap 'docker rm --force {self.name} >/dev/null 2>&1' EXIT\n"
            f"docker kill --signal={first} {self.name} >/dev/null 2>&1\n"
        )


# ---------------------------------------------------------------- the checked images


@dataclass(frozen=True)
class CheckedImage:
    """One --container image as the sweep found it."""

    reference: str  # as given to --container
    image_id: str  # the local image ID (sha256:...), the same on every node
    digest: str  # repo@sha256:... when pulled from a registry, else image_id: what runs
    python: str  # the interpreter inside the image
    horovodrun: str = ""
    pythonpath: str = ""  # the image's own PYTHONPATH, kept after the bench's
    facts: Mapping[str, Any] = field(default_factory=dict)  # the survey inside the image
    unavailable: Mapping[str, str] = field(default_factory=dict)  # launcher -> why not here

    def system(self) -> dict[str, Any]:
        """The image's entry in sweep.jsonl's system record."""
        keep = ("python", "torch", "torch_cuda", "nccl", "horovod", "gpus", "gpu_name")
        return {
            "image_id": self.image_id,
            "digest": self.digest,
            "executable": self.python,
            **{k: self.facts.get(k) for k in keep},
            "unavailable": dict(self.unavailable),
        }


@dataclass(frozen=True)
class DockerWrapper:
    """A sweep's checked --container images (by the name given) and the settings every container
    of the sweep gets: what wraps each launch, pins each run and records the images."""

    checked: Mapping[str, CheckedImage] = field(default_factory=dict)
    ulimits: tuple[str, ...] = ()
    gpus: bool = False
    docker: str = "docker"

    def image(self, digest: str) -> CheckedImage:
        for image in self.checked.values():
            if image.digest == digest:
                return image
        raise ValueError(f"image {digest!r} was not checked before the sweep")

    def argv(
        self,
        image: CheckedImage,
        argv: Sequence[str],
        *,
        name: str,
        bench_root: str,
        passed: Sequence[str] = (),
        data: str = "",
        writable: Sequence[str] = (),
        label: str = "",
    ) -> list[str]:
        """`docker run` of `argv` in the image (see the module docstring), the bench at
        `bench_root` (its checkout on the node) mounted in and first on PYTHONPATH; passed:
        variables passed by name from the docker CLI's environment; writable: host paths
        mounted at their own."""
        words = [self.docker, "run", "--rm", "--pull", "never", "--init", "--name", name]
        words += ["--network", "host", "--ipc", "host"]
        words += ["--label", f"{LABEL}={label}"] if label else []
        words += [w for limit in self.ulimits for w in ("--ulimit", limit)]
        words += ["--gpus", "all"] if self.gpus else []
        words += ["--volume", f"{os.path.join(bench_root, 'bench')}:{BENCH_MOUNT}/bench:ro"]
        words += ["--volume", f"{data}:{data}:ro"] if data else []
        words += [w for path in writable for w in ("--volume", f"{path}:{path}")]
        words += [w for key in sorted({*passed, *PASSED_NAMES}) for w in ("--env", key)]
        path = bench_pythonpath(BENCH_MOUNT, image.pythonpath)  # the image's own kept after it
        return [*words, "--env", f"PYTHONPATH={path}", image.digest, *argv]

    def around(self, launch: Launch, across_nodes: bool = False) -> InImage | Unwrapped:
        """The launch's wrap: as built on the host, or in its pinned image; across_nodes: its
        nodes are reached through a site."""
        if not launch.image:
            return BARE
        if across_nodes and launch.kind.ssh_to_other_nodes:  # `check` refuses it first
            raise ValueError(f"{launch.kind.title} across nodes in containers needs sshd in them")
        return InImage(self, self.image(launch.image), launch)

    def pin(self, runs: Sequence[RunSpec]) -> list[RunSpec]:
        """Each run in an image gets that image's digest: what it starts and its row records."""
        return [
            dataclasses.replace(s, container_digest=self.checked[s.variant.container].digest)
            if s.variant.container in self.checked
            else s
            for s in runs
        ]

    def unavailable(self, spec: RunSpec, on_host: Mapping[str, str]) -> str:
        """Why the run's launcher cannot run where the run runs: its image, or the host."""
        image = self.checked.get(spec.variant.container)
        return (image.unavailable if image else on_host).get(spec.launcher, "")

    def record(self, system: dict[str, Any]) -> None:
        """The images in sweep.jsonl's system record."""
        if self.checked:
            system["containers"] = {r: i.system() for r, i in self.checked.items()}

    def notes(self) -> list[str]:
        """What the sweep says before it starts: launchers unavailable in an image."""
        return [
            f"{launcher} unavailable in {image.reference}, its runs are recorded as such: {why}"
            for image in self.checked.values()
            for launcher, why in image.unavailable.items()
        ]


class Unwrapped:
    """A launch's commands as built, on the host."""

    def tools(self, tools: Tools) -> Tools:
        return tools

    def command(self, command: NodeCommand, **_: object) -> NodeCommand:
        return command


BARE = Unwrapped()


@dataclass(frozen=True)
class InImage:
    """One launch in its image: the launchers as the image has them (`tools`), and a command
    built with them run in it (`command`)."""

    wrapper: DockerWrapper
    image: CheckedImage
    launch: Launch

    def tools(self, tools: Tools) -> Tools:
        """The launchers inside the image."""
        return Tools(python=self.image.python, horovodrun=self.image.horovodrun or "horovodrun")

    def command(
        self,
        command: NodeCommand,
        *,
        bench_root: str,
        unique: str = "",
        writable: Sequence[str] = (),
        environ: Mapping[str, str] = os.environ,
    ) -> NodeCommand:
        """`command` run in the launch's image; bench_root: the bench checkout there, writable:
        host paths the command writes. Its variables stay on the docker CLI and are passed in by
        name, with those of `environ` the ranks would inherit on the host
        (FORWARDED_PREFIXES); PYTHONPATH is the container's own."""
        forwarded = [k for k in environ if k.startswith(FORWARDED_PREFIXES)]
        passed = [k for k in [*command.env, *forwarded] if k != "PYTHONPATH"]
        name = container_name(self.launch.launch_id, unique)
        argv = self.wrapper.argv(
            self.image,
            command.argv,
            name=name,
            bench_root=bench_root,
            passed=passed,
            data=self.launch.data,
            writable=writable,
            label=self.launch.launch_id,
        )
        enclosure = RunningContainer(name, self.wrapper.docker)
        return NodeCommand(command.host, tuple(argv), command.env, enclosure)
