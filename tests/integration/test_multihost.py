"""Real multi-node sweeps across test hosts made of network namespaces.

tests/infra/netns.sh makes three hosts (gsb1..gsb3 on 10.213.0.0/24, sshd on port 2213 in each,
root login with a throwaway key); this machine is the invoking node on the bridge (10.213.0.1).
The hosts share this machine's filesystem, like a cluster with a shared home: the same .venv and
checkout are at the same paths everywhere. Everything is torn down when the module finishes.

CPU ranks with gloo; ResNet-18 on 32x32 images keeps each launch to seconds. Nothing here
asserts on speed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from integration_support import (
    HOST1,
    HOST2,
    HOST3,
    PORT,
    REPO,
    SUBNET,
    TINY,
    bench_env,
    netns,
    netns_fleet,
)

from bench.results import ResultStore

pytestmark = pytest.mark.multihost


def distributions(python: Path, name: str) -> list[str]:
    """Where the environment's own site-packages holds a distribution called `name`."""
    code = (
        "import importlib.metadata as m, os, sys, sysconfig;"
        "own = os.path.realpath(sysconfig.get_path('purelib'));"
        "print(*(d.locate_file('') for d in m.distributions(name=sys.argv[1])"
        " if os.path.realpath(d.locate_file('')) == own))"
    )
    done = subprocess.run(
        [str(python), "-c", code, name], capture_output=True, text=True, check=True
    )
    return done.stdout.split()


def ssh_args(state: Path) -> list[str]:
    """How the invoking node reaches the hosts: the test key and the hosts' pinned keys."""
    return [
        "--ssh-port",
        str(PORT),
        "--ssh-identity-file",
        str(state / "id_ed25519"),
        "--ssh-option",
        f"UserKnownHostsFile={state / 'known_hosts'}",
        "--ssh-option",
        "StrictHostKeyChecking=yes",
    ]


def bench(out: Path, *args: str, timeout_s: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.scaling", *TINY, "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=REPO,
    )


def sweep_dir(out: Path) -> Path:
    (directory,) = [d for d in out.iterdir() if d.is_dir()]
    return directory


def rows(directory: Path, name: str = "runs") -> list[dict]:
    return pd.read_parquet(directory / f"{name}.parquet").to_dict(orient="records")


def run_processes_in(netns: str) -> list[int]:
    """Bench ranks (workers) running inside one test host."""
    listed = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True)
    pids = []
    for pid in listed.stdout.split():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"bench.rank.worker" in cmdline and b"torch.distributed.run" not in cmdline:
            pids.append(int(pid))
    return pids


def tagged_processes(settle_s: float = 10.0) -> list[int]:
    """Processes of any bench run (they carry GPURIG_BENCH_RUN), in any namespace, that are
    still there after `settle_s`: a remote rank or its sshd session may take a moment to finish
    exiting after the controller has its result; a leftover stays."""
    deadline = time.monotonic() + settle_s
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if b"GPURIG_BENCH_RUN=" in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


@pytest.mark.usefixtures("horovod")
def test_two_node_ddp_and_horovod_runs_produce_correct_rows(hosts: Path, tmp_path: Path) -> None:
    done = bench(
        tmp_path,
        "--hosts",
        f"{HOST1}:1,{HOST2}:1",
        "--nodes",
        "2",
        "--gpus-per-node",
        "1",
        "--launchers",
        "ddp,horovod",
        "--repeats",
        "1",
        "--probe-mb",
        "4",
        *ssh_args(hosts),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    directory = sweep_dir(tmp_path)
    runs = {r["launcher"]: r for r in rows(directory)}
    assert set(runs) == {"ddp", "horovod"}
    for launcher, run in runs.items():
        assert run["status"] == "ok", (launcher, run["error"])
        assert (run["nodes"], run["gpus_per_node"], run["gpus"]) == (2, 1, 2)
        assert run["hosts"] == f"{HOST1}:1,{HOST2}:1"
        assert run["backend"] == "gloo"
        # gloo over TCP on the hosts' own interface, found by routing toward the first host
        assert run["interconnect"] == "tcp (gloo, eth0)"
        assert run["images"] == run["global_batch"] * 3 == 24
        assert run["throughput"] == pytest.approx(run["images"] / run["window_s"])
    (probe,) = rows(directory, "probes")
    assert probe["status"] == "ok", probe["error"]
    assert (probe["nodes"], probe["gpus"], probe["interconnect"]) == (2, 2, "tcp (gloo, eth0)")
    document = ResultStore(directory).read_meta()
    nodes = document["system"]["nodes"]
    assert [n["hostname"] for n in nodes] == ["gsb1", "gsb2"]
    assert {n["torch"] for n in nodes} == {document["system"]["versions"]["torch"]}
    # ranks ran inside the two hosts, and nothing of the runs is left anywhere
    assert "| ddp | fp32-nchw | 2 | 2 |" in (directory / "report.md").read_text()
    assert tagged_processes() == []


@pytest.mark.usefixtures("tensorflow")
def test_two_node_tf_run_spans_the_hosts_with_multi_worker_mirrored(
    hosts: Path, tmp_path: Path
) -> None:
    done = bench(
        tmp_path,
        "--model",
        "resnet50",  # the tf launcher's model
        "--hosts",
        f"{HOST1}:1,{HOST2}:1",
        "--nodes",
        "1,2",
        "--gpus-per-node",
        "1",
        "--launchers",
        "tf",
        "--repeats",
        "1",
        "--no-probe",
        *ssh_args(hosts),
        timeout_s=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    directory = sweep_dir(tmp_path)
    runs = {r["nodes"]: r for r in rows(directory)}
    for run in runs.values():
        assert run["status"] == "ok", run["error"]
        assert run["images"] == run["global_batch"] * 3
        assert run["rank_tensorflow"]
    one, two = runs[1], runs[2]
    assert (one["hosts"], one["backend"]) == (f"{HOST1}:1", "none")
    # one worker per host, named in each one's TF_CONFIG, reducing over TensorFlow's gRPC ring
    assert (two["hosts"], two["gpus"], two["backend"]) == (f"{HOST1}:1,{HOST2}:1", 2, "ring")
    assert two["interconnect"] == "tcp (grpc ring, eth0)"
    output = (directory / "logs" / f"{two['run_id']}.log").read_text()
    assert f"[{HOST1}]" in output and f"[{HOST2}]" in output  # a process on each host
    assert tagged_processes() == []


def test_unreachable_host_stops_the_sweep_before_launch(hosts: Path, tmp_path: Path) -> None:
    sshd = int((hosts / "gsb3" / "sshd.pid").read_text())
    os.kill(sshd, signal.SIGTERM)  # gsb3 stays up but no longer takes ssh
    deadline = time.monotonic() + 10
    while Path(f"/proc/{sshd}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        done = bench(
            tmp_path,
            "--hosts",
            f"{HOST1}:1,{HOST2}:1,{HOST3}:1",
            "--launchers",
            "ddp",
            *ssh_args(hosts),
            timeout_s=120,
        )
    finally:
        # The hosts are the module's: gsb3 takes ssh again for the tests after this one (two CI
        # runs found it unreachable in the three-host acceptance test).
        restarted = netns("up", hosts, "3")
        assert restarted.returncode == 0, restarted.stderr
    assert done.returncode == 2, done.stderr[-3000:]
    assert "cannot reach 1 of 3 host(s)" in done.stderr
    assert f"{HOST3}: ssh: connect to host {HOST3} port {PORT}: Connection refused" in done.stderr
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_killed_ranks_on_one_host_give_a_failure_row_and_the_sweep_goes_on(
    hosts: Path, tmp_path: Path
) -> None:
    killed: list[int] = []
    stop = threading.Event()

    def kill_first_run_on_gsb2() -> None:
        # Wait for the first run's rank on gsb2, let it get going, then kill it (SIGKILL, as a
        # crashing node would). Later runs are left alone.
        while not stop.is_set() and not killed:
            pids = run_processes_in("gsb2")
            if pids:
                time.sleep(2)
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                killed.extend(pids)
            time.sleep(0.1)

    killer = threading.Thread(target=kill_first_run_on_gsb2, daemon=True)
    killer.start()
    try:
        done = bench(
            tmp_path,
            "--hosts",
            f"{HOST1}:1,{HOST2}:1",
            "--nodes",
            "2",
            "--gpus-per-node",
            "1",
            "--launchers",
            "ddp",
            "--repeats",
            "2",
            "--no-probe",
            "--timeout",
            "120",
            *ssh_args(hosts),
        )
    finally:
        stop.set()
        killer.join(timeout=10)
    assert killed, "no rank appeared on gsb2"
    assert done.returncode == 1, done.stderr[-4000:]  # a run failed (its row is recorded)
    first, second = rows(sweep_dir(tmp_path))
    assert first["run_id"].endswith("-r0") and second["run_id"].endswith("-r1")
    assert first["status"] == "failed"
    assert first["throughput"] is None or pd.isna(first["throughput"])
    assert (first["nodes"], first["hosts"]) == (2, f"{HOST1}:1,{HOST2}:1")
    assert "SIGKILL" in first["error"] or "exitcode  : -9" in first["error"], first["error"]
    assert second["status"] == "ok", second["error"]
    assert tagged_processes() == []


def test_playbook_runs_the_sweep_on_the_hosts_and_fetches_results(
    hosts: Path, tmp_path: Path
) -> None:
    # The hosts share this machine's filesystem: one environment, which both install the wheel into.
    python = bench_env(tmp_path / "env")
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(json.dumps(netns_fleet(hosts, python, 1, tmp_path / "remote")))
    # What bench.yml made under the project's former name: the bench installed in the environment
    # with its wheel's directory, and gsb1's key pair, already authorized on gsb2. bench.yml
    # uninstalls the one and adopts the other under the present name instead of making and
    # authorizing a second key.
    (adopt,) = yaml.safe_load((REPO / "playbooks/tasks/former-name.yml").read_text())
    former = adopt["vars"]["former_name"]
    checkout = tmp_path / "former-checkout"
    shutil.copytree(
        REPO / "bench", checkout / "bench", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("README.md", "LICENSE"):
        shutil.copy2(REPO / name, checkout / name)
    pyproject = (REPO / "pyproject.toml").read_text()
    (checkout / "pyproject.toml").write_text(
        pyproject.replace('name = "gpurig-bench"', f'name = "{former}-bench"')
    )
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            str(checkout),
        ],
        check=True,
        capture_output=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert distributions(python, f"{former}-bench")
    (tmp_path / "env" / "src" / f"{former}-bench").mkdir(parents=True)
    dot_ssh = hosts / "gsb1" / "dot-ssh"
    for leftover in dot_ssh.glob("*_bench_ed25519*"):
        leftover.unlink()
    former_key = dot_ssh / f"{former}_bench_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(former_key)], check=True
    )
    former_public = former_key.with_suffix(".pub").read_text().split()[1]
    authorized = hosts / "gsb2" / "dot-ssh" / "authorized_keys"
    with authorized.open("a") as keys:
        keys.write(f"ssh-ed25519 {former_public} {former}-bench launch key\n")
    results = tmp_path / "results"
    extra = {
        "bench_results_dir": str(results),
        "bench_run_name": "fleet",
        "bench_args": [
            *TINY,
            "--launchers",
            "ddp",
            "--nodes",
            "2",
            "--gpus-per-node",
            "1",
            "--repeats",
            "1",
            "--no-probe",
        ],
    }
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"),
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
    }
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            "-i",
            str(inventory),
            str(REPO / "playbooks" / "bench.yml"),
            "-e",
            json.dumps(extra),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-6000:]
    # the results came back to the control machine
    (directory,) = [d for d in (results / "fleet").iterdir() if d.is_dir()]
    (run,) = rows(directory)
    assert run["status"] == "ok", run["error"]
    assert (run["nodes"], run["hosts"]) == (2, f"{HOST1}:1,{HOST2}:1")
    assert (directory / "report.md").exists()
    # the sweep ran the wheel bench.yml built from this checkout and installed (python_env's tasks)
    shipped = tmp_path / "env" / "src" / "gpurig-bench"
    (wheel,) = shipped.iterdir()
    stamp = (tmp_path / "env" / "src" / "gpurig-bench.installed").read_text().strip()
    assert stamp == hashlib.sha256(wheel.read_bytes()).hexdigest()
    where = subprocess.run(
        [str(python), "-c", "import bench; print(bench.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    ).stdout
    assert where.startswith(str(tmp_path / "env" / "lib")), where
    # passwordless ssh between the hosts: gsb1's key is authorized on gsb2, gsb2 is known on gsb1
    public = (hosts / "gsb1" / "dot-ssh" / "gpurig_bench_ed25519.pub").read_text().split()[1]
    assert public == former_public
    assert authorized.read_text().count(public) == 1
    assert not [p for p in dot_ssh.iterdir() if former in p.name]
    assert distributions(python, f"{former}-bench") == []
    assert not (tmp_path / "env" / "src" / f"{former}-bench").exists()
    known_hosts = hosts / "gsb1" / "dot-ssh" / "known_hosts"
    known = subprocess.run(
        ["ssh-keygen", "-F", f"[{HOST2}]:{PORT}", "-f", str(known_hosts)],
        capture_output=True,
        text=True,
    )
    assert known.returncode == 0
    assert tagged_processes() == []


@pytest.mark.usefixtures("horovod")
def test_resume_first_stops_what_an_earlier_controller_left_on_a_host(
    hosts: Path, tmp_path: Path
) -> None:
    # horovodrun on one node, whose hosts are all local: no --network-interfaces (across two
    # nodes: test_two_node_ddp_and_horovod_runs_produce_correct_rows)
    done = bench(
        tmp_path,
        "--hosts",
        f"{HOST1}:1,{HOST2}:1",
        "--nodes",
        "1",
        "--gpus-per-node",
        "1",
        "--launchers",
        "horovod",
        "--repeats",
        "1",
        "--no-probe",
        *ssh_args(hosts),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    directory = sweep_dir(tmp_path)
    (run,) = rows(directory)
    assert run["status"] == "ok", run["error"]
    assert (run["launcher"], run["hosts"], run["backend"]) == ("horovod", f"{HOST1}:1", "gloo")
    sweep_id = ResultStore(directory).read_meta()["sweep_id"]
    # a rank an earlier controller left on gsb2: the sweep's tag, inside that host
    left = subprocess.Popen(
        ["nsenter", "--net=/run/netns/gsb2", "--", "sleep", "300"],
        env={**os.environ, "GPURIG_BENCH_SWEEP": sweep_id},
    )
    try:
        resumed = subprocess.run(
            [sys.executable, "-m", "bench.scaling", "--resume", str(directory)],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO,
        )
        assert left.wait(timeout=5) == -signal.SIGTERM
    finally:
        left.kill()
        left.wait()
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    # stopped by gsb2's stop script (which runs before this machine's own stop), and said so
    assert f"{HOST2}: an earlier controller left processes of this sweep there:" in resumed.stderr
    assert f"{HOST2}:   stopping {left.pid} sleep 300" in resumed.stderr
    assert f"{HOST1}: an earlier" not in resumed.stderr


def test_resume_is_refused_while_a_host_of_the_sweep_is_unreachable(
    hosts: Path, tmp_path: Path
) -> None:
    done = bench(
        tmp_path,
        "--hosts",
        f"{HOST1}:1",
        "--launchers",
        "ddp",
        "--repeats",
        "1",
        "--no-probe",
        *ssh_args(hosts),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    directory = sweep_dir(tmp_path)
    # the sweep also had a host that is gone now: an address on the bridge nobody answers
    gone = f"{SUBNET}.99"
    store = ResultStore(directory)
    document = store.read_meta()
    document["config"]["cluster"]["hosts"].append([gone, 1])
    store.write_meta(document)
    resumed = subprocess.run(
        [sys.executable, "-m", "bench.scaling", "--resume", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert resumed.returncode == 2, resumed.stderr[-4000:]
    assert "no rank of this sweep is left on 1 of 2 host(s)" in resumed.stderr
    assert f"{gone}: rc=255: ssh: connect to host {gone} port {PORT}" in resumed.stderr
    assert not (directory / "controller.lock").exists()


def acceptance(
    hosts: Path,
    tmp_path: Path,
    *args: str,
    fault: str = "",
    count: int = 2,
    gpus: int = 2,
    more: dict | None = None,
) -> tuple[int, Path, str]:
    """playbooks/acceptance.yml over the namespace hosts, two "GPUs" (CPU ranks) each, with
    verify.yml's tools and files pointed at the labelled stand-ins of tests/standin/tools
    (healthy readings) and BENCH_INJECT_FAULT reaching the per-GPU check's ranks."""
    from test_verify_checks import EXPECTED, standin

    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        json.dumps(netns_fleet(hosts, sys.executable, gpus, tmp_path / "remote", count))
    )
    report = tmp_path / "acceptance"
    extra = {
        **EXPECTED,
        **standin.build_root(tmp_path / "root", set()),
        "acceptance_report_dir": str(report),
        "acceptance_bench_args": [
            *TINY,
            *("--launchers", "per-gpu", "--repeats", "1", "--no-probe"),
            # A node's median of two GPUs halves their gap. Two equal CPU ranks sharing this 2-core
            # machine with the rest of the suite measured up to 42.9 % below their median (one at
            # 0.4 of the other; a healthy node failed at 40 in a CI run of 2026-11-27); the slowed
            # rank (bench.rank.faults.SLOW_FACTOR 9: a tenth of its own speed, spent busy) is
            # 81.8 % below when both run alike. When it slept instead, it handed the others its
            # core and ran ahead of them after waking: 3.9:1, not 60 % below, in a CI run of
            # 2026-11-28. At 60 % a healthy node fails only when one CPU rank runs 4 times slower
            # than the other.
            *("--slow-gpu-threshold", "60"),
        ],
        "bench_environment": {"BENCH_INJECT_FAULT": fault} if fault else {},
        # The node-to-node all-reduce's buffer: small, for CPU ranks over veth links.
        "acceptance_pair_mib": 4,
        "acceptance_history_file": str(tmp_path / "history.jsonl"),
        **(more or {}),
    }
    env = {
        **{k: v for k, v in os.environ.items() if k != standin.FAULTS_ENV},
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"),
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
    }
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            *("-i", str(inventory), *args, str(REPO / "playbooks" / "acceptance.yml")),
            *("-e", json.dumps(extra)),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=REPO,
    )
    return done.returncode, report, done.stdout


def test_acceptance_fails_the_node_with_a_slow_gpu_and_passes_the_healthy_one(
    hosts: Path, tmp_path: Path
) -> None:
    # slots: gsb1's GPUs are 0 and 1, gsb2's 2 and 3: gsb2's second GPU is slowed.
    rc, report, out = acceptance(hosts, tmp_path, fault="slow@3")
    assert rc != 0, out[-6000:]
    # Both verdicts are written whatever failed; where one is missing, the playbook's output says
    # why (one CI run of 2026-11-26 found no gsb1.json and, without this, nothing more).
    assert {"gsb1.json", "gsb2.json"} <= {p.name for p in report.glob("*.json")}, out[-6000:]
    healthy = json.loads((report / "gsb1.json").read_text())
    faulty = json.loads((report / "gsb2.json").read_text())
    assert healthy["passed"] is True, healthy["reasons"]
    assert healthy["failed_checks"] == [] and healthy["checks"] > 20
    assert [g["gpu_index"] for g in healthy["gpus"]] == [0, 1]
    assert faulty["passed"] is False
    assert faulty["failed_checks"] == []  # verify.yml found nothing: the per-GPU check did
    assert [r.split(":")[0] for r in faulty["reasons"]] == ["GPU 1 SLOW vs node median"]
    fleet = (report / "fleet.md").read_text()
    assert fleet.startswith(
        "# Fleet acceptance: FAILED\n\n1 of 2 nodes passed, 1 failed, 0 inconclusive"
    )
    flagged = fleet.split("## Flagged GPUs, slowest first")[1].split("## Node-to-node")[0]
    assert "| gsb2 | 1 | cpu |" in flagged and "gsb1" not in flagged
    # Two nodes make one pair, judged against no floor here: recorded, naming no one.
    assert "| gsb1 <-> gsb2 | 4 |" in fleet.split("## Node-to-node all-reduce, in pairs")[1]
    assert {p.name for p in (report / "verify").iterdir()} == {"gsb1.json", "gsb2.json"}
    assert "gsb2 did not pass: see" in " ".join(out.split())
    assert tagged_processes() == []


def test_acceptance_of_a_healthy_host_passes(hosts: Path, tmp_path: Path) -> None:
    rc, report, out = acceptance(hosts, tmp_path, "--limit", "gsb1")
    assert rc == 0, out[-6000:]
    assert json.loads((report / "gsb1.json").read_text())["passed"] is True
    assert not (report / "gsb2.json").exists()
    assert (report / "fleet.md").read_text().startswith("# Fleet acceptance: PASSED\n\n1 of 1")


@contextlib.contextmanager
def slowed_link(host: str, rate: str = "200mbit"):
    """A rate limit on both ends of one namespace host's veth link (the bridge's end: traffic to the
    host; the host's eth0: traffic from it) for everything but its sshd's port. An htb class at
    the rate takes all traffic; u32 filters send the ssh connection (source or destination port
    PORT) to an unlimited class, so Ansible reaches the host as fast as the others (with the whole
    link limited, two CI runs under load found gsb3 unreachable) and only the all-reduce is slow.
    netem, prio and tbf-as-a-child are not available on these machines; htb and u32 are."""
    index = host.removeprefix("gsb")
    ends = [["tc"], ["ip", "netns", "exec", host, "tc"]]
    devices = [f"gsbv{index}", "eth0"]
    try:
        for tc, device in zip(ends, devices, strict=True):
            for command in (
                ["qdisc", "add", "dev", device, "root", "handle", "1:", "htb", "default", "20"],
                ["class", "add", "dev", device, "parent", "1:", "classid", "1:10",
                 "htb", "rate", "10gbit", "burst", "1mb"],
                ["class", "add", "dev", device, "parent", "1:", "classid", "1:20",
                 "htb", "rate", rate, "ceil", rate],
                *(["filter", "add", "dev", device, "parent", "1:", "protocol", "ip", "prio", "1",
                   "u32", "match", "ip", end, str(PORT), "0xffff", "flowid", "1:10"]
                  for end in ("sport", "dport")),
            ):  # fmt: skip
                subprocess.run([*tc, *command], check=True, capture_output=True, timeout=30)
        yield
    finally:
        for tc, device in zip(ends, devices, strict=True):
            subprocess.run(
                [*tc, "qdisc", "del", "dev", device, "root"], capture_output=True, timeout=30
            )


def test_acceptance_names_the_node_behind_a_slowed_link(hosts: Path, tmp_path: Path) -> None:
    # Three hosts, one CPU "GPU" each; gsb3's link rate-limited: its two pairs (with gsb1 and gsb2)
    # are slow, the pair gsb1 <-> gsb2 is not, so gsb3 is named and the others pass.
    with slowed_link("gsb3"):
        rc, report, out = acceptance(hosts, tmp_path, count=3, gpus=1)
    assert rc != 0, out[-6000:]
    assert (report / "pairs.json").exists(), out[-6000:]
    pairs = json.loads((report / "pairs.json").read_text())
    rates = {" <-> ".join(p["pair"]): p["busbw_gbs"] for p in pairs["pairs"]}
    assert set(rates) == {"gsb1 <-> gsb2", "gsb2 <-> gsb3", "gsb1 <-> gsb3"}, pairs
    assert all(r is not None and r > 0 for r in rates.values()), pairs
    assert rates["gsb1 <-> gsb2"] > 2 * max(rates["gsb2 <-> gsb3"], rates["gsb1 <-> gsb3"])
    assert [p["slow"] for p in pairs["pairs"]] == [" <-> ".join(p["pair"]) != "gsb1 <-> gsb2"
                                                   for p in pairs["pairs"]]  # fmt: skip
    verdicts = {h: json.loads((report / f"{h}.json").read_text()) for h in ("gsb1", "gsb2", "gsb3")}
    assert verdicts["gsb1"]["passed"] and verdicts["gsb2"]["passed"], {
        host: [*v["reasons"], *(f"{c['check']}: {c['message']}" for c in v["failed_checks"])]
        for host, v in verdicts.items()
    }
    assert not verdicts["gsb3"]["passed"]
    (reason,) = verdicts["gsb3"]["reasons"]
    assert reason.startswith("node-to-node all-reduce slow with every partner (with gsb1 ")
    assert "no floor set" in reason and "check this node's network link" in reason
    fleet = (report / "fleet.md").read_text()
    assert "2 of 3 nodes passed, 1 failed, 0 inconclusive" in fleet
    assert "## Node-to-node all-reduce, in pairs" in fleet
    # Every node's verdict and figures appended to the history, its pairs' rates among them.
    history = [json.loads(x) for x in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [(h["host"], h["verdict"]) for h in history] == [
        ("gsb1", "pass"), ("gsb2", "pass"), ("gsb3", "fail")
    ]  # fmt: skip
    assert history[2]["metrics"]["all-reduce with gsb1 GB/s"] == rates["gsb1 <-> gsb3"]
    assert "## Since each node's last accepted run" in fleet
    assert tagged_processes() == []
