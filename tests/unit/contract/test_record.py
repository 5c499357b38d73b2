"""`Record` (launcher/contract/record.py) stands in for `@dataclass(frozen=True)` on the Plan types:
the same type declared both ways must behave the same in every way the code and tests use."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from launcher.contract.record import Record


class Spec(Record):
    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] | tuple[str, ...] = field(default_factory=dict)  # a tuple: hashable
    critical: bool = True
    port: int | None = None


class Twin(Record):  # Spec's fields under another name: never equal to a Spec, as with dataclasses
    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] | tuple[str, ...] = field(default_factory=dict)
    critical: bool = True
    port: int | None = None


@dataclass(frozen=True)
class SpecDC:
    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] | tuple[str, ...] = field(default_factory=dict)  # a tuple: hashable
    critical: bool = True
    port: int | None = None


BUILDS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    (("e", ("vllm",)), {}),
    (("e", ("vllm",), ()), {}),
    (("e",), {"argv": ("a", "b"), "port": 8000}),
    ((), {"name": "s", "argv": (), "env": {"A": "1"}, "critical": False}),
]


def _hash(value: object) -> int | str:
    try:
        return hash(value)
    except TypeError as exc:
        return str(exc)


def _both(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Spec, SpecDC]:
    return Spec(*args, **kwargs), SpecDC(*args, **kwargs)


@pytest.mark.parametrize(("args", "kwargs"), BUILDS)
def test_built_like_a_dataclass(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    ours, theirs = _both(args, kwargs)
    assert repr(ours) == repr(theirs).replace("SpecDC(", "Spec(")
    assert dataclasses.asdict(ours) == dataclasses.asdict(theirs)
    assert _hash(ours) == _hash(theirs)  # the tuple of the field values (a dict in it: unhashable)
    assert ours == Spec(*args, **kwargs) and ours != theirs  # equal to its own class only
    assert ours != Twin(*args, **kwargs)
    assert ours.__match_args__ == theirs.__match_args__


def test_fields_replace_and_defaults() -> None:
    spec = Spec("e", ("vllm",))
    assert dataclasses.is_dataclass(spec)
    assert [(f.name, f.type) for f in dataclasses.fields(spec)] == [
        (f.name, f.type) for f in dataclasses.fields(SpecDC)
    ]
    assert dataclasses.replace(spec, port=1) == Spec("e", ("vllm",), port=1)
    assert dataclasses.replace(spec, port=1).env == {}
    assert Spec("a", ()).env is not Spec("b", ()).env  # a factory default is made per instance
    assert Spec.critical is True and "env" not in vars(Spec)  # class attributes as a dataclass keeps
    assert Spec("a", ()) != Spec("a", (), critical=False)
    assert _hash(Spec("a", (), env=())) != _hash(Spec("a", (), env=(), port=1))
    assert _hash(Spec("a", (), env=())) == _hash(SpecDC("a", (), env=()))


def test_frozen() -> None:
    spec = Spec("e", ())
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "x"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del spec.name


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((), {"name": "e"}), (("e", (), {}, True, None, "extra"), {}), (("e",), {"name": "x", "argv": ()}),
     (("e", ()), {"nope": 1})],
    ids=["missing", "too-many", "twice", "unknown"],
)  # fmt: skip
def test_wrong_arguments_are_refused_as_by_a_dataclass(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        SpecDC(*args, **kwargs)
    with pytest.raises(TypeError):
        Spec(*args, **kwargs)
