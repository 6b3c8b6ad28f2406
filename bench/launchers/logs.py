"""Reading a failed launch's output: the line that says why, for the results table."""

from __future__ import annotations

import re

_SEPARATOR = re.compile(r"^[\s=\-*]*$")
_ERROR_LINE = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Exit)\b:?\s.*")
_HOROVOD_FIELD = re.compile(r"^(Process name|Exit code):\s*(.+?)\s*$")
_TORCHRUN_FIELD = re.compile(r"^\s*(host|rank|exitcode|traceback)\s*:\s*(.+?)\s*$")


def failure_reason(text: str, limit: int = 400) -> str:
    """The most telling line of a failed launcher's output, for the results table.

    torchrun ends with a root-cause table (host, rank, exitcode, signal) after the traceback,
    horovodrun with the first failed process's name and exit code; ranks print
    "SomethingError: ..." (prefixed "[rank0]:" by torchrun, "[1]<stderr>:" by horovodrun).
    Prefer the last exception line, add the launcher's root cause, else the last line.
    """
    lines = [line.strip() for line in text.splitlines() if not _SEPARATOR.match(line)]
    error = ""
    for line in lines:
        match = _ERROR_LINE.search(line)
        if match and "ChildFailedError" not in line:
            error = match.group(0)
    fields: dict[str, str] = {}
    for line in lines:
        match = _TORCHRUN_FIELD.match(line)
        if match:
            fields[match.group(1)] = match.group(2)
    cause = ""
    if "exitcode" in fields:
        where = " ".join(f"{k} {fields[k]}" for k in ("rank", "host") if k in fields)
        cause = f"{where}: exitcode {fields['exitcode']}".strip(": ")
    horovod = dict(m.groups() for m in map(_HOROVOD_FIELD.match, lines) if m)
    if horovod:
        # horovodrun names the first rank to fail on the lines after its RuntimeError.
        cause = ", ".join(f"{k.lower()} {v}" for k, v in horovod.items())
    reason = "; ".join(part for part in (error, cause) if part) or (lines[-1] if lines else "")
    reason = reason or "(no output)"
    return reason if len(reason) <= limit else reason[: limit - 3] + "..."
