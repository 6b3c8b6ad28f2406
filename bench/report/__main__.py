"""`python -m bench.report RESULTS_DIR`: rewrite report.md and the plots from stored rows.

The sweep's files are read back first (bench.results): a damaged or missing one is named and
rebuilt from what survives, or the command stops (exit status 2) saying how to recover.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.report.document import write_report
from bench.results import ResultStore, StoreError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.report", description="Rewrite report.md and plots from a sweep."
    )
    parser.add_argument("directory", type=Path, help="a sweep's results directory")
    args = parser.parse_args(argv)
    try:
        for line in ResultStore(args.directory).load():
            print(f"bench.report: {args.directory}: {line}", file=sys.stderr)
    except StoreError as exc:
        print(f"bench.report: cannot read {args.directory}: {exc}", file=sys.stderr)
        return 2
    print(write_report(args.directory))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
