#!/usr/bin/env python3
"""Write a PEP 503 "simple" index over a directory of wheels: <out>/<project>/index.html.

TEST STAND-IN for a package index such as PyTorch's (download.pytorch.org/whl/cu132/torch/ is a
PEP 503 project page: one <a href="...whl#sha256=..."> per file). The preflight's contact check
(roles/repo_contact) reads such pages; the molecule scenarios point python_env_torch_index_url
here.

Usage: simple_index.py WHEEL_DIR OUT_DIR   (relative links: OUT_DIR/<project>/ -> the wheels)
"""

from __future__ import annotations

import hashlib
import html
import os
import re
import sys
from pathlib import Path


def project(filename: str) -> str:
    """The PEP 503 normalized project name of a wheel or sdist file name."""
    name = filename.split("-")[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def main() -> None:
    wheels, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    files: dict[str, list[Path]] = {}
    for path in sorted(wheels.iterdir()):
        if path.name.endswith((".whl", ".tar.gz")):
            files.setdefault(project(path.name), []).append(path)
    for name, paths in files.items():
        page = out / name
        page.mkdir(parents=True, exist_ok=True)
        links = []
        for path in paths:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            href = os.path.relpath(path, page)
            links.append(
                f'<a href="{html.escape(href)}#sha256={digest}">{html.escape(path.name)}</a><br>'
            )
        (page / "index.html").write_text(
            "<!DOCTYPE html>\n<html><body>\n" + "\n".join(links) + "\n</body></html>\n"
        )
    (out / "index.html").write_text(
        "<!DOCTYPE html>\n<html><body>\n"
        + "\n".join(f'<a href="{n}/">{n}</a><br>' for n in sorted(files))
        + "\n</body></html>\n"
    )
    print(f"simple index: {len(files)} projects in {out}")


if __name__ == "__main__":
    main()
