"""The command line: help text, errors that lead with the problem, validation before
any heavy import, and the documented exit codes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from bench_builders import MODELS, cpu_machine, run_row, with_status
from test_stages import FakeLauncher

from bench import config, machine, options, scaling, stages
from bench.launchers import ExecResult
from bench.options import build_parser
from bench.schema import Status
from bench.spec import ProbeSpec, RunSpec

REPO = Path(__file__).resolve().parents[2]


def help_text() -> str:
    return build_parser().format_help()


def option_help(text: str) -> dict[str, str]:
    """Each option's help paragraph, keyed by its first long flag."""
    blocks: dict[str, str] = {}
    flag = ""
    for line in text.splitlines():
        match = re.match(r"^  (-\w, )?(--[\w-]+)", line)
        if match:
            flag = match.group(2)
            blocks[flag] = line
        elif flag and line.startswith("    "):
            blocks[flag] += " " + line.strip()
        else:
            flag = ""
    return {k: re.sub(r"\s+", " ", v) for k, v in blocks.items()}


def test_help_states_each_default_once_in_words() -> None:
    text = help_text()
    for bad in ("(default: None)", "(default: ('", "(default: (False", "(default: True)"):
        assert bad not in text
    blocks = option_help(text)
    assert len(blocks) > 40
    for flag, block in blocks.items():
        if flag == "--help":
            continue
        assert block.count("(default: ") == 1, f"{flag}: {block}"
    assert (
        "image-size" in blocks["--image-size"] and "224 on GPU, 32 on CPU" in blocks["--image-size"]
    )
    assert "(default: the probe runs)" in blocks["--no-probe"]
    assert "(default: 25.0)" in blocks["--bucket-cap-mb"]


def test_num_classes_and_seed_have_help() -> None:
    blocks = option_help(help_text())
    assert "classes" in blocks["--num-classes"] and "(default: 1000)" in blocks["--num-classes"]
    assert "seed of" in blocks["--seed"] and "(default: 0)" in blocks["--seed"]


def test_help_documents_the_exit_codes() -> None:
    text = help_text()
    for code in ("0 ", "1 ", "2 ", "130 "):
        assert f"\n  {code}" in text


def test_an_argparse_error_leads_with_the_problem() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.scaling", "--precision", "fp64"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert "error: argument --precision" in lines[0] and "fp64" in lines[0]
    assert len(lines) <= 3 and "usage:" not in done.stderr


def heavy_modules_after(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """scaling.main(argv) in a fresh interpreter; prints its status and which heavy modules
    it imported."""
    code = (
        "import sys\nfrom bench import scaling\n"
        f"status = scaling.main({argv!r})\n"
        "heavy = ('torch', 'horovod', 'pandas', 'matplotlib')\n"
        "heavy = sorted(m for m in heavy if m in sys.modules)\n"
        "print(status, heavy)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--hosts", "bad host:2"], "'bad host:2'"),
        (["--gpus", "1", "--hosts", "n1:2"], "--gpus counts ranks on this machine"),
    ],
)
def test_a_malformed_request_is_refused_before_torch_is_imported(
    argv: list[str], expected: str
) -> None:
    done = heavy_modules_after(argv)
    assert done.stdout.strip() == "2 []", done.stdout + done.stderr
    assert expected in done.stderr


def test_every_problem_is_listed_in_one_pass_per_tier(tmp_path: Path) -> None:
    # Tier 1, values: a value out of range, a non-finite one and a conflict, in one refusal,
    # before torch, pandas or the machine is touched.
    (tmp_path / "file").write_text("")
    machine = ["--gpus", "4096", "--out", str(tmp_path / "file" / "results"), "--model", "resnet5O"]
    values = ["--steps", "0", "--timeout", "nan", "--global-batch", "64", "--batch-size", "8"]
    done = heavy_modules_after([*values, *machine])
    assert done.stdout.strip() == "2 []", done.stdout + done.stderr
    problems = [line for line in done.stderr.splitlines() if line.startswith("  - ")]
    for text in (
        "--steps must be >= 1",
        "--timeout must be a finite number",
        "--global-batch with",
    ):
        assert sum(text in p for p in problems) == 1, (text, done.stderr)
    assert len(problems) == 3, done.stderr
    # Tier 2, the machine: with the values fixed, an unusable --out, more ranks than the machine
    # has and an unknown model, again in one refusal, not one wave after another.
    done = heavy_modules_after(machine)
    assert done.stdout.startswith("2 "), done.stdout + done.stderr
    problems = [line for line in done.stderr.splitlines() if line.startswith("  - ")]
    expected = [
        f"lies under {tmp_path / 'file'}, which is a plain file",
        "--gpus: 4096 requested",
        "--model: unknown",
    ]
    for text in expected:
        assert sum(text in p for p in problems) == 1, (text, done.stderr)
    assert "Traceback" not in done.stderr


def test_bad_host_entry_is_named_not_split() -> None:
    with pytest.raises(config.ConfigError, match="'bad host:2'"):
        options.parse_request(["--hosts", "bad host:2"])
    with pytest.raises(config.ConfigError, match="empty entry"):
        options.parse_request(["--hosts", "n1:2,,n2:2"])


class Outcome:
    """A launcher whose runs all end the same way: measured, or timed out."""

    def __init__(self, timed_out: bool) -> None:
        self.timed_out = timed_out

    def run(self, spec: RunSpec | ProbeSpec, timeout_s: float, log: Path) -> ExecResult:
        if isinstance(spec, ProbeSpec) or self.timed_out:
            return ExecResult(None, True, timeout_s + 1.2, "")
        return FakeLauncher().run(spec, timeout_s, log)


@pytest.mark.parametrize(("timed_out", "expected"), [(False, 0), (True, 1)])
def test_exit_status_says_whether_every_run_was_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, timed_out: bool, expected: int
) -> None:
    monkeypatch.setattr(machine, "local_environment", lambda **_: cpu_machine())
    monkeypatch.setattr(stages.models, "available_models", lambda: MODELS)
    monkeypatch.setattr(stages, "collect_system_info", lambda env: {"host": "vm"})
    monkeypatch.setattr(stages, "choose_launcher", lambda sweep, nodes: Outcome(timed_out))
    argv = [
        "--out",
        str(tmp_path),
        "--launchers",
        "ddp",
        "--repeats",
        "1",
        "--timeout",
        "3",
        "--no-progress",
    ]
    assert scaling.main(argv) == expected
    (directory,) = tmp_path.iterdir()
    rows = stages.ResultStore(directory).runs.rows()
    assert {r.status for r in rows} == {"timeout" if timed_out else "ok"}
    if timed_out:  # the configured timeout, not the wall time it took to stop the ranks
        assert all("killed after the 3 s timeout" in r.error for r in rows)


def test_all_runs_ok_needs_every_row_measured() -> None:
    class Store:
        def __init__(self, rows: list) -> None:  # type: ignore[type-arg]
            self.runs = type("T", (), {"rows": lambda _self: rows})()

    ok, failed = run_row(), with_status(run_row(), Status.FAILED.value, "boom")
    sweep = stages.Sweep(config=None, store=Store([ok, ok]), meta={})  # type: ignore[arg-type]
    assert stages.all_runs_ok(sweep)
    sweep.store = Store([ok, failed])  # type: ignore[assignment]
    assert not stages.all_runs_ok(sweep)
    sweep.store = Store([])  # type: ignore[assignment]
    assert not stages.all_runs_ok(sweep)
