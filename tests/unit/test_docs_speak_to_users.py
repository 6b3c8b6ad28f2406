"""Docs and code speak to users: they name no internal issue number (which a user of the
repository cannot look up) and no path outside the repository. Upstream references stay
(owner/repo#123, GitHub issue URLs). Tool logs and data files kept as results are not prose."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROSE = {".md", ".py", ".yml", ".yaml", ".sh", ".cfg", ".toml", ".ini", ".j2", ".txt"}
INTERNAL_ISSUE = re.compile(r"(?<![\w/.#-])[Ii]ssues? #?\d+\b|\bissue \d+'s\b")
# The shared folder and the tool library beside a checkout, and the checkout's own absolute path on
# the development machines; spelt in pieces so that this file does not name them itself.
OUTSIDE_PATHS = ("shared" + "/docs/", "/work" + "/main", ".." + "/.library")
OUTSIDE = re.compile(r"(?<![\w.])(?:" + "|".join(map(re.escape, OUTSIDE_PATHS)) + ")")
WORD = "issue"  # the examples below are built from it for the same reason


def prose_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [
        ROOT / name
        for name in listed
        if Path(name).suffix in PROSE
        and "/logs/" not in name
        and not name.startswith("tests/fixtures/")
        and (ROOT / name).is_file()
    ]


def offenders(pattern: re.Pattern[str]) -> list[str]:
    found = []
    for path in prose_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if pattern.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_no_internal_issue_numbers() -> None:
    assert offenders(INTERNAL_ISSUE) == []


def test_no_paths_outside_the_repository() -> None:
    assert offenders(OUTSIDE) == []


def test_the_patterns_catch_what_they_are_for() -> None:
    assert INTERNAL_ISSUE.search(f"see {WORD} 23") and INTERNAL_ISSUE.search(f"{WORD} 25's values")
    assert not INTERNAL_ISSUE.search("horovod/horovod#4290 and NVIDIA/DCGM#242")
    assert not INTERNAL_ISSUE.search("https://github.com/x/y/issues/12")
    assert all(OUTSIDE.search(f"as in {path}X.md") for path in OUTSIDE_PATHS)
    assert not OUTSIDE.search("docs/results/README.md")
