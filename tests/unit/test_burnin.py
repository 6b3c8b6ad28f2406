"""The burn-in: playbooks/files/verify_burnin.py run for real on CPU tensors, and its judge
(filter_plugins/gpurig_health.py burn_in) both ways.

CI has no GPU or NVML, so the script runs with --device cpu: the same load threads and timed
windows, without the NVML watch. The judge is tested on the script's own CPU output and on the real
reading of one H100 (tests/fixtures/health/verify_burnin-h100.json, SOURCES.md there), with faults
derived from it: an Xid event, an ECC rise, a fault clock reason and a throughput that falls.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "playbooks/files/verify_burnin.py"
_spec = importlib.util.spec_from_file_location(
    "gpurig_health", ROOT / "filter_plugins/gpurig_health.py"
)
health = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(health)
FAULTS = ["HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown", "SW Thermal Slowdown"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def registered(report: dict) -> dict:
    return {"rc": 0, "stdout": json.dumps(report), "stderr": ""}


@pytest.fixture(scope="module")
def cpu_report() -> dict:
    pytest.importorskip("torch")
    done = run("3", "--window", "0.5", "--device", "cpu", "--cpu-devices", "2")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_cpu_run_times_windows_on_every_device(cpu_report):
    assert cpu_report["tool"] == "verify_burnin" and cpu_report["errors"] == []
    assert [g["index"] for g in cpu_report["gpus"]] == [0, 1]
    for gpu in cpu_report["gpus"]:
        # 3 s of 0.5 s windows: about 6 each (the first, still being sized, is not kept).
        assert len(gpu["windows"]) >= 4
        assert all(w > 0 for w in gpu["windows"])
        assert gpu["samples"] == [] and gpu["xid"] == []
    assert cpu_report["xid_watch"] == "not on the CPU"
    assert cpu_report["settings"]["dtype"] == "fp32"


def test_the_judge_passes_a_steady_run_and_reports_its_figures(cpu_report):
    steady = json.loads(json.dumps(cpu_report))
    for gpu in steady["gpus"]:
        gpu["windows"] = [1.0] * 8
    steady["allreduce"]["windows"] = [2.0] * 8  # the CPU's own series is too noisy to judge
    row = health.burn_in(registered(steady), FAULTS, 0.05)
    assert row["passed"], row["message"]
    assert [g["drop"] for g in row["figures"]["gpus"]] == [0.0, 0.0]


def test_a_run_too_short_for_its_window_fails_and_says_how_to_fix_it(cpu_report):
    short = json.loads(json.dumps(cpu_report))
    short["gpus"][0]["windows"] = [1.0, 1.0, 1.0]
    row = health.burn_in(registered(short), FAULTS, 0.05)
    assert not row["passed"]
    assert "3 throughput windows, too few to show a drift" in row["message"]
    assert "verify_burnin_seconds" in row["message"]


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--window", "0", "seconds, finite and > 0"),
        ("--window", "nan", "seconds, finite and > 0"),
        ("--sample", "-1", "seconds, finite and > 0"),
        ("--gemm-size", "0", "a whole number >= 1"),
    ],
)
def test_bad_values_are_refused_before_anything_runs(option, value, expected):
    done = run("10", option, value, "--device", "cpu")
    assert done.returncode == 2 and done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    assert option in last and repr(value) in last and expected in last


def test_a_window_longer_than_the_burn_in_is_refused():
    done = run("4", "--window", "5", "--device", "cpu")
    assert done.returncode == 2
    assert "--window: 5.0 is longer than the burn-in (4.0 s)" in done.stderr


def test_a_failed_script_fails_the_check():
    row = health.burn_in({"rc": 3, "stdout": "{}", "stderr": "torch sees no GPU"}, FAULTS)
    assert not row["passed"] and "rc 3: torch sees no GPU" in row["message"]


# ---- The real readings of one H100 and one H200, and faults derived from them -------------------
FIXTURES = ROOT / "tests/fixtures/health"
READINGS = {
    "h100": json.loads((FIXTURES / "verify_burnin-h100.json").read_text()),
    "h200": json.loads((FIXTURES / "verify_burnin-h200.json").read_text()),
}


def derived(name: str, change) -> dict:
    """A copy of a real reading with one thing changed by change(gpu)."""
    reading = json.loads(json.dumps(READINGS[name]))
    change(reading["gpus"][0])
    return reading


@pytest.mark.parametrize("name", sorted(READINGS))
def test_the_real_readings_pass_at_their_power_cap(name):
    row = health.burn_in(registered(READINGS[name]), FAULTS, 0.05)
    assert row["passed"], row["message"]
    (gpu,) = row["figures"]["gpus"]
    # Held at the 700 W cap the whole time: SW Power Cap is a setting, not a fault.
    assert set(gpu["reasons_seen"]) == {"SW Power Cap"}
    assert gpu["power_w_max"] > 680 and abs(gpu["drop"]) < 0.01
    assert gpu["ecc_uncorrected"] == {"before": 0, "after": 0} and gpu["xid"] == []
    assert row["figures"]["xid_watch"] == "NVML critical-Xid events"


def test_throughput_that_falls_over_the_run_fails_with_the_drop_and_the_threshold():
    def slow_down(gpu):  # the last 8 of 24 windows 10 % slower, as a GPU that heats up gives
        gpu["windows"][-8:] = [w * 0.9 for w in gpu["windows"][-8:]]

    row = health.burn_in(registered(derived("h200", slow_down)), FAULTS, 0.05)
    assert not row["passed"]
    assert (
        "GPU 0 (NVIDIA H200): throughput fell 10.0 % over the burn-in (663.1 -> 596.6 TFLOPS)"
        in (row["message"])
    )
    assert "more than verify_burnin_max_drop 0.05" in row["message"]
    # The same run with a looser threshold passes.
    assert health.burn_in(registered(derived("h200", slow_down)), FAULTS, 0.15)["passed"]


def test_an_xid_an_ecc_rise_and_a_fault_reason_each_fail_and_are_named():
    def faults(gpu):
        gpu["xid"] = [{"t": 42.0, "gpu": 0, "xid": 79}]
        gpu["ecc_uncorrected"] = {"before": 0, "after": 2}
        for sample in gpu["samples"][30:33]:
            sample["reasons"] = ["HW Slowdown", "SW Power Cap"]

    row = health.burn_in(registered(derived("h100", faults)), FAULTS, 0.05)
    assert not row["passed"]
    name = "GPU 0 (NVIDIA H100 80GB HBM3)"
    assert f"{name}: Xid 79 at 42 s" in row["message"]
    assert f"{name}: uncorrectable ECC errors rose 0 -> 2" in row["message"]
    assert f"{name}: HW Slowdown in 3 of 92 readings" in row["message"]
    assert "SW Power Cap in" not in row["message"]  # a setting, not in the fault list


def test_an_unknown_ecc_count_is_not_a_rise():
    def no_ecc(gpu):
        gpu["ecc_uncorrected"] = {"before": None, "after": None}

    assert health.burn_in(registered(derived("h100", no_ecc)), FAULTS, 0.05)["passed"]


# ---- The all-reduce held beside the products --------------------------------------------------
def test_the_cpu_run_holds_an_all_reduce_across_the_devices(cpu_report):
    allreduce = cpu_report["allreduce"]
    assert allreduce["devices"] == 2 and allreduce["mib"] == 4.0
    assert allreduce["method"] == "sum of the CPU buffers (no interconnect)"
    # 3 s of 0.5 s windows, beside the products: a few windows, each a positive bus bandwidth.
    assert len(allreduce["windows"]) >= 3 and all(w > 0 for w in allreduce["windows"])
    assert cpu_report["settings"]["allreduce_mib"] == 4.0


def test_one_device_or_no_allreduce_runs_products_only():
    pytest.importorskip("torch")
    alone = json.loads(run("1", "--window", "0.2", "--device", "cpu").stdout)
    off = run("1", "--window", "0.2", "--device", "cpu", "--cpu-devices", "2", "--no-allreduce")
    assert alone["allreduce"] is None
    assert json.loads(off.stdout)["allreduce"] is None
    assert json.loads(off.stdout)["settings"]["allreduce_mib"] is None


def test_allreduce_mib_with_no_allreduce_is_refused():
    done = run("10", "--allreduce-mib", "8", "--no-allreduce", "--device", "cpu")
    assert done.returncode == 2 and done.stdout == ""
    assert "--allreduce-mib: 8.0 given with --no-allreduce" in done.stderr


def test_a_bad_allreduce_size_is_refused():
    done = run("10", "--allreduce-mib", "0", "--device", "cpu")
    assert done.returncode == 2
    assert "--allreduce-mib" in done.stderr and "MiB, finite and > 0" in done.stderr


def with_allreduce(windows: list[float]) -> dict:
    """The real H200 reading with an all-reduce of the given windows beside it (the H200 machine
    has one GPU: the series is a derived case, its figures near what verify.yml's floors take for
    8 GPUs on NVLink)."""
    reading = json.loads(json.dumps(READINGS["h200"]))
    reading["allreduce"] = {
        "mib": 256.0,
        "devices": 8,
        "method": "NCCL all-reduce across the GPUs (torch.cuda.nccl, one process)",
        "windows": windows,
    }
    return reading


def test_a_steady_allreduce_passes_and_is_reported():
    row = health.burn_in(registered(with_allreduce([470.0] * 12)), FAULTS, 0.05)
    assert row["passed"], row["message"]
    assert row["figures"]["allreduce"]["drop"] == 0.0
    assert row["figures"]["allreduce"]["busbw_last"] == 470.0


def test_an_allreduce_that_falls_over_the_run_fails_with_its_drop():
    row = health.burn_in(registered(with_allreduce([470.0] * 8 + [400.0] * 4)), FAULTS, 0.05)
    assert not row["passed"]
    assert (
        "the all-reduce across 8 GPUs: bus bandwidth fell 14.9 % over the burn-in "
        "(470.0 -> 400.0 GB/s), more than verify_burnin_max_drop 0.05"
    ) in row["message"]


def test_an_allreduce_too_short_for_its_window_fails():
    row = health.burn_in(registered(with_allreduce([470.0] * 3)), FAULTS, 0.05)
    assert not row["passed"]
    assert "the all-reduce: 3 bandwidth windows, too few to show a drift" in row["message"]
