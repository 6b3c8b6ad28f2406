#!/usr/bin/env python3
"""gpurig-healthcheck: verify.yml's fast hardware checks as Slurm's HealthCheckProgram.

verify.yml installs it on each node with `-e verify_healthcheck_dir=DIR` (docs/PROVISIONING.md,
"Back into service"): DIR/gpurig-healthcheck, beside it gpurig_health.py (the judges verify.yml
uses), verify_memory_errors.py and healthcheck.json, the thresholds and tools of that run.
slurm.conf then names it:

    HealthCheckProgram=DIR/gpurig-healthcheck
    HealthCheckInterval=300
    HealthCheckNodeState=ANY

How Slurm runs it (slurm.conf(5); slurmd 22.05.8 as tests/integration/test_slurm_healthcheck.py
runs it): on every node each HealthCheckInterval seconds, as root, with only SLURMD_NODENAME and
PWD in its environment; killed after 60 s; at slurmd's start, run again and again until it exits 0
before the node registers. So it:
- runs the checks that need no load and take seconds: gpu_count (the PCI bus against
  verify_expected_gpus), xid_errors, nvlink_links, ecc_uncorrectable, remapped_rows and, where DCGM
  is installed, dcgm_health; each command is gpurig_health.commands' and has its share of a 45 s
  budget, so a hung nvidia-smi fails its check instead of getting the program killed;
- drains the node with the failed checks as the reason ("gpurig: <checks>: <first message>"),
  unless someone else drained it (their reason stays);
- resumes the node when every check passes again, only if the drain is its own;
- exits 0 whatever it found: the verdict is the node's state, not the exit status.

`gpurig-healthcheck --report` runs the checks only, prints them as JSON (the rows verify.yml
records) and exits 1 when one failed: a look by hand, with no Slurm.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Installed, gpurig_health.py sits beside this file; in the repository, under filter_plugins/.
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "filter_plugins")]
import gpurig_health as health  # noqa: E402

REASON_PREFIX = "gpurig:"
BUDGET_S = 45.0  # of the 60 s Slurm allows; the rest is for sinfo and scontrol
PCI_GPU_CLASSES = ("0x0300", "0x0302")  # VGA, 3D controller (as verify.yml counts them)
NVIDIA = "0x10de"
# slurmd gives no PATH; these are where Debian's, Ubuntu's and NVIDIA's packages put the tools.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SETTINGS = (
    "verify_pci_devices_dir",
    "verify_expected_gpus",
    "verify_nvidia_smi",
    "verify_journalctl",
    "verify_dcgmi",
    "verify_dcgm",
    "verify_python_env_path",
    "verify_xid_allowed_codes",
    "verify_nvlink_max_inactive",
    "verify_ecc_max_uncorrected",
    "verify_remapped_rows_allow_pending",
    "verify_dcgm_health_fail_on_warning",
)


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def run(self, argv: list[str]) -> dict:
        """argv's result as Ansible's command module registers it (rc, stdout, stderr, msg)."""
        left = self.end - time.monotonic()
        if left <= 0:
            return {"rc": None, "stdout": "", "stderr": "", "msg": "not run: out of time"}
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=left, check=False)
        except subprocess.TimeoutExpired:
            return {"rc": None, "stdout": "", "stderr": "", "msg": f"timed out after {left:.0f} s"}
        except OSError as error:
            return {"rc": None, "stdout": "", "stderr": "", "msg": f"{argv[0]}: {error}"}
        return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr, "msg": ""}


def pci_gpus(devices: Path) -> int:
    """NVIDIA GPUs on the PCI bus (sysfs' vendor and class of each device)."""
    count = 0
    for device in devices.iterdir():
        try:
            vendor = (device / "vendor").read_text().strip()
            klass = (device / "class").read_text().strip()
        except OSError:
            continue
        count += vendor == NVIDIA and klass.startswith(PCI_GPU_CLASSES)
    return count


def checks(settings: dict, seconds: float = BUDGET_S) -> list[dict]:
    """The fast checks' rows, judged as verify.yml judges them."""
    clock = Deadline(seconds)
    commands = health.commands(
        settings["verify_nvidia_smi"], settings["verify_journalctl"], settings["verify_dcgmi"]
    )
    python = str(Path(settings["verify_python_env_path"]) / "bin" / "python")
    rows = [
        health.gpu_count(
            pci_gpus(Path(settings["verify_pci_devices_dir"])), settings["verify_expected_gpus"]
        ),
        health.xid_errors(clock.run(commands["kernel_log"]), settings["verify_xid_allowed_codes"]),
        health.nvlink_links(clock.run(commands["nvlink"]), settings["verify_nvlink_max_inactive"]),
        health.ecc_uncorrectable(
            clock.run(commands["gpu_query"]), settings["verify_ecc_max_uncorrected"]
        ),
        health.remapped_rows(
            clock.run([python, str(HERE / "verify_memory_errors.py")]),
            settings["verify_remapped_rows_allow_pending"],
        ),
    ]
    if settings["verify_dcgm"]:
        watches = clock.run(commands["dcgm_watches"])
        rows.append(
            health.dcgm_health(
                watches,
                clock.run(commands["dcgm_health"]),
                settings["verify_dcgm_health_fail_on_warning"],
            )
        )
    return rows


def load(path: Path) -> tuple[dict, list[dict]]:
    """The settings, or none and the row saying why they cannot be read."""
    try:
        settings = json.loads(path.read_text())
        missing = [name for name in SETTINGS if name not in settings]
    except (OSError, ValueError, TypeError) as error:
        settings, missing = {}, [f"a readable JSON object ({error})"]
    if not missing:
        return settings, []
    message = (
        f"{path}: missing {', '.join(missing)}; run verify.yml with verify_healthcheck_dir again "
        "to write it"
    )
    return {}, [
        {"check": "healthcheck_settings", "passed": False, "figures": {}, "message": message}
    ]


def reason(failed: list[dict]) -> str:
    names = ", ".join(row["check"] for row in failed)
    return " ".join(f"{REASON_PREFIX} {names}: {failed[0]['message']}".split())[:250]


def slurm_state(node: str, clock: Deadline) -> tuple[str, str] | None:
    """The node's state as sinfo shows it (idle, drained, draining, ...) and its reason."""
    shown = clock.run(["sinfo", "--noheader", "--Node", f"--nodes={node}", "--format=%T|%E"])
    line = (shown["stdout"] or "").splitlines()[:1]
    if shown["rc"] != 0 or not line:
        return None
    state, _, why = line[0].partition("|")
    return state.strip(), why.strip()


def act(node: str, rows: list[dict]) -> str:
    """Drain or resume the node as the rows say; what was done, in words."""
    clock = Deadline(10)
    failed = [row for row in rows if not row["passed"]]
    found = slurm_state(node, clock)
    if found is None:
        return f"sinfo does not show node {node}: nothing changed"
    state, why = found
    ours = why.startswith(REASON_PREFIX)
    drained = "drain" in state
    if failed and drained and not ours:
        return f"already drained by someone else ({why}): left as it is"
    if failed and not (drained and why == reason(failed)):
        update = ["State=DRAIN", f"Reason={reason(failed)}"]
    elif not failed and drained and ours:
        update = ["State=RESUME"]
    else:
        return f"{state}: nothing to change"
    done = clock.run(["scontrol", "update", f"NodeName={node}", *update])
    if done["rc"] != 0:
        return f"scontrol {' '.join(update)} failed: {(done['stderr'] or done['msg']).strip()}"
    return " ".join(update)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", type=Path, default=HERE / "healthcheck.json")
    parser.add_argument("--node", default=os.environ.get("SLURMD_NODENAME"))
    parser.add_argument("--report", action="store_true", help="check only, print JSON")
    options = parser.parse_args(argv)
    os.environ.setdefault("PATH", DEFAULT_PATH)
    settings, rows = load(options.settings)
    rows = rows or checks(settings)
    failed = [row["check"] for row in rows if not row["passed"]]
    if options.report:
        print(json.dumps({"checks": rows}, indent=2))
        return 1 if failed else 0
    node = options.node or socket.gethostname().split(".")[0]
    done = act(node, rows)
    print(f"gpurig-healthcheck: {node}: failed {', '.join(failed) or 'none'}; {done}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
