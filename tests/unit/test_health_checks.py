"""filter_plugins/gpurig_health.py: each health check on real tool output, healthy and faulty.

The fixtures in tests/fixtures/health/ are real output copied from public threads (SOURCES.md
there names each); a check whose verdict were inverted fails one of the two cases.
"""

from __future__ import annotations

import importlib.util
import json
import platform
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests/fixtures/health"
spec = importlib.util.spec_from_file_location("health", ROOT / "filter_plugins/gpurig_health.py")
health = importlib.util.module_from_spec(spec)
spec.loader.exec_module(health)
# verify.yml's verify_throttle_fault_reasons default.
FAULTS = ["HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown", "SW Thermal Slowdown"]


def ran(fixture: str, rc: int = 0) -> dict:
    """What an Ansible command task registers when the tool printed the fixture."""
    return {"rc": rc, "stdout": (FIXTURES / fixture).read_text(), "stderr": ""}


def test_every_fixture_has_its_source_named():
    sources = (FIXTURES / "SOURCES.md").read_text()
    for fixture in FIXTURES.glob("*.txt"):
        assert f"| {fixture.name} |" in sources


def test_gpu_count_passes_at_the_expected_count_and_fails_below_it():
    assert health.gpu_count(8, 8)["passed"]
    row = health.gpu_count("7", "8")
    assert not row["passed"]
    assert row["figures"] == {"pci_gpus": 7, "threshold": 8}
    assert "verify_expected_gpus is 8" in row["message"]


def test_nvlink_all_links_up_passes():
    row = health.nvlink_links(ran("nvidia-smi-nvlink-s.healthy.txt"))
    assert row["passed"], row
    assert row["figures"]["links_per_gpu"] == {"0": 18}
    assert row["figures"]["inactive_links"] == []
    assert row["message"] == ""


def test_nvlink_inactive_links_fail_with_their_names():
    row = health.nvlink_links(ran("nvidia-smi-nvlink-s.faulty.txt"))
    assert not row["passed"]
    assert row["figures"]["inactive_links"] == ["GPU 3 link 3", "GPU 3 link 5"]
    assert "GPU 3 link 3, GPU 3 link 5" in row["message"]
    assert "nvlink -e" in row["message"]


def test_nvlink_threshold_tolerates_that_many_inactive_links():
    assert health.nvlink_links(ran("nvidia-smi-nvlink-s.faulty.txt"), 2)["passed"]
    assert not health.nvlink_links(ran("nvidia-smi-nvlink-s.faulty.txt"), 1)["passed"]


def test_nvlink_fails_when_nvidia_smi_failed():
    row = health.nvlink_links({"rc": 9, "stdout": "", "stderr": "NVIDIA-SMI has failed"})
    assert not row["passed"]
    assert "rc 9: NVIDIA-SMI has failed" in row["message"]


def test_xid_none_in_the_kernel_log_passes():
    row = health.xid_errors(ran("journalctl-k.healthy.txt"))
    assert row["passed"], row
    assert row["figures"]["xid_codes"] == []


def test_xid_found_fails_with_code_and_bus():
    row = health.xid_errors(ran("journalctl-k.faulty.txt"))
    assert not row["passed"]
    assert row["figures"]["xid_codes"] == [79]
    assert row["figures"]["xid_errors"] == [
        {"pci": "0000:44:00", "xid": 79, "text": "GPU has fallen off the bus"}
    ]
    assert "codes [79]" in row["message"] and "PCI:0000:44:00" in row["message"]


def test_xid_allowed_codes_are_not_counted():
    row = health.xid_errors(ran("journalctl-k.faulty.txt"), [79])
    assert row["passed"]
    assert row["figures"]["threshold"] == [79]


def test_xid_fails_when_the_kernel_log_cannot_be_read():
    row = health.xid_errors({"rc": 1, "stdout": "", "stderr": "No journal files were found."})
    assert not row["passed"]
    assert "No journal files were found." in row["message"]


def test_dcgm_diag_all_pass_passes():
    row = health.dcgm_diag(ran("dcgmi-diag.healthy.txt"), 3)
    assert row["passed"], row
    assert row["figures"]["tests"]["Denylist"] == "Pass"
    assert len(row["figures"]["tests"]) == 9
    assert row["figures"]["failed"] == []


def test_dcgm_diag_failed_test_fails_with_its_warning():
    row = health.dcgm_diag(ran("dcgmi-diag.faulty.txt", rc=226), 2)
    assert not row["passed"]
    assert row["figures"]["failed"] == ["PCIe"]
    assert row["figures"]["warning"].startswith("GPU 0GPU 0's NvLink link 0 is currently down")
    assert "dcgmi diag -r 2 failed PCIe" in row["message"]


def test_dcgm_diag_without_a_table_fails():
    row = health.dcgm_diag({"rc": 1, "stdout": "", "msg": "[Errno 2] No such file or directory"})
    assert not row["passed"]
    assert "No such file or directory" in row["message"]


@pytest.mark.parametrize("check", ["dcgm_health", "dcgm_diag"])
def test_not_checked_rows_pass_and_say_why(check):
    row = health.not_checked(check, "dcgm_enabled is false: DCGM is not installed")
    assert row == {
        "check": check,
        "passed": True,
        "figures": {"skipped": "dcgm_enabled is false: DCGM is not installed"},
        "message": "",
    }


def test_throttling_busy_gpu_without_slowdown_passes():
    row = health.throttling(ran("nvidia-smi-q-performance.healthy.txt"), FAULTS, 10)
    assert row["passed"], row
    assert row["figures"]["gpus"] == [{"gpu": 0, "bus_id": "00000000:03:00.0", "active": []}]
    assert row["figures"]["threshold"] == FAULTS
    assert row["message"] == ""


def test_throttling_reads_a_whole_nvidia_smi_log_as_one_gpu():
    # The whole `nvidia-smi -q -d PERFORMANCE` of the H100 (docs/results/2026-11-25-h100) starts
    # with the log's header (Timestamp, Driver Version, CUDA Version, Attached GPUs). Read as a
    # GPU of its own, it failed the check there: "No clock reasons shown for GPU 0 (bus id not
    # shown)".
    row = health.throttling(ran("nvidia-smi-q-performance.h100-idle.txt"), FAULTS, 10)
    assert row["passed"], row
    assert row["figures"]["gpus"] == [{"gpu": 0, "bus_id": "00000000:00:06.0", "active": ["Idle"]}]


def test_throttling_idle_is_not_a_fault():
    row = health.throttling(ran("nvidia-smi-q-performance.idle.txt"), FAULTS)
    assert row["passed"], row
    assert row["figures"]["gpus"][0]["active"] == ["Idle"]


def test_throttling_power_brake_fails_and_names_the_gpu():
    row = health.throttling(ran("nvidia-smi-q-performance.faulty.txt"), FAULTS)
    assert not row["passed"]
    assert row["figures"]["slowed"] == [
        "GPU 0 (bus id not shown): HW Slowdown, HW Power Brake Slowdown"
    ]
    assert "HW Power Brake" in row["message"] and "GPU 0" in row["message"]


def test_throttling_reasons_outside_the_threshold_are_reported_not_failed():
    row = health.throttling(ran("nvidia-smi-q-performance.faulty.txt"), ["SW Thermal Slowdown"])
    assert row["passed"]
    assert row["figures"]["gpus"][0]["active"] == ["HW Slowdown", "HW Power Brake Slowdown"]


def test_throttling_names_the_slowed_gpu_among_several():
    # nvidia-smi -q prints one "GPU <bus id>" block after another (choderalab/perses#613,
    # NVIDIA/k8s-device-plugin#110); two real readings under such headers.
    text = (
        "GPU 00000000:03:00.0\n"
        + (FIXTURES / "nvidia-smi-q-performance.idle.txt").read_text()
        + "\nGPU 00000000:1E:00.0\n"
        + (FIXTURES / "nvidia-smi-q-performance.faulty.txt").read_text()
    )
    row = health.throttling({"rc": 0, "stdout": text, "stderr": ""}, FAULTS)
    assert not row["passed"]
    assert [g["bus_id"] for g in row["figures"]["gpus"]] == ["00000000:03:00.0", "00000000:1E:00.0"]
    assert row["figures"]["slowed"] == [
        "GPU 1 (00000000:1E:00.0): HW Slowdown, HW Power Brake Slowdown"
    ]


def test_throttling_fails_when_the_load_could_not_run():
    row = health.throttling({"rc": 3, "stdout": "", "stderr": "torch sees no GPU: no load"}, FAULTS)
    assert not row["passed"]
    assert "rc 3: torch sees no GPU" in row["message"]


def test_throttling_fails_when_no_reason_is_shown():
    row = health.throttling(ran("nvidia-smi-nvlink-s.healthy.txt"), FAULTS)
    assert not row["passed"]
    assert "No clock reasons shown" in row["message"]


def test_the_query_fields_are_the_columns_of_the_fixtures():
    # The fixtures' CSV is a real layout (tests/fixtures/health/SOURCES.md) in this column order.
    assert health.GPU_FIELDS == (
        "index",
        "pci.bus_id",
        "ecc.errors.uncorrected.volatile.total",
        "ecc.errors.uncorrected.aggregate.total",
        "pcie.link.gen.current",
        "pcie.link.gen.max",
        "pcie.link.width.current",
        "pcie.link.width.max",
    )


def test_ecc_without_uncorrectable_errors_passes():
    row = health.ecc_uncorrectable(ran("nvidia-smi-query-gpu-health.healthy.txt"), 0)
    assert row["passed"], row
    assert [(g["gpu"], g["volatile"], g["aggregate"]) for g in row["figures"]["gpus"]] == [
        (str(i), 0, 0) for i in range(4)
    ]


def test_ecc_uncorrectable_errors_fail_and_name_the_gpu():
    row = health.ecc_uncorrectable(ran("nvidia-smi-query-gpu-health.ecc.txt"), 0)
    assert not row["passed"]
    assert row["figures"]["failing"] == [
        "GPU 2 (00000000:47:00.0): 2 since the driver loaded, 3 over its lifetime"
    ]
    assert "verify_ecc_max_uncorrected = 0" in row["message"]


def test_ecc_threshold_tolerates_that_many_errors():
    assert health.ecc_uncorrectable(ran("nvidia-smi-query-gpu-health.ecc.txt"), 2)["passed"]


def test_ecc_not_shown_fails():
    # A GPU without ECC shows "[N/A]" in the CSV (Azure/azhpc-diagnostics' tests skip on it).
    text = "0, 00000000:07:00.0, [N/A], [N/A], 4, 4, 16, 16\n"
    row = health.ecc_uncorrectable({"rc": 0, "stdout": text, "stderr": ""})
    assert not row["passed"]
    assert "GPU 0 (00000000:07:00.0): [N/A]" in row["message"]


def test_pcie_link_at_its_maximum_passes():
    row = health.pcie_link(ran("nvidia-smi-query-gpu-health.healthy.txt"), 0, 0, 10)
    assert row["passed"], row
    assert row["figures"]["gpus"][0] == {
        "gpu": "0",
        "bus_id": "00000000:07:00.0",
        "gen": 4,
        "gen_max": 4,
        "width": 16,
        "width_max": 16,
    }


def test_pcie_link_narrower_than_its_maximum_fails():
    row = health.pcie_link(ran("nvidia-smi-query-gpu-health.pcie.txt"))
    assert not row["passed"]
    assert row["figures"]["failing"] == ["GPU 1 (00000000:0F:00.0): Gen 4 of 4, x8 of x16"]
    assert "verify_pcie_width_below_max = 0" in row["message"]


def test_pcie_link_thresholds_tolerate_that_many_lanes_or_generations():
    assert health.pcie_link(ran("nvidia-smi-query-gpu-health.pcie.txt"), 0, 8)["passed"]
    slower = "0, 00000000:07:00.0, 0, 0, 3, 4, 16, 16\n"
    result = {"rc": 0, "stdout": slower, "stderr": ""}
    assert not health.pcie_link(result, 0, 8)["passed"]
    assert health.pcie_link(result, 1, 0)["passed"]


def test_pcie_link_fails_when_the_load_could_not_run():
    result = {"rc": 3, "stdout": "", "stderr": "torch sees no GPU: no load, nothing read"}
    row = health.pcie_link(result)
    assert not row["passed"]
    assert "rc 3: torch sees no GPU" in row["message"]


def test_the_load_script_splits_its_commands_and_reports_each_read():
    spec = importlib.util.spec_from_file_location(
        "verify_gpu_load", ROOT / "playbooks/files/verify_gpu_load.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    argv = ["verify_gpu_load.py", "10", "--", "echo", "a b", "--", "sh", "-c", "echo x >&2; exit 4"]
    seconds, commands = script.commands(argv)
    assert (seconds, commands) == (10.0, [["echo", "a b"], ["sh", "-c", "echo x >&2; exit 4"]])
    reads = json.loads(script.read(commands))["reads"]
    assert reads == [
        {"argv": ["echo", "a b"], "rc": 0, "stdout": "a b\n", "stderr": ""},
        {"argv": ["sh", "-c", "echo x >&2; exit 4"], "rc": 4, "stdout": "", "stderr": "x\n"},
    ]


# remapped_rows reads verify_memory_errors.py's JSON (the format is the script's own): one GPU per
# entry, remapped rows on Ampere and newer, retired pages before. The pending reading carries the
# values of leptonai/gpud#80's real "Remapped Rows" block (Uncorrectable Error 4, Pending Yes).
def memory(*gpus: dict, rc: int = 0) -> dict:
    return {"rc": rc, "stdout": json.dumps({"gpus": list(gpus)}), "stderr": ""}


def remap(index: int, unc: int = 0, pending: bool = False, failure: bool = False) -> dict:
    rows = {"correctable": 0, "uncorrectable": unc, "pending": pending, "failure": failure}
    return {"index": index, "bus_id": f"00000000:0{index}:00.0", "remapped_rows": rows}


def test_remapped_rows_pass_with_no_pending_remap_and_no_failure():
    row = health.remapped_rows(memory(remap(0), remap(1, unc=2)))
    assert row["passed"] and row["message"] == ""
    assert row["figures"]["gpus"]["1"]["uncorrectable"] == 2
    assert row["figures"]["threshold"] == {"allow_pending": False}


def test_a_pending_remap_fails_unless_allowed_and_names_the_gpu():
    reading = memory(remap(0), remap(2, unc=4, pending=True))
    row = health.remapped_rows(reading)
    assert not row["passed"]
    assert row["message"].startswith("GPU 2 (00000000:02:00.0): a row remap waits for a GPU reset")
    assert health.remapped_rows(reading, allow_pending=True)["passed"]


def test_a_failed_remap_fails_even_when_pending_is_allowed():
    row = health.remapped_rows(memory(remap(1, unc=9, failure=True)), allow_pending=True)
    assert not row["passed"]
    assert "a row remap failed (9 rows remapped for uncorrectable errors)" in row["message"]
    assert "RMA" in row["message"]


def test_retired_pages_before_ampere_fail_only_when_a_retirement_is_pending():
    old = {"index": 0, "bus_id": "00000000:04:00.0"}
    settled = {**old, "retired_pages": {"single_bit": 1, "double_bit": 0, "pending": False}}
    waiting = {**old, "retired_pages": {"single_bit": 0, "double_bit": 2, "pending": True}}
    assert health.remapped_rows(memory(settled))["passed"]
    row = health.remapped_rows(memory(waiting))
    assert not row["passed"]
    assert (
        "a page retirement (2 double-bit, 0 single-bit pages) waits for a reboot" in row["message"]
    )


@pytest.mark.parametrize(
    "reading,said",
    [
        (memory(rc=1), "could not read NVML (rc 1"),
        ({"rc": 0, "stdout": "Traceback", "stderr": ""}, "its output is not JSON"),
        (memory(), "NVML lists no GPU"),
        (
            memory({"index": 0, "bus_id": "x", "error": "NVML: Unknown Error"}),
            "NVML: Unknown Error",
        ),
    ],
    ids=["script failed", "not JSON", "no GPU", "NVML error"],
)
def test_remapped_rows_fails_when_nothing_trustworthy_was_read(reading, said):
    row = health.remapped_rows(reading)
    assert not row["passed"]
    assert said in row["message"]


def test_the_memory_script_reads_remapped_rows_and_falls_back_to_retired_pages(monkeypatch, capsys):
    # A labelled stand-in of nvidia-ml-py's pynvml with the calls the script makes (names, return
    # shapes and constants as in nvidia-ml-py 13.615.71): GPU 0 remaps rows, GPU 1 (pre-Ampere)
    # answers NOT_SUPPORTED and reports retired pages instead.
    import runpy
    import types

    class NVMLError(Exception):
        def __init__(self, value):
            super().__init__(f"NVML error {value}")
            self.value = value

    fake = types.SimpleNamespace(
        NVMLError=NVMLError,
        NVML_ERROR_NOT_SUPPORTED=3,
        NVML_FEATURE_ENABLED=1,
        NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS=0,
        NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR=1,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=f"00000000:0{h}:00.0".encode()),
        nvmlDeviceGetRetiredPages=lambda h, cause: [0x1000] * (cause + 1),
        nvmlDeviceGetRetiredPagesPendingStatus=lambda h: 1,
    )

    def remapped(handle):
        if handle == 1:
            raise NVMLError(3)
        return (0, 4, 1, 0)

    fake.nvmlDeviceGetRemappedRows = remapped
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake)
    runpy.run_path(str(ROOT / "playbooks/files/verify_memory_errors.py"), run_name="__main__")
    gpus = json.loads(capsys.readouterr().out)["gpus"]
    assert gpus[0]["remapped_rows"] == {
        "correctable": 0,
        "uncorrectable": 4,
        "pending": True,
        "failure": False,
    }
    assert gpus[1] == {
        "index": 1,
        "bus_id": "00000000:01:00.0",
        "retired_pages": {"single_bit": 1, "double_bit": 2, "pending": True},
    }
    row = health.remapped_rows({"rc": 0, "stdout": json.dumps({"gpus": gpus}), "stderr": ""})
    assert not row["passed"] and "GPU 0 (00000000:00:00.0)" in row["message"]


SET = {"rc": 0, "stdout": "Health monitor systems set successfully.\n", "stderr": ""}


def test_dcgm_health_passes_when_the_watches_say_healthy():
    row = health.dcgm_health(SET, ran("dcgmi-health-c-j.healthy.json"))
    assert row["passed"] and row["message"] == ""
    assert row["figures"]["overall"] == "Healthy" and row["figures"]["incidents"] == []


def test_dcgm_health_fails_on_failure_and_names_each_incident():
    row = health.dcgm_health(SET, ran("dcgmi-health-c-j.faulty.json"))
    assert not row["passed"]
    assert row["figures"]["incidents"] == [
        "GPU 2 Memory: Failure: Detected 2 volatile double-bit ECC error(s) in GPU 2."
    ]
    assert row["message"].startswith("DCGM's health watches say Failure: GPU 2 Memory")


def test_a_warning_fails_unless_warnings_are_tolerated():
    warning = json.loads((FIXTURES / "dcgmi-health-c-j.healthy.json").read_text())
    warning["body"]["Overall Health"]["value"] = "Warning"
    result = {"rc": 0, "stdout": json.dumps(warning), "stderr": ""}
    assert not health.dcgm_health(SET, result)["passed"]
    assert health.dcgm_health(SET, result, fail_on_warning=False)["passed"]


def test_dcgm_health_fails_without_watches_or_a_host_engine():
    not_enabled = {"rc": 0, "stdout": "", "stderr": ""}
    not_enabled["stdout"] = (FIXTURES / "dcgmi-health-c.not-enabled.txt").read_text()
    row = health.dcgm_health(SET, not_enabled)
    assert not row["passed"] and "its output is not JSON" in row["message"]
    # dcgmi's own text for a host engine it cannot reach was not found: only its status is used.
    no_engine = {"rc": 255, "stdout": "", "stderr": ""}
    row = health.dcgm_health(no_engine, ran("dcgmi-health-c-j.healthy.json"))
    assert not row["passed"]
    assert "could not set DCGM's health watches (rc 255: no output)" in row["message"]


# --- hardware_floors: verify_hardware.py's figures against playbooks/vars/hardware_floors.yml ---

FLOORS = yaml.safe_load((ROOT / "playbooks/vars/hardware_floors.yml").read_text())[
    "verify_hardware_floors"
]
H200 = json.loads((FIXTURES / "verify_hardware-h200.json").read_text())
_script = importlib.util.spec_from_file_location(
    "verify_hardware", ROOT / "playbooks/files/verify_hardware.py"
)
hardware = importlib.util.module_from_spec(_script)
_script.loader.exec_module(hardware)


def measured(report: dict, rc: int = 0, table=FLOORS) -> dict:
    """What Ansible registers for the script: its JSON, each figure's interval and floor attached
    the way the script attaches them to what it measured."""
    report = hardware.attach_floors(json.loads(json.dumps(report)), table, 0.95)
    return {"rc": rc, "stdout": json.dumps(report), "stderr": ""}


def scaled(report: dict, key: str, factor: float) -> dict:
    """A copy of a reading with one figure's samples times factor."""
    changed = json.loads(json.dumps(report))
    figure = changed["gpus"][0][key]
    figure["samples"] = [x * factor for x in figure["samples"]]
    figure["median"], figure["best"] = figure["median"] * factor, figure["best"] * factor
    return changed


def test_the_floors_tables_figures_are_the_ones_the_check_reads():
    spec = yaml.safe_load((ROOT / "playbooks/vars/hardware_floors.yml").read_text())
    options = spec["verify_hardware_floors_spec"]["verify_hardware_floors"]["options"]
    figures = {*health.HARDWARE_FIGURES, health.PAIR_FIGURE, health.ALLREDUCE_FIGURE}
    assert set(options["floors"]["options"]) == figures
    for entry in FLOORS:
        assert set(entry["floors"]) <= figures, entry["model"]


def test_hardware_floors_the_real_h200_reading_passes_each_figure_against_its_floor():
    row = health.hardware_floors(measured(H200))
    assert row["passed"] and row["verdict"] == "pass" and row["message"] == ""
    (gpu,) = row["figures"]["gpus"]
    assert gpu["model"] == "H200" and row["figures"]["not_judged"] == []
    h2d = gpu["figures"]["h2d_gbs"]
    assert h2d["floor"] == 48 and h2d["kind"] == "cloud" and "Azure" in h2d["source"]
    assert h2d["verdict"] == "pass" and h2d["repeats"] == 5 and h2d["confidence"] == 0.95
    low, high = h2d["interval"]
    assert 48 < low < h2d["mean"] < high
    assert gpu["figures"]["hbm_copy_gbs"]["floor"] == 2333
    assert gpu["figures"]["gemm_bf16_tflops"]["kind"] == "measured"
    assert "Student-t interval" in row["figures"]["rule"]


def test_hardware_floors_a_figure_clearly_below_its_floor_fails_naming_gpu_figure_and_source():
    # Derived from the real reading: host-to-device halved, as a link trained at x8 of x16 gives.
    row = health.hardware_floors(measured(scaled(H200, "h2d_gbs", 0.5)))
    assert not row["passed"] and row["verdict"] == "fail"
    assert (
        "GPU 0 (NVIDIA H200) host-to-device copy 27.6 GB/s (mean of 5, 95 % interval"
        in (row["message"])
    )
    assert "vs floor 48.0 (Azure nd96isr_h200_v5.conf check_gpu_bw 48)" in row["message"]


def test_hardware_floors_a_noisy_figure_around_its_floor_is_inconclusive_not_a_pass():
    # The real bf16 samples (737.4 median) against a floor inside their spread: the mean is above
    # it, and the median too, but the interval holds it, so the reading cannot tell.
    noisy = json.loads(json.dumps(H200))
    bf16 = noisy["gpus"][0]["gemm_tflops"]["bf16"]
    table = json.loads(json.dumps(FLOORS))
    h200 = next(e for e in table if e["model"] == "H200")
    h200["floors"]["gemm_bf16_tflops"]["value"] = 740.0
    row = health.hardware_floors(measured(noisy, table=table))
    figure = row["figures"]["gpus"][0]["figures"]["gemm_bf16_tflops"]
    assert statistics.fmean(bf16["samples"]) > 740.0
    assert figure["verdict"] == "inconclusive"
    assert figure["interval"][0] < 740.0 < figure["interval"][1]
    assert row["verdict"] == "inconclusive" and not row["passed"]
    assert row["message"].startswith("Inconclusive, the floor inside the interval")
    assert "bf16 GEMM" in row["message"] and "Below the floor" not in row["message"]


def test_hardware_floors_a_model_without_floors_is_recorded_not_judged():
    other = json.loads(json.dumps(H200))
    other["gpus"][0]["name"] = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    row = health.hardware_floors(measured(other))
    assert row["passed"]
    assert row["figures"]["not_judged"] == [
        "GPU 0 (NVIDIA RTX PRO 6000 Blackwell Server Edition): no floors for this model"
    ]
    figures = row["figures"]["gpus"][0]["figures"].values()
    assert all(f["floor"] is None and f["verdict"] is None for f in figures)


def test_hardware_floors_fails_when_the_script_did_not_measure():
    failed = {"rc": 3, "stdout": '{"error": "no CUDA device"}', "stderr": "no CUDA device"}
    row = health.hardware_floors(failed)
    assert not row["passed"] and "rc 3: no CUDA device" in row["message"]
    row = health.hardware_floors(measured({"gpus": []}))
    assert not row["passed"] and "it measured no GPU" in row["message"]


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA H100 80GB HBM3", "H100 80GB HBM3 (SXM)"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
        ("NVIDIA A100-SXM4-40GB", None),
        ("NVIDIA B200", "B200"),
    ],
)
def test_hardware_floor_entries_match_the_most_specific_model(name, model):
    entry = hardware.floor_entry(name, FLOORS)
    assert (entry or {}).get("model") == model


def test_hardware_floors_judge_each_gpu_pair_by_its_source_gpus_floor():
    # The script's real output on CPU, two CPU devices standing in for a GPU pair; the table is
    # this test's own, for that "model" (the machine's architecture, as the script names it).
    def run(table):
        done = subprocess.run(
            [
                sys.executable,
                str(ROOT / "playbooks/files/verify_hardware.py"),
                *("--device", "cpu", "--cpu-devices", "2", "--repeats", "2", "--tests", "p2p"),
                *("--max-repeats", "30", "--floors", json.dumps(table)),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return {"rc": 0, "stdout": done.stdout, "stderr": ""}, json.loads(done.stdout)

    name = platform.processor() or platform.machine()
    tokens = sorted(hardware.words(name))
    floor = {"value": 0.001, "kind": "measured", "source": "t"}
    low = {"model": "cpu", "tokens": tokens, "floors": {"p2p_gbs": floor}}
    result, report = run([low])
    row = health.hardware_floors(result)
    assert row["passed"], row
    assert {(p["src"], p["dst"]) for p in row["figures"]["pairs"]} == {(0, 1), (1, 0)}
    # How many samples each took depends on this machine's noise (test_verify_hardware.py tests the
    # stopping rule on scripted samples); each is within the cap.
    assert all(2 <= p["repeats"] <= 30 for p in row["figures"]["pairs"])
    high = {**low, "floors": {"p2p_gbs": {**floor, "value": 1e6, "source": "no link reaches"}}}
    result, report = run([high])
    row = health.hardware_floors(result)
    assert not row["passed"] and row["verdict"] == "fail"
    pair = report["p2p_gbs"][0]
    assert f"GPU 0 -> GPU 1 copy ({pair['path']}) " in row["message"]
    assert "vs floor 1,000,000.0 (no link reaches)" in row["message"]


# --- nccl_tests_allreduce: all_reduce_perf against the floors' allreduce_busbw_gbs --------------

# nccl-tests 2.20.0's report of four A100-SXM4-80GB (the stand-in's fixture; its sources are in
# tests/standin/tools/standin.py): rows 32 KB to 32 MB, "Avg bus bandwidth : 93.4552".
ALLREDUCE = (ROOT / "tests/standin/tools/fixtures/all_reduce_perf.txt").read_text()


def allreduce_ran(text: str = ALLREDUCE, rc: int = 0, stderr: str = "") -> dict:
    return {"rc": rc, "stdout": text, "stderr": stderr}


def a100_floor(value: float, gpus: int = 4, size: str = "32M") -> list[dict]:
    """The floors table with one all-reduce floor for four A100 SXM4 80GB at 32 MB."""
    table = json.loads(json.dumps(FLOORS))
    (entry,) = [e for e in table if e["model"] == "A100 SXM4 80GB"]
    floor = {"gpus": gpus, "size": size, "value": value, "kind": "measured", "source": "a test"}
    entry["floors"]["allreduce_busbw_gbs"] = [floor]
    return table


def test_allreduce_floor_is_the_named_models_at_this_gpu_count():
    floor = health.allreduce_floor(allreduce_ran(), FLOORS, 8)
    assert floor["model"] == "A100 SXM4 80GB" and floor["size"] == "16G" and floor["value"] == 228
    assert "nd96amsr_a100_v4.conf check_nccl_allreduce 228.0 1 16G" in floor["source"]
    assert health.allreduce_floor(allreduce_ran(), FLOORS, 4) is None  # Azure's are for eight
    assert health.allreduce_floor(allreduce_ran(rc=127, text=""), FLOORS, 8) is None


def test_allreduce_without_a_floor_is_recorded_not_judged():
    row = health.nccl_allreduce(allreduce_ran(), None, None, 4)
    assert row["passed"] and row["message"] == ""
    figures = row["figures"]
    assert figures["busbw_gbs_at_largest_size"] == 300.51 and figures["largest_size_bytes"] == 2**25
    assert figures["floor"] is None and figures["wrong_results"] == 0
    assert figures["floor_note"] == (
        "no all-reduce floor for 4 x NVIDIA A100-SXM4-80GB in verify_hardware_floors: "
        "recorded, not judged"
    )


def cycles(*busbw: float) -> dict:
    """all_reduce_perf -b 32M -e 32M -N <len(busbw)> as the pinned nccl-tests prints it (2.19.6
    src/common.cu: with -N, the result line of each size again per cycle): the fixture's header,
    then its 32 MB line once per cycle with that cycle's out-of-place busbw, then its footer."""
    head, _, tail = ALLREDUCE.partition("       32768")
    fields = next(x for x in ALLREDUCE.splitlines() if x.split()[:1] == ["33554432"]).split()
    rows = ["  ".join([*fields[:7], f"{b:.2f}", *fields[8:]]) for b in busbw]
    return allreduce_ran(head + "\n".join(rows) + "\n" + tail[tail.index("# Out of bounds") :])


def test_allreduce_cycles_at_the_floor_size_pass_fail_or_stay_inconclusive_by_their_interval():
    floor = health.allreduce_floor(allreduce_ran(), a100_floor(90.0), 4)
    steady = cycles(95.1, 95.4, 94.9, 95.2, 95.3)
    assert not health.allreduce_unclear(steady, floor, 0.95)  # clear of 90: no more cycles
    row = health.nccl_allreduce(allreduce_ran(), [steady, {"skipped": True}], floor, 4, 0.95)
    assert row["passed"] and row["verdict"] == "pass", row["message"]
    judged = row["figures"]["at_floor_size"]
    assert judged["repeats"] == 5 and judged["samples"] == [95.1, 95.4, 94.9, 95.2, 95.3]
    assert judged["interval"][0] > 90.0 and judged["floor"] == 90.0 and judged["source"] == "a test"
    assert row["figures"]["busbw_gbs_at_floor_size"] == pytest.approx(95.18)
    assert row["figures"]["floor"] == {
        "value": 90.0, "size": "32M", "gpus": 4, "kind": "measured", "source": "a test"
    }  # fmt: skip
    low = health.allreduce_floor(allreduce_ran(), a100_floor(100.0), 4)
    row = health.nccl_allreduce(allreduce_ran(), [steady], low, 4, 0.95)
    assert not row["passed"] and row["verdict"] == "fail"
    assert "bus bandwidth at 32M across 4 x A100 SXM4 80GB 95.2 GB/s (mean of 5" in row["message"]
    assert "vs floor 100.0 (a test)" in row["message"]
    # Noisy cycles around the floor: more are run; still around it at the cap, inconclusive.
    noisy = cycles(80.0, 99.0, 86.0, 97.0, 88.0)
    assert health.allreduce_unclear(noisy, floor, 0.95)
    more = cycles(83.0, 96.0, 91.0, 85.0, 98.0)
    row = health.nccl_allreduce(allreduce_ran(), [noisy, more], floor, 4, 0.95)
    assert not row["passed"] and row["verdict"] == "inconclusive"
    assert row["figures"]["at_floor_size"]["repeats"] == 10
    assert "the floor inside the interval at the most cycles allowed" in row["message"]
    assert not health.allreduce_unclear(noisy, None, 0.95)  # no floor: nothing to make clear


def test_allreduce_fails_on_wrong_results_and_on_a_run_that_did_not_measure():
    # The 1 MB row's out-of-place #wrong set to 3.
    wrong = ALLREDUCE.replace("66.11       0", "66.11       3")
    assert wrong != ALLREDUCE
    row = health.nccl_allreduce(allreduce_ran(wrong), None, None, 4)
    assert not row["passed"] and "1 size(s) with wrong results" in row["message"]
    missing = allreduce_ran("", 127, "all_reduce_perf: error while loading shared libraries")
    row = health.nccl_allreduce(missing, None, None, 4)
    assert not row["passed"]
    assert (
        "all_reduce_perf -b 8 -e 256M -g 4 did not measure (rc 127: all_reduce_perf: error"
        in (row["message"])
    )
    floor = health.allreduce_floor(allreduce_ran(), a100_floor(90.0), 4)
    row = health.nccl_allreduce(allreduce_ran(), [missing], floor, 4)
    assert not row["passed"] and "all_reduce_perf at 32M did not measure (rc 127" in row["message"]


def test_the_filter_and_verify_hardware_py_match_a_gpu_to_the_same_floors_entry():
    names = ["NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200"]
    names += ["NVIDIA H200 NVL", "NVIDIA A100-SXM4-80GB", "NVIDIA B200", "NVIDIA L4", ""]
    for name in names:
        assert health.floor_entry(name, FLOORS) == hardware.floor_entry(name, FLOORS), name


def test_allreduce_reads_the_pinned_nccl_tests_real_report_of_one_h200():
    # nccl-tests 2.19.6 (nccl_tests_version) on one H200 (docs/results/2026-11-27-h200/logs):
    # one GPU moves nothing between GPUs, so busbw is 0, and no floor is for one GPU.
    real = (ROOT / "docs/results/2026-11-27-h200/logs/allreduce.log").read_text()
    assert health.allreduce_floor(allreduce_ran(real), FLOORS, 1) is None
    assert health.allreduce_floor(allreduce_ran(real), FLOORS, 8)["value"] == 431  # H200's
    row = health.nccl_allreduce(allreduce_ran(real), None, None, 1)
    assert row["passed"]
    assert row["figures"]["model"] == "NVIDIA H200"
    assert row["figures"]["largest_size_bytes"] == 2**29 and row["figures"]["wrong_results"] == 0


def test_textfile_metrics_name_each_check_its_verdict_and_escape_label_values():
    checks = [
        {"check": "gpu_count", "passed": True},
        {"check": "hardware_floors", "passed": False, "verdict": "inconclusive"},
        {"check": 'a "quoted"\\name', "passed": False},
    ]
    text = health.textfile(checks, at=1700000000.5)
    assert text.endswith("\n")
    lines = text.splitlines()
    assert 'gpurig_verify_check_passed{check="gpu_count",verdict="pass"} 1' in lines
    assert 'gpurig_verify_check_passed{check="hardware_floors",verdict="inconclusive"} 0' in lines
    assert 'gpurig_verify_check_passed{check="a \\"quoted\\"\\\\name",verdict="fail"} 0' in lines
    assert "gpurig_verify_passed 0" in lines and "gpurig_verify_checks 3" in lines
    assert "gpurig_verify_last_run_timestamp_seconds 1700000000.5" in lines
    assert "gpurig_verify_passed 1" in health.textfile(checks[:1], at=1).splitlines()
