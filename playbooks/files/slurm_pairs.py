"""acceptance.yml's node-to-node all-reduce in pairs, as one Slurm job step: one task per node.

    srun --nodes=N --ntasks-per-node=1 python playbooks/files/slurm_pairs.py --out DIR
        [--mib M] [--ranks-per-node G] [--port P] [--timeout S] [--min-busbw-gbs F]
        [--slow-fraction X]

Every task reads its node from the step (SLURM_NODEID in the nodes of SLURM_STEP_NODELIST, as
`scontrol show hostnames` expands it) and works out the same rounds of disjoint pairs as
acceptance.yml (filter_plugins/gpurig_acceptance.py pair_rounds: each node with two others where
the step has three or more). In each round where it has a partner it runs verify_allreduce.py (next
to this file) under torchrun on both nodes, G ranks per node (default: the GPUs Slurm gave the
step, SLURM_GPUS_ON_NODE; else 1), the pair's first node the master at port P + the round; in the
other rounds it goes on to its next pair, whose partner meets it at that round's port. Each task
writes what its runs printed to DIR/pair-runs/<node>.json; DIR must be on a filesystem every node
sees. Task 0 waits for every node's file (at most --timeout seconds after its own rounds), judges
the pairs as acceptance.yml does (pair_verdicts: slow more than --slow-fraction below the fleet's
reference pair, or by the 95 % Student-t interval against --min-busbw-gbs; a node whose every pair
is slow is named) and writes DIR/pairs.json in acceptance.yml's format. Its exit status is 0 when
no pair is slow, failed or inconclusive, else 1; 2 for a bad option or a step this cannot run in,
before anything runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import verify_allreduce  # noqa: E402  (the all-reduce each pair runs, and its option checks)

_spec = importlib.util.spec_from_file_location(
    "gpurig_acceptance", HERE.parents[1] / "filter_plugins" / "gpurig_acceptance.py"
)
acceptance = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(acceptance)

PROG = "slurm_pairs.py"
KEPT = 4000  # the last characters of a run's stderr kept in its node's file


class Refused(Exception):
    """The step cannot run the pairs: the message says why and what to do."""


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not usable (expected a number in (0, 1))")
    return value


def port(text: str) -> int:
    if not (text.isdigit() and 1024 <= int(text) <= 65000):
        raise argparse.ArgumentTypeError(f"{text!r} is not usable (expected a port, 1024 to 65000)")
    return int(text)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    positive = verify_allreduce.positive
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="shared directory for pairs.json")
    parser.add_argument(
        "--mib",
        type=positive(float, 1 / verify_allreduce.MIB),
        default=256.0,
        help="all-reduce buffer, MiB (default 256, as acceptance.yml)",
    )
    parser.add_argument(
        "--ranks-per-node",
        type=positive(int, 1),
        default=None,
        help="ranks per node, one per GPU (default SLURM_GPUS_ON_NODE, else 1)",
    )
    parser.add_argument(
        "--port",
        type=port,
        default=29611,
        help="the first round's port on the pair's first node (default 29611)",
    )
    parser.add_argument(
        "--timeout",
        type=positive(int, 1),
        default=600,
        help="seconds one pair may take, and task 0's wait for the others",
    )
    parser.add_argument(
        "--min-busbw-gbs",
        type=positive(float, 0),
        default=None,
        help="the least bus bandwidth of a pair, GB/s (default: none)",
    )
    parser.add_argument(
        "--slow-fraction",
        type=fraction,
        default=0.5,
        help="how far below the fleet's reference pair a pair is slow (0.5)",
    )
    return parser.parse_args(argv)


def hostnames(nodelist: str) -> list[str]:
    """A Slurm node list ("gpu[01-03]") as its host names, by `scontrol show hostnames`."""
    done = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0:
        raise Refused(f"scontrol show hostnames {nodelist!r} failed: {done.stderr.strip()}")
    return done.stdout.split()


def step_nodes(
    environ: Mapping[str, str], expand: Callable[[str], list[str]] = hostnames
) -> tuple[list[str], int, str]:
    """The step's nodes, this task's index among them and the step's id ("job.step"), from the
    variables srun gives each task; Refused where they say this cannot run the pairs."""
    missing = [
        name
        for name in ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_NODEID")
        if not environ.get(name)
    ]
    nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST")
    if missing or not nodelist:
        raise Refused(
            f"not a task of a Slurm job step ({', '.join(missing) or 'SLURM_STEP_NODELIST'} "
            "unset): run it as srun --nodes=N --ntasks-per-node=1 python slurm_pairs.py --out DIR"
        )
    nodes = expand(nodelist)
    tasks = environ.get("SLURM_STEP_NUM_TASKS") or environ.get("SLURM_NTASKS")
    if tasks and int(tasks) != len(nodes):
        raise Refused(
            f"the step has {tasks} tasks on {len(nodes)} nodes ({nodelist}): the pairs need one "
            "task per node, srun --ntasks-per-node=1"
        )
    if len(nodes) < 2:
        raise Refused(
            f"the step has {len(nodes)} node ({nodelist}): the pairs need 2 or more, "
            "srun --nodes=N with N >= 2"
        )
    index = int(environ["SLURM_NODEID"])
    if not 0 <= index < len(nodes):
        raise Refused(f"SLURM_NODEID={index} is not one of the step's {len(nodes)} nodes")
    return nodes, index, f"{environ['SLURM_JOB_ID']}.{environ['SLURM_STEP_ID']}"


def run_pair(role: Mapping, round_: int, args: argparse.Namespace, ranks: int) -> dict:
    """One round's all-reduce on this node: torchrun with verify_allreduce.py, as acceptance.yml
    runs it; the loop result acceptance.yml registers ({item, rc, stdout, stderr})."""
    argv = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
        f"--nproc-per-node={ranks}", f"--node-rank={role['rank']}",
        f"--master-addr={role['master']}", f"--master-port={args.port + round_}",
        str(HERE / "verify_allreduce.py"), f"--mib={args.mib}",
    ]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout)
        rc, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as stopped:
        said = stopped.stderr or ""
        said = said.decode(errors="replace") if isinstance(said, bytes) else said
        rc, stdout = None, ""
        stderr = f"{said}\ntimed out after {args.timeout} s (--timeout)"
    return {"item": dict(role), "rc": rc, "stdout": stdout, "stderr": stderr[-KEPT:]}


def run_rounds(nodes: Sequence[str], me: str, args: argparse.Namespace, ranks: int) -> list:
    results = []
    for round_, role in enumerate(acceptance.pair_roles(acceptance.pair_rounds(nodes), me)):
        if role is None:
            results.append({"item": None, "skipped": True})
            continue
        result = run_pair(role, round_, args, ranks)
        print(f"{me}: round {round_}, {' <-> '.join(role['pair'])}: rc {result['rc']}",
              file=sys.stderr, flush=True)  # fmt: skip
        results.append(result)
    return results


def write_runs(out: Path, node: str, step: str, results: list) -> None:
    """This node's results, written whole and renamed so task 0 never reads half a file."""
    folder = out / "pair-runs"
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{node}.json.partial"
    partial.write_text(json.dumps({"host": node, "step": step, "results": results}))
    partial.rename(folder / f"{node}.json")


def read_runs(out: Path, nodes: Sequence[str], step: str) -> dict[str, dict]:
    """The nodes' files of this step (one an earlier step left is not this step's)."""
    found = {}
    for node in nodes:
        try:
            runs = json.loads((out / "pair-runs" / f"{node}.json").read_text())
        except (OSError, ValueError):
            continue
        if runs.get("step") == step:
            found[node] = runs
    return found


def measured(nodes: Sequence[str], runs: Mapping[str, Mapping], waited: float) -> list[dict]:
    """One entry per pair of the rounds ({pair, rc, stdout, stderr}, as pair_verdicts takes it):
    what the nodes' runs say (pair_runs), and a failure for a pair neither node reported."""
    found = acceptance.pair_runs(list(runs.values()))
    have = {tuple(item["pair"]) for item in found}
    for round_ in acceptance.pair_rounds(nodes):
        for pair in round_:
            if tuple(pair) not in have:
                found.append(
                    {
                        "pair": list(pair),
                        "rc": None,
                        "stdout": "",
                        "stderr": f"no result: {' and '.join(pair)} wrote none within "
                        f"{waited:g} s of task 0's rounds (is --out on a filesystem every node "
                        "sees?)",
                    }
                )
    return found


def judge(out: Path, nodes: Sequence[str], step: str, args: argparse.Namespace, wait=1.0) -> dict:
    """Task 0's part: wait for every node's runs (at most --timeout s), judge, write pairs.json."""
    deadline = time.monotonic() + args.timeout
    runs = read_runs(out, nodes, step)
    while len(runs) < len(nodes) and time.monotonic() < deadline:
        time.sleep(wait)
        runs = read_runs(out, nodes, step)
    judged = acceptance.pair_verdicts(
        measured(nodes, runs, args.timeout), args.min_busbw_gbs, args.slow_fraction
    )
    partial = out / ".pairs.json.partial"
    partial.write_text(json.dumps(judged, indent=4, sort_keys=True) + "\n")
    partial.rename(out / "pairs.json")
    return judged


def summary(judged: Mapping) -> str:
    lines = [f"Rule: {judged['rule']}."]
    for p in judged["pairs"]:
        rate = p["error"] if p["busbw_gbs"] is None else f"{p['busbw_gbs']:.2f} GB/s"
        lines.append(f"{' <-> '.join(p['pair'])}: {rate}{'  SLOW' if p['slow'] else ''}")
    for kind in ("reasons", "unsure"):
        lines += [f"{host}: {why}" for host, said in judged[kind].items() for why in said]
    return "\n".join(lines)


def main(argv: Sequence[str], environ: Mapping[str, str] = os.environ) -> int:
    args = parse(argv)
    try:
        nodes, index, step = step_nodes(environ)
        ranks = args.ranks_per_node or int(environ.get("SLURM_GPUS_ON_NODE") or 1)
    except (Refused, ValueError) as refused:
        print(f"{PROG}: error: {refused}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    write_runs(args.out, nodes[index], step, run_rounds(nodes, nodes[index], args, ranks))
    if int(environ["SLURM_PROCID"]) != 0:
        return 0
    judged = judge(args.out, nodes, step, args)
    print(summary(judged))
    print(f"pairs.json: {args.out / 'pairs.json'}")
    bad = any(p["slow"] or p["floor_unclear"] for p in judged["pairs"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
