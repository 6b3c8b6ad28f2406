"""The command line of `python -m bench.scaling`, generated from the knob declarations.

Each option comes from a `Knob` on a field of bench.config.BenchConfig, bench.spec.Variant,
bench.spec.Workload or bench.hosts.ClusterConfig (the multi-node options), plus --resume and
--no-progress; its help states the default once, in words. `parse_request` turns argv into a
Request; a malformed value is refused by argparse with the problem on the first line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.config import BenchConfig, ConfigError, Request, all_knobs
from bench.hosts import ClusterConfig, HostSpecError, cluster_from_options
from bench.paths import REPO_ROOT
from bench.spec import Knob, Variant, Workload, knobs

EXIT_CODES = """exit status:
  0    every run measured
  1    some runs failed, timed out or could not run (their rows are recorded),
       or the per-gpu check flagged a GPU (--slow-gpu-threshold)
  2    invalid request, or the --resume sweep is run by another controller or
       beyond repair: nothing was launched
  3    the sweep's files could not be written (a full disk): the runs stored
       before are kept; free space, then --resume DIR
  130  interrupted (Ctrl-C or SIGTERM); continue with --resume DIR"""


class Parser(argparse.ArgumentParser):
    """Leads an error with the problem, not with the usage (which --help shows)."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message}\n(all options: {self.prog} --help)\n")


_WHAT = {int: "an integer", float: "a number"}


def _value_type(k: Knob) -> Callable[[str], Any]:
    """The argparse type reading a knob's value: one, or each of a comma list's."""

    def one(text: str) -> Any:
        if text in k.refused:
            raise argparse.ArgumentTypeError(f"{text!r} is not built: {k.refused[text]}")
        if k.values is not None:
            if text not in k.values:
                raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(k.values)}")
            return k.values[text]
        convert = k.parse or str
        try:
            return convert(text)
        except ValueError:
            what = _WHAT.get(convert, "a valid value")  # type: ignore[call-overload]
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None

    def many(text: str) -> tuple[Any, ...]:
        items = [v.strip() for v in text.split(",") if v.strip()]
        if not items:
            raise argparse.ArgumentTypeError("expected at least one value")
        return tuple(dict.fromkeys(one(v) for v in items))

    return many if k.many else one


def default_words(k: Knob) -> str:
    """A knob's default as its --help states it."""
    if k.words:
        return k.words
    if k.default is None:
        return f"{k.gpu} on GPU, {k.cpu} on CPU"
    if k.values is not None:
        default = k.default if isinstance(k.default, tuple) else (k.default,)
        return ",".join(w for w, v in k.values.items() if v in default)
    if isinstance(k.default, tuple):
        return ",".join(str(v) for v in k.default)
    return str(k.default)


def add_knob(group: Any, name: str, k: Knob) -> None:
    """One option from its declaration: the help states the default once, in words."""
    if k.switch:
        options: dict[str, Any] = {"action": "store_const", "const": not k.default}
    else:
        if k.values is not None:
            metavar = "{" + ",".join(k.values) + "}"
        else:  # named after the option, not the field: --steps N, --gpus N[,N...]
            metavar = k.flag.removeprefix("--").upper().replace("-", "_")
            metavar += f"[,{metavar}...]" if k.many else ""
        action = "append" if k.repeat else "store"
        options = {"action": action, "type": _value_type(k), "metavar": metavar}
    help_text = f"{k.help} (default: {default_words(k)})"
    group.add_argument(k.flag, dest=name, default=None, help=help_text, **options)


def add_knobs(group: Any, cls: type) -> None:
    """The options of a declaration's knobs, in order; those naming one `exclusive` set go in
    a mutually exclusive group (argparse refuses two of them together)."""
    exclusive: dict[str, Any] = {}
    for name, k in knobs(cls):
        if k.exclusive and k.exclusive not in exclusive:
            exclusive[k.exclusive] = group.add_mutually_exclusive_group()
        add_knob(exclusive[k.exclusive] if k.exclusive else group, name, k)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="python -m bench.scaling",
        description="Measure ResNet-50 (or any torchvision classifier) training throughput on "
        "1, 2, 4, ... GPUs with DDP (torchrun) and Horovod (horovodrun), and report scaling "
        "efficiency with confidence intervals, an allreduce ceiling and published references.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--resume",
        type=Path,
        metavar="DIR",
        help="continue the sweep in this results directory (default: a new sweep)",
    )
    p.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="no progress bar (default: a progress bar)",
    )
    add_knobs(p.add_argument_group("sweep", "How the sweep runs."), BenchConfig)
    workload = p.add_argument_group(
        "workload",
        "What every run trains; each comma list is swept, every combination a separate run.",
    )
    for cls in (Variant, Workload):
        add_knobs(workload, cls)
    multi_node = p.add_argument_group(
        "multi-node",
        "Sweep node counts as well as GPUs per node: torchrun on every node with a c10d "
        "rendezvous on the first (started over ssh, or with --slurm as srun steps inside the "
        "allocation the sweep runs in), horovodrun -H from the first node.",
    )
    add_knobs(multi_node, ClusterConfig)
    return p


def parse_request(argv: Sequence[str] | None) -> Request:
    """argv -> Request; argparse exits 2 on a malformed value, ConfigError for the rest."""
    args = build_parser().parse_args(argv)
    values = {name: getattr(args, name) for name, _ in all_knobs()}
    try:
        # The nodes run the same interpreter and checkout paths unless told otherwise.
        cluster = cluster_from_options(vars(args), python=sys.executable, workdir=str(REPO_ROOT))
    except HostSpecError as exc:
        raise ConfigError(f"  - {exc}") from None
    if cluster is not None and values["gpu_counts"]:
        raise ConfigError(
            "  - --gpus counts ranks on this machine; with --hosts/--hostfile/--slurm "
            "give --nodes and --gpus-per-node"
        )
    return Request(values, resume=args.resume, progress=args.progress, cluster=cluster)


def explicit_options(argv: Sequence[str]) -> list[str]:
    """Long options present on the command line (to refuse them beside --resume)."""
    return [a.split("=")[0] for a in argv if a.startswith("--")]
