"""A validated profile with what was read around it (warnings, source, line of every key), and its plain-data
form for the profile cache (cli/profile_cache.py). PURE, and free of pydantic and yaml: a cache hit builds a
LoadedProfile from this module and model/profile.py alone."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kimik3_reconciler.errors import ProfileProblem
from kimik3_reconciler.model.profile import Profile, from_tree
from kimik3_reconciler.model.profile_rules import FieldPath


@dataclass(frozen=True)
class ProfileWarning:
    """Something legal but probably unintended in a profile, located in its file."""

    source: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        return str(ProfileProblem(self.source, self.line, self.field, self.message))


@dataclass(frozen=True)
class LoadedProfile:
    """A validated profile, its warnings, where it came from, and the line of every key in it.
    `tree`: the validated data the profile's values were built from (model/profile_schema.to_tree)."""

    profile: Profile
    warnings: tuple[ProfileWarning, ...]
    source: str
    lines: Mapping[FieldPath, int] = field(default_factory=dict, repr=False, compare=False)
    text: str = field(default="", repr=False, compare=False)  # kept to record the last good profile
    tree: Any = field(default=None, repr=False, compare=False)

    def fields_in(self, message: str) -> tuple[FieldPath, ...]:
        """The fields of this profile a message names (fields_named)."""
        return fields_named(message, self.lines)

    def where(self, path: FieldPath) -> str:
        """`file:line: field` of a field (or its closest written parent), for a refusal made after validation."""
        return f"{self.source}:{line_for(path, self.lines) or 1}: {render_path(path)}"


def line_for(path: FieldPath, lines: Mapping[FieldPath, int]) -> int | None:
    for end in range(len(path), 0, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return None


_TOP_KEYS = "apiVersion|name|engine|model|image|build|gpus|share_gpus|serve|gate|systemd|rpc|metrics|vllm|sglang"
_NAMED_FIELD = re.compile(rf"(?<![\w./-])({_TOP_KEYS})((?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])*)(?=[\s:=,;)]|$)")


def fields_named(message: str, lines: Mapping[FieldPath, int]) -> tuple[FieldPath, ...]:
    """The profile fields a refusal's text names ("serve.port", "build.patches[0]", "gpus: ..."), for those the
    profile writes (a default has no line): how a refusal made without the file still points at it."""
    found: list[FieldPath] = []
    for match in _NAMED_FIELD.finditer(message):
        head, rest = match.group(1), match.group(2)
        opens = match.start() == 0 or message[: match.start()].endswith(("\n", "- "))
        if not rest and not (opens and message[match.end() :].startswith(":")):
            continue  # a bare word ("the model ...", "with gpus: none") is prose; a refusal opening "gpus: ..." names it
        path: list[str | int] = [head]
        for part in re.findall(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]", rest):
            path.append(part[0] if part[0] else int(part[1]))
        while len(path) > 1 and tuple(path) not in lines:
            path.pop()  # "serve.spec_draft.device" unwritten (a default): its section's line
        if tuple(path) in lines and tuple(path) not in found:
            found.append(tuple(path))
    # "check model.quant / model.mmproj" without an mmproj: model.quant's line says it; "model" would be noise.
    return tuple(f for f in found if not any(g != f and g[: len(f)] == f for g in found))


def render_path(path: FieldPath) -> str:
    """("serve", "extra_args", 2) -> "serve.extra_args[2]"."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def to_entry(loaded: LoadedProfile) -> dict[str, Any]:
    """What the profile cache keeps of a validation: everything but the text (its key) and the source (the
    same text may be read under another name: the warnings name the file as it is read now)."""
    return {
        "tree": loaded.tree,
        "warnings": [[w.line, w.field, w.message] for w in loaded.warnings],
        "lines": [[list(path), line] for path, line in loaded.lines.items()],
    }


def from_entry(entry: Mapping[str, Any], text: str, source: str) -> LoadedProfile:
    """The LoadedProfile `to_entry` kept, read as `source`. A malformed entry raises (KeyError, TypeError,
    ValueError): the cache then validates the text again."""
    warnings = tuple(ProfileWarning(source, line, str(name), str(message)) for line, name, message in entry["warnings"])
    lines: dict[FieldPath, int] = {}
    for path, line in entry["lines"]:
        if not isinstance(line, int) or not all(isinstance(p, (str, int)) for p in path):
            raise ValueError(f"malformed line entry {path!r}: {line!r}")
        lines[tuple(path)] = line
    profile = from_tree(entry["tree"])
    if not isinstance(profile, Profile):
        raise ValueError("the cached tree is not a profile")
    return LoadedProfile(profile, warnings, source, lines, text, entry["tree"])
