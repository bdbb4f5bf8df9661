"""Progress and logs while applying: rich on a TTY, structlog JSON lines otherwise (both on stderr)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kimik3_reconciler import logs

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from kimik3_reconciler.console import Stream


def configure_logging(json_logs: bool, verbose: bool) -> None:
    """Applied when the first line is logged (kimik3_reconciler/logs.py): a no-op plan never loads structlog."""
    logs.configure(json_logs, verbose)


class CliReporter:
    """Executors' events: a rich progress bar per task on a TTY, JSON progress events otherwise."""

    def __init__(self, console: Stream, interactive: bool, verbose: bool):
        self.console, self.interactive, self.verbose = console, interactive, verbose
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}
        self._last_step: dict[str, int] = {}

    @property
    def log(self) -> Any:
        return logs.logger()

    def progress(self, task: str, done: int, total: int, **fields: object) -> None:
        """`fields` (rate_bps, eta_s, phase, ...) go into the JSON event; on a TTY `phase` follows the task name
        (rich computes the rate and ETA of the bar itself)."""
        if not self.interactive:
            # JSON progress events, one per 10 % step of each task (a 50 GB shard is not 6,000 lines).
            step = int(10 * done / total) if total else 0
            if self._last_step.get(task) != step:
                self._last_step[task] = step
                self.log.info("progress", task=task, done=done, total=total, **fields)
            return
        if self._progress is None:
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                      TransferSpeedColumn(), TimeRemainingColumn(),
                                      console=getattr(self.console, "rich", self.console),
                                      transient=True)
            self._progress.start()
        key = task.split(" (")[0]
        description = f"{task}: {fields['phase']}" if fields.get("phase") else task
        if key not in self._tasks:
            self._tasks[key] = self._progress.add_task(description, total=total or None)
        self._progress.update(self._tasks[key], completed=done, total=total or None, description=description)
        self._progress.refresh()

    def line(self, source: str, text: str) -> None:
        # Dockerfile steps are the build's progress; compiler lines only with -v.
        if text.startswith("Step ") or "kimik3:" in text:
            self.log.info(source, line=text)
        else:
            self.log.debug(source, line=text)

    def event(self, name: str, **fields: object) -> None:
        self.close()
        self.log.info(name, **fields)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress, self._tasks = None, {}
