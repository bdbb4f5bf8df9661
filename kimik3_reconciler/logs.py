"""The one structlog setup: chosen by the CLI, applied when the first line is logged.

structlog costs ~50 ms to import on a 2-core machine (it loads asyncio and rich.traceback), and a
no-op `plan` logs nothing; so `configure` only records the settings while structlog is not loaded,
and `logger()` loads it and applies them before the first line. Adapters log through `logger()` too
(a docker retry), so every line gets the CLI's renderer whoever logs first.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

Render = Callable[[Mapping[str, Any]], str]  # an event's fields (event, level, ...) -> the line a person reads
_pending: tuple[bool, bool, Render | None] | None = None  # (json_logs, verbose, render) chosen, not applied yet


def configure(json_logs: bool, verbose: bool, render: Render | None = None) -> None:
    """`render`: lines for a person (reporting.py's; no timestamp, no JSON) in place of the JSON/console renderer."""
    global _pending
    _pending = (json_logs, verbose, render)
    if "structlog" in sys.modules:  # already loaded (a test capturing logs, a second orchestrator): apply at once
        _apply()


def logger(name: str = "kimik3") -> Any:
    """structlog's logger (loading structlog on first use), with the CLI's settings applied."""
    import structlog

    if _pending is not None:
        _apply()
    return structlog.get_logger(name)


def _apply() -> None:
    global _pending
    import logging

    import structlog

    if _pending is None:
        return
    json_logs, verbose, render = _pending
    _pending = None
    if render is not None:
        processors: list[Any] = [structlog.processors.add_log_level, lambda _logger, _name, fields: render(fields)]
    else:
        renderer = structlog.processors.JSONRenderer() if json_logs else structlog.dev.ConsoleRenderer(colors=False)
        processors = [structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso"), renderer]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG if verbose else logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
    )
