"""Each host's effective profile: the fleet's profile text with that host's overrides set, and its relative paths
made absolute against the folder they mean on that host; PURE (text in, text out).

The text keeps the profile's comments and key order (a round-trip YAML load, as `tune --write`), so what a host is
sent reads like the file the operator wrote. It travels to the host as data (ssh's stdin), never in a command line."""

from __future__ import annotations

import io
import posixpath
from collections.abc import Iterable, Mapping
from typing import Any

from ruamel.yaml.comments import CommentedMap

from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_edit import _yaml  # the round-trip reader `tune --write` edits profiles with
from kimik3_reconciler.model.profile_rules import FieldPath
from kimik3_reconciler.model.profile_rules.paths import local_paths


def override_paths(overrides: Mapping[str, Any]) -> tuple[FieldPath, ...]:
    """The profile fields a host's override tree sets: ("gpus",), ("serve", "port"), ("rpc", "workers"), ..."""
    found: list[FieldPath] = []
    for key, value in overrides.items():
        if key == "gpus":
            found.append(("gpus",))
        elif isinstance(value, Mapping):
            found += [(key, inner) for inner in value]
    return tuple(found)


def _value_at(tree: Mapping[str, Any], path: FieldPath) -> Any:
    value: Any = tree
    for part in path:
        value = value[part]
    return value


def _set(data: Any, path: FieldPath, value: Any) -> None:
    for part in path[:-1]:
        if isinstance(part, str) and part not in data:
            data[part] = CommentedMap()
        data = data[part]
    data[path[-1]] = value


def with_overrides(text: str, overrides: Mapping[str, Any]) -> str:
    """The profile `text` with every field the override tree sets replaced (or added)."""
    return _edited(text, ((path, _value_at(overrides, path)) for path in override_paths(overrides)))


def relative_paths(profile: Profile) -> tuple[tuple[FieldPath, str], ...]:
    """The host paths the profile names relative to its folder (model/profile_rules/paths.local_paths)."""
    return tuple((where, path) for where, path in local_paths(profile) if not posixpath.isabs(path))


def with_absolute_paths(text: str, profile: Profile, folder: str) -> str:
    """`text` with each relative path made absolute against `folder` (the profile's folder on that host): the host
    reads the profile from stdin, which has no folder of its own."""
    found = relative_paths(profile)
    if not found:
        return text
    return _edited(text, ((where, posixpath.normpath(posixpath.join(folder, path))) for where, path in found))


def _edited(text: str, changes: Iterable[tuple[FieldPath, Any]]) -> str:
    yaml = _yaml()
    data = yaml.load(text)
    for path, value in changes:
        _set(data, path, value)
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()
