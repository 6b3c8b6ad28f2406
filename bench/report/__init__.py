"""Reporting: report.md and two PNG plots from a results directory.

`python -m bench.report RESULTS_DIR` rewrites them from the stored rows at any time (the sweep
calls `write_report` when it ends or is interrupted). Everything is computed from the rows
alone, so the report never shows a number the rows do not support. One concern per module:

- `summary`: rows -> one `ScalingPoint` per configuration (means of launches, intervals,
  ideal speed-up for what the ranks share, allreduce ceiling)
- `tables`: number formatting and the Markdown tables
- `comparison`: the FLOP bound and published figures (bench.reference)
- `epochs`: the epoch-time projection and fit
- `diagnosis`: "Why not linear?" and the sanity checks, from the measurements
- `plots`: the two PNGs
- `document`: report.md in order, with the containers and --profile sections; `write_report`
"""

from bench.report.document import CPU_BANNER, markdown, write_report
from bench.report.summary import ScalingPoint, summarise
from bench.report.tables import scaling_table

__all__ = ["CPU_BANNER", "ScalingPoint", "markdown", "scaling_table", "summarise", "write_report"]
