"""`@record`: a frozen dataclass whose methods are shared functions instead of code compiled per class.

`@dataclass(frozen=True)` writes six methods per class as source text and compiles each with `exec`
(CPython 3.11 Lib/dataclasses.py, `_create_fn`): about 0.45 ms a class, 13 ms for the plan's types,
paid by every `plan` before it does anything. `@record` asks `dataclass` for the fields alone
(`init=False, repr=False, eq=False`: nothing compiled) and adds the methods `frozen=True` would, as
closures over the field names: 0.07 ms a class. Only public API: the class is a dataclass
(`dataclasses.fields`, `replace`, `asdict` work), and type checkers read it as a frozen dataclass
through `dataclass_transform` (PEP 681).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import MISSING, FrozenInstanceError, dataclass, field, fields
from typing import Any, TypeVar

from typing_extensions import dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: type[T]) -> type[T]:
    """What `@dataclass(frozen=True)` makes of `cls`: __init__ by field order with the defaults and
    default factories, __repr__, __eq__ and __hash__ over the fields, and no assignment or deletion."""
    if hasattr(cls, "__post_init__"):  # the shared __init__ does not call it: use @dataclass there
        raise TypeError(f"@record does not run {cls.__qualname__}.__post_init__")
    if not cls.__doc__:  # what dataclass would write, without its inspect.signature
        cls.__doc__ = f"{cls.__name__}({', '.join(inspect.get_annotations(cls))})"
    cls = dataclass(init=False, repr=False, eq=False)(cls)
    names = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    defaults: dict[str, Callable[[], Any]] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.default is not MISSING:
            defaults[f.name] = _constant(f.default)
        elif f.default_factory is not MISSING:
            defaults[f.name] = f.default_factory
    qualname = cls.__qualname__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(names):
            raise TypeError(f"{qualname}() takes {len(names)} arguments but {len(args)} were given")
        values = dict(zip(names, args, strict=False))  # more args than names: refused above
        for name, value in kwargs.items():
            if name in values:
                raise TypeError(f"{qualname}() got multiple values for argument {name!r}")
            if name not in names:
                raise TypeError(f"{qualname}() got an unexpected keyword argument {name!r}")
            values[name] = value
        for name in names:
            if name in values:
                object.__setattr__(self, name, values[name])
            elif name in defaults:
                object.__setattr__(self, name, defaults[name]())
            else:
                raise TypeError(f"{qualname}() missing required argument: {name!r}")

    def values(self: Any) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in names)

    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{type(self).__qualname__}({shown})"

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return bool(values(self) == values(other))

    def __hash__(self: Any) -> int:
        return hash(values(self))

    type.__setattr__(cls, "__init__", __init__)
    type.__setattr__(cls, "__repr__", __repr__)
    type.__setattr__(cls, "__eq__", __eq__)
    type.__setattr__(cls, "__hash__", __hash__)
    type.__setattr__(cls, "__setattr__", _no_assignment)
    type.__setattr__(cls, "__delattr__", _no_deletion)
    return cls


def _constant(value: Any) -> Callable[[], Any]:
    return lambda: value


def _no_assignment(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _no_deletion(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")
