"""`python -m bench.launchers.on_node`: what the multi-node backends run on the nodes themselves
(over ssh, or as Slurm job steps) before a launch.

- `survey [TARGET]`: print this node's facts (bench.machine.survey) as one marked JSON line;
  with --exports VAR, sh exports of the interface and address toward TARGET instead.
- `check-versions`: read survey lines (e.g. srun's, labelled per task) from stdin and exit 3
  when the nodes differ in the given components.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence

from bench.launchers.versions import COMPARED_COMPONENTS, VersionMismatchError, check_versions
from bench.machine import read_surveys, survey, survey_line

MODULE = "bench.launchers.on_node"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    commands = parser.add_subparsers(dest="command", required=True)
    p_survey = commands.add_parser("survey", help="print this node's versions and route")
    p_survey.add_argument("target", nargs="?", default="", help="the rendezvous host")
    p_survey.add_argument("--route-only", action="store_true", help="skip the versions")
    p_survey.add_argument(
        "--exports",
        metavar="VAR",
        help="print sh exports instead: VAR (unless set) = the interface to target, and "
        "BENCH_NODE_ADDR = this node's address on it",
    )
    p_check = commands.add_parser(
        "check-versions", help="compare survey lines read from stdin; exit 3 on a mismatch"
    )
    p_check.add_argument(
        "--components",
        default="torch",
        help=f"comma list from {','.join(COMPARED_COMPONENTS)} (see components_for)",
    )
    p_check.add_argument("--nodes", type=int, help="fail unless this many nodes answered")
    p_check.add_argument(
        "--print-interfaces",
        action="store_true",
        help="print the nodes' interfaces to the rendezvous host, comma-separated",
    )
    return parser


def _survey(args: argparse.Namespace) -> int:
    info = survey(args.target, versions=not (args.route_only or args.exports))
    if not args.exports:
        print(survey_line(info), flush=True)
        return 0
    if not info.get("interface"):
        print(f"bench: {info.get('route_error') or 'no interface found'}", file=sys.stderr)
        return 2
    # A value the user exported already wins over the detected interface.
    default = info["interface"].replace('"', "")
    print(f'export {args.exports}="${{{args.exports}:-{default}}}"')
    print(f"export BENCH_NODE_ADDR={shlex.quote(info['address'])}")
    return 0


def _check_versions(args: argparse.Namespace) -> int:
    infos = read_surveys(sys.stdin)
    if args.nodes is not None and len(infos) != args.nodes:
        print(f"bench: {len(infos)} of {args.nodes} nodes answered the survey", file=sys.stderr)
        return 3
    try:
        check_versions(infos, [c for c in args.components.split(",") if c])
    except VersionMismatchError as err:
        print(f"bench: {err}", file=sys.stderr)
        return 3
    print(f"bench: {len(infos)} node(s) agree on {args.components}", file=sys.stderr)
    if args.print_interfaces:
        print(",".join(dict.fromkeys(i.interface for i in infos.values() if i.interface)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return _survey(args) if args.command == "survey" else _check_versions(args)


if __name__ == "__main__":
    sys.exit(main())
