"""The check of every --container image before a sweep: the sweep's wrapper comes out of it.

The check, for each image, on every machine that runs it (this one, or each --hosts
node, through the sweep's site): the docker CLI is there and its daemon answers; the image is
present locally (a sweep never pulls: a pull would need credentials, take minutes and could
change the image between repeats); all nodes hold the same image. Then the node survey
(bench.machine) runs inside the image, started exactly as the launches start it, and must find
torch, see the GPUs on a GPU sweep, and Horovod where that launcher runs in the image. Every
problem is listed at once (ConfigError: exit status 2). What it finds: each image's digest
(pinned on each run and recorded per row), its interpreter and horovodrun (the launches use
them), and its torch/CUDA/NCCL/Horovod versions (sweep.jsonl's system record).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.config import BenchConfig, refuse
from bench.launcher_kinds import LauncherKind, launcher_kind
from bench.launchers.docker import CheckedImage, DockerWrapper, container_name
from bench.launchers.sites import Site, last_line, on_all, run_here, run_on_host, site_for
from bench.machine import HorovodStatus, survey_records
from bench.paths import REPO_ROOT
from bench.spec import NO_CONTAINER, container_label

DockerRun = Callable[[Sequence[str], float], "subprocess.CompletedProcess[str]"]

NOT_RUNNABLE = 127  # docker run: the command was not found in the image
DOCKER_FAILED = 125  # docker run: the daemon could not create or start the container
SURVEY_TIMEOUT_S = 300  # a large image's first torch import on a cold disk takes a while
ROLE_HINT = (
    "install the NVIDIA Container Toolkit and configure Docker for it: the container_runtime "
    "role does both (ansible-playbook site.yml -e gpurig_container_runtime=true), or "
    "`nvidia-ctk runtime configure --runtime=docker` and restart dockerd"
)
# Run inside the image: the node survey, where the interpreter and horovodrun are, and with
# the argument "horovod" whether horovod.torch works (as bench.machine checks it on a host).
IMAGE_SURVEY = """
import shutil, sys
from pathlib import Path
from bench.machine import horovod_status, survey, survey_line
info = survey()
beside = Path(sys.executable).with_name("horovodrun")
info.update(executable=sys.executable,
            horovodrun=str(beside) if beside.exists() else shutil.which("horovodrun") or "")
if "horovod" in sys.argv[1:]:
    status = horovod_status(sys.executable)
    info["horovod_status"] = [status.available, status.version, status.nccl_built, status.reason]
print(survey_line(info), flush=True)
"""


@dataclass(frozen=True)
class Machine:
    """Where an image is checked: this machine, or a --hosts node reached through its site."""

    name: str
    docker: DockerRun
    bench_root: str  # the bench checkout there, mounted into the containers


def node_docker(host: str, site: Site) -> DockerRun:
    """docker on `host` through its site: a missing CLI is exit status 127, a timeout 124."""
    return lambda argv, timeout_s: run_on_host(host, shlex.join(argv), site, timeout_s)


def pinned_digest(reference: str, inspected: Mapping[str, Any]) -> str:
    """The registry digest of the repository named (else of any), or the local image ID."""
    digests = list(inspected.get("RepoDigests") or [])
    repository = reference.split("@")[0]
    if ":" in repository.rsplit("/", 1)[-1]:
        repository = repository.rsplit(":", 1)[0]
    same = [d for d in digests if d.split("@")[0] in (repository, f"docker.io/{repository}")]
    return (same or digests or [str(inspected["Id"])])[0]


def image_env(inspected: Mapping[str, Any], name: str) -> str:
    env = (inspected.get("Config") or {}).get("Env") or []
    return dict(entry.partition("=")[::2] for entry in env).get(name, "")


def docker_info(machine: Machine) -> tuple[dict[str, Any], str]:
    """(docker info, "") or ({}, why Docker cannot be used there)."""
    done = machine.docker(["docker", "info", "--format", "{{json .}}"], 60)
    text = last_line(done.stderr or done.stdout)
    if done.returncode == NOT_RUNNABLE or "docker: not found" in (done.stderr or ""):
        return {}, f"{machine.name}: the docker CLI is not installed (Docker Engine: {ROLE_HINT})"
    try:
        info = dict(json.loads(done.stdout.strip().splitlines()[-1])) if done.stdout else {}
    except ValueError:
        info = {}
    if done.returncode != 0 or not info.get("ServerVersion"):
        return {}, (
            f"{machine.name}: the Docker daemon does not answer ({text}): is dockerd running, "
            "and may this user use its socket (group docker)?"
        )
    return info, ""


def inspect_image(machine: Machine, reference: str) -> tuple[dict[str, Any], str]:
    """(docker image inspect, "") or ({}, why the image cannot be used)."""
    done = machine.docker(["docker", "image", "inspect", "--format", "{{json .}}", reference], 60)
    if done.returncode != 0:
        return {}, (
            f"{machine.name}: image {reference!r} is not present locally "
            f"({last_line(done.stderr or done.stdout)}); a sweep never pulls: "
            f"`docker pull {reference}` (or `docker load -i FILE.tar`) on every node first"
        )
    return dict(json.loads(done.stdout.strip().splitlines()[-1])), ""


def _docker_failure(
    text: str, reference: str, config: BenchConfig, info: Mapping[str, Any], where: str
) -> str:
    if "rlimit" in text:
        limits = ",".join(config.container_ulimits)
        return (
            f"{where}: docker cannot apply --container-ulimit {limits} ({text}); raising "
            "memlock needs CAP_SYS_RESOURCE in dockerd: give limits it may set, e.g. "
            "--container-ulimit stack=67108864, or none"
        )
    if config.device == "cuda" and ("device driver" in text or "nvidia" in text.lower()):
        runtimes = ", ".join(sorted(info.get("Runtimes") or {})) or "none"
        cdi = ", ".join(info.get("CDISpecDirs") or [])
        cdi = f"CDI spec directories {cdi}" if cdi else "no CDI"
        return (
            f"{where}: Docker cannot pass the GPUs in ({text}; runtimes: {runtimes}; {cdi}): "
            + ROLE_HINT
        )
    return f"{where}: docker run {reference} failed: {text}"


def survey_image(
    machine: Machine,
    reference: str,
    inspected: Mapping[str, Any],
    config: BenchConfig,
    info: Mapping[str, Any],
    horovod: bool,
) -> tuple[dict[str, Any], str]:
    """(the survey inside the image, "") or ({}, why it could not run there)."""
    pythons = [config.container_python] if config.container_python else ["python3", "python"]
    image_id = str(inspected["Id"])
    pythonpath = image_env(inspected, "PYTHONPATH")
    where = f"{machine.name}: image {reference}"
    for python in pythons:
        image = CheckedImage(reference, image_id, image_id, python, "", pythonpath)
        name = container_name(f"survey-{container_label(reference)}")
        argv = wrapper_for({}, config).argv(
            image,
            [python, "-c", IMAGE_SURVEY, *(["horovod"] if horovod else [])],
            name=name,
            bench_root=machine.bench_root,
        )
        done = machine.docker(argv, SURVEY_TIMEOUT_S)
        text = last_line(done.stderr or done.stdout)
        if done.returncode == 124:
            machine.docker(["docker", "rm", "--force", name], 60)
            return {}, f"{where}: the survey inside it took over {SURVEY_TIMEOUT_S} s"
        if done.returncode == NOT_RUNNABLE and "not found" in (done.stderr or ""):
            continue
        if done.returncode == DOCKER_FAILED:
            return {}, _docker_failure(text, reference, config, info, machine.name)
        records = survey_records(done.stdout.splitlines())
        if done.returncode != 0 or not records:
            return {}, f"{where}: the survey inside it failed with {python} ({text})"
        return records[-1], ""
    tried = " or ".join(pythons)
    return {}, f"{where}: no {tried} on the image's PATH; name its interpreter: --container-python"


def torch_problems(reference: str, facts: Mapping[str, Any], config: BenchConfig) -> list[str]:
    """What the image's torch lacks for this sweep."""
    where = f"image {reference} ({facts.get('executable')})"
    if not facts.get("torch"):
        return [f"{where}: no torch installed"]
    if facts.get("torch_error"):
        return [f"{where}: torch {facts['torch']} fails: {facts['torch_error']}"]
    if config.device != "cuda":
        return []
    needed = max(config.cluster.gpus_per_node) if config.cluster else max(config.gpu_counts)
    seen = int(facts.get("gpus") or 0)
    if seen >= needed:
        return []
    build = f"CUDA {facts['torch_cuda']}" if facts.get("torch_cuda") else "a CPU build"
    return [
        f"{where}: its torch {facts['torch']} ({build}) sees {seen} GPU(s) with --gpus all, "
        f"the sweep needs {needed}" + (f" (driver {facts.get('driver')})" if seen == 0 else "")
    ]


def launcher_in_image(kind: LauncherKind, facts: Mapping[str, Any], config: BenchConfig) -> str:
    """Why a launcher cannot run in the image, or "" if it can."""
    # (a launcher that cannot span nodes is refused with --hosts before: bench.admission)
    if config.cluster is not None and kind.multi_node and kind.ssh_to_other_nodes:
        return (
            f"{kind.title} across nodes in containers needs sshd inside the containers "
            f"({kind.argv.value} starts the other nodes' ranks over ssh), which this bench does "
            "not set up"
        )
    if not kind.needs_horovod:
        return ""
    available, version, nccl, reason = facts.get("horovod_status") or (False, "", None, "")
    return HorovodStatus(bool(available), version or "", nccl, reason or "").problem(config.device)


def check_image(
    reference: str,
    config: BenchConfig,
    machines: Sequence[Machine],
    infos: Sequence[Mapping[str, Any]],
    errors: list[str],
) -> CheckedImage | None:
    """One image on every machine; problems appended to `errors`."""
    by_name = {m.name: m for m in machines}
    found = on_all(list(by_name), lambda name: inspect_image(by_name[name], reference))
    problems = [why for _, why in found.values() if why]
    ids = {name: str(data.get("Id")) for name, (data, why) in found.items() if not why}
    if len(set(ids.values())) > 1:
        problems.append(
            f"image {reference} differs between nodes: "
            + "; ".join(f"{i} on {n}" for n, i in ids.items())
        )
    if problems:
        errors.extend(problems)
        return None
    inspected = found[machines[0].name][0]
    kinds = [launcher_kind(x) for x in config.launchers]
    horovod = any(k.needs_horovod for k in kinds)
    facts, why = survey_image(machines[0], reference, inspected, config, infos[0], horovod)
    if why:
        errors.append(why)
        return None
    errors.extend(torch_problems(reference, facts, config))
    unavailable = {}
    for kind in kinds:
        problem = launcher_in_image(kind, facts, config)
        if problem and config.launchers_explicit:
            errors.append(f"--launchers {kind.name} in image {reference}: {problem}")
        elif problem:
            unavailable[kind.name] = problem
    return CheckedImage(
        reference,
        str(inspected["Id"]),
        pinned_digest(reference, inspected),
        str(facts.get("executable") or ""),
        str(facts.get("horovodrun") or ""),
        image_env(inspected, "PYTHONPATH"),
        facts,
        unavailable,
    )


def check_images(config: BenchConfig) -> DockerWrapper:
    """Every --container image checked (see the module docstring), by the name given, as the
    sweep's wrapper; raises ConfigError listing every problem. A host-only sweep asks Docker
    nothing."""
    references = [c for c in config.axes.get("container", ()) if c != NO_CONTAINER]
    if not references:
        return wrapper_for({}, config)
    errors = []
    if config.cluster is not None and config.cluster.slurm:
        errors.append(
            "--container with --slurm: Slurm runs containers through pyxis/enroot "
            "(srun --container-image), which this bench does not drive; use --hosts, or the host"
        )
    labels: dict[str, str] = {}
    for reference in references:
        other = labels.setdefault(container_label(reference), reference)
        if other != reference:
            errors.append(
                f"--container {other} and {reference} share the short name "
                f"{container_label(reference)!r} that run ids use: tag one differently"
            )
    refuse(errors)
    # this machine, or every --hosts node (each over ssh, with its own bench checkout)
    if config.cluster is None:
        machines = [Machine("this machine", run_here, str(REPO_ROOT))]
    else:
        site, hosts = site_for(config.cluster)
        workdir = config.cluster.remote_workdir
        machines = [Machine(h, node_docker(h, site), workdir) for h in hosts]
    answers = [docker_info(m) for m in machines]
    refuse([why for _, why in answers if why])
    infos, errors = [info for info, _ in answers], []
    checked = {r: check_image(r, config, machines, infos, errors) for r in references}
    refuse(errors)
    return wrapper_for({r: i for r, i in checked.items() if i is not None}, config)


def wrapper_for(images: Mapping[str, CheckedImage], config: BenchConfig) -> DockerWrapper:
    """The checked images as the launches run them."""
    ulimits = tuple(u for u in config.container_ulimits if u != "none")
    return DockerWrapper(dict(images), ulimits, config.device == "cuda")
