"""The container route (--container IMAGE): a launch's command run inside a Docker image.

Every backend builds its torchrun/horovodrun argv as on the host (bench.launchers.argv), with the
image's interpreter, and `Containers.wrap` turns it into one `docker run` here, once:

- `--rm --pull never`: nothing is pulled during a sweep (bench.image_check checked the image is
  there); `--init` hands the stop policy's signals to the launcher and reaps its ranks;
- `--network host --ipc host`: the ranks see the node's interfaces, ports and /dev/shm as on the
  host (NCCL's shared-memory transport, torchrun's rendezvous); `--ulimit memlock=-1
  --ulimit stack=67108864` as NVIDIA recommends for PyTorch containers (--container-ulimit);
- `--gpus all` on a GPU sweep (CUDA_VISIBLE_DEVICES, when set, still narrows them);
- the bench package mounted read-only and first on PYTHONPATH, a --data directory read-only at
  its own path, scratch directories the launcher writes (torchrun's --log-dir) read-write;
- the rank environment (threads, NCCL_*, ... ) passed by name with -e, so the values are the
  ones the launcher set on the docker CLI;
- `--name` from the launch id, so bench.launchers.stop can stop and remove the container.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bench.launchers import FORWARDED_PREFIXES, RUN_TAG_VAR, Launch
from bench.launchers.argv import NodeCommand, Tools
from bench.paths import bench_pythonpath

BENCH_MOUNT = "/opt/gpustack-bench"  # the bench package appears as BENCH_MOUNT/bench
LABEL = "org.gpustack.bench.launch"  # docker ps --filter label=org.gpustack.bench.launch
# Passed whenever set on the docker CLI (-e NAME), besides what the launcher sets.
PASSED_NAMES = (RUN_TAG_VAR, "CUDA_VISIBLE_DEVICES")


@dataclass(frozen=True)
class Image:
    """What the launchers need of a checked image (bench.image_check finds it)."""

    digest: str  # what docker run starts: repo@sha256:..., or the local image ID
    python: str  # the interpreter inside the image
    horovodrun: str = ""
    pythonpath: str = ""  # the image's own PYTHONPATH, kept after the bench's


def container_name(launch_id: str, unique: str = "") -> str:
    """A Docker container name for a launch: its id, made safe, and a unique suffix."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", launch_id)[:150]
    return f"gsb-{safe}-{unique or uuid.uuid4().hex[:8]}"


def docker_run_argv(
    image: str,
    argv: Sequence[str],
    *,
    name: str,
    passed: Sequence[str] = (),
    values: Mapping[str, str] | None = None,
    gpus: bool = False,
    ulimits: Sequence[str] = (),
    read_only: Mapping[str, str] | None = None,
    writable: Sequence[str] = (),
    label: str = "",
    docker: str = "docker",
) -> list[str]:
    """`docker run` of `argv` in `image` (see the module docstring).

    passed: variables passed by name from the docker CLI's environment; values: set to a value.
    read_only: host path -> path in the container; writable: host paths mounted at their own.
    """
    words = [
        docker,
        "run",
        "--rm",
        "--pull",
        "never",
        "--init",
        "--name",
        name,
        "--network",
        "host",
        "--ipc",
        "host",
    ]
    if label:
        words += ["--label", f"{LABEL}={label}"]
    for limit in ulimits:
        words += ["--ulimit", limit]
    if gpus:
        words += ["--gpus", "all"]
    for source, target in (read_only or {}).items():
        words += ["--volume", f"{source}:{target}:ro"]
    for path in writable:
        words += ["--volume", f"{path}:{path}"]
    for key in passed:
        words += ["--env", key]
    for key, value in (values or {}).items():
        words += ["--env", f"{key}={value}"]
    return [*words, image, *argv]


@dataclass(frozen=True)
class Containers:
    """How a sweep's --container images run: the checked images by digest and the settings
    every container of the sweep gets."""

    images: Mapping[str, Image] = field(default_factory=dict)
    ulimits: tuple[str, ...] = ()
    gpus: bool = False
    docker: str = "docker"

    def image(self, digest: str) -> Image:
        if digest not in self.images:
            raise ValueError(f"image {digest!r} was not checked before the sweep")
        return self.images[digest]

    def tools(self, digest: str) -> Tools:
        """The launchers inside the image."""
        image = self.image(digest)
        return Tools(python=image.python, horovodrun=image.horovodrun or "horovodrun")

    def argv(
        self,
        digest: str,
        argv: Sequence[str],
        *,
        name: str,
        bench_root: str,
        passed: Sequence[str] = (),
        data: str = "",
        writable: Sequence[str] = (),
        label: str = "",
    ) -> list[str]:
        """docker run of `argv` in the image with the bench at `bench_root` (its checkout on
        the node) mounted in and first on PYTHONPATH."""
        image = self.image(digest)
        mounts = {os.path.join(bench_root, "bench"): f"{BENCH_MOUNT}/bench"}
        if data:
            mounts[data] = data
        path = bench_pythonpath(BENCH_MOUNT, image.pythonpath)  # the image's own kept after it
        names = sorted(set(passed) | set(PASSED_NAMES))
        return docker_run_argv(
            digest,
            argv,
            name=name,
            passed=names,
            values={"PYTHONPATH": path},
            gpus=self.gpus,
            ulimits=self.ulimits,
            read_only=mounts,
            writable=writable,
            label=label,
            docker=self.docker,
        )

    def wrap(
        self,
        command: NodeCommand,
        launch: Launch,
        *,
        bench_root: str,
        name: str,
        writable: Sequence[str] = (),
        environ: Mapping[str, str] = os.environ,
    ) -> NodeCommand:
        """`command` (built with `tools(launch.image)`) run in the launch's image. Its variables
        stay on the docker CLI and are passed in by name, with those of `environ` the ranks
        would inherit on the host (FORWARDED_PREFIXES); PYTHONPATH is the container's own."""
        forwarded = [k for k in environ if k.startswith(FORWARDED_PREFIXES)]
        passed = [k for k in [*command.env, *forwarded] if k != "PYTHONPATH"]
        argv = self.argv(
            launch.image,
            command.argv,
            name=name,
            bench_root=bench_root,
            passed=passed,
            data=launch.data,
            writable=writable,
            label=launch.launch_id,
        )
        return NodeCommand(command.host, tuple(argv), command.env, container=name)
