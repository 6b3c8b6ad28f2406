"""playbooks/files/verify_hardware.py: the measuring code run for real on CPU tensors.

CI has no GPU, so the script runs with --device cpu (the same code path on CPU tensors) and small
sizes; two CPU stand-ins for GPUs make the all-at-once threads and the pair loop run too. The
arithmetic the figures are made of is checked by importing the script by path.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "playbooks/files/verify_hardware.py"
_spec = importlib.util.spec_from_file_location("verify_hardware", SCRIPT)
hardware = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hardware)

pytest.importorskip("torch")

SMALL = ["--gemm-size", "64", "--hbm-mib", "1", "--host-mib", "0.5", "--p2p-mib", "0.5"]
REPEATS = 3


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.fixture(scope="module")
def report() -> dict:
    done = run(
        "--device", "cpu", "--cpu-devices", "2", *SMALL,
        "--repeats", str(REPEATS), "--iters", "2", "--warmup", "1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, "stdout holds exactly one JSON object; progress goes to stderr"
    assert "gemm" in done.stderr
    return json.loads(lines[0])


def figures(report: dict):
    """Every summary in the report: (where, {unit, samples, best, median})."""
    for gpu in report["gpus"]:
        for precision, figure in gpu["gemm_tflops"].items():
            yield f"gpu{gpu['index']} gemm {precision}", figure
        for key in ("hbm_copy_gbs", "h2d_gbs", "d2h_gbs"):
            yield f"gpu{gpu['index']} {key}", gpu[key]
    for direction, entry in report["host_all_at_once"].items():
        yield f"all-at-once {direction}", entry["aggregate_gbs"]
        for per in entry["per_device_gbs"]:
            yield f"all-at-once {direction} device {per['index']}", per
    for pair in report["p2p_gbs"]:
        yield f"pair {pair['src']}->{pair['dst']}", pair


def test_the_report_says_what_was_run(report):
    assert report["tool"] == "verify_hardware"
    assert report["device"] == "cpu"
    assert report["torch"]
    assert report["settings"] == {
        "tests": ["gemm", "hbm", "host", "p2p"],
        "gemm_size": 64,
        "hbm_bytes": 1 << 20,
        "host_bytes": 1 << 19,
        "p2p_bytes": 1 << 19,
        "repeats": REPEATS,
        "max_repeats": 30,
        "confidence": 0.95,
        "iters": 2,
        "warmup": 1,
    }
    assert set(report["units"]) == {"TFLOPS", "GB/s"}
    assert [gpu["index"] for gpu in report["gpus"]] == [0, 1]
    assert report["seconds"] > 0


def test_every_figure_keeps_every_sample_finite_and_positive(report):
    seen = list(figures(report))
    # 2 devices x (3 precisions + hbm + h2d + d2h) + 2 directions x (aggregate + 2) + 2 pairs
    assert len(seen) == 2 * 6 + 2 * 3 + 2
    for where, figure in seen:
        samples = figure["samples"]
        assert len(samples) == REPEATS, where
        assert all(math.isfinite(s) and s > 0 for s in samples), (where, samples)
        assert figure["best"] == max(samples), where
        assert figure["best"] >= figure["median"], where
        assert min(samples) <= figure["median"] <= max(samples), where
        assert figure["unit"] in ("TFLOPS", "GB/s"), where


def test_gemm_runs_the_cpu_precisions_and_says_why_tf32_is_skipped(report):
    for gpu in report["gpus"]:
        assert set(gpu["gemm_tflops"]) == {"bf16", "fp16", "fp32"}
        assert set(gpu["gemm_skipped"]) == {"tf32"}
        assert "CPU" in gpu["gemm_skipped"]["tf32"]


def test_copy_figures_say_which_bytes_they_count(report):
    gpu = report["gpus"][0]
    assert gpu["hbm_copy_gbs"]["counts"].startswith("read+write")
    assert gpu["hbm_copy_gbs"]["bytes_per_copy"] == 1 << 20
    for key in ("h2d_gbs", "d2h_gbs"):
        assert "one direction" in gpu[key]["counts"]
        # No host-device link on a CPU run: the figure must not pass for one.
        assert "host memcpy" in gpu[key]["path"]
    for entry in report["host_all_at_once"].values():
        assert entry["devices"] == 2
        assert "host memcpy" in entry["path"]


def test_pairs_cover_each_ordered_pair_once(report):
    pairs = report["p2p_gbs"]
    assert sorted((p["src"], p["dst"]) for p in pairs) == [(0, 1), (1, 0)]
    assert all(p["peer"] is False and "host memcpy" in p["path"] for p in pairs)


def test_one_device_has_no_pair_and_says_so():
    done = run("--device", "cpu", *SMALL, "--repeats", "2", "--iters", "1", "--tests", "p2p")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["p2p_gbs"] == []
    assert "one device" in report["p2p_skipped"]
    assert "gemm_tflops" not in report["gpus"][0]


def test_the_flop_count_is_two_n_cubed():
    assert hardware.gemm_flops(1) == 2
    assert hardware.gemm_flops(8192) == 2 * 8192**3
    # 10 products of n = 1000 (2e9 flop each) in 0.02 s: 1e12 flop/s.
    assert hardware.tflops(1000, 10, 0.02) == pytest.approx(1.0)
    assert hardware.gbs(3e9, 1.5) == pytest.approx(2.0)


def test_summary_keeps_samples_best_and_median():
    assert hardware.summary([3.0, 1.0, 2.0, 5.0], "GB/s") == {
        "unit": "GB/s",
        "samples": [3.0, 1.0, 2.0, 5.0],
        "best": 5.0,
        "median": 2.5,
    }


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--gemm-size", "0", ">= 1"),
        ("--gemm-size", "-5", ">= 1"),
        ("--gemm-size", "nan", ">= 1"),
        ("--hbm-mib", "0", "> 0"),
        ("--host-mib", "-1", "> 0"),
        ("--p2p-mib", "nan", "finite"),
        ("--hbm-mib", "inf", "finite"),
        ("--repeats", "1", ">= 2"),
        ("--max-repeats", "0", ">= 1"),
        ("--confidence", "1", "from 0.5 up to, not including, 1"),
        ("--confidence", "nan", "confidence level"),
        ("--confidence", "0.2", "from 0.5"),
        ("--iters", "0", ">= 1"),
        ("--warmup", "-1", ">= 0"),
        ("--tests", "gemm,disk", "gemm,hbm,host,p2p"),
    ],
)
def test_bad_values_are_refused_before_anything_runs(option, value, expected):
    done = run("--device", "cpu", f"{option}={value}")
    assert done.returncode == 2
    assert done.stdout == ""
    message = done.stderr.strip().splitlines()[-1]
    assert option in message
    assert repr(value) in message
    assert expected in message


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--floors", "{not json"], "argument --floors: is not JSON"),
        (["--floors", '{"H100": 1}'], "argument --floors: is not a floors table"),
        (
            ["--floors", '[{"tokens": [], "floors": {"h2d_gbs": {"value": "abc"}}}]'],
            "argument --floors: is not a floors table (expected a JSON list of",
        ),
        (["--repeats", "8", "--max-repeats", "5"], "--max-repeats: 5 is below --repeats 8"),
    ],
)
def test_bad_floors_and_caps_are_refused_before_anything_runs(argv, expected):
    done = run("--device", "cpu", *argv)
    assert done.returncode == 2 and done.stdout == ""
    assert expected in done.stderr


class Scripted:
    """Clock.samples' rate() fed from a list: the samples a test wants, in order."""

    def __init__(self, values):
        self.values = iter(values)

    def __call__(self, _seconds):
        return next(self.values)


def samples_until_clear(values, floor, repeats=3, cap=8):
    torch = pytest.importorskip("torch")
    args = hardware.parse(
        ["--device", "cpu", "--repeats", str(repeats), "--max-repeats", str(cap), "--iters", "1"]
    )
    clock = hardware.Clock(torch, torch.device("cpu"))
    floor = None if floor is None else {"value": floor, "kind": "measured", "source": "t"}
    return clock.samples(lambda: None, args, Scripted(values), floor)


def test_a_figure_clear_of_its_floor_stops_at_the_repeats_asked_for():
    assert samples_until_clear([10.0, 10.1, 9.9, 50.0], floor=5.0) == [10.0, 10.1, 9.9]
    assert samples_until_clear([1.0, 1.1, 0.9, 50.0], floor=5.0) == [1.0, 1.1, 0.9]
    assert samples_until_clear([1.0, 9.0, 5.0, 50.0], floor=None) == [1.0, 9.0, 5.0]


def test_a_figure_whose_interval_holds_its_floor_is_sampled_until_clear_or_the_cap():
    # 4 and 6 alternate around 5: the interval always holds it, so sampling goes on to the cap.
    assert samples_until_clear([4.0, 6.0] * 10, floor=5.0) == [4.0, 6.0] * 4
    # Noisy at first, then steady well above the floor: it stops once the interval clears it.
    taken = samples_until_clear([3.0, 9.0, 6.0, 8.0, 8.1, 7.9, 8.0, 8.0, 8.0], floor=5.0)
    low, _ = hardware.interval(taken, 0.95)
    assert 3 < len(taken) < 8 and low >= 5.0
    assert hardware.interval(taken[:-1], 0.95)[0] < 5.0


def test_the_interval_is_the_student_t_interval_of_the_mean():
    # mean 10, s = 1, n = 4: t(0.975, 3) = 3.182446 (scipy), half-width 3.182446 * 1 / 2.
    low, high = hardware.interval([9.0, 11.0, 9.0, 11.0], 0.95)
    half = 3.182446305284263 * (2 / math.sqrt(3)) / 2
    assert (low, high) == (pytest.approx(10 - half), pytest.approx(10 + half))
    assert all(math.isnan(x) for x in hardware.interval([1.0], 0.95))


def test_cpu_stand_ins_are_refused_with_cuda():
    done = run("--device", "cuda", "--cpu-devices", "2")
    assert done.returncode == 2
    assert "--cpu-devices" in done.stderr


def test_cuda_without_a_gpu_exits_3_and_says_so():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = run("--device", "cuda", "--repeats", "2")
    assert done.returncode == 3
    assert "no GPU" in json.loads(done.stdout)["error"]


# ---- --nvbandwidth: the host copies taken from nvbandwidth's -j runs --------------------------
# TEST FIXTURE: a stand-in for NVIDIA's nvbandwidth. It prints nvbandwidth's -j layout for the
# asked testcases, a 1 x devices matrix of GB/s strings each, as NVIDIA/nvbandwidth's
# testcases_ce.cpp and json_output.cpp write it ({"nvbandwidth": {"testcases": [{"name",
# "status", "bandwidth_description", "bandwidth_matrix", "sum"}]}}, read 2026-11-28). Its figures
# come from the file SERIES names, one line per run (cycled), so a test chooses what is measured.
STANDIN = """#!{python}
import json, sys
from pathlib import Path
series = Path({series!r}).read_text().split()
count = Path({count!r})
run = int(count.read_text()) if count.exists() else 0
count.write_text(str(run + 1))
values = series[run % len(series)].split(",")
names = sys.argv[sys.argv.index("-t") + 1:]
status = {status!r}
print(json.dumps({{"nvbandwidth": {{"version": "standin", "testcases": [
    {{"name": n, "status": status, "bandwidth_matrix": [values], "sum": 0.0,
      "bandwidth_description": "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)"}}
    for n in names]}}}}, indent=2))
"""


def nvbandwidth_standin(tmp_path: Path, series: list[str], status: str = "Passed") -> Path:
    (tmp_path / "series").write_text("\n".join(series))
    path = tmp_path / "nvbandwidth"
    path.write_text(
        STANDIN.format(
            python=sys.executable,
            series=str(tmp_path / "series"),
            count=str(tmp_path / "runs"),
            status=status,
        )
    )
    path.chmod(0o755)
    return path


def host_run(tool: Path, *extra: str) -> subprocess.CompletedProcess:
    return run(
        "--device", "cpu", "--cpu-devices", "2", "--tests", "host", *SMALL,
        "--repeats", "3", "--iters", "1", "--warmup", "0", "--nvbandwidth", str(tool), *extra,
    )  # fmt: skip


def test_host_copies_come_from_nvbandwidth_runs(tmp_path):
    tool = nvbandwidth_standin(tmp_path, ["55.1,54.9", "55.3,54.7", "55.2,54.8"])
    done = host_run(tool)
    assert done.returncode == 0, done.stderr
    gpus = json.loads(done.stdout)["gpus"]
    for index, gpu in enumerate(gpus):
        for direction in ("h2d_gbs", "d2h_gbs"):
            figure = gpu[direction]
            assert figure["tool"].startswith("nvbandwidth ")
            assert figure["samples"] == [[55.1, 55.3, 55.2], [54.9, 54.7, 54.8]][index]
    assert gpus[0]["h2d_gbs"]["tool"] == "nvbandwidth host_to_device_memcpy_ce (copy engine)"
    assert (tmp_path / "runs").read_text() == "3"  # one run per sample, both directions at once


def test_nvbandwidth_is_run_again_while_a_floor_is_inside_the_interval(tmp_path):
    # Samples scattered around 50 GB/s with a floor of 50: unclear until the cap of 6 runs.
    tool = nvbandwidth_standin(tmp_path, ["48,60", "53,60", "49,60", "52,60"])
    floors = json.dumps([{"model": "any", "tokens": [], "floors": {"h2d_gbs": {"value": 50}}}])
    done = host_run(tool, "--max-repeats", "6", "--floors", floors)
    assert done.returncode == 0, done.stderr
    (first, second) = json.loads(done.stdout)["gpus"]
    assert len(first["h2d_gbs"]["samples"]) == 6 and first["h2d_gbs"]["floor"]["value"] == 50
    assert second["h2d_gbs"]["samples"] == [60.0] * 6


def test_a_testcase_nvbandwidth_did_not_pass_exits_4_and_says_which(tmp_path):
    done = host_run(nvbandwidth_standin(tmp_path, ["55,55"], status="Waived"))
    assert done.returncode == 4
    error = json.loads(done.stdout)["error"]
    assert error.startswith("nvbandwidth host_to_device_memcpy_ce: Waived")


def test_a_missing_nvbandwidth_is_refused_before_anything_runs(tmp_path):
    done = host_run(tmp_path / "nowhere")
    assert done.returncode == 2 and done.stdout == ""
    assert "--nvbandwidth" in done.stderr and "is not an executable file" in done.stderr


def script_tasks(node, inherited: bool = False):
    """Every ansible.builtin.script task under a YAML node, and whether it runs without a tty
    (ansible_ssh_use_tty false in its own vars, or in its play's: `inherited`)."""
    if isinstance(node, list):
        for item in node:
            yield from script_tasks(item, inherited)
    elif isinstance(node, dict):
        no_tty = inherited or (node.get("vars") or {}).get("ansible_ssh_use_tty") is False
        if "ansible.builtin.script" in node:
            yield node.get("name"), no_tty
        for key in ("tasks", "pre_tasks", "post_tasks", "block", "rescue", "always"):
            yield from script_tasks(node.get(key), no_tty)


def test_every_script_whose_json_is_read_runs_without_a_tty() -> None:
    # Over ssh Ansible gives a script a pseudo-terminal by default, which merges its stderr (every
    # script's progress) into the stdout its JSON is read from; tried on a namespace host over ssh.
    import yaml

    root = Path(__file__).resolve().parents[2]
    verify = yaml.safe_load((root / "playbooks" / "verify.yml").read_text())
    found = dict(script_tasks(verify))
    health = yaml.safe_load((root / "playbooks" / "tasks" / "verify_health.yml").read_text())
    found |= dict(script_tasks(health, inherited=verify[0]["vars"]["ansible_ssh_use_tty"] is False))
    for path in (root / "roles").glob("*/tasks/*.yml"):
        found |= {f"{path}: {n}": ok for n, ok in script_tasks(yaml.safe_load(path.read_text()))}
    assert len(found) >= 10
    assert [name for name, no_tty in found.items() if not no_tty] == []
