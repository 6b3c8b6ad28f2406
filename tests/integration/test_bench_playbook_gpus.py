"""playbooks/bench.yml counts a host's ranks from its GPUs, and stops loudly when the driver fails.

A host with NVIDIA GPUs on the PCI bus whose `nvidia-smi --list-gpus` fails, or lists fewer GPUs
than the bus has, must stop the play with a message that says so, before anything is set up (no
key pair, no code copied). Here the PCI bus is a directory tree laid out like
/sys/bus/pci/devices (gpurig_pci_devices_dir) and nvidia-smi is a script first on PATH: the play
runs against this machine over a local connection, in check mode.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def pci_tree(root: Path, gpus: int) -> Path:
    """`gpus` NVIDIA display controllers and one other device, as sysfs lists them."""
    devices = [("0x10de", "0x030200")] * gpus + [("0x8086", "0x060000")]
    for number, (vendor, klass) in enumerate(devices):
        device = root / f"0000:{number + 1:02x}:00.0"
        device.mkdir(parents=True)
        (device / "vendor").write_text(vendor + "\n")
        (device / "class").write_text(klass + "\n")
    return root


def fake_nvidia_smi(bin_dir: Path, listed: int, rc: int) -> Path:
    bin_dir.mkdir()
    lines = "".join(f"echo 'GPU {i}: NVIDIA H100 (UUID: GPU-{i})'\n" for i in range(listed))
    script = bin_dir / "nvidia-smi"
    err = "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\n"
    script.write_text("#!/bin/sh\n" + (err if rc else lines) + f"exit {rc}\n")
    script.chmod(0o755)
    return bin_dir


def run_bench_playbook(tmp_path: Path, gpus: int, listed: int, rc: int, *args: str):
    inventory = tmp_path / "hosts.json"
    inventory.write_text(
        json.dumps(
            {
                "gpu_nodes": {
                    "hosts": {
                        "gpuhost": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                            "bench_python": sys.executable,
                            "bench_workdir": str(tmp_path / "work"),
                            "bench_ssh_key": str(tmp_path / "ssh" / "id_ed25519"),
                            "gpurig_pci_devices_dir": str(pci_tree(tmp_path / "pci", gpus)),
                        }
                    }
                }
            }
        )
    )
    bin_dir = fake_nvidia_smi(tmp_path / "bin", listed, rc)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"),
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
    }
    # --check: the counting tasks run anyway (check_mode: false); should the stop ever go missing,
    # the rest of the play (keys, authorized_keys of this machine's user) must still change nothing.
    return subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            "-i",
            str(inventory),
            "--check",
            *args,
            str(REPO / "playbooks" / "bench.yml"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
        check=False,
    )


@pytest.mark.parametrize(
    ("listed", "rc", "says"),
    [(0, 9, "`nvidia-smi --list-gpus` failed (rc 9)"), (1, 0, "`nvidia-smi --list-gpus` lists 1")],
    ids=["nvidia-smi fails", "nvidia-smi lists fewer GPUs"],
)
def test_a_gpu_host_whose_driver_fails_stops_the_play(tmp_path, listed, rc, says):
    done = run_bench_playbook(tmp_path, gpus=2, listed=listed, rc=rc)
    assert done.returncode != 0
    output = " ".join(done.stdout.split())
    assert "gpuhost has 2 NVIDIA GPU(s) on the PCI bus, but" in output, done.stdout[-3000:]
    assert says in output
    # It stopped before setting anything up on the host.
    assert not (tmp_path / "ssh").exists()
    assert not (tmp_path / "work").exists()


def test_a_port_that_is_not_a_number_is_refused_before_anything(tmp_path):
    done = run_bench_playbook(tmp_path, 2, 2, 0, "-e", "bench_ssh_port=abc")
    assert done.returncode != 0
    output = " ".join(done.stdout.split())
    assert "argument 'bench_ssh_port' is of type str and we were unable to convert to int" in output
    assert not (tmp_path / "ssh").exists()
    assert not (tmp_path / "work").exists()


def test_options_the_sweep_refuses_are_refused_before_anything(tmp_path):
    given = json.dumps({"bench_args": ["--launchers", "bogus"]})
    done = run_bench_playbook(tmp_path, 2, 2, 0, "-e", given)
    assert done.returncode != 0
    output = " ".join(done.stdout.split())
    assert "python -m bench.scaling refuses the sweep's options (bench_args;" in output, output[
        -3000:
    ]
    assert "argument --launchers: 'bogus': choose from ddp, horovod" in output
    assert not (tmp_path / "ssh").exists()
    assert not (tmp_path / "work").exists()
