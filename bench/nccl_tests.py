"""NVIDIA's nccl-tests beside the bench's own allreduce probe.

Where nccl-tests is installed (the nccl_tests role puts it in /opt/nccl-tests/<version>/bin, or
`all_reduce_perf` is on PATH), a single-node GPU sweep runs `all_reduce_perf` once per probed
GPU count at the probe's message size, one process driving the GPUs (-g N), and records its bus
bandwidth beside the probe's: the two should agree, and when they do not the probe (torch's
NCCL, the bench's process layout) or the installation is the place to look. Multi-node needs
nccl-tests built with MPI and an MPI launch, which this does not attempt.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from bench.launchers.sites import run_here

BINARY = "all_reduce_perf"
ROLE_PREFIX = Path("/opt/nccl-tests")  # the nccl_tests role's default nccl_tests_prefix
# One result row: size count type redop root | time algbw busbw #wrong (out-of-place) | ...
ROW = re.compile(
    r"^\s*(?P<size>\d+)\s+\d+\s+\S+\s+\S+\s+\S+\s+(?P<time>[\d.]+)\s+(?P<algbw>[\d.]+)"
    r"\s+(?P<busbw>[\d.]+)\s+(?P<wrong>\S+)",
    re.M,
)


@dataclass(frozen=True)
class NcclTestsResult:
    busbw_gbps: float | None
    note: str  # the command that ran, or why there is no figure


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", path.parent.parent.name))


def find_binary(asked: str = "", prefix: Path = ROLE_PREFIX) -> Path | None:
    """all_reduce_perf: `asked` (the file or its directory), else on PATH, else the newest
    version the nccl_tests role installed under `prefix`."""
    if asked:
        path = Path(asked)
        path = path / BINARY if path.is_dir() else path
        return path if path.is_file() else None
    if on_path := shutil.which(BINARY):
        return Path(on_path)
    installed = [p for p in prefix.glob(f"*/bin/{BINARY}") if p.is_file()]
    return max(installed, key=_version_key) if installed else None


def argv(binary: Path, nbytes: int, gpus: int, iterations: int) -> list[str]:
    """One message size (the probe's), out-of-place and in-place, `gpus` GPUs in one process."""
    size = nbytes - nbytes % 4  # whole floats
    flags = f"-b {size} -e {size} -g {gpus} -n {iterations} -w 5 -c 1"
    return [str(binary), *flags.split()]


def parse(output: str, nbytes: int) -> float | None:
    """The bus bandwidth in GB/s of the out-of-place result at `nbytes` (nccl-tests' own GB/s:
    1e9 bytes); None when that row is missing or reports wrong results."""
    for row in ROW.finditer(output):
        if int(row["size"]) == nbytes - nbytes % 4:
            return float(row["busbw"]) if row["wrong"] in ("0", "N/A") else None
    return None


def measure(
    binary: Path, nbytes: int, gpus: int, iterations: int, timeout_s: float = 300
) -> NcclTestsResult:
    command = argv(binary, nbytes, gpus, iterations)
    shown = " ".join(command)
    done = run_here(command, timeout_s)
    busbw = parse(done.stdout, nbytes) if done.returncode == 0 else None
    if busbw is None:
        lines = (done.stderr or done.stdout).strip().splitlines()
        reason = lines[-1] if lines else "no result at that size"
        return NcclTestsResult(None, f"{shown} (exit {done.returncode}): {reason}")
    return NcclTestsResult(busbw, shown)
