"""A size cap on the log of a detached kimik3 process (the metrics exporter under a profile without `systemd:`;
under systemd the journal keeps its output).

`LocalProcesses.spawn` points the process's stdout and stderr (fds 1 and 2) at one file in the state dir and
names it in KIMIK3_LOG_FILE. Whatever writes there (structlog's lines, the standard library's last-resort
handler, a traceback, C code writing to fd 2) lands in that file, so the cap works on the file, not on a
logging handler: at the start, and then every CHECK_S inside the process, a log past CAP_BYTES is renamed to
`<log>.1` (replacing the older one) and a fresh file is put under fds 1 and 2 with dup2. Nothing is lost
(a line goes to the old file or to the new one) and the disk holds at most about 2 x CAP_BYTES. Chosen over
logging's RotatingFileHandler, which rotates only what goes through its own `emit`, and over truncating
at start alone, which leaves an exporter that runs for months unbounded.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from kimik3_reconciler.model.env_knobs import knob_value

CAP_BYTES = 8 << 20  # ~40,000 JSON log lines: weeks of an exporter's warnings, a crash loop's tracebacks
CHECK_S = 30.0
LOG_FILE_ENV = "KIMIK3_LOG_FILE"


def open_log(path: Path) -> int:
    """The log opened for appending (O_APPEND: every writer's line lands at the end, whatever the others do)."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)


def rotate_if_over(path: Path, cap: int = CAP_BYTES, fds: tuple[int, ...] = ()) -> bool:
    """Rename `path` to `<path>.1` when it is larger than `cap`, and put a fresh file under `fds` (the writer's
    stdout and stderr: only the process itself can move them). Whether it rotated."""
    try:
        if path.stat().st_size <= cap:
            return False
    except FileNotFoundError:
        return False
    os.replace(path, path.with_name(path.name + ".1"))
    if fds:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()  # Python's buffer first: it belongs in the old file
        fresh = open_log(path)
        try:
            for fd in fds:
                os.dup2(fresh, fd)  # fd 1/2 are inheritable copies; the O_CLOEXEC original is closed below
        finally:
            os.close(fresh)
    return True


def cap_own_log(cap: int = CAP_BYTES, every_s: float = CHECK_S) -> threading.Thread | None:
    """In the spawned process: watch its own log (KIMIK3_LOG_FILE) from a daemon thread; None when it has none."""
    path = knob_value(LOG_FILE_ENV, os.environ)
    if path is None:
        return None
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(every_s):
            try:
                rotate_if_over(path, cap, fds=(1, 2))
            except OSError:  # a full disk or a removed state dir: keep serving metrics, try again later
                pass

    thread = threading.Thread(target=watch, name="log-cap", daemon=True)
    thread.start()
    return thread
