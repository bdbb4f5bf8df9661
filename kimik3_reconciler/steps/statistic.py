"""Statistics in the state dir (load rates, a load's seconds, the apply record, the last verify report): written
when they can be, never worth failing an apply for (issue 30: a full state dir failed an apply whose new server
was already healthy, on `host/load-rate-warm.json`, and skipped its verify). A write that fails is a warning event;
what reads the statistic then finds the previous one, or none (a downtime predicted from the defaults)."""

from __future__ import annotations

from typing import Any

from kimik3_reconciler.ports import StatePort
from kimik3_reconciler.steps.report import Reporter


def write_statistic(state: StatePort, key: str, value: dict[str, Any], reporter: Reporter) -> bool:
    """Write `value` at `key`; on an OSError (no space, read-only, permissions) warn and carry on (False)."""
    try:
        state.write(key, value)
    except OSError as exc:
        reporter.event(
            "warning",
            record=key,
            error=f"{exc.filename or key}: {exc.strerror or exc}",
            consequence="statistic not recorded (the apply goes on)",
        )
        return False
    return True
