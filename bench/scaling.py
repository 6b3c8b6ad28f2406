"""`python -m bench.scaling`: sweep GPU counts x launchers, store every run, write the report.

The command line only: parse the request and refuse the values no machine could run (torch-free,
in well under a second), open a --resume sweep (refused, or locked, before torch is imported),
then hand it to the stages in bench.stages, which list every problem of the machine at once.
Exit status: see EXIT_CODES.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from bench.admission import request_problems
from bench.config import ConfigError, Request, refuse
from bench.launcher_kinds import DEFAULT_LAUNCHERS, launcher_kind
from bench.options import EXIT_CODES, parse_request
from bench.spec import runs_on_host

__all__ = ["EXIT_CODES", "main"]


def wants_horovod_check(request: Request) -> bool:
    """Importing horovod.torch to check it costs seconds: only when the sweep may use it here
    (a --hosts or --slurm sweep asks the nodes instead; runs in a --container image use the
    image's, checked in the image)."""
    launchers = request.values.get("launchers") or DEFAULT_LAUNCHERS
    horovod = request.resume is not None or any(launcher_kind(x).needs_horovod for x in launchers)
    return horovod and runs_on_host(request.values) and request.cluster is None


def admitted(args: Sequence[str]) -> Request:
    """The request argv makes, once the values tier found nothing no machine could run: values out
    of range or not finite, flags that contradict each other, options nothing would read. It is
    torch-free and takes well under a second; ConfigError lists every problem."""
    request = parse_request(args)
    refuse(request_problems(request))
    return request


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        request = admitted(args)  # before the saved sweep, torch, pandas or this machine
        saved = None
        if request.resume is not None:  # refused, or locked, before torch loads
            from bench.resume import open_saved

            saved = open_saved(request, args)
        from bench import stages  # torch, pandas, matplotlib
        from bench.machine import local_environment

        environment = local_environment(check_horovod=wants_horovod_check(request))
        sweep = stages.prepare(request, environment, saved)
    except ConfigError as exc:
        print(f"bench: cannot run this sweep:\n{exc}", file=sys.stderr)
        return 2
    state = stages.execute_sweep(sweep, progress=request.progress)
    if state == "interrupted":
        return 130
    if state == "unsaved":
        return 3
    flagged = any(v.flagged for v in stages.print_table(sweep))
    return 0 if stages.all_runs_ok(sweep) and not flagged else 1


if __name__ == "__main__":
    raise SystemExit(main())
