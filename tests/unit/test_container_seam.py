"""A container is a wrapper around any site (bench.launchers.docker), not a concept every stage
knows: at most 5 bench files mention it outside comments and docstrings."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
# The modules allowed to know containers, and why each must.
ALLOWED = {
    "bench/launchers/docker/__init__.py": "the wrapper: docker argv, mounts, stopping",
    "bench/launchers/docker/check.py": "the check of every image before the sweep",
    "bench/spec.py": "the --container axis and image knobs, the run's pinned digest",
    "bench/schema.py": "the container_digest column every row records",
    "bench/report/document.py": "report.md's host-and-containers section",
}


def _docstring_starts(tree: ast.AST) -> set[tuple[int, int]]:
    starts = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                starts.add((first.value.lineno, first.value.col_offset))
    return starts


def container_mentions(source: str) -> list[str]:
    """Each identifier or string (f-strings included) of `source` that says "container", in any
    case; comments and docstrings do not count."""
    docstrings = _docstring_starts(ast.parse(source))
    return [
        f"{token.start[0]}: {token.string[:60]}"
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type in (tokenize.NAME, tokenize.STRING)
        and "container" in token.string.lower()
        and token.start not in docstrings
    ]


def test_the_detector_skips_comments_and_docstrings_only() -> None:
    source = (
        '"""Runs in a container."""\n'
        "def f(spec):\n"
        '    """The container of spec."""\n'
        "    # a container comment\n"
        "    x = spec.image  # container\n"
        '    y = f"in {spec.Container_digest}"\n'
        "    return NO_CONTAINER, 'container'\n"
    )
    assert container_mentions(source) == [
        '6: f"in {spec.Container_digest}"',
        "7: NO_CONTAINER",
        "7: 'container'",
    ]


def test_at_most_five_bench_files_know_containers() -> None:
    knowing = {
        str(path.relative_to(BENCH.parent))
        for path in sorted(BENCH.rglob("*.py"))
        if container_mentions(path.read_text())
    }
    assert len(ALLOWED) <= 5
    assert knowing <= set(ALLOWED), sorted(knowing - set(ALLOWED))
