"""`python -m bench.launchers.on_node survey [TARGET]`: what the multi-node backend runs on each
node (through its site: ssh, or an srun step) before a sweep: this node's facts
(bench.machine.survey) as one marked JSON line, with its interface and address toward TARGET,
the rendezvous host.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bench.machine import survey, survey_line

MODULE = "bench.launchers.on_node"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    commands = parser.add_subparsers(dest="command", required=True)
    p_survey = commands.add_parser("survey", help="print this node's versions and route")
    p_survey.add_argument("target", nargs="?", default="", help="the rendezvous host")
    args = parser.parse_args(argv)
    print(survey_line(survey(args.target)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
