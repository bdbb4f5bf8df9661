"""What an apply's events say to a person: one plain line each, for the default (human) output.

The events themselves (name + fields, reporting.CliReporter's input) are the machine's record: with `-v` or
`--json` they are printed as structlog lines, as before. Without either, a person reads these lines instead (issue
39: 40 `lock-wait` JSON lines while apply waited, JSON mixed into the plan and the verify table). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

Fields = Mapping[str, object]

_SYMBOL = {"noop": " ", "create": "+", "update": "~", "replace": "-/+", "delete": "-", "read": "<="}  # model.plan
BUILD_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")  # the classic builder's step line
COMPILE_PERCENT = re.compile(r"^\[\s*(\d+)%\]")  # cmake's progress on its build lines: "[ 42%] Building CXX …"


def size(n: object) -> str:
    """Bytes as a person reads them: 812 B, 3.4 MiB, 52.0 GiB."""
    value = float(n) if isinstance(n, (int, float)) else 0.0
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"  # (not reached)


def _step(f: Fields) -> str:
    action = str(f.get("action", ""))
    return f"{_SYMBOL.get(action, action):>3} {f.get('kind')} {f.get('target')}: {f.get('reason')}"


def _downloaded(f: Fields) -> str:
    adopted = f" ({size(f['adopted'])} already in the cache)" if f.get("adopted") else ""
    return (
        f"    downloaded {f.get('files')} file(s) of {f.get('repo')}: {size(f.get('bytes'))} in {f.get('seconds')} s"
        f"{adopted}"
    )


def _healthy(f: Fields) -> str:
    return f"    {f.get('container')} answers /health after {f.get('seconds')} s ({f.get('cache')} load)"


def _lock_wait(f: Fields) -> str:
    # An RPC worker's host (`worker`), or a cluster node's (`node`, with its Docker's field while the profile names it).
    field = f" ({f['field']})" if f.get("field") else ""
    where = (
        f" on rpc worker {f['worker']}"
        if f.get("worker")
        else f" on cluster node {f['node']}{field}"
        if f.get("node")
        else ""
    )
    return f"waiting for the host lock{where}, held by {f.get('holder')} (up to {f.get('timeout_s')} s)"


def _revert(f: Fields) -> str:
    return f"reverting to the last good profile ({f.get('to')}, applied {f.get('recorded')}): {f.get('reason')}"


def _warning(f: Fields) -> str:
    rest = {k: v for k, v in f.items() if k not in ("error", "record")}
    return f"    warning: {f.get('record', '')}: {f.get('error', '')}" + (f" ({_pairs(rest)})" if rest else "")


_TEXTS: dict[str, Callable[[Fields], str]] = {
    "step": _step,
    "downloaded": _downloaded,
    "healthy": _healthy,
    "lock-wait": _lock_wait,
    "revert": _revert,
    "warning": _warning,
    "built": lambda f: f"    built {f.get('image')} in {f.get('seconds')} s ({f.get('compile')})",
    "launched": lambda f: (
        f"    launched {f.get('container')} ({f.get('id')})" + (f" on {f['worker']}" if f.get("worker") else "")
    ),
    "pull": lambda f: f"    pulling {f.get('image')}",
    "pulled": lambda f: f"    pulled {f.get('image')}",
    "fetch-archive": lambda f: f"    fetching the source archive {f.get('url')}",
}


def _pairs(fields: Fields) -> str:
    return ", ".join(f"{key.replace('_', ' ')} {value}" for key, value in fields.items() if value not in (None, ""))


def event_line(name: str, fields: Fields) -> str:
    """The line for event `name`: its own sentence, else the name and its fields in words."""
    text = _TEXTS.get(name)
    if text is not None:
        return text(fields)
    return f"    {name}: {_pairs(fields)}" if fields else f"    {name}"


def log_line(fields: Fields) -> str:
    """A structlog event (an adapter's warning: `docker-retry`) as one line: `warning: docker-retry: message`."""
    rest = dict(fields)
    event, level = rest.pop("event", ""), str(rest.pop("level", "info"))
    rest.pop("timestamp", None)
    said = rest.pop("message", None)
    detail = str(said) if said is not None else _pairs(rest)
    prefix = f"{level}: " if level not in ("info", "debug") else ""
    return f"{prefix}{event}: {detail}" if detail else f"{prefix}{event}"


def progress_quarter(done: int, total: int) -> int:
    """0-4: how many quarters of a task are done (the plain output says each once)."""
    return min(4, 4 * done // total) if total > 0 else 0


def progress_line(task: str, done: int, total: int, unit: str) -> str:
    if unit == "s":
        amount = f"{done} of {total} s"
    else:
        amount = f"{size(done)} of {size(total)}"
    percent = 100 * done // total if total else 0
    return f"    {task}: {percent} % ({amount})"
