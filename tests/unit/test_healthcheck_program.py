"""playbooks/files/gpurig_healthcheck.py's checks on stand-in tools (tests/standin/tools), without
Slurm: each fault fails its own check and no other, a hung tool fails its check within the budget,
and settings it cannot read fail the run with the reason. Its draining and resuming under a real
slurmd: tests/integration/test_slurm_healthcheck.py."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "playbooks" / "files" / "gpurig_healthcheck.py"
_spec = importlib.util.spec_from_file_location("standin", ROOT / "tests/standin/tools/standin.py")
standin = sys.modules.setdefault("standin", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(standin)
_spec = importlib.util.spec_from_file_location("gpurig_healthcheck", PROGRAM)
program = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(program)

CHECKS = [
    "gpu_count",
    "xid_errors",
    "nvlink_links",
    "ecc_uncorrectable",
    "remapped_rows",
    "dcgm_health",
]
THRESHOLDS = {
    "verify_dcgm": True,
    "verify_xid_allowed_codes": [],
    "verify_nvlink_max_inactive": 0,
    "verify_ecc_max_uncorrected": 0,
    "verify_remapped_rows_allow_pending": False,
    "verify_dcgm_health_fail_on_warning": True,
}


def settings_for(root: Path, faults: set[str], **given) -> Path:
    built = standin.build_root(root, faults)
    settings = {name: built[name] for name in program.SETTINGS if name in built}
    path = root / "healthcheck.json"
    path.write_text(json.dumps({**settings, **THRESHOLDS, **given}))
    return path


def report(path: Path) -> tuple[int, dict]:
    done = subprocess.run(
        [sys.executable, str(PROGRAM), "--report", "--settings", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, {row["check"]: row for row in json.loads(done.stdout)["checks"]}


def test_a_healthy_node_passes_every_check(tmp_path):
    rc, rows = report(settings_for(tmp_path, set()))
    assert rc == 0
    assert list(rows) == CHECKS
    assert [name for name, row in rows.items() if not row["passed"]] == []


@pytest.mark.parametrize("check", CHECKS)
def test_a_fault_fails_its_check_and_no_other(tmp_path, check):
    rc, rows = report(settings_for(tmp_path, {check}))
    assert rc == 1
    assert [name for name, row in rows.items() if not row["passed"]] == [check]
    assert rows[check]["message"]


def test_without_dcgm_its_health_is_not_read(tmp_path):
    rc, rows = report(settings_for(tmp_path, {"dcgm_health"}, verify_dcgm=False))
    assert rc == 0
    assert "dcgm_health" not in rows


def test_a_hung_tool_fails_its_check_within_the_budget(tmp_path):
    hung = tmp_path / "nvidia-smi"
    hung.write_text("#!/bin/sh\nexec sleep 60\n")
    hung.chmod(0o755)
    path = settings_for(tmp_path / "root", set(), verify_nvidia_smi=str(hung))
    rows = {row["check"]: row for row in program.checks(json.loads(path.read_text()), 2)}
    assert "rc None: timed out after 2 s" in rows["nvlink_links"]["message"]
    # The budget is spent: what comes after is not run, and fails too.
    assert "not run: out of time" in rows["remapped_rows"]["message"]
    assert rows["xid_errors"]["passed"]


def test_settings_it_cannot_read_fail_the_run_and_say_why(tmp_path):
    path = tmp_path / "healthcheck.json"
    path.write_text(json.dumps({"verify_expected_gpus": 4}))
    rc, rows = report(path)
    assert rc == 1
    assert list(rows) == ["healthcheck_settings"]
    message = rows["healthcheck_settings"]["message"]
    assert f"{path}: missing verify_pci_devices_dir, verify_nvidia_smi," in message
    assert "run verify.yml with verify_healthcheck_dir again" in message
    path.write_text("{")
    assert "a readable JSON object" in report(path)[1]["healthcheck_settings"]["message"]


def test_the_drain_reason_names_every_failed_check_on_one_line():
    failed = [
        {"check": "xid_errors", "message": "Xid 79\non GPU 2"},
        {"check": "nvlink_links", "message": "link down"},
    ]
    assert program.reason(failed) == "gpurig: xid_errors, nvlink_links: Xid 79 on GPU 2"
