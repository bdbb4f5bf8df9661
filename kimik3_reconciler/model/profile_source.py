"""Profile text -> validated Profile, with every problem located by line; PURE (takes text, reads no file)."""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Mapping
from typing import Any, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from kimik3_reconciler.errors import ProfileError, ProfileProblem
from kimik3_reconciler.model.loaded_profile import LoadedProfile, ProfileWarning, line_for, render_path
from kimik3_reconciler.model.profile import from_tree
from kimik3_reconciler.model.profile_rules import FieldPath, check_rules
from kimik3_reconciler.model.profile_rules.engines import engine_fields
from kimik3_reconciler.model.profile_schema import Profile, to_tree

__all__ = ["LoadedProfile", "ProfileWarning", "load_yaml", "parse_profile", "render_path", "validation_problems"]

MAX_PROFILE_CHARS = 256 * 1024
_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_YAML11_BOOLS = frozenset({"yes", "no", "on", "off", "y", "n"})
_YAML11_NUMBER = re.compile(
    r"[-+]?(0[xob][0-9a-fA-F_]+|[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?|[0-9][0-9_]*_[0-9_]*"
    r"(\.[0-9_]*)?|[0-9]+[eE][-+]?[0-9]+)"
)
_TYPE_WORDS = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}


class _Refused(Exception):
    """YAML that kimik3 refuses before constructing any value (anchors, aliases)."""

    def __init__(self, mark: yaml.Mark, message: str):
        super().__init__(message)
        self.line = mark.line + 1
        self.message = message


# YAML 1.2's core schema for plain scalars, instead of PyYAML's YAML 1.1 guesses: `on`/`yes`/`no`/`off` are not
# booleans (`smoke: on` is refused, `LLAMA_ARG_FIT: off` stays the string "off"), `0100` is not octal 64, `8_080`
# and `1:30` (base 60) are not numbers, `2026-01-01` is not a date. What other YAML readers of the GitOps repo (CI
# linters, editors) see is what kimik3 sees. Floats keep a point or an exponent after one (`1e5` stays a string:
# a commit sha of digits and one `e` is hex).
_IMPLICIT = (
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("tag:yaml.org,2002:int", r"^[-+]?[0-9]+$", "-+0123456789"),
    (
        "tag:yaml.org,2002:float",
        r"^(?:[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)"
        r"|\.(?:nan|NaN|NAN))$",
        "-+0123456789.",
    ),
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:merge", r"^(?:<<)$", ["<"]),  # resolved only to be refused by name (_walk)
)


class _ProfileLoader(yaml.SafeLoader):
    """SafeLoader that refuses anchors and aliases (no alias bombs, no values shared by reference) and types plain
    scalars by YAML 1.2's core schema (_IMPLICIT)."""

    yaml_implicit_resolvers: dict[str, list[tuple[str, re.Pattern[str]]]] = {}

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Refused(
                event.start_mark, "anchors and aliases (&name, *name) are not allowed in a profile: write the value out"
            )
        if getattr(event, "tag", None) not in (None, "!"):
            # `!!int abc`, `!!bool x`, `!!timestamp x` raised from PyYAML's constructors (a traceback); `!!binary`
            # and `!!python/...` make values no profile field takes. A profile's values are plain YAML.
            shown_tag = event.tag.replace("tag:yaml.org,2002:", "!!")
            raise _Refused(
                event.start_mark,
                f"explicit tags ({shown_tag}) are not allowed in a profile: write the value plainly (quote a string)",
            )
        return super().compose_node(parent, index)


for _tag, _pattern, _first in _IMPLICIT:
    _ProfileLoader.add_implicit_resolver(_tag, re.compile(_pattern), list(_first))
# Plain decimal, leading zeros included (YAML 1.2): PyYAML's constructor reads `0100` as octal.
_ProfileLoader.add_constructor("tag:yaml.org,2002:int", lambda loader, node: int(loader.construct_scalar(node), 10))


def _walk(
    node: Node,
    path: FieldPath,
    lines: dict[FieldPath, int],
    found: list[tuple[int, FieldPath, str]],
    written: dict[FieldPath, str],
) -> None:
    """Record the line of every key and list item, and every scalar as written; report duplicate, merge and
    non-scalar keys."""
    if isinstance(node, ScalarNode):
        written[path] = node.value  # `revision: 0000…` reaches pydantic as 0: the hint must quote the digits
        if (hidden := _hidden_character(node.value, _holds_text(path))) is not None:
            found.append((node.start_mark.line + 1, path, hidden))
    if isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            lines[(*path, i)] = item.start_mark.line + 1
            _walk(item, (*path, i), lines, found, written)
    if not isinstance(node, MappingNode):
        return
    kept, seen = [], {}
    for key_node, value_node in node.value:
        line = key_node.start_mark.line + 1
        if key_node.tag == _MERGE_TAG:
            found.append((line, path, "merge keys (<<) are not allowed in a profile: write the keys out"))
            continue
        if not isinstance(key_node, ScalarNode):
            found.append((line, path, "a key must be a plain name, not a list or mapping"))
            continue
        key_node.tag = _STR_TAG  # keys are names: `on:` or `1:` stay strings instead of becoming true / 1
        key = key_node.value
        if key in seen:
            found.append((line, (*path, key), f"duplicate key (first at line {seen[key]}, again at line {line})"))
        else:
            seen[key] = line
            lines[(*path, key)] = line
        kept.append((key_node, value_node))
        _walk(value_node, (*path, key), lines, found, written)
    node.value = kept


# Unicode categories no profile value is written with: control (Cc: NUL, ESC, CR, tab, newline), format (Cf:
# zero-width, bidi overrides), lone surrogates (Cs) and line/paragraph separators. The YAML reader refuses most of them
# written raw, but a double-quoted "\0", "\n", "\e" or "\ud800" escape reaches every field: a NUL in a path made plan
# crash with a traceback (os.stat: embedded null byte), in serve.env or extra_args it passed plan and failed at
# `docker create`, an ESC rewrites what a terminal shows. Names and paths need none of them.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# Tab and newline are text in the two fields that travel as the container's argv and environment (the docker API,
# no shell, no unit file: the systemd env file holds kimik3's own values only, planning/unit_step.py): a `|` block
# scalar env value, or an inline multi-line `--chat-template` (the only way to override the template). Plans and
# logs show them escaped (model/plan.py).
_TEXT_CONTROLS = frozenset("\t\n")


def _holds_text(path: FieldPath) -> bool:
    """serve.env values and serve.extra_args items: text that may span lines."""
    return len(path) == 3 and path[0] == "serve" and path[1] in ("env", "extra_args")


_CONTROL_NAMES = {0x00: "NUL", 0x09: "a tab", 0x0A: "a newline", 0x0D: "a carriage return", 0x1B: "ESC"}


def _hidden_character(value: str, text: bool = False) -> str | None:
    """Why `value` is refused, or None: the first character no profile value may hold, by code point (`text`:
    a serve.env value or extra_args item, where tab and newline are allowed)."""
    for char in value:
        category = unicodedata.category(char)
        if category in _HIDDEN_CATEGORIES and not (text and char in _TEXT_CONTROLS):
            what = (
                _CONTROL_NAMES.get(ord(char))
                or ("a lone surrogate" if category == "Cs" else None)
                or unicodedata.name(char, "a control character").lower()
            )
            allowed = (
                " (tab and newline only in serve.env values and serve.extra_args)" if char in _TEXT_CONTROLS else ""
            )
            return (
                f"holds U+{ord(char):04X} ({what}): a profile's values are plain text (names, paths, flags, "
                f"env values), never control or invisible characters{allowed}"
            )
    return None


def load_yaml(
    text: str, written: dict[FieldPath, str]
) -> tuple[Any, dict[FieldPath, int], list[tuple[int | None, FieldPath, str]]]:
    """(data, key lines, problems); `written` gets every scalar as written. data is None when the text
    cannot be used at all."""
    lines: dict[FieldPath, int] = {}
    found: list[tuple[Any, FieldPath, str]] = []
    loader = None
    try:
        loader = _ProfileLoader(text)  # the reader refuses control characters here already
        node = loader.get_single_node()
        if node is None:
            return None, lines, [(1, (), "the profile is empty")]
        if not isinstance(node, MappingNode):
            return (
                None,
                lines,
                [(node.start_mark.line + 1, (), "the top level must be a mapping (apiVersion, name, model, ...)")],
            )
        _walk(node, (), lines, found, written)
        return loader.construct_document(node), lines, found
    except _Refused as exc:
        return None, lines, [(exc.line, (), exc.message)]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        detail = f"{exc.problem} ({exc.context})" if exc.context else str(exc.problem)
        return None, lines, [(mark.line + 1 if mark else None, (), f"invalid YAML: {detail}")]
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        return None, lines, [(line, (), f"invalid YAML: character #x{exc.character:04x}: {exc.reason}")]
    except RecursionError:
        return None, lines, [(None, (), "invalid YAML: nested too deeply")]
    finally:
        if loader is not None:
            loader.dispose()


def _model_at(path: FieldPath, root: type[BaseModel] = Profile) -> type[BaseModel] | None:
    """The pydantic model that validates the mapping at `path` (under `root`), or None (a dict, a list item...)."""
    model: type[BaseModel] = root
    for part in path:
        fields = {(f.alias or name): f for name, f in model.model_fields.items()}
        if part not in fields:
            return None
        inner = _submodel(fields[part].annotation)
        if inner is None:
            return None
        model = inner
    return model


def _submodel(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) is not None and get_origin(annotation) is not list and get_origin(annotation) is not dict:
        for arg in get_args(annotation):
            if (found := _submodel(arg)) is not None:
                return found
    return None


def _suggest(path: FieldPath, root: type[BaseModel] = Profile) -> str | None:
    """The valid key nearest to the unknown key at `path` (difflib over that model's YAML keys)."""
    model = _model_at(path[:-1], root)
    if model is None or not isinstance(path[-1], str):
        return None
    keys = [f.alias or name for name, f in model.model_fields.items()]
    close = difflib.get_close_matches(path[-1], keys, n=1, cutoff=0.6)
    return close[0] if close else None


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value) if isinstance(value, str) else str(value)


def _message(
    err: Mapping[str, Any], path: FieldPath, written: Mapping[FieldPath, str], root: type[BaseModel] = Profile
) -> str:
    kind, value, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    if kind == "kimik3":
        return str(ctx["reason"])
    if kind == "extra_forbidden":
        suggestion = _suggest(path, root)
        return "unknown key" + (f" (did you mean '{suggestion}'?)" if suggestion else "")
    if kind == "missing":
        return "required, but missing"
    if kind == "literal_error":
        expected = str(ctx.get("expected", ""))
        close = difflib.get_close_matches(str(value), re.findall(r"'([^']*)'", expected), n=1, cutoff=0.6)
        return f"must be {expected}, not {_describe(value)}" + (f" (did you mean '{close[0]}'?)" if close else "")
    if kind in _TYPE_WORDS:
        message = f"expected {_TYPE_WORDS[kind]}, got {_describe(value)}"
        if kind == "string_type" and isinstance(value, (int, float)) and not isinstance(value, bool):
            message += f' (quote it: "{written.get(path, value)}")'
        elif kind == "bool_type" and isinstance(value, str) and value.lower() in _YAML11_BOOLS:
            message += " (a profile is YAML 1.2: write true or false)"
        elif kind in ("int_type", "float_type") and isinstance(value, str) and _YAML11_NUMBER.fullmatch(value):
            message += " (a profile is YAML 1.2: write the number in plain decimal, e.g. 8080)"
        return message
    if kind == "string_too_short":
        return "must not be empty"
    return str(err["msg"]).replace("Input should be", "must be").replace("List should have", "must have")


def validation_problems(
    exc: ValidationError,
    source: str,
    lines: Mapping[FieldPath, int],
    written: Mapping[FieldPath, str],
    root: type[BaseModel] = Profile,
) -> list[ProfileProblem]:
    """pydantic's errors as located problems (`root`: the model validated, the profile's or the fleet file's)."""
    errors = [(tuple(p for p in err["loc"] if p != "[key]"), err) for err in exc.errors()]
    suggested = {(path[:-1], _suggest(path, root)) for path, err in errors if err["type"] == "extra_forbidden"}
    problems = []
    for path, err in errors:
        if err["type"] == "missing" and (path[:-1], path[-1]) in suggested:
            continue  # `modle:` already says "did you mean 'model'?"; "model: required" would be noise
        problems.append(
            ProfileProblem(source, line_for(path, lines) or 1, render_path(path), _message(err, path, written, root))
        )
    return problems


def parse_profile(text: str, source: str = "<profile>") -> LoadedProfile:
    """Validate profile YAML text; raise ProfileError listing every problem found, each with its line."""
    if len(text) > MAX_PROFILE_CHARS:
        # Parsing is linear but slow in pure Python (~0.5 ms a key): a 10 MB file of keys took minutes before
        # saying anything. A real profile is a few KiB; this says at once that the file is not one.
        raise ProfileError(
            [
                ProfileProblem(
                    source,
                    None,
                    "",
                    f"{len(text) // 1024} KiB: a profile is a few KiB and "
                    f"kimik3 reads at most {MAX_PROFILE_CHARS // 1024} KiB; is this the "
                    "right file?",
                )
            ]
        )
    written: dict[FieldPath, str] = {}
    data, lines, found = load_yaml(text, written)
    problems = [ProfileProblem(source, line, render_path(path), message) for line, path, message in found]
    if data is None:
        raise ProfileError(problems)
    if isinstance(data, dict) and data.get("kind") == "Fleet":
        # A fleet file given where a profile goes: one line saying so, not "model: required" and an unknown key each.
        message = "a fleet file (kind: Fleet), not a profile: `kimik3 fleet plan|apply|status FILE` reads it"
        raise ProfileError([ProfileProblem(source, line_for(("kind",), lines) or 1, "kind", message)])
    # Fields another engine reads: checked as written (a schema default is not the user's), beside the schema.
    mixed = [
        ProfileProblem(source, line_for(f.path, lines) or 1, render_path(f.path), f.message)
        for f in engine_fields(data)
    ]
    problems += mixed
    try:
        tree = to_tree(Profile.model_validate(data))
    except ValidationError as exc:
        raise ProfileError(_sorted(problems + validation_problems(exc, source, lines, written))) from None
    if mixed:
        raise ProfileError(_sorted(problems))  # the cross-field rules of a profile mixing two engines are noise
    profile = from_tree(tree)  # what every command plans with: the same values a cached profile gives
    warnings = []
    for finding in check_rules(profile):
        where = (source, line_for(finding.path, lines) or 1, render_path(finding.path), finding.message)
        if finding.severity == "error":
            problems.append(ProfileProblem(*where))
        else:
            warnings.append(ProfileWarning(*where))
    if problems:
        raise ProfileError(_sorted(problems))
    return LoadedProfile(profile, tuple(_sorted(warnings)), source, lines, text, tree)


def _sorted(items: list[Any]) -> list[Any]:
    return sorted(items, key=lambda p: p.line if p.line is not None else 0)
