"""What `kimik3 verify` found: one timed CheckResult per check, the tool-call counts, the weights, a crash."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from kimik3_reconciler.model.weights import Weights


class Status(str, Enum):
    """A check passed, failed, could not judge what the model said (random weights), got nothing to judge from a
    real model (its thinking used every token), or does not apply."""

    OK = "ok"
    FAILED = "failed"
    NOT_CHECKABLE = "not checkable"
    INCONCLUSIVE = "inconclusive"
    SKIPPED = "skipped"


NOT_CHECKABLE = "not checkable (random weights)"
INCONCLUSIVE = "inconclusive (thinking used all {tokens} tokens)"


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
        # ok: true passed, false failed, null neither (not checkable, inconclusive, skipped)
        ok = {Status.OK: True, Status.FAILED: False}.get(self.status)
        return {
            "name": self.name,
            "status": self.status.value,
            "ok": ok,
            "detail": self.detail,
            "seconds": self.seconds,
        }


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

    @property
    def inconclusive(self) -> list[str]:
        return [c.name for c in self.checks if c.status is Status.INCONCLUSIVE]

    @property
    def content(self) -> str:
        """What verify could say about the model's answers, beside `ok` (which only says nothing failed)."""
        if self.weights is not None and self.weights.random:
            return NOT_CHECKABLE
        if self.inconclusive:
            return f"inconclusive: {', '.join(self.inconclusive)} (the thinking used every token)"
        return "checked" if self.ok else "failed"

    def summary(self) -> str:
        """One honest line: on random weights only the plumbing passed, never a plain "ok"."""
        if not self.ok:
            return self.failure_text()
        if self.weights is not None and self.weights.random:
            return f"plumbing ok; content {NOT_CHECKABLE}"
        if self.inconclusive:
            return f"ok, except inconclusive: {', '.join(self.inconclusive)} (thinking used every token; not a failure)"
        return "ok: plumbing and content checked"

    def failure_text(self) -> str:
        """The one line VerifyFailed carries: the failed checks, and the crash's cause and fix when there is one."""
        failed = ", ".join(c.name for c in self.checks if c.failed)
        crash = f"; the server crashed: {self.crash}" if self.crash else ""
        return f"verify failed ({failed}) for {self.profile}{crash}"

    def to_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "ok": self.ok,
            "content": self.content,
            "summary": self.summary(),
            "weights": self.weights.to_json() if self.weights else None,
            "tool_call_parse_failures": self.tool_calls.parse_failures,
            "tool_call_retries": self.tool_calls.retries,
            "tool_calls": self.tool_calls.to_json(),
            "crash": self.crash,
            "not_checkable": self.not_checkable,
            "inconclusive": self.inconclusive,
            "checks": [c.to_json() for c in self.checks],
        }
