"""python_env's tasks/bench.yml on this machine: the checkout's wheel into an environment.

The tasks site.yml (python_env) and playbooks/bench.yml both run, over a local connection, into
a scratch venv that sees this project's packages: check mode says what it would install and
changes nothing; the first run replaces what an earlier version of the role shipped there (an
unpacked checkout and its tar) with the wheel and installs it; a second run changes nothing; an
edited module (same version number) is installed on the next run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from integration_support import REPO, bench_env

PLAY = """
- name: Install the bench as python_env does
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Install the bench
      ansible.builtin.include_role:
        name: python_env
        tasks_from: bench
      vars:
        python_env_target: "{{ target }}"
        python_env_bench_src: "{{ src }}"
"""


def play(tmp_path: Path, env: Path, src: Path, *args: str) -> tuple[str, int]:
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            *("-i", "localhost,", "-c", "local", *args, str(playbook)),
            *("-e", json.dumps({"target": str(env), "src": str(src)})),
            *("-e", f"ansible_python_interpreter={sys.executable}"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    changed = int(re.search(r"localhost\s+: ok=\d+\s+changed=(\d+)", done.stdout).group(1))
    return done.stdout, changed


def bench_file(python: Path, cwd: Path) -> str:
    done = subprocess.run(
        [str(python), "-c", "import bench.paths as p; print(p.__file__)"],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )
    return done.stdout.strip()


def test_wheel_installs_once_and_again_when_a_module_changes(tmp_path: Path) -> None:
    python = bench_env(tmp_path / "env")
    env = tmp_path / "env"
    src = tmp_path / "checkout"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "bench", src / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    shipped, stamp = env / "src" / "gpurig-bench", env / "src" / "gpurig-bench.installed"
    # what the archive-shipping role left: the unpacked checkout and its tar
    (shipped / "bench").mkdir(parents=True)
    (shipped / "pyproject.toml").write_text("[project]\n")
    (env / "src" / "gpurig-bench.tar").write_bytes(b"old")

    out, changed = play(tmp_path, env, src, "--check")
    assert "Check mode: would install gpurig_bench-0.1.0-py3-none-any.whl" in out
    assert changed > 0
    assert sorted(p.name for p in shipped.iterdir()) == ["bench", "pyproject.toml"]
    assert not stamp.exists()
    assert not bench_file(python, tmp_path).startswith(str(env))

    out, changed = play(tmp_path, env, src)
    (wheel,) = shipped.iterdir()
    assert wheel.name == "gpurig_bench-0.1.0-py3-none-any.whl"
    assert not (env / "src" / "gpurig-bench.tar").exists()
    assert stamp.read_text().strip() == hashlib.sha256(wheel.read_bytes()).hexdigest()
    installed = Path(bench_file(python, tmp_path))
    assert installed.is_relative_to(env / "lib")
    assert installed.read_text() == (src / "bench" / "paths.py").read_text()

    _, changed = play(tmp_path, env, src)
    assert changed == 0

    with (src / "bench" / "paths.py").open("a") as module:
        module.write("# edited on the controller\n")
    _, changed = play(tmp_path, env, src)
    assert changed > 0
    assert installed.read_text().endswith("# edited on the controller\n")
    (wheel,) = shipped.iterdir()
    assert stamp.read_text().strip() == hashlib.sha256(wheel.read_bytes()).hexdigest()
