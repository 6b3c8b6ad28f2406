"""`python -m bench.report RESULTS_DIR`: rewrite report.md and the plots from stored rows."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.report.document import write_report
from bench.results import SWEEP_JSON


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.report", description="Rewrite report.md and plots from a sweep."
    )
    parser.add_argument("directory", type=Path, help="a sweep's results directory")
    args = parser.parse_args(argv)
    if not (args.directory / SWEEP_JSON).exists():
        parser.error(f"{args.directory}: no {SWEEP_JSON} here (not a results directory)")
    print(write_report(args.directory))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
