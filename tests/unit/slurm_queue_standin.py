"""Stand-ins for squeue and scancel, put first on PATH: a JSON file is Slurm's queue.

The queue file holds {"jobs": [{"id", "comment", "user", "on_term"}], "fail": ""}. squeue answers
`--me --noheader --format=%i %k` as Slurm 22.05.8 does (one "ID COMMENT" line per pending,
running or completing job, "(null)" for a job without a comment); without --me it lists every
user's jobs. A non-empty "fail" makes it print that to stderr and exit 1, as squeue does when
slurmctld cannot be reached. scancel records each call in calls.jsonl and drops the job from
the queue as Slurm would: --signal=TERM ends it unless its "on_term" is "ignore"; KILL, or
scancel without --signal, ends it unless its "on_term" is "stuck" (a job that stays completing).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ME = "bench-user"

SQUEUE = """#!{python}
import json, sys
state = json.load(open({queue!r}))
if state.get("fail"):
    sys.exit("squeue: error: " + state["fail"])
args = sys.argv[1:]
assert "--noheader" in args and "--format=%i %k" in args, args
for job in state["jobs"]:
    if "--me" in args and job.get("user", {me!r}) != {me!r}:
        continue
    print(job["id"], job.get("comment") or "(null)")
"""

SCANCEL = """#!{python}
import json, sys
queue = {queue!r}
with open({calls!r}, "a") as calls:
    calls.write(json.dumps(sys.argv[1:]) + "\\n")
state = json.load(open(queue))
job_id = sys.argv[-1]
signal = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--signal=")), "")
def ends(job):
    if job["id"] != job_id:
        return False
    resists = {{"TERM": ("ignore", "stuck"), "KILL": ("stuck",), "": ("stuck",)}}[signal]
    return job.get("on_term", "") not in resists
state["jobs"] = [j for j in state["jobs"] if not ends(j)]
json.dump(state, open(queue, "w"))
"""


class FakeQueue:
    """A queue file, and squeue/scancel stand-ins reading it, in directory/bin."""

    def __init__(self, directory: Path, jobs: list[dict[str, str]], fail: str = "") -> None:
        self.bin = directory / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        self.queue = directory / "queue.json"
        self.calls_file = directory / "calls.jsonl"
        self.queue.write_text(json.dumps({"jobs": jobs, "fail": fail}))
        for name, text in (("squeue", SQUEUE), ("scancel", SCANCEL)):
            path = self.bin / name
            path.write_text(
                text.format(
                    python=sys.executable, queue=str(self.queue), calls=str(self.calls_file), me=ME
                )
            )
            path.chmod(0o755)

    def path(self, rest: str) -> str:
        return f"{self.bin}:{rest}"

    def job_ids(self) -> list[str]:
        return [j["id"] for j in json.loads(self.queue.read_text())["jobs"]]

    def calls(self) -> list[list[str]]:
        if not self.calls_file.exists():
            return []
        return [json.loads(line) for line in self.calls_file.read_text().splitlines()]
