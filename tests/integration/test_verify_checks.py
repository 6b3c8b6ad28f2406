"""playbooks/verify.yml's checks in both directions, against this machine with stand-in tools.

verify.yml runs over a local connection with every tool and file it reads pointed (by its
verify_* variables) at tests/standin/tools: outputs copied from the real tools, chosen per check by
GPURIG_STANDIN_FAULTS. A healthy run must pass every check and exit 0; a faulty run must fail
every check with its own message and exit non-zero. So inverting any check's logic fails a test.
gpus_present's fault (no GPU on the PCI bus) changes what every other check compares with, so it
runs alone, with --tags driver (which also shows the tags still select their checks).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from integration_support import unavailable

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "tests" / "standin" / "tools"
PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")

_spec = importlib.util.spec_from_file_location("standin", TOOLS / "standin.py")
standin = sys.modules.setdefault("standin", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(standin)

# check -> what its failure message must say with the faulty stand-ins.
FAULT_MESSAGES = {
    "nvidia_smi_sees_all_gpus": "nvidia-smi -L lists 0 GPUs but the PCI bus has 4 (rc 9:",
    "driver_branch": "reports driver 565.57.01 and the loaded kernel module is 565.57.01",
    "compat_driver_branch": "Driver branch 565 is not one compat.yml lists for debian12",
    "persistence_mode": "Persistence mode is off on GPU(s) 0, 00000000:07:00.0, 565.57.01,",
    "fabric_manager": 'gpuhost has 6 NVSwitch(es) but nvidia-fabricmanager is "inactive"',
    "cuda_release": "/nvcc reports CUDA 11.1 (rc 0), but gpurig_cuda_version is 13.0.",
    "compat_cuda": "CUDA 11.1 with driver branch 565 on debian12 is not a combination",
    "cudnn_version": (
        "cuDNN is not installed where the cudnn role puts it, but cudnn_version is 9.20.0.48"
    ),
    "nccl_version": "nccl.h states NCCL ?.?.?, but nccl_version is 2.29.7-1",
    "torch_gpus_nccl": 'does not use all 4 GPUs with NCCL: {"torch": "2.14.1+cu126"',
    "compat_torch_cuda_major": "torch 2.14.1+cu126 is built for CUDA 12.6 but the toolkit is",
    "horovod_build": "does not list both PyTorch and NCCL as built",
    "nccl_runtime": "/usr/lib/x86_64-linux-gnu/libnccl.so.2.29.7'] (torch NCCL 2.29.7",
    "nccl_tests_allreduce": "All-reduce inside the node: all_reduce_perf -b 8 -e 256M -g 4 did not "
    "measure (rc 127: all_reduce_perf: error while loading shared libraries: libnccl.so.2",
    "container_gpus": "nvidia-smi -L` lists 0 GPUs but the PCI bus has 4 (rc 125: docker: Error",
    "cupy_matmul": "within 0.001 of NumPy (per GPU: [0.98])",
    "tensorflow_gpus_matmul": "lists 0 of the 4 GPUs",
    "hardware_floors": "Below the floor: GPU 0 (NVIDIA H200) host-to-device copy 27.6 GB/s (mean "
    "of 5, 95 % interval 27.5 to 27.7) vs floor 48.0",
    "burn_in": "GPU 0 (NVIDIA H100 80GB HBM3): throughput fell 9.7 % over the burn-in (681.9 ->",
    # The health checks (tasks/verify_health.yml) on the readings of tests/fixtures/health.
    "gpu_count": "4 NVIDIA GPU(s) on the PCI bus, verify_expected_gpus is 8",
    "xid_errors": '1 Xid error(s) since boot, codes [79] (first: Xid 79 on PCI:0000:44:00, "GPU',
    "nvlink_links": "NVLink link(s) down: GPU 3 link 3, GPU 3 link 5 (verify_nvlink_max_inactive",
    "dcgm_diag": "dcgmi diag -r 3 failed PCIe: GPU 0GPU 0's NvLink link 0 is currently down",
    "throttling": "Clocks slowed while busy on GPU 0 (bus id not shown): HW Slowdown, HW Power",
    "ecc_uncorrectable": "on GPU 2 (00000000:47:00.0): 2 since the driver loaded, 3 over its",
    "pcie_link": "below its maximum while busy on GPU 1 (00000000:0F:00.0): Gen 4 of 4, x8 of x16",
    "remapped_rows": "GPU 2 (00000000:47:00.0): a row remap waits for a GPU reset: drain it",
    "dcgm_health": "DCGM's health watches say Failure: GPU 2 Memory: Failure: Detected 2 volatile",
}
GPUS_PRESENT_MESSAGE = "gpuhost has no NVIDIA GPU on the PCI bus: it should not be in gpu_nodes."
# What the inventory would set: the versions the healthy stand-ins report, and DCGM.
EXPECTED = {
    "gpurig_driver_branch": "580",
    "gpurig_cuda_version": "13.0",
    "cudnn_version": "9.20.0.48",
    "nccl_version": "2.29.7-1",
    # DCGM installed (the dcgm role's default), its diagnostic at the acceptance run's level.
    "dcgm_enabled": True,
    "verify_dcgm_diag_level": 3,
    # Seconds of load around the throttling check's reading (none here: the stand-in only reads).
    "verify_throttle_load_seconds": 1,
    # The burn-in's length (the stand-in serves a real 90 s reading without running any load).
    "verify_burnin_seconds": 30,
}


def run_verify(tmp: Path, faults: set[str], *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = verify_process(tmp, faults, *args)
    report = tmp / "report" / "gpuhost.json"
    assert report.exists(), proc.stdout[-4000:] + proc.stderr[-2000:]
    checks = json.loads(report.read_text())["checks"]
    return proc, {check["check"]: check for check in checks}


def verify_process(
    tmp: Path, faults: set[str], *args: str, playbook: str = "verify.yml"
) -> subprocess.CompletedProcess:
    if not PLAYBOOK.exists():
        unavailable("ansible-playbook is not installed beside this Python")
    inventory = tmp / "hosts.yml"
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": {"gpuhost": host}}}))
    # Extra variables: verify.yml declares its verify_* variables in the play, above inventory.
    extra = {
        **EXPECTED,
        **standin.build_root(tmp / "root", faults),
        "verify_report_dir": str(tmp / "report"),
        "verify_container_runtime": True,
        "python_env_install_tensorflow": True,
    }
    (tmp / "extra.json").write_text(json.dumps(extra))
    # No faults in the environment: the root's tool wrappers carry them, as for a host of its own.
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    env.pop(standin.FAULTS_ENV, None)
    return subprocess.run(
        [
            str(PLAYBOOK),
            *("-i", str(inventory), "-e", f"@{tmp / 'extra.json'}", *args),
            str(REPO / "playbooks" / playbook),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_a_bad_floors_table_is_refused_before_any_check_runs(tmp_path):
    table = [{"model": "H200", "tokens": ["H200"], "floors": {"h2d_gbs": {"value": "abc"}}}]
    proc = verify_process(
        tmp_path, set(), "-e", json.dumps({"verify_hardware_floors": table}), "--tags", "hardware"
    )
    said = " ".join(proc.stdout.split())
    assert proc.returncode != 0
    assert "Check the hardware floors table (verify_hardware_floors)" in said
    assert "verify_hardware_floors" in said and "value" in said, said[-3000:]
    assert "missing required arguments: kind, source" in said, said[-3000:]
    assert not (tmp_path / "report" / "gpuhost.json").exists()  # no check ran


def test_the_all_reduce_floor_runs_more_cycles_while_unclear_then_judges_their_interval(tmp_path):
    # A floor for these four A100s at 32 MB. The stand-in prints one result line at that size per
    # run: one sample has no interval, so the second run (-N 25) follows, and the two equal
    # samples (300.51 GB/s) then pass a floor of 90 and fail one of 400.
    def floors(value: float) -> str:
        floor = {"gpus": 4, "size": "32M", "value": value, "kind": "measured", "source": "a test"}
        a100 = {"model": "A100", "tokens": ["A100"], "floors": {"allreduce_busbw_gbs": [floor]}}
        return json.dumps({"verify_hardware_floors": [a100]})

    for value, verdict in ((90, "pass"), (400, "fail")):
        (tmp_path / verdict).mkdir()
        _, checks = run_verify(
            tmp_path / verdict, set(), "-e", floors(value), "--tags", "nccl_tests"
        )
        row = checks["nccl_tests_allreduce"]
        assert row["verdict"] == verdict, row
        assert row["figures"]["at_floor_size"]["samples"] == [300.51, 300.51], row
        assert row["figures"]["floor"]["value"] == value
    assert "vs floor 400.0 (a test)" in row["message"]


# An all-reduce floor whose size all_reduce_perf would not take ("GB" is not one of its suffixes).
BAD_SIZE = {"gpus": 8, "size": "16GB", "value": 431, "kind": "cloud", "source": "x"}


# Thresholds given as a user might mistype them: each refused, naming the variable, before any check
# is recorded (no report); as numbers they would compare as 0, or run `dcgmi diag -r 7`.
@pytest.mark.parametrize(
    ("given", "said"),
    [
        (
            {
                "verify_hardware_floors": [
                    {
                        "model": "H200",
                        "tokens": ["H200"],
                        "floors": {"allreduce_busbw_gbs": [BAD_SIZE]},
                    }
                ]
            },
            "verify_hardware_floors: allreduce_busbw_gbs sizes ['16GB']: expected a size "
            "all_reduce_perf takes",
        ),
        (
            {"verify_nccl_tests_min_busbw_gbs": 100},
            "verify_nccl_tests_min_busbw_gbs=100 is no longer read: the all-reduce inside a node is"
            " held to verify_hardware_floors' allreduce_busbw_gbs",
        ),
        (
            {"verify_textfile_dir": "metrics"},
            "verify_textfile_dir=metrics: expected an absolute directory on each node",
        ),
        (
            {"verify_dcgm_diag_level": "7"},
            "value of verify_dcgm_diag_level must be one of: 1, 2, 3, 4, got: 7",
        ),
        (
            {"verify_expected_gpus": "eight"},
            "argument 'verify_expected_gpus' is of type str and we were unable to convert to int",
        ),
        (
            {"verify_ecc_max_uncorrected": -1},
            "verify_ecc_max_uncorrected must be 0 or more, got -1.",
        ),
        (
            {"verify_burnin_window_seconds": 10},
            "verify_burnin_window_seconds=10 with verify_burnin_seconds=30: expected a window above"
            " 0 and at most a fifth of the burn-in",
        ),
        (
            {"verify_hardware_repeats": 1},
            "verify_hardware_repeats=1, verify_hardware_max_repeats=30, verify_hardware_confidence="
            "0.95: expected at least 2 repeats",
        ),
    ],
)
def test_a_bad_threshold_is_refused_before_any_check_is_recorded(tmp_path, given, said):
    proc = verify_process(tmp_path, set(), "-e", json.dumps(given), "--tags", "driver")
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0
    assert said in out, out[-3000:]
    assert not (tmp_path / "report" / "gpuhost.json").exists()


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (
            {"acceptance_dcgm_diag_level": "abc"},
            "argument 'acceptance_dcgm_diag_level' is of type str and we were unable to convert "
            "to int",
        ),
        (
            {"acceptance_burnin_minutes": "ten"},
            "argument 'acceptance_burnin_minutes' is of type str and we were unable to convert "
            "to float",
        ),
        (
            {"acceptance_pair_slow_fraction": 2},
            "acceptance_pair_slow_fraction=2, acceptance_pair_mib=256, "
            "acceptance_pair_min_busbw_gbs=none, acceptance_fleet_outlier_fraction=0.1, "
            "acceptance_history_change=0.02: expected fractions between 0 and 1",
        ),
    ],
)
def test_acceptance_refuses_a_bad_setting_before_any_check(tmp_path, given, said):
    report = tmp_path / "acceptance"
    given = {**given, "acceptance_report_dir": str(report)}
    proc = verify_process(tmp_path, set(), "-e", json.dumps(given), playbook="acceptance.yml")
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0
    assert said in out, out[-3000:]
    assert not report.exists()


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    return run_verify(tmp_path_factory.mktemp("healthy"), set())


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    return run_verify(tmp_path_factory.mktemp("faulty"), set(FAULT_MESSAGES))


def test_a_healthy_node_passes_and_exits_0(healthy):
    proc, checks = healthy
    # Every check in the report passes, the health checks of tasks/verify_health.yml included
    # (their stand-in outputs go into tests/standin/tools beside these).
    assert [name for name, check in checks.items() if not check["passed"]] == []
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert {"gpus_present", *FAULT_MESSAGES} <= set(checks)
    # The health checks read their tools (none is recorded as not applying to this host).
    assert checks["dcgm_diag"]["figures"]["tests"]["Inforom"] == "Pass"
    assert checks["throttling"]["figures"]["gpus"][0]["bus_id"] == "00000000:03:00.0"
    assert checks["nvlink_links"]["figures"]["links_per_gpu"] == {"0": 18}
    assert [gpu["width"] for gpu in checks["pcie_link"]["figures"]["gpus"]] == [16] * 4


@pytest.mark.parametrize("check", ["gpus_present", *FAULT_MESSAGES])
def test_check_passes_on_a_healthy_node(healthy, check):
    _, checks = healthy
    assert checks[check]["passed"] is True, checks[check]
    assert checks[check]["message"] == ""


def test_a_faulty_node_exits_non_zero(faulty):
    proc, _ = faulty
    assert proc.returncode != 0
    assert "check(s) failed on gpuhost" in " ".join(proc.stdout.split())


@pytest.mark.parametrize("check", list(FAULT_MESSAGES))
def test_check_fails_with_its_message(faulty, check):
    _, checks = faulty
    assert checks[check]["passed"] is False, checks[check]
    assert FAULT_MESSAGES[check] in " ".join(checks[check]["message"].split())


def test_gpus_present_fails_on_a_node_without_gpus(tmp_path):
    proc, checks = run_verify(tmp_path, {"gpus_present"}, "--tags", "driver")
    assert proc.returncode != 0
    assert checks["gpus_present"]["passed"] is False
    assert checks["gpus_present"]["message"] == GPUS_PRESENT_MESSAGE
    # --tags driver runs the driver checks and none of the others.
    assert "cuda_release" not in checks and "torch_gpus_nccl" not in checks
    assert {"nvidia_smi_sees_all_gpus", "driver_branch", "persistence_mode"} <= set(checks)


def test_two_roots_give_two_hosts_their_own_readings(tmp_path):
    """Hosts sharing this filesystem, each with its root's verify_* variables: no environment."""
    healthy = standin.build_root(tmp_path / "healthy", set())
    faulty = standin.build_root(tmp_path / "faulty", {"nvlink_links", "throttling", "gpu_count"})
    # A fault left in the environment does not reach the healthy host's tools.
    env = {**os.environ, standin.FAULTS_ENV: "nvlink_links,throttling"}
    health = REPO / "tests" / "fixtures" / "health"

    def read(*argv: str) -> str:
        return subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout

    for variables, state in ((healthy, "healthy"), (faulty, "faulty")):
        nvlink = read(variables["verify_nvidia_smi"], "nvlink", "-s")
        assert nvlink == (health / f"nvidia-smi-nvlink-s.{state}.txt").read_text()
        # The throttling task's command: the environment's python, verify_gpu_load.py, nvidia-smi.
        under_load = read(
            f"{variables['verify_python_env_path']}/bin/python",
            str(REPO / "playbooks" / "files" / "verify_gpu_load.py"),
            *("1", "--", variables["verify_nvidia_smi"], "-q", "-d", "PERFORMANCE"),
        )
        (performance,) = json.loads(under_load)["reads"]
        assert performance["rc"] == 0
        assert (
            performance["stdout"] == (health / f"nvidia-smi-q-performance.{state}.txt").read_text()
        )
    assert (healthy["verify_expected_gpus"], faulty["verify_expected_gpus"]) == (4, 8)


def test_node_exporter_serves_the_verdicts_as_textfile_metrics(tmp_path):
    # Debian's prometheus-node-exporter (scripts/test.sh installs it) reads what verify.yml wrote
    # to verify_textfile_dir, as it reads /var/lib/prometheus/node-exporter on a real node.
    exporter = shutil.which("prometheus-node-exporter")
    if not exporter:
        unavailable("prometheus-node-exporter is not installed (scripts/test.sh installs it)")
    textfile = tmp_path / "textfile"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    served = subprocess.Popen(
        [exporter, "--collector.disable-defaults", "--collector.textfile",
         f"--collector.textfile.directory={textfile}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        for faults, passed in ((set(), 1), ({"gpus_present"}, 0)):
            given = json.dumps({"verify_textfile_dir": str(textfile)})
            run = tmp_path / f"run{passed}"  # the stand-in root of each run
            run.mkdir()
            _, checks = run_verify(run, faults, "--tags", "driver", "-e", given)
            metrics = scrape(f"http://127.0.0.1:{port}/metrics")
            assert "node_textfile_scrape_error 0" in metrics, metrics[-2000:]
            assert f"\ngpurig_verify_passed {passed}\n" in metrics
            assert f"\ngpurig_verify_checks {len(checks)}\n" in metrics
            for name, check in checks.items():
                verdict = "pass" if check["passed"] else "fail"
                line = f'gpurig_verify_check_passed{{check="{name}",verdict="{verdict}"}}'
                assert f"\n{line} {int(check['passed'])}\n" in metrics, (line, metrics[-3000:])
            assert "gpurig_verify_last_run_timestamp_seconds " in metrics
    finally:
        served.terminate()
        served.wait(timeout=30)


def scrape(url: str, seconds: float = 30) -> str:
    """The exporter's /metrics, once it listens."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return answer.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
