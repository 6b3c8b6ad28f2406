"""A real sweep on JPEG files: the data-set helper's folder, read by the torch loader on two
CPU ranks, with the loader-only rate in every row; and the loaders refused before launch.

On CPU only `--loader torch` can run (nvjpeg and DALI decode on the GPU); their decode and
augmentation code is exercised on CPU tensors in tests/unit/test_loaders.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from integration_support import TINY

from bench.datasets import make_jpeg_folder

pytestmark = pytest.mark.slow


def scaling(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.scaling", *TINY, "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_torch_loader_sweep_records_the_loader_and_its_own_rate(tmp_path: Path) -> None:
    root = tmp_path / "train"
    make_jpeg_folder(root, images=48, size=(48, 40), classes=3)
    done = scaling(
        tmp_path / "out",
        "--data",
        str(root),
        "--launchers",
        "ddp",
        "--gpus",
        "2",
        "--repeats",
        "1",
        "--no-probe",
        "--workers",
        "1",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (directory,) = (tmp_path / "out").iterdir()
    (run,) = pd.read_parquet(directory / "runs.parquet").to_dict(orient="records")
    assert run["status"] == "ok", run["error"]
    assert (run["loader"], run["loader_workers"], run["data"]) == ("torch", 1, str(root))
    assert run["run_id"] == "ddp-n2-fp32-nchw-torch-r0"
    # each rank timed its loader alone; the slowest bounds what the sum can be
    assert 0 < run["loader_throughput_per_gpu"] <= run["loader_throughput"] / 2 + 1e-9


def test_gpu_loaders_are_refused_before_launch_on_cpu(tmp_path: Path) -> None:
    root = tmp_path / "train"
    make_jpeg_folder(root, images=4, size=(16, 16), classes=2)
    done = scaling(tmp_path / "out", "--data", str(root), "--loader", "torch,nvjpeg,dali")
    assert done.returncode == 2
    assert "--loader nvjpeg: nvJPEG decodes on the GPU; this sweep runs on CPU" in done.stderr
    assert "--loader dali: DALI's pipeline decodes on the GPU" in done.stderr
    assert not (tmp_path / "out").exists()
    synthetic = scaling(tmp_path / "out", "--loader", "torch")
    assert synthetic.returncode == 2 and "nothing to load" in synthetic.stderr
