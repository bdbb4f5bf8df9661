"""Progress and logs while applying, on stderr, for a person by default and for a machine with `-v` or `--json`.

A person (no `-v`, no `--json`): each event as one plain line (event_text.py), rich bars on a terminal where work is
long (downloads, the image build's steps, loads, a lock wait), off a terminal a line per quarter of each task; a
lock wait is one line (a bar on a terminal), however long it lasts. A machine (`-v`, `--json`): every event a
structlog line, JSON off a terminal, progress as JSON events per 10 % (and rich bars on a terminal), the build's
compiler output with `-v`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kimik3_reconciler import logs
from kimik3_reconciler.console import Styled
from kimik3_reconciler.event_text import (
    BUILD_STEP,
    COMPILE_PERCENT,
    event_line,
    log_line,
    progress_line,
    progress_quarter,
)

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from kimik3_reconciler.console import Stream

_LOCK_TASK = "lock"  # the bar (terminal) of a lock wait: one, updated, gone when the lock is taken
_DOWNLOAD_TOTAL = "total"  # hub_download's task for all files together: the plain output follows it alone


def configure_logging(json_logs: bool, verbose: bool, human: bool = False) -> None:
    """Applied when the first line is logged (kimik3_reconciler/logs.py): a no-op plan never loads structlog.
    `human`: an adapter's log line (a docker retry) reads as event_text.log_line, never JSON."""
    logs.configure(json_logs, verbose, render=log_line if human else None)


class CliReporter:
    """Executors' events, for a person or (`machine`: `-v`, `--json`; default: `verbose`) as structlog lines."""

    def __init__(self, console: Stream, interactive: bool, verbose: bool, machine: bool | None = None):
        self.console, self.interactive, self.verbose = console, interactive, verbose
        self.machine = verbose if machine is None else machine
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}
        self._last_step: dict[str, int] = {}  # task -> the 10 % step of its last JSON event
        self._quarters: dict[str, int] = {}  # task -> the quarters said (plain), until the next event
        self._waiting = False  # a lock wait was said: its repeats are not
        self._build_step: tuple[int, int, str, int] | None = None  # (step, steps, what, compile percent said)

    @property
    def log(self) -> Any:
        return logs.logger()

    def progress(self, task: str, done: int, total: int, **fields: object) -> None:
        """`fields` (rate_bps, eta_s, phase, ...) go into the JSON event; on a TTY `phase` follows the task name
        (rich computes the rate and ETA of the bar itself)."""
        if self.interactive:
            description = f"{task}: {fields['phase']}" if fields.get("phase") else task
            self._bar(task.split(" (")[0], description, done, total, _unit(task, fields))
        elif self.machine:
            # JSON progress events, one per 10 % step of each task (a 50 GB shard is not 6,000 lines).
            step = int(10 * done / total) if total else 0
            if self._last_step.get(task) != step:
                self._last_step[task] = step
                self.log.info("progress", task=task, done=done, total=total, **fields)
        else:
            self._plain_progress(task, done, total, fields)

    def _plain_progress(self, task: str, done: int, total: int, fields: dict[str, object]) -> None:
        """A line per quarter of a task (none at 0 %); a download's files are followed by their total alone."""
        if task != _DOWNLOAD_TOTAL and _DOWNLOAD_TOTAL in self._quarters:
            return
        self._quarters.setdefault(task, 0)  # seen (a download's total from its first call on)
        quarter = progress_quarter(done, total)
        if self._quarters[task] >= quarter:
            return
        self._quarters[task] = quarter
        self._say(progress_line("download" if task == _DOWNLOAD_TOTAL else task, done, total, _unit(task, fields)))

    def line(self, source: str, text: str) -> None:
        step = BUILD_STEP.match(text)
        if self.machine:
            # Dockerfile steps are the build's progress; compiler lines only with -v.
            if step or "kimik3:" in text:
                self.log.info(source, line=text)
            else:
                self.log.debug(source, line=text)
        elif step:
            self._build_step = (int(step[1]), int(step[2]), step[3], 0)
            if self.interactive:
                self._bar(
                    source,
                    f"{source} step {step[1]}/{step[2]}: {_cut(step[3], 60)}",
                    int(step[1]) - 1,
                    int(step[2]),
                    "steps",
                )
            else:
                self._say(f"    {source} step {step[1]}/{step[2]}: {_cut(step[3], 100)}")
        elif "kimik3:" in text:
            self._say(f"    {source}: {text}")
        elif (percent := COMPILE_PERCENT.match(text)) and self._build_step is not None:
            self._compiling(source, int(percent[1]))
        # else: compiler output, only with -v

    def _compiling(self, source: str, percent: int) -> None:
        """The compile's own percent (cmake's) within its Dockerfile step: minutes of work that say how far."""
        done, total, what, said = self._build_step  # type: ignore[misc]
        if self.interactive:
            self._bar(source, f"{source} step {done}/{total}: compiling {percent} %", done - 1, total, "steps")
        elif percent // 25 > said // 25:
            self._say(f"    {source} step {done}/{total}: compiling {percent} %")
            self._build_step = (done, total, what, percent)

    def event(self, name: str, **fields: object) -> None:
        if name == "lock-wait" and not self.machine:
            self._lock_wait(fields)
            return
        self.close()
        if self.machine:
            self.log.info(name, **fields)
        else:
            self._say(event_line(name, fields))

    def _lock_wait(self, fields: dict[str, object]) -> None:
        """One line for the whole wait: a bar with the time waited on a terminal, else said once."""
        if self.interactive:
            self._bar(_LOCK_TASK, event_line("lock-wait", fields), 0, 0, "wait")
        elif not self._waiting:
            self._say(event_line("lock-wait", fields))
        self._waiting = True

    def _say(self, text: str) -> None:
        self.console.print(Styled(text))

    def _bar(self, key: str, description: str, done: int, total: int, unit: str) -> None:
        if self._progress is None:
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                _amount_column(),
                TimeRemainingColumn(),
                console=getattr(self.console, "rich", self.console),
                transient=True,
            )
            self._progress.start()
        if key not in self._tasks:
            self._tasks[key] = self._progress.add_task(description, total=total or None, unit=unit)
        self._progress.update(self._tasks[key], completed=done, total=total or None, description=description)
        self._progress.refresh()

    def close(self) -> None:
        self._waiting, self._quarters = False, {}
        if self._progress is not None:
            self._progress.stop()
            self._progress, self._tasks = None, {}


def _cut(text: str, width: int) -> str:
    """A Dockerfile step on one line: a RUN of a dozen chained commands is not what a person reads here."""
    return text if len(text) <= width else text[: width - 1] + "…"


def _unit(task: str, fields: dict[str, object]) -> str:
    """Bytes, except a load watched by the clock (its server's /proc unreadable: seconds against the timeout)."""
    return "s" if task.startswith("loading ") and "read_bytes" not in fields else "bytes"


def _amount_column() -> Any:
    """rich's download and speed columns for bytes; `3/12` for the build's steps; the time waited for a lock."""
    from rich.progress import DownloadColumn, ProgressColumn, TimeElapsedColumn, TransferSpeedColumn
    from rich.text import Text

    class Amount(ProgressColumn):
        def __init__(self) -> None:
            super().__init__()
            self._bytes, self._speed, self._elapsed = DownloadColumn(), TransferSpeedColumn(), TimeElapsedColumn()

        def render(self, task: Any) -> Any:
            unit = task.fields.get("unit")
            if unit == "steps":
                return Text(f"{int(task.completed)}/{int(task.total or 0)} steps")
            if unit == "wait":
                return Text("waited ") + self._elapsed.render(task)
            if unit == "s":
                return Text(f"{int(task.completed)}/{int(task.total or 0)} s")
            return Text.assemble(self._bytes.render(task), " ", self._speed.render(task))

    return Amount()
