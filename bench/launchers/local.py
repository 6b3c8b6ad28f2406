"""The local backend: a launch's torchrun or horovodrun as a child of this process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from bench.launchers import ExecResult, Launch, launch_of, rank_environment
from bench.launchers.argv import (
    Enclosure,
    NodeCommand,
    Tools,
    free_port,
    node_argv,
    rendezvous_endpoint,
)
from bench.launchers.docker import DockerWrapper
from bench.launchers.stop import STOP, StopPolicy, stop_tree
from bench.machine import tensorflow_env
from bench.paths import REPO_ROOT
from bench.shared.lifeline import die_with_parent
from bench.spec import LOCAL_HOST, ProbeSpec, RunSpec, format_hosts

_INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM arriving inside the block are recorded, not raised, and raised again
    as the block ends (in the main thread; elsewhere Python runs no signal handler anyway)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, _frame: object) -> None:
        held.append(signum)

    previous = {sig: signal.signal(sig, hold) for sig in _INTERRUPTS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in held:
            signal.raise_signal(signum)  # to this thread: the handler restored above runs now


def execute(
    argv: Sequence[str],
    env: Mapping[str, str],
    timeout_s: float,
    log_path: Path,
    policy: StopPolicy = STOP,
    enclosure: Enclosure | None = None,
) -> ExecResult:
    """Run one prepared command; capture stdout+stderr in `log_path`; stop the tree on timeout
    (and first what a wrapper started around the command, if any).

    On KeyboardInterrupt the tree is stopped too and the interrupt propagates, so the caller can
    record the run as interrupted; one that lands while the child is being started waits until
    the child exists and can be stopped. The child runs in its own session: a terminal's Ctrl-C
    reaches only the sweep, which decides what to stop. It dies with this process
    (PR_SET_PDEATHSIG), and so do its ranks (bench.shared.lifeline): a controller killed with
    SIGKILL leaves none.
    """

    def stop() -> None:
        if enclosure is not None:
            enclosure.stop(policy)
        stop_tree(proc, policy)

    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    timed_out = False
    proc: subprocess.Popen | None = None
    with open(log_path, "wb") as log:
        try:
            log.write(("$ " + " ".join(argv) + "\n").encode())
            log.flush()
            with _interrupts_held():
                proc = subprocess.Popen(
                    list(argv),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env={**os.environ, **env},
                    start_new_session=True,
                    preexec_fn=die_with_parent,  # killed with the controller, even by SIGKILL
                )
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            stop()
        except BaseException:
            if proc is not None:
                stop()
            raise
    wall = time.monotonic() - started
    output = log_path.read_text(errors="replace")
    returncode = None if timed_out else proc.returncode
    return ExecResult(returncode, timed_out, wall, output)


class LocalLauncher:
    """Every rank on this machine: torchrun on a free local port, horovodrun -H localhost:N, or
    the one process of DataParallel or TensorFlow started directly; each wrapped as the
    sweep's wrapper says (bench.launchers.docker)."""

    def __init__(
        self,
        tools: Tools | None = None,
        policy: StopPolicy = STOP,
        wrapper: DockerWrapper | None = None,
    ) -> None:
        self.tools = tools or Tools(tensorflow=tensorflow_env()[0])
        self.policy = policy
        self.wrapper = wrapper or DockerWrapper()

    def command(self, launch: Launch, port: int | None = None) -> NodeCommand:
        if launch.nodes != 1 or launch.placement[0].host != LOCAL_HOST:
            raise ValueError(
                f"the local launcher runs on {LOCAL_HOST} only, "
                f"got {format_hosts(launch.placement)}"
            )
        env = rank_environment(launch.threads_per_rank, launch.device, launch.sweep_id)
        wrap = self.wrapper.around(launch)
        endpoint = rendezvous_endpoint(LOCAL_HOST, port or free_port())
        argv = node_argv(launch, 0, wrap.tools(self.tools), endpoint=endpoint)
        return wrap.command(NodeCommand(LOCAL_HOST, tuple(argv), env), bench_root=str(REPO_ROOT))

    def run(self, spec: RunSpec | ProbeSpec, timeout_s: float, log_path: Path) -> ExecResult:
        command = self.command(launch_of(spec))
        return execute(
            command.argv, command.env, timeout_s, log_path, self.policy, command.enclosure
        )
