"""A saved plan (`kimik3 plan FILE -out PLAN`): the steps with their exact payloads, the profile text and
the observed facts the plan was made from, as one JSON document. PURE: text in, values out.

Payloads are frozen dataclasses (model/specs.py); pydantic's TypeAdapter writes and reads them (imported
here only when a plan is saved or read), so a
payload read back equals the one planned (tests/unit/model/test_plan_file.py round-trips every type in
`PAYLOADS`). The file holds no secret: a profile never holds one (the validator refuses them) and
payloads carry the api key's *path*, never its content.

The file carries digests of its own content (`content_digest`: the profile, the observed facts, the header and
each step), so a file edited by hand is refused as edited, naming the part, rather than found stale against the
host; a part of the wrong shape is named by its place in the file (`step 4 (+ container k3): payload
LaunchContainer: container.command: ...`). The digests catch edits, not forgeries: whoever may write the file may
recompute them, and `apply PLAN` still checks every payload it runs against a fresh plan (planning/basis.py).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from kimik3_reconciler.errors import InputError, StalePlan
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


class _Shape(ValueError):
    """A part of a plan file of the wrong shape; the message names it by its place in the file."""


_JSON_TYPES = {
    dict: "an object",
    list: "a list",
    str: "a string",
    bool: "true or false",
    int: "a number",
    float: "a number",
    type(None): "null",
}


def _member(data: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:  # noqa: ANN401
    """data[key] when it is of `kind`; else _Shape naming `where` + `key` and what it holds instead."""
    name = where + key
    if key not in data:
        raise _Shape(f"{name}: missing")
    value = data[key]
    if not isinstance(value, kind):
        wanted = " or ".join(dict.fromkeys(_JSON_TYPES[k] for k in (kind if isinstance(kind, tuple) else (kind,))))
        raise _Shape(f"{name}: {wanted} expected, found {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:  # noqa: ANN401
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _payload_problem(exc: Exception, type_name: str) -> str:
    """A pydantic refusal as one line per field (its place in the payload, what is wrong, the value found),
    instead of pydantic's own multi-line dump."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return f"payload {type_name}: {exc}"
    problems = []
    for error in exc.errors()[:3]:
        place = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"]).lstrip(".")
        found = repr(error.get("input"))
        said = error["msg"].replace("a valid tuple", "a list")  # a tuple is a JSON list in the file
        problems.append(f"{place or 'fields'}: {said} (found {found[:60] + '…' if len(found) > 60 else found})")
    more = f"; and {exc.error_count() - 3} more" if exc.error_count() > 3 else ""
    return f"payload {type_name}: " + "; ".join(problems) + more


def step_from_json(data: Any, number: int = 1) -> Step:  # noqa: ANN401 - JSON as read
    """Step `number` (1-based, as people count the file's steps) of a plan file; _Shape names what is wrong."""
    where = f"step {number}: "
    if not isinstance(data, dict):
        raise _Shape(f"{where}an object expected, found {_json_type(data)}")
    kind, target = _member(data, "kind", str, where), _member(data, "target", str, where)
    action_name = _member(data, "action", str, where)
    if action_name.upper() not in Action.__members__:
        raise _Shape(
            f"{where}action: one of {', '.join(a.name.lower() for a in Action)} expected, found {action_name!r}"
        )
    action = Action[action_name.upper()]
    where = f"step {number} ({action.symbol.strip()} {kind} {target}): "
    diff = []
    for i, item in enumerate(_member(data, "diff", list, where)):
        if not isinstance(item, dict):
            raise _Shape(f"{where}diff[{i}]: an object expected, found {_json_type(item)}")
        diff.append(DiffItem(_member(item, "field", str, f"{where}diff[{i}]."), item.get("old"), item.get("new")))
    spec_json, spec = _member(data, "spec", (dict, type(None)), where), None
    if spec_json is not None:
        type_name = _member(spec_json, "type", str, f"{where}spec.")
        _member(spec_json, "fields", dict, f"{where}spec.")
        try:
            spec = payload_from_json(spec_json)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError; an unknown type too
            raise _Shape(f"{where}{_payload_problem(exc, type_name)}") from exc
    warnings = _member(data, "warnings", list, where) if "warnings" in data else []
    cost = _member(data, "cost", (str, type(None)), where) if "cost" in data else None
    try:
        return Step(
            kind=kind,
            target=target,
            action=action,
            reason=_member(data, "reason", str, where),
            diff=tuple(diff),
            spec=spec,
            cost=cost,
            warnings=tuple(str(w) for w in warnings),
        )
    except TypeError as exc:  # Step's own checks: a change without a payload
        raise _Shape(f"{where}{exc}") from exc


def _digest(value: Any) -> str:  # noqa: ANN401 - JSON
    """sha256 of a JSON value, independent of key order and layout (a plan reformatted by jq is not edited); ASCII
    escapes, so a lone surrogate an edit put in a string (`"\\ud800"`) hashes rather than fails to encode."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


_PARTS = {
    "profile": "the profile text",
    "observed": "the observed facts",
    "header": "the header (created, kimik3, warnings)",
}


def content_digest(data: dict[str, Any]) -> dict[str, Any]:
    """The digests a plan file carries of its own parts (everything but `content_digest` itself)."""
    header = {k: v for k, v in data.items() if k not in ("profile", "observed", "steps", "content_digest")}
    steps = data.get("steps")
    return {
        "profile": _digest(data.get("profile")),
        "observed": _digest(data.get("observed")),
        "header": _digest(header),
        "steps": [_digest(s) for s in steps] if isinstance(steps, list) else _digest(steps),
    }


def _edits(data: dict[str, Any], saved: Any) -> list[str]:  # noqa: ANN401 - JSON as read
    """The parts of the file whose content no longer matches the digests saved with it (empty: not edited)."""
    if not isinstance(saved, dict):
        return ["content_digest"]
    now = content_digest(data)
    edits = [label for part, label in _PARTS.items() if saved.get(part) != now[part]]
    before, after = saved.get("steps"), now["steps"]
    if not isinstance(before, list) or not isinstance(after, list):
        return [*edits, "the steps"] if before != after else edits
    return edits + _step_edits(before, after, data["steps"])


def _step_edits(before: list[str], after: list[str], steps: list[Any]) -> list[str]:
    """Steps changed, copied or removed, by their digests (a step moved elsewhere is not "changed": the order is
    said once)."""
    unclaimed = Counter(before)
    edits = []
    for number, (digest, step) in enumerate(zip(after, steps), 1):
        if unclaimed[digest] > 0:
            unclaimed[digest] -= 1
        else:
            edits.append(_step_name(step, number) + (" (a copy)" if digest in unclaimed else ""))
    changed = sum(1 for d in after if d not in unclaimed)
    removed = sum(unclaimed.values()) - changed
    if removed > 0:
        edits.append(f"{removed} step(s) removed")
    if not edits and before != after:
        edits.append("the order of the steps")
    return edits


def _step_name(data: Any, number: int) -> str:  # noqa: ANN401
    if isinstance(data, dict) and all(isinstance(data.get(k), str) for k in ("symbol", "kind", "target")):
        return f"step {number} ({data['symbol']} {data['kind']} {data['target']})"
    return f"step {number}"


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
    # Read from a file that carried its content digests (and they matched): every file this kimik3 writes does,
    # so one of this kimik3 without them had them removed (cli.inputs.check_made_by).
    sealed: bool = field(default=False, compare=False)

    @property
    def changes(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.changes)

    def to_json(self) -> dict[str, Any]:
        data = {
            "format": FORMAT,
            "version": VERSION,
            "created": self.created,
            "kimik3": self.made_by,
            "profile": {"source": self.profile_source, "text": self.profile_text},
            "observed": {
                "rehash": self.rehash,
                "digest": basis_digest(self.basis),
                "basis": dict(sorted(self.basis.items())),
            },
            "warnings": list(self.warnings),
            "steps": [step_to_json(s) for s in self.steps],
        }
        return {**data, "content_digest": content_digest(data)}

    @classmethod
    def from_json(cls, data: dict[str, Any], source: str) -> SavedPlan:
        """`source`: the plan file, named in errors. An edited file is StalePlan (exit 7, as every other change
        since the plan was made), naming the parts edited; a part of the wrong shape is InputError (exit 2)."""
        if data.get("version") != VERSION:
            raise InputError(
                f"{source}: saved plan format version {data.get('version')!r}; this kimik3 reads "
                f"version {VERSION}: make the plan again with this kimik3"
            )
        sealed = "content_digest" in data  # absent: an older kimik3's file (check_made_by refuses it), or removed
        edits = _edits(data, data["content_digest"]) if sealed else []
        try:
            plan = cls._read(data, sealed)
        except _Shape as exc:
            if edits:  # the edit is the cause; what no longer reads says where it went wrong
                raise _edited(source, data, edits, f"; it no longer reads: {exc}") from None
            raise InputError(f"{source}: not a readable kimik3 saved plan ({exc})") from None
        if edits:
            raise _edited(source, data, edits)
        return plan

    @classmethod
    def _read(cls, data: dict[str, Any], sealed: bool) -> SavedPlan:
        profile, observed = _member(data, "profile", dict, ""), _member(data, "observed", dict, "")
        basis = _member(observed, "basis", dict, "observed.")
        return cls(
            profile_source=_member(profile, "source", str, "profile."),
            profile_text=_member(profile, "text", str, "profile."),
            basis={str(k): str(v) for k, v in basis.items()},
            steps=tuple(step_from_json(s, i) for i, s in enumerate(_member(data, "steps", list, ""), 1)),
            created=_member(data, "created", str, ""),
            rehash=bool(observed.get("rehash", False)),
            warnings=tuple(str(w) for w in (_member(data, "warnings", list, "") if "warnings" in data else ())),
            made_by=str(data.get("kimik3", "")),
            sealed=sealed,
        )


def _edited(source: str, data: dict[str, Any], edits: list[str], detail: str = "") -> StalePlan:
    profile = data.get("profile")
    path = profile.get("source") if isinstance(profile, dict) and isinstance(profile.get("source"), str) else ""
    path = path if path.isprintable() and path.encode("utf-8", "replace").decode() == path else "PROFILE"
    return StalePlan(
        f"the saved plan {source} was edited after kimik3 wrote it (what differs from the digests "
        f"saved with it: {', '.join(edits)}{detail}): nothing was changed. kimik3 applies a saved plan "
        f"only as it was made: plan again (kimik3 plan {path} -out PLAN)",
        tuple(f"edited: {e}" for e in edits),
    )


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
            raise InputError(
                f"{source}: a damaged kimik3 saved plan (not complete JSON: {exc.msg}, line "
                f"{exc.lineno} column {exc.colno}; truncated or edited?): make the plan again with "
                "`kimik3 plan PROFILE -out PLAN`"
            ) from exc
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    return SavedPlan.from_json(data, source)


def write_saved_plan(plan: SavedPlan) -> str:
    return json.dumps(plan.to_json(), indent=2) + "\n"
