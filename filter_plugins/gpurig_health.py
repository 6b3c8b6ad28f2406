"""Hardware health checks of playbooks/verify.yml: tool output in, one check row out.

Each filter takes what a task registered (a dict with rc, stdout, stderr, msg) and the check's
threshold, and returns the row verify.yml appends to verify_checks:

    {{ verify_health_nvlink_run | gpurig_health_nvlink(verify_nvlink_max_inactive) }}
    -> {'check': 'nvlink_links', 'passed': False,
        'figures': {'inactive_links': ['GPU 3 link 3', ...], 'threshold': 0, ...},
        'message': 'one line: what was measured and what to do'}

The message is empty when the check passed. Output formats (checked 2026-11-25, copied into
tests/fixtures/health/ with their sources in SOURCES.md there):
- `nvidia-smi nvlink -s`: "GPU <n>: <name> (UUID: ...)" then "Link <k>: <speed> GB/s" or
  "Link <k>: <inactive>" (Azure/azhpc-diagnostics#73, NVIDIA/k8s-test-infra#371);
- kernel log: "NVRM: Xid (PCI:<bus id>): <code>, <text>" (NVIDIA/NVSentinel#155,
  leptonai/gpud#1209);
- `dcgmi diag -r <level>`: a table of "| <test> | <Pass|Fail|Warn|Skip>[ - ...] |" rows, DCGM 4
  adding per-GPU rows "|  | GPU0: Pass |" (NVIDIA/DCGM#55, #49, #253). Its JSON form (-j) changed
  its top-level key between DCGM 3 and 4 ("DCGM GPU Diagnostic" / "DCGM Diagnostic",
  facebookresearch/gcm#38) and no real DCGM 4 JSON sample was found, so the table is read;
- `nvidia-smi -q` (here `-q -d PERFORMANCE`, choderalab/perses#613): one "GPU <bus id>" block per
  GPU, then "Name : value" lines nested by indentation; the clock slowdown reasons sit under
  "Clocks Throttle Reasons" or, in newer drivers, "Clocks Event Reasons" (NVIDIA/k8s-test-infra#691;
  XML clocks_event_reasons in 1Panel-dev/1Panel#10990), each "Active" or "Not Active"
  (NVIDIA/nvidia-docker#821, kubeflow/kubeflow#68, the README of
  l4rz/reverse-engineering-dell-idrac-to-get-rid-of-gpu-throttling);
- `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`: one line per GPU, the fields'
  values in the order asked, joined by ", " (the pasted output in NVIDIA/DCGM#263); the field names
  are those of `nvidia-smi --help-query-gpu` (quoted in netdata/netdata#10362: the ECC section's
  ecc.errors.uncorrected.{volatile,aggregate}.total and pcie.link.{gen,width}.{current,max}, the
  latter "may be reduced when the GPU is not in use", also NVIDIA/gpu-monitoring-tools#215); a
  value nvidia-smi cannot show reads "[N/A]" (not a number here).
- `dcgmi health -c -j`: {"body": {"Overall Health": {"value": "Healthy"}}, "header": [...]}
  (NVIDIA/DCGM#263, real); "Warning" and "Failure" are the other values and incidents sit under
  body.<entity group>.children.<id> (DCGM 4.6.0's dcgmi/Health.cpp, read 2026-11-25);
- remapped rows / retired pages: the JSON of playbooks/files/verify_memory_errors.py (NVML through
  nvidia-ml-py; its format is ours), since no nvidia-smi output of them was found both ways.
- GEMM, device and host copies: the JSON of playbooks/files/verify_hardware.py (torch; its format
  is ours), judged against playbooks/vars/hardware_floors.yml.
- nccl-tests' all_reduce_perf: "#  Rank  0 Group  0 Pid <pid> on <host> device  0 [<bus>] <GPU
  name>" lines, then one row per size: size count type redop root, then time algbw busbw #wrong
  out of place and the same in place; with -N, the rows again for each cycle (nccl-tests 2.20.0,
  tests/standin/tools/fixtures/all_reduce_perf.txt and its sources; -N: 2.19.6 src/common.cu).
Unit tests: tests/unit/test_health_checks.py.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterable, Mapping

NVLINK_GPU = re.compile(r"^GPU (\d+): (.*)$")
NVLINK_LINK = re.compile(r"^\s+Link (\d+): (.*?)\s*$")
NVLINK_INACTIVE = "<inactive>"
XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+),\s*(.*)$")
DCGM_ROW = re.compile(
    r"^\|\s*(?P<test>[^|]*?)\s*\|\s*(?:GPU\d+:\s*)?(?P<status>Pass|Fail|Warn|Skip)\b"
)
DCGM_WARNING = re.compile(r"^\|\s*(?:Warning)?\s*\|\s*(?P<text>.*?)\s*\|?\s*$")
DCGM_FAILING = {"Fail"}
SMI_GPU = re.compile(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
SMI_LINE = re.compile(r"^(?P<indent> *)(?P<key>[^ :][^:]*?)\s*(?::\s*(?P<value>.*?))?\s*$")
DCGM_OVERALL = "Overall Health"
THROTTLE_SECTIONS = ("Clocks Throttle Reasons", "Clocks Event Reasons")
ECC_VOLATILE = "ecc.errors.uncorrected.volatile.total"  # since the driver loaded
ECC_AGGREGATE = "ecc.errors.uncorrected.aggregate.total"  # over the GPU's lifetime
PCIE_GEN = ("pcie.link.gen.current", "pcie.link.gen.max")
PCIE_WIDTH = ("pcie.link.width.current", "pcie.link.width.max")
# The --query-gpu columns the ecc_uncorrectable and pcie_link checks read, in this order.
GPU_FIELDS = ("index", "pci.bus_id", ECC_VOLATILE, ECC_AGGREGATE, *PCIE_GEN, *PCIE_WIDTH)
NCCL_DEVICE = re.compile(r"^#\s+Rank\s+\d+\s.*?\bdevice\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$", re.M)
NCCL_ROW = re.compile(r"^\s*\d+\s+\d+(?:\s+\S+){3}(?:\s+\S+){8}\s*$", re.M)


def _row(check: str, passed: bool, figures: dict, message: str) -> dict:
    return {
        "check": check,
        "passed": passed,
        "figures": figures,
        "message": "" if passed else message,
    }


def _ran(result: Mapping) -> tuple[bool, str]:
    """Whether the command ran and exited 0, and the last line it (or Ansible) said otherwise."""
    rc = result.get("rc")
    said = (
        str(result.get("stderr") or "").strip() or str(result.get("msg") or "").strip()
    ).splitlines()
    return rc == 0, f"rc {rc}: {said[-1] if said else 'no output'}"


def _script_report(result: Mapping) -> tuple[bool, str, dict, list]:
    """One of our playbooks/files scripts' JSON: whether it ran, what it said otherwise, the
    report and its "gpus" (empty where it did not run or printed no JSON object)."""
    ran, said = _ran(result)
    try:
        report = json.loads(str(result.get("stdout") or "")) if ran else {}
    except ValueError:
        ran, said, report = False, "its output is not JSON", {}
    report = report if isinstance(report, dict) else {}
    return ran, said, report, report.get("gpus", [])


def gpu_count(pci_gpus, expected) -> dict:
    """GPUs on the PCI bus against the expected count (verify_expected_gpus)."""
    found, wanted = int(pci_gpus), int(expected)
    return _row(
        "gpu_count",
        found == wanted,
        {"pci_gpus": found, "threshold": wanted},
        f"{found} NVIDIA GPU(s) on the PCI bus, verify_expected_gpus is {wanted}: a GPU that fell "
        "off the bus or is not seated shows here; reseat or replace it, or correct the count.",
    )


def commands(nvidia_smi="nvidia-smi", journalctl="journalctl", dcgmi="dcgmi") -> dict:
    """The command behind each reading of the checks above, written once: verify.yml
    (tasks/verify_health.yml) and the Slurm health check (playbooks/files/gpurig_healthcheck.py)
    both run these. `journalctl -k -b`: the kernel's messages of the current boot
    (gist.github.com/2arunpmohan/9cc8932a1ff009e29b5b4e6e45791468, checked 2026-11-25)."""
    return {
        "kernel_log": [journalctl, "-k", "-b"],
        "nvlink": [nvidia_smi, "nvlink", "-s"],
        "performance": [nvidia_smi, "-q", "-d", "PERFORMANCE"],
        "gpu_query": [
            nvidia_smi,
            f"--query-gpu={','.join(GPU_FIELDS)}",
            "--format=csv,noheader,nounits",
        ],
        "dcgm_watches": [dcgmi, "health", "-s", "a"],
        "dcgm_health": [dcgmi, "health", "-c", "-j"],
    }


def nvlink_links(result: Mapping, max_inactive=0) -> dict:
    """Every NVLink link `nvidia-smi nvlink -s` lists is active (GPUs listing no link have none)."""
    ran, said = _ran(result)
    links: dict[str, list[str]] = {}
    gpu = None
    for line in str(result.get("stdout") or "").splitlines():
        if header := NVLINK_GPU.match(line):
            gpu = header.group(1)
            links.setdefault(gpu, [])
        elif gpu is not None and (link := NVLINK_LINK.match(line)):
            links[gpu].append(link.group(1) if link.group(2) == NVLINK_INACTIVE else "")
    inactive = [f"GPU {g} link {k}" for g, ks in links.items() for k in ks if k]
    figures = {
        "links_per_gpu": {g: len(ks) for g, ks in links.items()},
        "inactive_links": inactive,
        "threshold": int(max_inactive),
    }
    passed = ran and len(inactive) <= int(max_inactive)
    return _row(
        "nvlink_links",
        passed,
        figures,
        (
            f"NVLink link(s) down: {', '.join(inactive)} (verify_nvlink_max_inactive = "
            f"{max_inactive}). "
            # `nvidia-smi nvlink -e` prints the links' error counters
            # (GoogleCloudPlatform/cluster-toolkit#5942, checked 2026-11-25).
            "Read `nvidia-smi nvlink -e` and Fabric Manager's log; reset the GPU, then reseat or "
            "RMA it."
        )
        if ran
        else f"`nvidia-smi nvlink -s` failed ({said}).",
    )


def xid_errors(result: Mapping, allowed_codes: Iterable = ()) -> dict:
    """Xid errors in the kernel log since boot, except the codes allowed."""
    ran, said = _ran(result)
    allowed = {int(code) for code in allowed_codes or ()}
    found = [
        {"pci": m.group(1), "xid": int(m.group(2)), "text": m.group(3).strip()}
        for line in str(result.get("stdout") or "").splitlines()
        if (m := XID.search(line))
    ]
    counted = [x for x in found if x["xid"] not in allowed]
    codes = sorted({x["xid"] for x in counted})
    figures = {"xid_codes": codes, "xid_errors": counted, "threshold": sorted(allowed)}
    if not ran:
        message = f"Could not read the kernel log with `journalctl -k -b` ({said})."
    else:
        first = counted[0] if counted else {}
        message = (
            f"{len(counted)} Xid error(s) since boot, codes {codes} (first: Xid "
            f"{first.get('xid')} on "
            f'PCI:{first.get("pci")}, "{first.get("text")}"). Look the codes up in NVIDIA\'s Xid '
            "documentation, drain the node and reset or replace that GPU (verify_xid_allowed_codes "
            "lists codes to tolerate)."
        )
    return _row("xid_errors", ran and not counted, figures, message)


def dcgm_diag(result: Mapping, level=1) -> dict:
    """`dcgmi diag -r <level>`: no test failed (Warn and Skip are reported, not failed)."""
    _, said = _ran(result)
    statuses: dict[str, str] = {}
    warnings: list[str] = []
    last = None
    for line in str(result.get("stdout") or "").splitlines():
        if row := DCGM_ROW.match(line):
            test = row.group("test") or last
            last = test
            if statuses.get(test) not in DCGM_FAILING:
                statuses[test] = row.group("status")
        elif (line.startswith("| Warning") or (warnings and line.startswith("|  "))) and (
            text := DCGM_WARNING.match(line)
        ):
            warnings.append(text.group("text"))
    failed = sorted(t for t, s in statuses.items() if s in DCGM_FAILING)
    figures = {
        "level": int(level),
        "tests": statuses,
        "failed": failed,
        "warning": " ".join(warnings)[:400],
        "threshold": "no test Fail",
        "rc": result.get("rc"),
    }
    # The table decides; its exit status is only reported (no source says what it is on a Fail).
    passed = bool(statuses) and not failed
    if failed:
        message = (
            f"dcgmi diag -r {level} failed {', '.join(failed)}: "
            f"{figures['warning'] or 'see the table'}. Drain the node, rerun `dcgmi diag -r 3` and "
            "reset or replace the GPU until the failing test passes."
        )
    else:
        message = f"`dcgmi diag -r {level}` listed no test ({said}); is nvidia-dcgm running?"
    return _row("dcgm_diag", passed, figures, message)


def smi_gpus(text: str) -> list[dict]:
    """`nvidia-smi -q` text: per GPU block its bus id and every "Name : value" by its path.

    A field's path is the names of the lines it is indented under, then its own name:
    ("Clocks Throttle Reasons", "HW Slowdown", "HW Thermal Slowdown"). The fields before the
    first "GPU <bus id>" line are the log's header (Timestamp, Driver Version, CUDA Version,
    Attached GPUs), not a GPU; only output cut down to a few sections, with no such line at all,
    counts as one GPU whose bus id is its "Bus Id" field, if shown.
    """
    gpus: list[dict] = []
    gpu: dict | None = None
    headed = False  # a "GPU <bus id>" line was seen
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        if header := SMI_GPU.match(line):
            if not headed:
                gpus = []  # what came before was the log's header
                headed = True
            gpu = {"bus_id": header.group(1), "fields": {}}
            gpus.append(gpu)
            stack = []
            continue
        if not (field := SMI_LINE.match(line)):
            continue
        if gpu is None:
            gpu = {"bus_id": None, "fields": {}}
            gpus.append(gpu)
        indent, name, value = len(field.group("indent")), field.group("key"), field.group("value")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if value is not None:
            gpu["fields"][(*(n for _, n in stack), name)] = value
            if name == "Bus Id" and gpu["bus_id"] is None:
                gpu["bus_id"] = value
        stack.append((indent, name))
    return gpus


def _gpu_name(index: int, gpu: dict) -> str:
    return f"GPU {index} ({gpu['bus_id'] or 'bus id not shown'})"


def throttling(result: Mapping, fault_reasons: Iterable = (), load_seconds=0) -> dict:
    """No clock slowdown reason of fault_reasons is Active on any GPU while it is busy.

    result is what verify_gpu_load.py printed: `nvidia-smi -q -d PERFORMANCE` read during the
    load. Idle, Applications Clocks Setting, SW Power Cap and the like are reported, not failed.
    """
    ran, said = _ran(result)
    faults = list(fault_reasons)
    per_gpu, failing, unread = [], [], []
    for index, gpu in enumerate(smi_gpus(str(result.get("stdout") or ""))):
        reasons = {
            path[-1]: value
            for path, value in gpu["fields"].items()
            if any(section in path[:-1] for section in THROTTLE_SECTIONS)
        }
        active = [reason for reason, value in reasons.items() if value == "Active"]
        slowed = [reason for reason in faults if reasons.get(reason) == "Active"]
        per_gpu.append({"gpu": index, "bus_id": gpu["bus_id"], "active": active})
        if not reasons:
            unread.append(_gpu_name(index, gpu))
        elif slowed:
            failing.append(f"{_gpu_name(index, gpu)}: {', '.join(slowed)}")
    figures = {
        "gpus": per_gpu,
        "slowed": failing,
        "threshold": faults,
        "load_seconds": float(load_seconds),
    }
    if not ran or not per_gpu:
        # verify_gpu_load.py exits 3 when torch sees no GPU, else with nvidia-smi's status.
        message = (
            f"No clock reasons read under load ({said}): verify_gpu_load.py needs torch with every "
            "GPU in the environment's python (see torch_gpus_nccl) and a working nvidia-smi."
        )
    elif failing:
        # What each reason indicates: nvidia-smi(1), "Clocks Throttle Reasons" (quoted in
        # Ricks-Lab/gpu-utils#88, checked 2026-11-25).
        message = (
            f"Clocks slowed while busy on {'; '.join(failing)}. HW Power Brake: the power supply "
            "or BMC asserts the brake (PSUs, GPU power cables, the server's GPU power table); "
            "HW/SW Thermal: temperature over its limit (airflow, fans, `nvidia-smi -q -d "
            "TEMPERATURE`); fix that, or drain the node and RMA the GPU."
        )
    else:
        message = (
            f"No clock reasons shown for {', '.join(unread)} in `nvidia-smi -q -d PERFORMANCE`."
        )
    passed = ran and bool(per_gpu) and not failing and not unread
    return _row("throttling", passed, figures, message)


def gpu_csv(text: str, fields: Iterable) -> list[dict]:
    """`nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`: a dict per GPU line."""
    names = list(fields)
    return [
        dict(zip(names, (value.strip() for value in line.split(",")), strict=False))
        for line in text.splitlines()
        if line.strip()
    ]


def _number(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _csv_gpu_name(row: dict) -> str:
    return f"GPU {row.get('index')} ({row.get('pci.bus_id')})"


def ecc_uncorrectable(result: Mapping, max_uncorrected=0) -> dict:
    """Uncorrectable ECC errors since the driver loaded, per GPU, at most max_uncorrected."""
    ran, said = _ran(result)
    per_gpu, failing, unread = [], [], []
    for row in gpu_csv(str(result.get("stdout") or ""), GPU_FIELDS):
        volatile, aggregate = _number(row.get(ECC_VOLATILE)), _number(row.get(ECC_AGGREGATE))
        per_gpu.append(
            {
                "gpu": row.get("index"),
                "bus_id": row.get("pci.bus_id"),
                "volatile": volatile,
                "aggregate": aggregate,
            }
        )
        if volatile is None:
            unread.append(f"{_csv_gpu_name(row)}: {row.get(ECC_VOLATILE)}")
        elif volatile > int(max_uncorrected):
            failing.append(
                f"{_csv_gpu_name(row)}: {volatile} since the driver loaded, {aggregate} over its "
                "lifetime"
            )
    figures = {"gpus": per_gpu, "failing": failing, "threshold": int(max_uncorrected)}
    if not ran or not per_gpu:
        message = f"No ECC counters read ({said}): nvidia-smi --query-gpu failed."
    elif failing:
        # A reset is what remaps the rows of a pending remapping (NVML's nvmlDeviceGetRemappedRows
        # in cuda.bindings.nvml.device_get_remapped_rows' docs; leptonai/gpud#80), checked
        # 2026-11-25.
        message = (
            f"Uncorrectable ECC errors on {'; '.join(failing)} (verify_ecc_max_uncorrected = "
            f"{max_uncorrected}). Drain the node and reset the GPU (on A100 and later that remaps "
            "the failing rows); replace it if the errors come back."
        )
    else:
        message = f"ECC counters not shown for {', '.join(unread)}: is ECC off or unsupported?"
    passed = ran and bool(per_gpu) and not failing and not unread
    return _row("ecc_uncorrectable", passed, figures, message)


def pcie_link(result: Mapping, gen_below_max=0, width_below_max=0, load_seconds=0) -> dict:
    """Each GPU's PCIe link, read while it is busy, at its maximum generation and width."""
    ran, said = _ran(result)
    per_gpu, failing, unread = [], [], []
    for row in gpu_csv(str(result.get("stdout") or ""), GPU_FIELDS):
        gen, gen_max = (_number(row.get(name)) for name in PCIE_GEN)
        width, width_max = (_number(row.get(name)) for name in PCIE_WIDTH)
        per_gpu.append(
            {
                "gpu": row.get("index"),
                "bus_id": row.get("pci.bus_id"),
                "gen": gen,
                "gen_max": gen_max,
                "width": width,
                "width_max": width_max,
            }
        )
        if None in (gen, gen_max, width, width_max):
            unread.append(_csv_gpu_name(row))
        elif gen_max - gen > int(gen_below_max) or width_max - width > int(width_below_max):
            failing.append(
                f"{_csv_gpu_name(row)}: Gen {gen} of {gen_max}, x{width} of x{width_max}"
            )
    figures = {
        "gpus": per_gpu,
        "failing": failing,
        "threshold": {"gen_below_max": int(gen_below_max), "width_below_max": int(width_below_max)},
        "load_seconds": float(load_seconds),
    }
    if not ran or not per_gpu:
        message = (
            f"No PCIe link read under load ({said}): verify_gpu_load.py needs torch with every GPU "
            "in the environment's python (see torch_gpus_nccl) and a working nvidia-smi."
        )
    elif failing:
        # lspci -vv shows the link from the host's side: LnkCap (capable) and LnkSta (trained)
        # (tests of Azure/azhpc-diagnostics, checked 2026-11-25).
        message = (
            f"PCIe link below its maximum while busy on {'; '.join(failing)} "
            f"(verify_pcie_gen_below_max = {gen_below_max}, verify_pcie_width_below_max = "
            f"{width_below_max}). Reseat the GPU or its riser and check the slot (`lspci -vv`: "
            "LnkCap against LnkSta); replace the GPU or riser if it stays narrow or slow."
        )
    else:
        message = f"No PCIe link figures shown for {', '.join(unread)}."
    passed = ran and bool(per_gpu) and not failing and not unread
    return _row("pcie_link", passed, figures, message)


def remapped_rows(result: Mapping, allow_pending=False) -> dict:
    """No GPU has a failed row remap, nor (unless allowed) one waiting for a reset; on GPUs
    without row remapping, no page retirement waiting for a reboot. Reads the JSON of
    playbooks/files/verify_memory_errors.py (NVML, through the environment's nvidia-ml-py)."""
    ran, said = _ran(result)
    try:
        gpus = json.loads(str(result.get("stdout") or "")).get("gpus", []) if ran else []
    except ValueError:
        ran, said, gpus = False, "its output is not JSON", []
    problems = []
    for gpu in gpus:
        name = f"GPU {gpu.get('index')} ({gpu.get('bus_id', '?')})"
        rows, pages = gpu.get("remapped_rows"), gpu.get("retired_pages")
        if rows is not None:
            if rows.get("failure"):
                problems.append(
                    f"{name}: a row remap failed ({rows.get('uncorrectable')} rows remapped for "
                    "uncorrectable errors): it cannot hide more bad memory, replace it (RMA)"
                )
            elif rows.get("pending") and not allow_pending:
                problems.append(
                    f"{name}: a row remap waits for a GPU reset: drain it, then reset the GPU "
                    "(nvidia-smi -r) or reboot"
                )
        elif pages is not None:
            if pages.get("pending"):
                problems.append(
                    f"{name}: a page retirement ({pages.get('double_bit')} double-bit, "
                    f"{pages.get('single_bit')} single-bit pages) waits for a reboot"
                )
        else:
            problems.append(f"{name}: {gpu.get('error', 'NVML reported nothing')}")
    if ran and not gpus:
        problems.append("NVML lists no GPU")
    figures = {
        "gpus": {
            str(g.get("index")): g.get("remapped_rows") or g.get("retired_pages") for g in gpus
        },
        "threshold": {"allow_pending": bool(allow_pending)},
    }
    message = (
        "; ".join(problems)
        if ran
        else f"verify_memory_errors.py could not read NVML ({said}): is nvidia-ml-py installed "
        "in the environment and the driver loaded?"
    )
    return _row("remapped_rows", ran and not problems, figures, message)


def _dcgm_incidents(body: Mapping) -> list[str]:
    """'GPU 2 Memory: Failure: <message>' per system of each entity `dcgmi health -c -j` lists
    (body.<entity group>.children.<id>.children.Errors.children.<system>: value and overflow, the
    layout of DCGM 4.6.0's dcgmi/Health.cpp and dcgmi/DcgmiOutput.h)."""
    found = []
    for group, entities in body.items():
        if group == DCGM_OVERALL or not isinstance(entities, Mapping):
            continue
        for entity, node in (entities.get("children") or {}).items():
            errors = ((node.get("children") or {}).get("Errors") or {}).get("children") or {}
            for system, detail in errors.items():
                text = " ".join(detail.get("overflow") or [])
                found.append(
                    f"{group} {entity} {system}: {detail.get('value', '?')}: {text}".strip()
                )
    return found


def dcgm_health(watches: Mapping, result: Mapping, fail_on_warning=True) -> dict:
    """DCGM's background health watches (`dcgmi health -s a`, set at the start of the health
    checks) report Healthy at `dcgmi health -c -j`, or Warning when warnings are tolerated."""
    set_ok, set_said = _ran(watches)
    ran, said = _ran(result)
    overall, incidents = None, []
    if ran:
        try:
            body = json.loads(str(result.get("stdout") or "")).get("body", {})
            overall = (body.get(DCGM_OVERALL) or {}).get("value")
            incidents = _dcgm_incidents(body)
        except ValueError:
            ran, said = False, "its output is not JSON"
    accepted = {"Healthy"} | (set() if fail_on_warning else {"Warning"})
    passed = set_ok and ran and overall in accepted
    figures = {
        "overall": overall,
        "incidents": incidents,
        "threshold": sorted(accepted),
    }
    if not set_ok:
        message = (
            f"`dcgmi health -s a` could not set DCGM's health watches ({set_said}): "
            "is nvidia-dcgm running?"
        )
    elif not ran:
        message = f"`dcgmi health -c -j` failed ({said}): is nvidia-dcgm running?"
    else:
        message = (
            f"DCGM's health watches say {overall}: {'; '.join(incidents) or 'no incident listed'}."
            " Drain the node and act on each (dcgmi diag -r 3 for detail)."
        )
    return _row("dcgm_health", passed, figures, message)


# verify_hardware.py's figures, each carrying its floor from playbooks/vars/hardware_floors.yml
# (the script matches each GPU to its model's entry): floor key -> where the figure sits in a GPU's
# report (a path of keys) and what it is.
HARDWARE_FIGURES = {
    "gemm_bf16_tflops": (("gemm_tflops", "bf16"), "bf16 GEMM", "TFLOPS"),
    "gemm_fp16_tflops": (("gemm_tflops", "fp16"), "fp16 GEMM", "TFLOPS"),
    "gemm_tf32_tflops": (("gemm_tflops", "tf32"), "tf32 GEMM", "TFLOPS"),
    "gemm_fp32_tflops": (("gemm_tflops", "fp32"), "fp32 GEMM", "TFLOPS"),
    "hbm_copy_gbs": (("hbm_copy_gbs",), "device memory copy (read+write)", "GB/s"),
    "h2d_gbs": (("h2d_gbs",), "host-to-device copy", "GB/s"),
    "d2h_gbs": (("d2h_gbs",), "device-to-host copy", "GB/s"),
}


# ... and the one figure per ordered pair of GPUs, judged by the source GPU's model.
PAIR_FIGURE = "p2p_gbs"
# The all-reduce floors, by GPU count and message size (nccl_allreduce, not verify_hardware.py).
ALLREDUCE_FIGURE = "allreduce_busbw_gbs"

# A measured figure's verdict against its floor, from the Student-t interval of its mean.
PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
HARDWARE_RULE = (
    "pass when the Student-t interval of the mean lies at or above the floor, fail when it lies "
    "below, inconclusive when the floor is inside it after the most repeats allowed"
)


def verdict(figure: Mapping) -> str | None:
    """pass, fail or inconclusive for a figure with a floor; None for one without."""
    floor = figure.get("floor")
    if not floor:
        return None
    low, high = (float(x) for x in figure.get("interval") or (math.nan, math.nan))
    if low >= float(floor["value"]):
        return PASS
    if high < float(floor["value"]):
        return FAIL
    return INCONCLUSIVE  # the floor inside the interval, or no interval (NaN compares false)


def worst(verdicts: Iterable[str | None]) -> str:
    found = set(verdicts)
    return FAIL if FAIL in found else INCONCLUSIVE if INCONCLUSIVE in found else PASS


def _judged(figure: Mapping, what: str, unit: str) -> tuple[dict, str]:
    floor = figure.get("floor") or {}
    low, high = (float(x) for x in figure.get("interval") or (math.nan, math.nan))
    row = {
        "verdict": verdict(figure),
        "mean": float(figure["mean"]),
        "interval": [low, high],
        "confidence": figure.get("confidence"),
        "repeats": len(figure.get("samples", [])),
        "median": float(figure["median"]),
        "best": float(figure["best"]),
        "samples": figure.get("samples", []),
        "unit": unit,
        "floor": float(floor["value"]) if floor else None,
        "kind": floor.get("kind"),
        "source": floor.get("source"),
    }
    said = (
        f"{what} {row['mean']:,.1f} {unit} (mean of {row['repeats']}, "
        f"{100 * float(row['confidence'] or 0):.0f} % interval {low:,.1f} to {high:,.1f}) "
        f"vs floor {row['floor']:,.1f} ({row['source']})"
        if floor
        else ""
    )
    return row, said


def hardware_floors(result: Mapping) -> dict:
    """Each GPU's figures from playbooks/files/verify_hardware.py against the floors it carries
    (playbooks/vars/hardware_floors.yml, its model's entry): each figure passes, fails or is
    inconclusive by its interval (HARDWARE_RULE), and the check takes the worst verdict. A model
    without an entry, and a figure without a floor, are recorded unjudged, and the figures say
    so. An inconclusive check does not pass."""
    ran, said, report, gpus = _script_report(result)
    if not ran or not gpus:
        reason = said if not ran else "it measured no GPU"
        row = _row(
            "hardware_floors",
            False,
            {"error": reason},
            f"verify_hardware.py did not measure the GPUs ({reason}).",
        )
        return {**row, "verdict": FAIL}
    figures, flagged, unjudged = [], {FAIL: [], INCONCLUSIVE: []}, []
    for gpu in gpus:
        name = str(gpu.get("name", "?"))
        rows = {}
        for key, (path, what, unit) in HARDWARE_FIGURES.items():
            found = gpu
            for part in path:
                found = found.get(part, {}) if isinstance(found, Mapping) else {}
            if not found:
                continue
            rows[key], said = _judged(found, f"GPU {gpu.get('index')} ({name}) {what}", unit)
            if rows[key]["verdict"] in flagged:
                flagged[rows[key]["verdict"]].append(said)
        if gpu.get("model") is None:
            unjudged.append(f"GPU {gpu.get('index')} ({name}): no floors for this model")
        figures.append(
            {
                "index": gpu.get("index"),
                "name": name,
                "uuid": gpu.get("uuid"),
                "model": gpu.get("model"),
                "figures": rows,
            }
        )
    pairs = []
    for pair in report.get("p2p_gbs", []):
        what = f"GPU {pair.get('src')} -> GPU {pair.get('dst')} copy ({pair.get('path')})"
        row, said = _judged(pair, what, "GB/s")
        pairs.append(
            {"src": pair.get("src"), "dst": pair.get("dst"), "path": pair.get("path"), **row}
        )
        if row["verdict"] in flagged:
            flagged[row["verdict"]].append(said)
    overall = worst(
        [r["verdict"] for f in figures for r in f["figures"].values()]
        + [p["verdict"] for p in pairs]
    )
    summary = {
        "rule": HARDWARE_RULE,
        "verdict": overall,
        "pairs": pairs,
        "gpus": figures,
        "not_judged": unjudged,
    }
    message = []
    if flagged[FAIL]:
        message.append(
            "Below the floor: " + "; ".join(flagged[FAIL]) + ". Reseat or replace the GPU, "
            "check its PCIe link and power, or rerun with --tags hardware to confirm."
        )
    if flagged[INCONCLUSIVE]:
        message.append(
            "Inconclusive, the floor inside the interval at the most repeats allowed "
            "(verify_hardware_max_repeats): " + "; ".join(flagged[INCONCLUSIVE]) + ". "
            "Something else loaded the GPU or the figure sits at its floor: rerun on an idle "
            "node with --tags hardware."
        )
    return {
        **_row("hardware_floors", overall == PASS, summary, " ".join(message)),
        "verdict": overall,
    }


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _drift(values: Iterable) -> tuple[float | None, float | None, float | None]:
    """A series' first and last quarter medians (its very first window left out) and the drop
    between them; the drop is None with fewer than 5 windows."""
    windows = [float(w) for w in values]
    quarter = max(1, (len(windows) - 1) // 4)
    early, late = windows[1 : 1 + quarter], windows[-quarter:]
    drop = 1 - _median(late) / _median(early) if len(windows) >= 5 else None
    return (_median(early) if early else None), (_median(late) if late else None), drop


def burn_in(result: Mapping, fault_reasons: Iterable = (), max_drop=0.05) -> dict:
    """playbooks/files/verify_burnin.py's run judged: a GPU fails on an error of the load, an Xid
    event, a rise of its uncorrectable ECC count, a fault clock reason in any reading (as
    nvidia-smi names them: verify_throttle_fault_reasons), or throughput that drifts down: the
    median of the last quarter of its windows more than max_drop below the median of the first
    quarter (the very first window left out: clocks are still ramping there). The all-reduce held
    beside the products (2+ GPUs) is judged by the same drift rule on its bus bandwidth. Fewer
    than 5 windows cannot show a drift, and fail the check: the burn-in was too short for its
    window."""
    ran, said, report, gpus = _script_report(result)
    if not ran or not gpus:
        reason = said if not ran else "it loaded no GPU"
        return _row(
            "burn_in", False, {"error": reason}, f"verify_burnin.py did not run ({reason})."
        )
    faults, limit = set(fault_reasons), float(max_drop)
    problems = [f"the load failed: {error}" for error in report.get("errors", [])]
    figures = []
    for gpu in gpus:
        name = f"GPU {gpu.get('index')} ({gpu.get('name', '?')})"
        windows = gpu.get("windows", [])
        first, last, drop = _drift(windows)
        samples = gpu.get("samples", [])
        seen: dict[str, int] = {}
        for sample in samples:
            for reason in sample.get("reasons", []):
                seen[reason] = seen.get(reason, 0) + 1
        ecc = gpu.get("ecc_uncorrected", {})
        rose = None not in (ecc.get("before"), ecc.get("after")) and ecc["after"] > ecc["before"]
        figures.append(
            {
                "index": gpu.get("index"),
                "name": gpu.get("name"),
                "windows": len(windows),
                "tflops_first": first,
                "tflops_last": last,
                "drop": drop,
                "sm_mhz": [s.get("sm_mhz") for s in samples],
                "power_w_max": max((s.get("power_w", 0) for s in samples), default=None),
                "temp_c_max": max((s.get("temp_c", 0) for s in samples), default=None),
                "reasons_seen": seen,
                "xid": gpu.get("xid", []),
                "ecc_uncorrected": ecc,
            }
        )
        if drop is None:
            problems.append(
                f"{name}: {len(windows)} throughput windows, too few to show a drift (5 or more: "
                "lengthen verify_burnin_seconds or shorten verify_burnin_window_seconds)"
            )
        elif drop > limit:
            problems.append(
                f"{name}: throughput fell {100 * drop:.1f} % over the burn-in "
                f"({first:,.1f} -> {last:,.1f} TFLOPS), more than "
                f"verify_burnin_max_drop {limit:g}"
            )
        problems += [
            f"{name}: Xid {x.get('xid')} at {x.get('t', 0):.0f} s" for x in gpu.get("xid", [])
        ]
        if rose:
            problems.append(
                f"{name}: uncorrectable ECC errors rose {ecc['before']} -> {ecc['after']}"
            )
        for reason in sorted(faults & set(seen)):
            problems.append(f"{name}: {reason} in {seen[reason]} of {len(samples)} readings")
    allreduce = report.get("allreduce")
    if allreduce:
        windows = allreduce.get("windows", [])
        first, last, drop = _drift(windows)
        allreduce = {
            "mib": allreduce.get("mib"),
            "devices": allreduce.get("devices"),
            "method": allreduce.get("method"),
            "windows": len(windows),
            "busbw_first": first,
            "busbw_last": last,
            "drop": drop,
        }
        if drop is None:
            problems.append(
                f"the all-reduce: {len(windows)} bandwidth windows, too few to show a drift (5 or "
                "more: lengthen verify_burnin_seconds or shorten verify_burnin_window_seconds)"
            )
        elif drop > limit:
            problems.append(
                f"the all-reduce across {allreduce['devices']} GPUs: bus bandwidth fell "
                f"{100 * drop:.1f} % over the burn-in ({allreduce['busbw_first']:,.1f} -> "
                f"{allreduce['busbw_last']:,.1f} GB/s), more than verify_burnin_max_drop {limit:g}"
            )
    summary = {
        "rule": (
            "no error, Xid, ECC rise or fault clock reason; throughput (and, with 2+ GPUs, the "
            f"all-reduce's bus bandwidth) drop <= {limit:g}"
        ),
        "allreduce": allreduce,
        "seconds": report.get("settings", {}).get("seconds"),
        "xid_watch": report.get("xid_watch"),
        "gpus": figures,
    }
    return _row(
        "burn_in",
        not problems,
        summary,
        "Burn-in: " + "; ".join(problems) + ". Drain the node and check its cooling and power.",
    )


def floor_entry(name: str, table: Iterable[Mapping]) -> Mapping | None:
    """The first entry of verify_hardware_floors whose every token is a word of the GPU's name
    (the table lists the more specific models first); verify_hardware.py matches GPUs the same
    way (tests/unit/test_health_checks.py keeps the two equal)."""
    found = set(re.findall(r"[A-Z0-9]+", name.upper()))
    for entry in table:
        if all(token.upper() in found for token in entry.get("tokens", [])):
            return entry
    return None


def _allreduce(result: Mapping | None) -> dict:
    """all_reduce_perf's run: whether it ran, its GPUs' names, its result rows (split), the
    largest size's bus bandwidth (out of place) and how many rows gave wrong results."""
    ran, said = _ran(result or {})
    text = str((result or {}).get("stdout") or "")
    rows = [m.group(0).split() for m in NCCL_ROW.finditer(text)]
    return {
        "ran": ran and bool(rows),
        "said": "it printed no result rows" if ran else said,
        "names": NCCL_DEVICE.findall(text),
        "rows": rows,
        "largest": (int(rows[-1][0]), float(rows[-1][7])) if rows else None,
        "wrong": sum(1 for r in rows if r[8] not in ("0", "N/A") or r[12] not in ("0", "N/A")),
    }


def allreduce_floor(result: Mapping, table: Iterable[Mapping], gpus) -> dict | None:
    """The all-reduce floor (verify_hardware_floors' allreduce_busbw_gbs) for the GPU model the
    run names and this node's GPU count, with its model; None when the table has none."""
    names = _allreduce(result)["names"]
    entry = floor_entry(names[0], table) if names else None
    for floor in ((entry or {}).get("floors") or {}).get(ALLREDUCE_FIGURE) or []:
        if int(floor["gpus"]) == int(gpus):
            return {**floor, "model": entry["model"]}
    return None


def _printed_size(size: str) -> int:
    """The bytes all_reduce_perf prints for a size it was given (K, M, G: powers of 1024, whole
    float elements; nccl-tests 2.19.6 src/common.cu parsesize and setupArgs)."""
    unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:].upper(), 1)
    return int(size.rstrip("KMGkmg")) * unit // 4 * 4


def _cycles(runs: Iterable[Mapping | None], size: str) -> dict:
    """The runs of all_reduce_perf at the floor's size, -b = -e with -N cycles: one result line
    per cycle (nccl-tests 2.19.6 src/common.cu, "run & print each cycle"), skipped runs left out.
    Whether every run measured, what one that did not said, the out-of-place bus bandwidth of
    each line at that size and the wrong results."""
    done = [_allreduce(r) for r in runs or () if r and not r.get("skipped")]
    samples = [
        float(row[7]) for run in done for row in run["rows"] if int(row[0]) == _printed_size(size)
    ]
    failed = [run["said"] for run in done if not run["ran"]]
    return {
        "ran": bool(done) and not failed and bool(samples),
        "said": failed[0] if failed else "it printed no result rows",
        "samples": samples,
        "wrong": sum(run["wrong"] for run in done),
    }


def cycle_figure(samples: list[float], level: float) -> dict:
    """Cycles' bus bandwidths as the hardware figures are (mean, median, best and the Student-t
    interval of the mean at `level`; NaN with fewer than two)."""
    interval = [math.nan, math.nan]
    if len(samples) >= 2:
        from scipy import stats  # on the controller: the project's environment carries SciPy

        spread = float(stats.sem(samples))
        centre = sum(samples) / len(samples)
        interval = (
            [centre, centre]
            if spread == 0
            else [float(x) for x in stats.t.interval(level, len(samples) - 1, centre, spread)]
        )
    return {
        "samples": samples,
        "mean": sum(samples) / len(samples) if samples else math.nan,
        "median": _median(samples) if samples else math.nan,
        "best": max(samples, default=math.nan),
        "interval": interval,
        "confidence": float(level),
    }


def allreduce_unclear(at_floor: Mapping | None, floor: Mapping | None, level=0.95) -> bool:
    """Whether the floor still lies inside the interval of the cycles run at its size (verify.yml
    then runs more, up to verify_hardware_max_repeats)."""
    if not floor:
        return False
    found = _cycles([at_floor], str(floor["size"]))
    figure = {**cycle_figure(found["samples"], float(level)), "floor": floor}
    return found["ran"] and verdict(figure) == INCONCLUSIVE


def nccl_allreduce(
    sweep: Mapping,
    at_floor: Iterable[Mapping | None] = (),
    floor: Mapping | None = None,
    gpus=0,
    level=0.95,
) -> dict:
    """all_reduce_perf across the node's GPUs: the sweep (8 B to 256 MB) must run with no wrong
    results; where verify_hardware_floors has a floor for this model and GPU count (Azure's
    check_nccl_allreduce: the average bus bandwidth of a run at one size), the cycles run at that
    size are judged as the hardware figures are (HARDWARE_RULE): pass, fail or inconclusive by the
    interval of their mean. Without a floor the bandwidth is recorded, not judged, and the figures
    say so."""
    swept = _allreduce(sweep)
    cycles = _cycles(at_floor, str(floor["size"]) if floor else "0")
    model = floor["model"] if floor else (swept["names"] or ["an unnamed GPU"])[0]
    figures = {
        "gpus": int(gpus),
        "model": model,
        "busbw_gbs_at_largest_size": swept["largest"][1] if swept["largest"] else None,
        "largest_size_bytes": swept["largest"][0] if swept["largest"] else None,
        "wrong_results": swept["wrong"] + cycles["wrong"],
        "floor": None,
    }
    problems, unsure = [], []
    if not swept["ran"]:
        problems.append(f"all_reduce_perf -b 8 -e 256M -g {gpus} did not measure ({swept['said']})")
    if floor is None:
        figures["floor_note"] = (
            f"no all-reduce floor for {gpus} x {model} in verify_hardware_floors: "
            "recorded, not judged"
        )
    else:
        size = floor["size"]
        figures["floor"] = {k: floor[k] for k in ("value", "size", "gpus", "kind", "source")}
        if not cycles["ran"]:
            problems.append(f"all_reduce_perf at {size} did not measure ({cycles['said']})")
        else:
            found = {**cycle_figure(cycles["samples"], float(level)), "floor": floor}
            figures["at_floor_size"], said = _judged(
                found, f"bus bandwidth at {size} across {gpus} x {model}", "GB/s"
            )
            figures["busbw_gbs_at_floor_size"] = figures["at_floor_size"]["mean"]
            judged = figures["at_floor_size"]["verdict"]
            (problems if judged == FAIL else unsure if judged == INCONCLUSIVE else []).append(said)
    if figures["wrong_results"]:
        problems.append(f"{figures['wrong_results']} size(s) with wrong results")
    overall = FAIL if problems else INCONCLUSIVE if unsure else PASS
    message = "All-reduce inside the node: " + "; ".join(problems + unsure)
    message += (
        ". Check `nvidia-smi topo -m`, NVLink/P2P state and Fabric Manager; build nccl-tests with"
        " the nccl_tests role."
        if problems
        else ": the floor inside the interval at the most cycles allowed "
        "(verify_hardware_max_repeats). Rerun on an idle node with --tags nccl_tests."
    )
    return {**_row("nccl_tests_allreduce", overall == PASS, figures, message), "verdict": overall}


def _label(value) -> str:
    """A Prometheus label value: backslash, double quote and line feed escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def textfile(checks: Iterable[Mapping], at: float | None = None) -> str:
    """verify.yml's verdicts as node-exporter textfile metrics (Prometheus' text format): one
    gpurig_verify_check_passed per check with its verdict (pass, fail, or inconclusive where the
    check has one), whether every check passed, how many ran and when."""
    checks = list(checks)
    lines = [
        "# HELP gpurig_verify_check_passed 1 when verify.yml's check passed on this node, else 0.",
        "# TYPE gpurig_verify_check_passed gauge",
    ]
    for row in checks:
        verdict = row.get("verdict") or (PASS if row["passed"] else FAIL)
        lines.append(
            f'gpurig_verify_check_passed{{check="{_label(row["check"])}",'
            f'verdict="{_label(verdict)}"}} {int(bool(row["passed"]))}'
        )
    passed = all(row["passed"] for row in checks)
    for name, help_text, value in (
        ("passed", "1 when every check of verify.yml's last run passed, else 0.", int(passed)),
        ("checks", "How many checks verify.yml's last run recorded.", len(checks)),
        (
            "last_run_timestamp_seconds",
            "When verify.yml's last run judged this node (Unix time).",
            round(time.time() if at is None else float(at), 3),
        ),
    ):
        lines += [
            f"# HELP gpurig_verify_{name} {help_text}",
            f"# TYPE gpurig_verify_{name} gauge",
            f"gpurig_verify_{name} {value}",
        ]
    return "\n".join(lines) + "\n"


def not_checked(check: str, reason: str) -> dict:
    """A check that does not apply on this host: passed, with the reason in its figures."""
    return _row(check, True, {"skipped": reason}, "")


class FilterModule:
    def filters(self):
        return {
            "gpurig_health_gpu_count": gpu_count,
            "gpurig_health_nvlink": nvlink_links,
            "gpurig_health_xid": xid_errors,
            "gpurig_health_dcgm_diag": dcgm_diag,
            "gpurig_health_throttling": throttling,
            "gpurig_health_ecc": ecc_uncorrectable,
            "gpurig_health_pcie": pcie_link,
            "gpurig_health_remapped_rows": remapped_rows,
            "gpurig_health_dcgm_health": dcgm_health,
            "gpurig_health_not_checked": not_checked,
            "gpurig_health_hardware_floors": hardware_floors,
            "gpurig_health_burn_in": burn_in,
            "gpurig_health_allreduce_floor": allreduce_floor,
            "gpurig_health_nccl_allreduce": nccl_allreduce,
            "gpurig_health_allreduce_unclear": allreduce_unclear,
            "gpurig_health_textfile": textfile,
            "gpurig_health_commands": commands,
        }
