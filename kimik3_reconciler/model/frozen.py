"""Frozen values without pydantic: the part of pydantic's BaseModel that kimik3's facts and profile values use.

A no-op `kimik3 plan` must not import pydantic (~90 ms before any model class, then ~1 ms a class to build
its validator: docs/design.md "What a no-op plan imports"). Facts are made by kimik3's own collectors and
the profile is validated once by model/profile_schema.py (pydantic), so what they need is values:
keyword construction with defaults, a list given for a tuple field or a mapping for a nested value
converted (as pydantic's lax mode does), frozen attributes, equality, `model_copy(update=...)`,
`model_dump(mode=..., exclude=...)` and `model_validate`. Declaring a class costs a few microseconds
(no generated code, unlike a dataclass's ~1 ms).

    class GpuFact(Frozen):
        index: int
        processes: tuple[GpuProcess, ...] = ()
        labels: dict[str, str] = default(dict)

Fields are the class's annotated names (inherited ones first), in order. `_json` maps a field to a
function of its value used by `model_dump(mode="json")` (pydantic's `field_serializer(when_used="json")`).
An open class (`_open = True`) takes any fields, in the order given: a profile section rebuilt from its
validated data (model/profile.py).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Any, ClassVar, Union, get_args, get_origin

_MISSING = object()


class _Factory:
    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]):
        self.make = make


def default(make: Callable[[], Any]) -> Any:
    """A field default made fresh for each value (pydantic's `Field(default_factory=...)`)."""
    return _Factory(make)


class Frozen:
    """A frozen value with named fields; see the module docstring."""

    _fields: ClassVar[tuple[str, ...]] = ()
    _defaults: ClassVar[dict[str, Any]] = {}
    _json: ClassVar[dict[str, Callable[[Any], Any]]] = {}
    _open: ClassVar[bool] = False
    _coerced: ClassVar[dict[str, Any] | None] = None  # field -> type hint, for the fields that convert input

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields: list[str] = []
        defaults: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            for name, hint in klass.__dict__.get("__annotations__", {}).items():
                if name.startswith("_") or str(hint).startswith("ClassVar"):
                    continue
                if name not in fields:
                    fields.append(name)
                if name in klass.__dict__:
                    defaults[name] = klass.__dict__[name]
                elif name in klass.__dict__.get("_defaults", {}):  # a parent's, already moved off its class
                    defaults[name] = klass.__dict__["_defaults"][name]
        cls._fields, cls._defaults, cls._coerced = tuple(fields), defaults, None
        for name in defaults:  # the instance holds every field; a class attribute would only shadow it
            if name in cls.__dict__:
                delattr(cls, name)

    def __init__(self, **values: Any):
        cls = type(self)
        own = self.__dict__
        if cls._open:
            own.update(values)
            return
        unknown = values.keys() - set(cls._fields)
        if unknown:
            raise TypeError(f"{cls.__name__}: unknown field(s) {', '.join(sorted(unknown))}")
        coerced = cls._coerced if cls._coerced is not None else cls._coercions()
        for name in cls._fields:
            value = values.get(name, _MISSING)
            if value is _MISSING:
                value = cls._defaults.get(name, _MISSING)
                if value is _MISSING:
                    raise TypeError(f"{cls.__name__}: missing field {name}")
                if isinstance(value, _Factory):
                    value = value.make()
            elif name in coerced:
                value = _coerce(value, coerced[name])
            own[name] = value

    @classmethod
    def _coercions(cls) -> dict[str, Any]:
        """The fields whose input may need converting (tuples, nested values), from the type hints: resolved
        on the first value of the class, so declaring one costs nothing."""
        hints = typing.get_type_hints(cls)
        cls._coerced = {name: hints[name] for name in cls._fields if _may_convert(hints[name])}
        return cls._coerced

    @classmethod
    def model_validate(cls, data: dict[str, Any]) -> Any:
        return cls(**data)

    def model_copy(self, update: dict[str, Any] | None = None) -> Any:
        """A copy with some fields replaced (as given: pydantic's model_copy does not validate either)."""
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)
        copy.__dict__.update(update or {})
        return copy

    def model_dump(self, *, mode: str = "python", exclude: Any = None) -> dict[str, Any]:
        """The fields as plain data, nested values as dicts; mode "json": tuples as lists, `_json` applied.
        `exclude`: a set of field names, or a mapping of field name to what to exclude inside it."""
        out: dict[str, Any] = {}
        serializers = type(self)._json if mode == "json" else {}
        for name, value in self.__dict__.items():
            inner = None
            if exclude is not None and name in exclude:
                inner = exclude[name] if isinstance(exclude, dict) else True
                if inner is True:
                    continue
            out[name] = serializers[name](value) if name in serializers else _dump(value, mode, inner)
        return out

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: use model_copy(update=...)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash((type(self), *self.__dict__.values()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """Saved plans write and read payloads with pydantic (model/plan_file.py); some payloads hold facts."""
        from pydantic_core import core_schema

        hints = typing.get_type_hints(cls)
        fields = {
            name: core_schema.typed_dict_field(handler.generate_schema(hints[name]), required=name not in cls._defaults)
            for name in cls._fields
        }
        return core_schema.no_info_after_validator_function(
            lambda data: cls(**data),
            core_schema.typed_dict_schema(fields, extra_behavior="forbid"),
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda value, info: value.model_dump(mode=info.mode), info_arg=True
            ),
        )


def _may_convert(hint: Any) -> bool:
    origin = get_origin(hint)
    if origin in (tuple, Union, types.UnionType):
        return True
    return isinstance(hint, type) and issubclass(hint, Frozen)


def _coerce(value: Any, hint: Any) -> Any:
    """pydantic's lax conversions that kimik3's callers rely on: a list for a tuple, a mapping for a value."""
    if value is None:
        return None
    origin = get_origin(hint)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            return value
        args = get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(item, args[0]) for item in value)
        if len(args) == len(value):
            return tuple(_coerce(item, arg) for item, arg in zip(value, args))
        return tuple(value)
    if origin in (Union, types.UnionType):
        for arg in get_args(hint):
            if isinstance(value, (list, tuple)) and get_origin(arg) is tuple:
                return _coerce(value, arg)
            if isinstance(value, dict) and isinstance(arg, type) and issubclass(arg, Frozen):
                return arg(**value)
        return value
    if isinstance(value, dict) and isinstance(hint, type) and issubclass(hint, Frozen):
        return hint(**value)
    return value


def _dump(value: Any, mode: str, exclude: Any) -> Any:
    if isinstance(value, Frozen):
        return value.model_dump(mode=mode, exclude=exclude)
    if isinstance(value, tuple):
        items = [_dump(item, mode, None) for item in value]
        return items if mode == "json" else tuple(items)
    if isinstance(value, list):
        return [_dump(item, mode, None) for item in value]
    if isinstance(value, dict):
        return {key: _dump(item, mode, None) for key, item in value.items()}
    return value
