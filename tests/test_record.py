"""`planc.record` behaves as `dataclasses.dataclass(frozen=True)` does, field by field, and
planc's modules use it (a frozen dataclass costs `planc check` start-up; issue 17)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import re
from dataclasses import FrozenInstanceError, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planc.record import HOT_CALLS, _generic_init, _init, record

ROOT = Path(__file__).resolve().parents[1]


@record(order=True)
class Point:
    x: int
    y: str = "a"
    note: tuple[int, ...] = field(default=(), compare=False, repr=False)


@dataclasses.dataclass(frozen=True, order=True)
class Reference:
    x: int
    y: str = "a"
    note: tuple[int, ...] = field(default=(), compare=False, repr=False)


@record(eq=False)
class Identity:
    x: int


@record(kw_only=True)
class Named:
    a: int
    b: int = 2


@record
class Custom:
    x: int

    def __repr__(self) -> str:
        return "custom"


def test_assigning_or_deleting_a_field_raises_as_for_a_frozen_dataclass() -> None:
    point = Point(1)
    with pytest.raises(FrozenInstanceError):
        point.x = 2  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        del point.x
    with pytest.raises(FrozenInstanceError):
        point.z = 3  # type: ignore[attr-defined]
    assert point.x == 1


@given(st.integers(), st.text(), st.lists(st.integers()), st.integers(), st.text())
def test_equality_hash_order_and_repr_match_dataclass(
    x: int, y: str, note: list[int], x2: int, y2: str
) -> None:
    ours = Point(x, y, tuple(note)), Point(x2, y2)
    theirs = Reference(x, y, tuple(note)), Reference(x2, y2)
    assert (ours[0] == ours[1]) is (theirs[0] == theirs[1])
    assert (ours[0] < ours[1]) is (theirs[0] < theirs[1])
    assert (ours[0] >= ours[1]) is (theirs[0] >= theirs[1])
    assert ours[0] == Point(x, y)  # note is compare=False
    assert hash(ours[0]) == hash(Point(x, y))
    assert repr(ours[0]) == repr(theirs[0]).replace("Reference", "Point")


def test_dataclass_functions_and_pickling_work() -> None:
    point = Point(1, "b", (3,))
    assert dataclasses.is_dataclass(point)
    assert [f.name for f in dataclasses.fields(point)] == ["x", "y", "note"]
    assert dataclasses.replace(point, x=5) == Point(5, "b")
    assert dataclasses.asdict(point) == {"x": 1, "y": "b", "note": (3,)}
    assert pickle.loads(pickle.dumps(point)) == point
    assert copy.deepcopy(point) == point
    assert Point(1) != Reference(1)  # type: ignore[comparison-overlap]  # other classes never equal


@record(kw_only=True)
class Built:
    items: list[int] = field(default_factory=list)
    total: int = field(init=False, default=0)
    squares: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "squares", tuple(i * i for i in self.items))


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuiltReference:
    items: list[int] = field(default_factory=list)
    total: int = field(init=False, default=0)
    squares: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "squares", tuple(i * i for i in self.items))


def _parameters(target: Any) -> list[tuple[str, object, object]]:
    import inspect

    return [(p.name, p.kind, p.default) for p in inspect.signature(target).parameters.values()]


def _compiled(cls: type) -> Any:
    """The __init__ a record compiles once it is hot (planc.record.HOT_CALLS)."""
    return _init(cls, dataclasses.fields(cls))


def test_init_is_a_frozen_dataclass_init() -> None:
    assert _parameters(_compiled(Point))[1:] == _parameters(Reference)
    assert _parameters(_compiled(Named))[1][1].name == "KEYWORD_ONLY"  # type: ignore[attr-defined]
    first, second = Built(), Built()
    assert first.items == [] and first.items is not second.items  # a fresh default each time
    assert Built(items=[2, 3]).squares == (4, 9) == BuiltReference(items=[2, 3]).squares
    assert Built().total == 0
    assert [f.name for f in dataclasses.fields(Built)] == ["items", "total", "squares"]
    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):

        @record
        class Wrong:
            a: int = 1
            b: int  # type: ignore[misc]


def test_options() -> None:
    first = Identity(1)
    assert first != Identity(1) and first == first  # eq=False: identity
    assert Named(a=1).b == 2
    with pytest.raises(TypeError):
        Named(1)  # type: ignore[call-arg]
    assert repr(Custom(1)) == "custom"  # a method the class writes is kept
    with pytest.raises(ValueError, match="order"):
        record(order=True, eq=False)


def test_planc_uses_records_not_frozen_dataclasses() -> None:
    # One exception: the pipeline simulator's Op keeps __slots__ for speed in its hot loop.
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "planc").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.match(r"\s*@dataclass\(frozen=True(?!, slots=True)", line)
    ]
    assert not found, f"use @record (planc.record) for frozen data: {found}"


def test_an_undocumented_record_gets_its_fields_as_its_docstring() -> None:
    @record
    class Pair:
        left: int
        right: int = 0

    assert Pair.__doc__ == "Pair(left, right)"


_CALLS = st.tuples(
    st.lists(st.integers(), max_size=4),
    st.dictionaries(st.sampled_from(["x", "y", "note", "z"]), st.integers(), max_size=3),
)


def _outcome(make: Any, args: list[int], kwargs: dict[str, int]) -> object:
    try:
        made = make(*args, **kwargs)
    except TypeError as error:
        return TypeError, str(error).split("()", 1)[-1]  # the message after the class's name
    return tuple(getattr(made, f.name) for f in dataclasses.fields(made))


@given(_CALLS)
def test_generic_and_compiled_init_bind_as_dataclass_does(call: tuple[list[int], dict[str, int]]) -> None:
    args, kwargs = call
    expected = _outcome(Reference, args, kwargs)
    for init in (_generic_init(Point, dataclasses.fields(Point)), _compiled(Point)):

        def make(*a: Any, init: Any = init, **k: Any) -> Point:
            made = Point.__new__(Point)
            init(made, *a, **k)
            return made

        got = _outcome(make, args, kwargs)
        if isinstance(expected, tuple) and expected and expected[0] is TypeError:
            assert isinstance(got, tuple) and got[0] is TypeError
        else:
            assert got == expected


def test_a_record_compiles_its_init_once_hot() -> None:
    @record
    class Hot:
        a: int
        b: list[int] = field(default_factory=list)

    generic = Hot.__init__
    made = [Hot(i) for i in range(HOT_CALLS + 2)]
    assert Hot.__init__ is not generic  # compiled on the HOT_CALLS-th call
    assert [m.a for m in made] == list(range(HOT_CALLS + 2))
    assert all(m.b == [] for m in made) and made[0].b is not made[-1].b


def test_planc_dataclasses_have_docstrings() -> None:
    # dataclass writes a missing docstring from inspect.signature, tokenizing it at import
    # (about 1 ms a class on the start-up path); records write theirs from the field names.
    undocumented = []
    for path in sorted((ROOT / "planc").rglob("*.py")):
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if re.match(r"\s*@dataclass\b", line):
                body = lines[number + 2].strip() if number + 2 < len(lines) else ""
                if not body.startswith('"""'):
                    undocumented.append(f"{path.relative_to(ROOT)}:{number + 1}")
    assert not undocumented, f"give these dataclasses a docstring: {undocumented}"


def _body() -> dict[str, Any]:
    """A class body with every kind of field a record uses, made fresh for each class."""
    return {
        "__module__": __name__,
        "__doc__": "Shapes.",
        "__annotations__": {
            "a": "int",
            "b": "str",
            "c": "list[int]",
            "d": "int",
            "e": "tuple[int, ...]",
        },
        "b": "x",
        "c": field(default_factory=list),
        "d": field(default=3, compare=False, repr=False, metadata={"unit": "bytes"}),
        "e": field(init=False, default=()),
    }


@pytest.mark.parametrize("kw_only", [False, True])
def test_records_get_the_fields_dataclass_gives(kw_only: bool) -> None:
    ours: Any = record(kw_only=kw_only)(type("Shapes", (), _body()))
    theirs: Any = dataclasses.dataclass(init=False, repr=False, eq=False, kw_only=kw_only)(
        type("Shapes", (), _body())
    )
    slots: tuple[str, ...] = ("name", "type", "default", "default_factory", "init", "repr")
    slots += ("hash", "compare", "metadata", "kw_only", "_field_type")
    assert [[getattr(f, s) for s in slots] for f in dataclasses.fields(ours)] == [
        [getattr(f, s) for s in slots] for f in dataclasses.fields(theirs)
    ]
    for name in "abcde":  # class attributes: defaults kept, factories and Field objects gone
        assert getattr(ours, name, None) == getattr(theirs, name, None)
    assert ours.__match_args__ == theirs.__match_args__
    for slot in type(theirs.__dataclass_params__).__slots__:
        assert getattr(ours.__dataclass_params__, slot) == getattr(theirs.__dataclass_params__, slot)


def test_records_refuse_what_dataclass_refuses() -> None:
    with pytest.raises(ValueError, match="mutable default"):
        record(type("Bad", (), {"__module__": __name__, "__annotations__": {"x": "list"}, "x": []}))
    with pytest.raises(TypeError, match="no type annotation"):
        record(type("Bad", (), {"__module__": __name__, "x": field(default=1)}))



@record
class Derived:
    x: int
    twice: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "twice", 2 * self.x)


def test_replace_gives_what_dataclasses_replace_gives() -> None:
    from planc.record import replace

    for old, changes in [
        (Point(1, "b", (3,)), {"y": "c"}),
        (Point(1), {}),
        (Named(a=1), {"b": 5}),
        (Derived(3), {"x": 4}),
    ]:
        new = replace(old, **changes)
        assert new == dataclasses.replace(old, **changes)
        assert repr(new) == repr(dataclasses.replace(old, **changes))
    assert replace(Derived(3), x=4).twice == 8
    with pytest.raises(TypeError):
        replace(Point(1), z=2)
    with pytest.raises(TypeError):
        replace(Derived(3), twice=1)


def test_a_field_that_is_a_descriptor_is_refused() -> None:
    # The compiled __init__ sets fields in the instance's __dict__, which a class descriptor
    # of the same name would shadow.
    with pytest.raises(TypeError, match="descriptor"):

        @record
        class Shadowed:
            x: int = property(lambda self: 1)  # type: ignore[assignment]
