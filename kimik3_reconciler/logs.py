"""The one structlog setup: chosen by the CLI, applied when the first line is logged.

structlog costs ~50 ms to import on a 2-core machine (it loads asyncio and rich.traceback), and a
no-op `plan` logs nothing; so `configure` only records the settings while structlog is not loaded,
and `logger()` loads it and applies them before the first line. Adapters log through `logger()` too
(a docker retry), so every line gets the CLI's renderer whoever logs first.
"""

from __future__ import annotations

import sys
from typing import Any

_pending: tuple[bool, bool] | None = None  # (json_logs, verbose) chosen but not applied yet


def configure(json_logs: bool, verbose: bool) -> None:
    global _pending
    _pending = (json_logs, verbose)
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
    json_logs, verbose = _pending
    _pending = None
    renderer = structlog.processors.JSONRenderer() if json_logs else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso"), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG if verbose else logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
    )
