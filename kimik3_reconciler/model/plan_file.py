"""A saved plan (`kimik3 plan FILE -out PLAN`): the steps with their exact payloads, the profile text and
the observed facts the plan was made from, as one JSON document. PURE: text in, values out.

Payloads are frozen dataclasses (model/specs.py); pydantic's TypeAdapter writes and reads them (imported
here only when a plan is saved or read), so a
payload read back equals the one planned (tests/unit/test_plan_file.py round-trips every type in
`PAYLOADS`). The file holds no secret: a profile never holds one (the validator refuses them) and
payloads carry the api key's *path*, never its content.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from kimik3_reconciler.errors import InputError
from kimik3_reconciler.model.plan import Action, DiffItem, Step
from kimik3_reconciler.model.specs import PAYLOADS, Payload

FORMAT = "kimik3-plan"
VERSION = 1
_BY_NAME = {cls.__name__: cls for cls in PAYLOADS}


@cache
def _adapter(cls: type[Payload]) -> Any:
    from pydantic import TypeAdapter  # only a saved plan needs it: a plain `plan` never imports pydantic

    return TypeAdapter(cls)


def payload_to_json(payload: Payload) -> dict[str, Any]:
    """{"type": "LaunchContainer", "fields": {...}}: the type picks the executor, so it is kept by name."""
    return {"type": type(payload).__name__, "fields": _adapter(type(payload)).dump_python(payload, mode="json")}


def payload_from_json(data: dict[str, Any]) -> Payload:
    cls = _BY_NAME.get(data.get("type", ""))
    # A plan written by another kimik3 version may name a payload this one cannot execute.
    if cls is None:
        raise ValueError(f"unknown step payload {data.get('type')!r}")
    return _adapter(cls).validate_python(data["fields"])


def step_to_json(step: Step) -> dict[str, Any]:
    data = step.to_json()
    data["spec"] = payload_to_json(step.spec) if step.spec is not None else None
    return data


def step_from_json(data: dict[str, Any]) -> Step:
    return Step(kind=data["kind"], target=data["target"], action=Action[data["action"].upper()],
                reason=data["reason"], diff=tuple(DiffItem(d["field"], d["old"], d["new"]) for d in data["diff"]),
                spec=payload_from_json(data["spec"]) if data["spec"] is not None else None,
                cost=data.get("cost"), warnings=tuple(data.get("warnings", ())))


@dataclass(frozen=True)
class SavedPlan:
    """What `apply PLAN` executes, and what must not have moved since it was made.

    `basis`: flat {fact: value} of the observation (planning/basis.py), compared again at apply time.
    `rehash`: the plan was made with `--verify`; apply observes the same way.
    """

    profile_source: str  # absolute path of the profile file
    profile_text: str
    basis: dict[str, str]
    steps: tuple[Step, ...]
    created: str
    rehash: bool = False
    warnings: tuple[str, ...] = ()
    made_by: str = ""  # the kimik3 that made it (version and code digest): only the same one executes it

    @property
    def changes(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.changes)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "version": VERSION, "created": self.created, "kimik3": self.made_by,
            "profile": {"source": self.profile_source, "text": self.profile_text},
            "observed": {"rehash": self.rehash, "digest": basis_digest(self.basis),
                         "basis": dict(sorted(self.basis.items()))},
            "warnings": list(self.warnings),
            "steps": [step_to_json(s) for s in self.steps],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], source: str) -> SavedPlan:
        """`source`: the plan file, named in errors."""
        from pydantic import ValidationError

        if data.get("version") != VERSION:
            raise InputError(f"{source}: saved plan format version {data.get('version')!r}; this kimik3 reads "
                             f"version {VERSION}: make the plan again with this kimik3")
        try:
            return cls(profile_source=data["profile"]["source"], profile_text=data["profile"]["text"],
                       basis={str(k): str(v) for k, v in data["observed"]["basis"].items()},
                       steps=tuple(step_from_json(s) for s in data["steps"]), created=data["created"],
                       rehash=bool(data["observed"].get("rehash", False)), warnings=tuple(data.get("warnings", ())),
                       made_by=str(data.get("kimik3", "")))
        # AttributeError: a field of the wrong JSON type (a list where the basis mapping goes, a number as action).
        except (AttributeError, KeyError, TypeError, ValueError, ValidationError) as exc:
            raise InputError(f"{source}: not a readable kimik3 saved plan ({type(exc).__name__}: {exc})") from exc


def basis_digest(basis: dict[str, str]) -> str:
    """One sha256 over the facts the plan was made from (for readers and CI logs; apply compares the facts)."""
    return hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()


def read_saved_plan(text: str, source: str) -> SavedPlan | None:
    """The saved plan in `text`, or None when the text is not one (a profile): detected by content."""
    if not text.lstrip().startswith("{"):
        return None  # profiles are YAML mappings in block style; a plan file is one JSON object
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        # A plan cut short (a full disk, a killed copy, a merge) would otherwise be parsed as a YAML profile and
        # refused as "invalid YAML" at some line: say what the file is and what to do.
        if f'"format": "{FORMAT}"' in text[:200]:
            raise InputError(f"{source}: a damaged kimik3 saved plan (not complete JSON: {exc.msg}, line "
                             f"{exc.lineno} column {exc.colno}; truncated or edited?): make the plan again with "
                             "`kimik3 plan PROFILE -out PLAN`") from exc
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    return SavedPlan.from_json(data, source)


def write_saved_plan(plan: SavedPlan) -> str:
    return json.dumps(plan.to_json(), indent=2) + "\n"
