"""filter_plugins/gpustack_health.py: each health check on real tool output, healthy and faulty.

The fixtures in tests/fixtures/health/ are real output copied from public threads (SOURCES.md
there names each); a check whose verdict were inverted fails one of the two cases.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests/fixtures/health"
spec = importlib.util.spec_from_file_location("health", ROOT / "filter_plugins/gpustack_health.py")
health = importlib.util.module_from_spec(spec)
spec.loader.exec_module(health)


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
