"""Plan values: Terraform-style actions, field diffs, steps with reasons, and their JSON form."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, is_dataclass
from enum import Enum
from typing import Any

from kimik3_reconciler.model.specs import Payload


class Action(Enum):
    """What a step does, with the symbol `kimik3 plan` prints (Terraform's)."""

    NOOP = " "
    CREATE = "+"
    UPDATE = "~"
    REPLACE = "-/+"
    DELETE = "-"
    READ = "<="

    @property
    def symbol(self) -> str:
        return self.value


@dataclass(frozen=True)
class DiffItem:
    """One field whose desired value differs from what the running thing was made from."""

    field: str
    old: Any
    new: Any

    def __str__(self) -> str:
        return f"{self.field}: {_show(self.old)} → {_show(self.new)}"


def _show(value: Any) -> str:
    return "(none)" if value is None else shown(str(value))


def shown(text: str) -> str:
    """`text` with its control characters escaped (a tab or newline of a serve.env value or an extra_args item,
    profile_source.py): one diff line stays one line, and nothing reaches the terminal as a control code."""
    return "".join(repr(c)[1:-1] if c < " " or c == "\x7f" else c for c in text)


def flat_diff(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> tuple[DiffItem, ...]:
    """The fields whose values differ between two flat {field: value} maps, sorted by field: the one diff
    behind every REPLACE/UPDATE reason (container inputs, image inputs, unit file settings)."""
    return tuple(
        DiffItem(f"{prefix}{key}", old.get(key), new.get(key))
        for key in sorted(old.keys() | new.keys())
        if old.get(key) != new.get(key)
    )


@dataclass(frozen=True)
class Step:
    """One ordered unit of convergence; `spec` is the executor's input, `reason` says why.

    `kind` names the step for people (plan output, case files); the executor is chosen by the type
    of `spec`, so a step that changes something must carry a Payload (checked here, at plan time).
    """

    kind: str
    target: str
    action: Action
    reason: str
    diff: tuple[DiffItem, ...] = ()
    spec: Any = None
    cost: str | None = None
    warnings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.spec is not None and not isinstance(self.spec, Payload):
            raise TypeError(f"{self.kind} step: spec {type(self.spec).__name__} is not a step payload (model/specs.py)")
        if self.action is not Action.NOOP and self.spec is None:
            raise TypeError(f"{self.kind} step: {self.action.name} without a payload: nothing could execute it")

    @property
    def changes(self) -> bool:
        return self.action is not Action.NOOP

    @property
    def host(self) -> str:
        """Where the step acts: an RPC worker's name (its payload carries the worker's Docker), else the main host."""
        worker = getattr(self.spec, "host", None)
        return getattr(worker, "name", None) or MAIN_HOST

    @property
    def ships_bytes(self) -> int:
        """Bytes this step sends to its host: a worker's image build context (0 for everything else)."""
        return int(getattr(self.spec, "context_bytes", 0) or 0) if self.changes else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "action": self.action.name.lower(),
            "symbol": self.action.symbol.strip(),
            "reason": self.reason,
            "diff": [{"field": d.field, "old": d.old, "new": d.new} for d in self.diff],
            "cost": self.cost,
            "warnings": list(self.warnings),
            "spec": _jsonable(self.spec),
        }


MAIN_HOST = "this host"  # the main server's host, where kimik3 runs


@dataclass(frozen=True)
class Plan:
    """The ordered steps for one profile against one observation."""

    profile: str
    steps: tuple[Step, ...]
    warnings: tuple[str, ...] = field(default=())
    forecast: Any = None  # planning.placement.Forecast, when the layout and GPU facts are known
    routes: Any = None  # planning.routes.RouteReport: the ways this host can serve Kimi-K3 (issue 25 §4)

    @property
    def changes(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.changes)

    @property
    def converged(self) -> bool:
        return not self.changes

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for step in self.changes:
            counts[step.action.name.lower()] = counts.get(step.action.name.lower(), 0) + 1
        if not counts:
            return "no changes"
        return ", ".join(f"{n} to {verb}" for verb, n in counts.items())

    def hosts(self) -> dict[str, dict[str, Any]]:
        """Steps grouped by the host they act on, in apply order, with the bytes each host is sent."""
        groups: dict[str, dict[str, Any]] = {}
        for step in self.steps:
            group = groups.setdefault(step.host, {"changes": 0, "ships_bytes": 0, "steps": []})
            group["changes"] += int(step.changes)
            group["ships_bytes"] += step.ships_bytes
            group["steps"].append(f"{step.kind} {step.target}")
        return groups

    def to_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "converged": self.converged,
            "summary": self.summary(),
            "hosts": self.hosts(),
            "warnings": list(self.warnings),
            "forecast": _jsonable(self.forecast),
            "routes": self.routes.to_json() if self.routes is not None else None,
            "steps": [s.to_json() for s in self.steps],
        }


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, Payload) and hasattr(value, "to_json"):
        return _jsonable(value.to_json())
    if is_dataclass(value):
        data = asdict(value)
        data.pop("secret", None)
        return {k: _jsonable(v) for k, v in data.items()}
    if hasattr(value, "model_dump"):  # pydantic facts (RemoteFile, ...)
        return _jsonable(value.model_dump(mode="json"))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)
