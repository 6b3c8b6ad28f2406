"""Where the bench imports from, and the PYTHONPATH that lets another process import it there.

Imports nothing of the bench, so every module (the per-rank code included) can use it.
"""

from __future__ import annotations

import os
from pathlib import Path

# The checkout (or install prefix) holding the `bench` package on this machine.
REPO_ROOT = Path(__file__).resolve().parent.parent


def bench_pythonpath(root: str | os.PathLike[str], inherited: str | None = None) -> str:
    """PYTHONPATH for a child that imports the bench from `root` (first, so it wins over any
    other copy) and then whatever the child would have had (`inherited`, when there is one)."""
    return os.pathsep.join(p for p in (os.fspath(root), inherited) if p)
