"""`Record`: a frozen dataclass whose methods are shared, not generated.

`@dataclass(frozen=True)` compiles six methods per class from source text (`exec`) when the class is
created: the 25 Plan types cost ~10 ms of every `plan` and `run` start, a third of the launcher's own
import time (bench/results/plan_speed.md). A Record subclass behaves the same — keyword or positional
construction with defaults and `field(default_factory=...)`, equality and hash over the fields in
order, the same repr, assignment refused with `FrozenInstanceError` — and `dataclasses.replace`,
`fields`, `asdict` and `is_dataclass` accept it (it carries `__dataclass_fields__`); type checkers
read it as a frozen dataclass (PEP 681).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, ClassVar

from typing_extensions import dataclass_transform


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
class Record:
    """Subclass it: the subclass's annotated names (in order) are its fields."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]
    _names: ClassVar[tuple[str, ...]]
    _defaults: ClassVar[dict[str, Any]]  # name -> value, or a factory for the names in _factories
    _factories: ClassVar[frozenset[str]]
    __match_args__: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls) -> None:
        annotations = inspect.get_annotations(cls)  # this class's own, as text (future annotations)
        names = tuple(annotations)
        defaults: dict[str, Any] = {}
        fields: dict[str, dataclasses.Field[Any]] = {}
        for name in names:
            declared = cls.__dict__.get(name, dataclasses.MISSING)
            spec: Any = (
                declared if isinstance(declared, dataclasses.Field) else dataclasses.field(default=declared)
            )
            if spec.default_factory is not dataclasses.MISSING:
                defaults[name] = spec.default_factory
                delattr(cls, name)
            elif spec.default is not dataclasses.MISSING:
                defaults[name] = spec.default
                setattr(cls, name, spec.default)  # as a dataclass keeps it: a class attribute
            spec.name, spec.type = name, annotations[name]
            spec._field_type = dataclasses._FIELD  # type: ignore[attr-defined]  # what fields() lists
            fields[name] = spec
        cls.__dataclass_fields__, cls._names, cls._defaults = fields, names, defaults
        cls._factories = frozenset(
            n for n, f in fields.items() if f.default_factory is not dataclasses.MISSING
        )
        cls.__match_args__ = names  # type: ignore[misc]  # mypy reads it as the dataclass-made one

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        if len(args) > len(cls._names):
            raise TypeError(f"{cls.__qualname__}() takes {len(cls._names)} arguments, {len(args)} given")
        values = dict(zip(cls._names, args, strict=False))  # the rest: keywords or defaults
        for name, value in kwargs.items():
            if name not in cls.__dataclass_fields__:
                raise TypeError(f"{cls.__qualname__}() got an unexpected keyword argument {name!r}")
            if name in values:
                raise TypeError(f"{cls.__qualname__}() got multiple values for argument {name!r}")
            values[name] = value
        for name in cls._names:
            if name not in values:
                if name not in cls._defaults:
                    raise TypeError(f"{cls.__qualname__}() missing required argument: {name!r}")
                default = cls._defaults[name]
                values[name] = default() if name in cls._factories else default
            object.__setattr__(self, name, values[name])

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._names)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record) or other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._names)
        return f"{type(self).__qualname__}({shown})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
