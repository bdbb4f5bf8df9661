"""What `kimik3 verify` found: one timed CheckResult per check, the tool-call counts, the weights, a crash."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from kimik3_reconciler.model.weights import Weights


class Status(str, Enum):
    """A check passed, failed, could not judge what the model said (random weights), or does not apply."""

    OK = "ok"
    FAILED = "failed"
    NOT_CHECKABLE = "not checkable"
    SKIPPED = "skipped"


NOT_CHECKABLE = "not checkable (random weights)"


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    detail: str
    seconds: float

    @property
    def ok(self) -> bool:
        """Passed: a check that could not judge the answer never reads as passed."""
        return self.status is Status.OK

    @property
    def failed(self) -> bool:
        return self.status is Status.FAILED

    def to_json(self) -> dict[str, Any]:
        # ok: true passed, false failed, null neither (not checkable, skipped)
        ok = {Status.OK: True, Status.FAILED: False}.get(self.status)
        return {"name": self.name, "status": self.status.value, "ok": ok, "detail": self.detail,
                "seconds": self.seconds}


@dataclass
class ToolCallCounts:
    """Seed 001: K3 now and then emits a tool call its parser does not expect; validate and retry. These are
    the numbers a monitor exports (tool-call parse failures), kept in the report for it."""

    attempts: int = 0  # tool-call requests sent
    parse_failures: int = 0  # replies whose tool call did not parse (HTTP 500 from the parser, bad JSON, markup)
    retries: int = 0  # requests sent again because of a parse failure

    def to_json(self) -> dict[str, int]:
        return {"attempts": self.attempts, "parse_failures": self.parse_failures, "retries": self.retries}


@dataclass
class VerifyReport:
    profile: str
    weights: Weights | None = None
    checks: list[CheckResult] = field(default_factory=list)
    tool_calls: ToolCallCounts = field(default_factory=ToolCallCounts)
    crash: str | None = None  # why the server died during a check, read from its log

    @property
    def ok(self) -> bool:
        """No check failed (a not-checkable one does not fail verify; the report says it was not checked)."""
        return not any(c.failed for c in self.checks)

    @property
    def tool_call_parse_failures(self) -> int:
        return self.tool_calls.parse_failures

    @property
    def not_checkable(self) -> list[str]:
        return [c.name for c in self.checks if c.status is Status.NOT_CHECKABLE]

    def failure_text(self) -> str:
        """The one line VerifyFailed carries: the failed checks, and the crash's cause and fix when there is one."""
        failed = ", ".join(c.name for c in self.checks if c.failed)
        crash = f"; the server crashed: {self.crash}" if self.crash else ""
        return f"verify failed ({failed}) for {self.profile}{crash}"

    def to_json(self) -> dict[str, Any]:
        return {"profile": self.profile, "ok": self.ok,
                "weights": self.weights.to_json() if self.weights else None,
                "tool_call_parse_failures": self.tool_calls.parse_failures,
                "tool_call_retries": self.tool_calls.retries,
                "tool_calls": self.tool_calls.to_json(), "crash": self.crash,
                "not_checkable": self.not_checkable,
                "checks": [c.to_json() for c in self.checks]}
