"""Is a state record this kimik3's shape? PURE: a record's JSON data checked against a fact's type hints.

The state dir outlives kimik3 versions and is open to editors, full disks and restored backups: a record that
is torn, of another version, or edited by hand must count as absent (the step that wrote it redoes its work and
writes it again), never reach the planner as a value of the wrong type (a `None` where a tuple of layer sizes
goes was a traceback in every `plan`). Frozen values do not check types (model/frozen.py: they are made by
kimik3's own collectors), so a record read from disk is checked here first.
"""

from __future__ import annotations

import types
import typing
from typing import Any, TypeVar, Union, get_args, get_origin

from kimik3_reconciler.model.frozen import Frozen

T = TypeVar("T", bound=Frozen)


def conforms(value: Any, hint: Any) -> bool:
    """Does JSON-decoded `value` fit the type `hint` (int, float, str, bool, None, X | Y, tuple[X, ...],
    tuple[X, Y], list[X], dict[str, X], Any, a Frozen class)? JSON arrays stand for tuples."""
    if hint is Any:
        return True
    if hint is type(None) or hint is None:
        return value is None
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        return any(conforms(value, arg) for arg in args)
    if origin in (tuple, list):
        if not isinstance(value, list | tuple):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(conforms(v, a) for v, a in zip(value, args))
        inner = args[0] if args else Any
        return all(conforms(v, inner) for v in value)
    if origin is dict:
        key, inner = args or (Any, Any)
        return isinstance(value, dict) and all(conforms(k, key) and conforms(v, inner) for k, v in value.items())
    if isinstance(hint, type) and issubclass(hint, Frozen):
        return typed(hint, value) is not None
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(hint, type) and isinstance(value, hint)


def typed(cls: type[T], data: Any) -> T | None:
    """`cls(**data)` when `data` is a mapping of `cls`'s fields (required ones present) of the right types,
    else None: the record counts as absent."""
    if not isinstance(data, dict) or not data.keys() <= set(cls._fields):
        return None
    hints = typing.get_type_hints(cls)
    if any(name not in data and name not in cls._defaults for name in cls._fields):
        return None
    if not all(conforms(value, hints[name]) for name, value in data.items()):
        return None
    return cls(**data)
