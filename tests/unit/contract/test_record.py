"""`@record` (launcher/contract/record.py) behaves as `@dataclass(frozen=True)`: the same class body
decorated both ways gives the same instances, text, equality, hashes and refusals."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from launcher.contract.record import record


def _twins() -> tuple[type[Any], type[Any]]:
    def body() -> type[Any]:
        class Point:
            """A point with a default and a default factory."""

            x: int
            label: str = "origin"
            tags: dict[str, str] = dataclasses.field(default_factory=dict)

            @property
            def doubled(self) -> int:
                return 2 * self.x

        return Point

    return dataclasses.dataclass(frozen=True)(body()), record(body())


DATACLASS, RECORD = _twins()

CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((1,), {}),
    ((1, "a"), {}),
    ((1,), {"label": "b"}),
    ((), {"x": 2, "label": "c", "tags": {"k": "v"}}),
    ((3, "d", {"k": "w"}), {}),
]


@pytest.mark.parametrize(("args", "kwargs"), CALLS)
def test_instances_read_print_and_compare_as_the_dataclass(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    want, got = DATACLASS(*args, **kwargs), RECORD(*args, **kwargs)
    assert dataclasses.asdict(got) == dataclasses.asdict(want)
    assert repr(got) == repr(want)
    assert got.doubled == want.doubled
    assert got == RECORD(*args, **kwargs)
    assert got != RECORD(99)
    assert got != want  # another class, as two dataclasses of one shape are unequal
    assert (got == object()) is False


def test_hash_follows_the_fields() -> None:
    assert hash(RECORD(1, "a", ())) == hash(DATACLASS(1, "a", ())) == hash((1, "a", ()))
    with pytest.raises(TypeError):  # a dict field is unhashable, as in the dataclass
        hash(RECORD(1))


def test_each_instance_gets_a_fresh_default_from_the_factory() -> None:
    assert RECORD(1).tags is not RECORD(1).tags


def test_fields_cannot_be_assigned_or_deleted() -> None:
    point = RECORD(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.x = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        del point.x
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.other = 2
    assert point.x == 1


def test_it_is_a_dataclass_for_replace_and_fields() -> None:
    point = RECORD(1, "a")
    moved = dataclasses.replace(point, x=5)
    assert (moved.x, moved.label, point.x) == (5, "a", 1)
    assert [f.name for f in dataclasses.fields(RECORD)] == ["x", "label", "tags"]
    assert RECORD.__match_args__ == DATACLASS.__match_args__
    assert RECORD.__doc__ == DATACLASS.__doc__


@pytest.mark.parametrize(
    "call",
    [
        lambda cls: cls(),  # x missing
        lambda cls: cls(1, "a", {}, "extra"),
        lambda cls: cls(1, x=1),
        lambda cls: cls(1, colour="red"),
    ],
    ids=["missing", "too-many", "twice", "unknown"],
)
def test_wrong_calls_are_refused_as_by_the_dataclass(call: Callable[[type[Any]], object]) -> None:
    with pytest.raises(TypeError):
        call(DATACLASS)
    with pytest.raises(TypeError):
        call(RECORD)


def test_a_class_without_a_docstring_is_described_by_its_fields() -> None:
    @record
    class Bare:
        a: int
        b: str

    assert Bare.__doc__ == "Bare(a, b)"


def test_a_class_with_post_init_is_refused_since_the_shared_init_would_skip_it() -> None:
    with pytest.raises(TypeError, match="__post_init__"):

        @record
        class Checked:
            x: int

            def __post_init__(self) -> None:
                raise AssertionError("never called by @record's __init__")
