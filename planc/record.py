"""`record`: planc's frozen dataclass, built without compiling code until it is needed.

`dataclasses.dataclass(frozen=True)` compiles six functions for every class it decorates
(__init__, __repr__, __eq__, __hash__, __setattr__, __delattr__), about 0.35 ms a class on
Python 3.11. `planc check` imports some sixty record types, so that was a quarter of its
start-up (issue 17's target is within 1.1× of yamllint). A record compiles nothing at class
creation: its fields are made by `dataclass(init=False, repr=False, eq=False)`, which writes no
function (about 45 µs a class); equality, hashing, ordering, repr and the refusal to assign or
delete are shared functions that read the class's field tuples; and __init__ starts as a generic
function that binds arguments as the dataclass __init__ would. After HOT_CALLS calls the class
compiles the __init__ a frozen dataclass has (defaults, default factories, keyword-only fields,
__post_init__), which sets each field in the instance's __dict__ rather than through
object.__setattr__ (the same for a class with no descriptor of a field's name, in half the
time), so types built thousands of times (search, compile) run faster than a dataclass, and
types a check builds a few times never pay for a compile.

The behaviour is a frozen dataclass's: `dataclasses.fields`, `replace`, `asdict` and pickling
work unchanged; assigning or deleting an attribute raises `dataclasses.FrozenInstanceError`;
equality and hashing use the fields with compare=True, ordering (order=True) compares them as a
tuple; arguments bind the same way (tests/test_record.py holds both __init__s to dataclass's).
Until a class is hot, `inspect.signature` shows (*args, **kwargs). InitVar pseudo-fields are not
supported (planc has none).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import MISSING, Field, FrozenInstanceError, dataclass, fields
from operator import attrgetter
from typing import Any, TypeVar, cast, dataclass_transform, overload

T = TypeVar("T")


def _key(self: Any) -> tuple[Any, ...]:
    return cast(tuple[Any, ...], type(self).__record_key__(self))


def _compared(compare: Callable[[Any, Any], bool]) -> Callable[[Any, object], object]:
    """__eq__, __lt__ and the rest: `compare` on the two records' keys, for records of one
    class (NotImplemented otherwise, as dataclass does)."""

    def method(self: Any, other: object) -> object:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return compare(_key(self), _key(other))

    return method


def _hash(self: Any) -> int:
    return hash(_key(self))


_EQ = _compared(operator.eq)
_ORDER = {
    "__lt__": _compared(operator.lt),
    "__le__": _compared(operator.le),
    "__gt__": _compared(operator.gt),
    "__ge__": _compared(operator.ge),
}


def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in type(self).__record_repr__)
    return f"{type(self).__qualname__}({shown})"


def _setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _init(cls: type[Any], specs: tuple[Field[Any], ...]) -> Callable[..., None]:
    """The __init__ a frozen dataclass has: positional fields in order (defaults after the
    ones without), keyword-only fields after `*`, each set in the instance's __dict__ (what
    object.__setattr__ does for a record, whose class defines no descriptor of a field's name,
    in half the time), then __post_init__ if the class has one."""
    names: dict[str, Any] = {"__missing": MISSING}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = ["__d = self.__dict__"]
    for spec in specs:
        name = spec.name
        if spec.default is not MISSING:
            names[f"__d_{name}"] = spec.default
            value, param = f"__d_{name}", f"{name}=__d_{name}"
        elif spec.default_factory is not MISSING:
            names[f"__f_{name}"] = spec.default_factory
            value, param = f"__f_{name}()", f"{name}=__missing"
        else:
            value, param = "", name
        if not spec.init:
            if not value:
                continue  # set by __post_init__, as dataclass leaves it
            body.append(f"__d[{name!r}] = {value}")
            continue
        if spec.default_factory is not MISSING:
            body.append(f"if {name} is __missing: {name} = __f_{name}()")
        body.append(f"__d[{name!r}] = {name}")
        if spec.kw_only:
            keyword.append(param)
            continue
        positional.append(param)
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    params = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    lines = "\n    ".join(body)
    exec(f"def __init__({params}):\n    {lines}\n", names)
    init: Callable[..., None] = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def _check_order(fields_in: tuple[Field[Any], ...]) -> None:
    """As dataclass refuses at class creation: a positional field without a default after
    one with a default."""
    defaulted = False
    for spec in fields_in:
        if spec.kw_only:
            continue
        has_default = spec.default is not MISSING or spec.default_factory is not MISSING
        if defaulted and not has_default:
            raise TypeError(f"non-default argument {spec.name!r} follows default argument")
        defaulted = defaulted or has_default


# Calls a record takes through the generic __init__ before it compiles its own. `planc check`
# builds most of its sixty record types only a few times, and compiling an __init__ costs about
# as much as 40 generic calls; search and compile build the same few types thousands of times.
HOT_CALLS = 32


def _generic_init(cls: type[Any], specs: tuple[Field[Any], ...]) -> Callable[..., None]:
    """The same __init__ as `_init` builds, without compiling one: binds the arguments as
    Python binds them to that signature (the same TypeErrors), then sets the fields."""
    fields_in = tuple(spec for spec in specs if spec.init)
    _check_order(fields_in)
    positional = tuple(spec.name for spec in fields_in if not spec.kw_only)
    accepted = frozenset(spec.name for spec in fields_in)
    preset = tuple(
        spec
        for spec in specs
        if not spec.init and (spec.default is not MISSING or spec.default_factory is not MISSING)
    )
    post_init = hasattr(cls, "__post_init__")
    where = f"{cls.__qualname__}.__init__()"

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(positional):
            raise TypeError(
                f"{where} takes {len(positional) + 1} positional arguments but "
                f"{len(args) + 1} were given"
            )
        values = dict(zip(positional, args, strict=False))  # fewer args than fields: defaults
        for key, value in kwargs.items():
            if key in values:
                raise TypeError(f"{where} got multiple values for argument {key!r}")
            if key not in accepted:
                raise TypeError(f"{where} got an unexpected keyword argument {key!r}")
            values[key] = value
        for spec in fields_in:
            if spec.name in values:
                value = values[spec.name]
            elif spec.default is not MISSING:
                value = spec.default
            elif spec.default_factory is not MISSING:
                value = spec.default_factory()
            else:
                kind = "keyword-only" if spec.kw_only else "positional"
                raise TypeError(f"{where} missing 1 required {kind} argument: {spec.name!r}")
            object.__setattr__(self, spec.name, value)
        for spec in preset:
            made = spec.default if spec.default is not MISSING else spec.default_factory()  # type: ignore[operator]
            object.__setattr__(self, spec.name, made)
        if post_init:
            self.__post_init__()

    return __init__


def _adaptive_init(cls: type[Any], specs: tuple[Field[Any], ...]) -> Callable[..., None]:
    """The generic __init__, which after HOT_CALLS calls puts the compiled one on the class."""
    generic = _generic_init(cls, specs)
    calls = 0

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == HOT_CALLS:
            type.__setattr__(cls, "__init__", _init(cls, specs))
        generic(self, *args, **kwargs)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _tuple_getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """attrgetter returns a bare value for one name and fails for none; keys are tuples."""
    if not names:
        return lambda _: ()
    if len(names) == 1:
        get = attrgetter(names[0])
        return lambda obj: (get(obj),)
    return attrgetter(*names)


def replace(obj: T, /, **changes: Any) -> T:
    """`dataclasses.replace` for a record: a new one with `changes` and the other fields'
    values (a field that is not an __init__ argument is refused, by __init__). It reads the
    __init__ fields' names the class keeps instead of walking `dataclasses.fields`, in a third
    of the time (a search replaces three records a candidate)."""
    names: tuple[str, ...] = type(obj).__record_init__  # type: ignore[attr-defined]
    values = {name: getattr(obj, name) for name in names if name not in changes}
    return type(obj)(**values, **changes)


def _finish(cls: type[T], eq: bool, order: bool) -> type[T]:
    specs = fields(cast(Any, cls))
    cls.__record_init__ = tuple(spec.name for spec in specs if spec.init)  # type: ignore[attr-defined]
    for spec in specs:
        # The compiled __init__ writes fields to the instance's __dict__, which a descriptor of
        # the same name on the class would shadow.
        if hasattr(getattr(cls, spec.name, None), "__set__"):
            raise TypeError(f"{cls.__qualname__}.{spec.name} is a field and a descriptor")
    cls.__record_repr__ = tuple(spec.name for spec in specs if spec.repr)  # type: ignore[attr-defined]
    cls.__record_key__ = staticmethod(  # type: ignore[attr-defined]
        _tuple_getter(tuple(spec.name for spec in specs if spec.compare))
    )
    shared: dict[str, Callable[..., Any]] = {
        "__init__": _adaptive_init(cls, specs),
        "__repr__": _repr,
        "__setattr__": _setattr,
        "__delattr__": _delattr,
    }
    if eq:
        shared |= {"__eq__": _EQ, "__hash__": _hash}
    if order:
        shared |= _ORDER
    for name, method in shared.items():
        # As dataclass does: a method the class writes itself is kept (a frozen class may
        # not write its own __setattr__ or __delattr__).
        if name in cls.__dict__ and cls.__dict__[name] is not None:
            if name in ("__init__", "__setattr__", "__delattr__"):
                raise TypeError(f"a record cannot define {name} ({cls.__qualname__})")
            continue
        setattr(cls, name, method)
    return cls


@overload
@dataclass_transform(frozen_default=True, eq_default=True)
def record(cls: type[T], /) -> type[T]: ...


@overload
def record(
    *, eq: bool = True, order: bool = False, kw_only: bool = False
) -> Callable[[type[T]], type[T]]: ...


def record(
    cls: type[T] | None = None, /, *, eq: bool = True, order: bool = False, kw_only: bool = False
) -> type[T] | Callable[[type[T]], type[T]]:
    """A frozen dataclass (`@record`, or `@record(eq=False)`, `order=True`, `kw_only=True`)."""
    if order and not eq:
        raise ValueError("order=True needs eq=True")

    def wrap(cls: type[T]) -> type[T]:
        # dataclass writes a missing docstring from inspect.signature, which tokenizes the
        # signature text (some 1 ms a class); a record writes it from its field names instead.
        undocumented = not cls.__doc__
        if undocumented:
            cls.__doc__ = cls.__qualname__
        # The fields as dataclass makes them; with init, repr and eq off it compiles nothing.
        dataclass(cls, init=False, repr=False, eq=False, kw_only=kw_only)
        built = _finish(cls, eq, order)
        if undocumented:
            built.__doc__ = f"{cls.__name__}({', '.join(f.name for f in fields(cast(Any, built)))})"
        return built

    return wrap if cls is None else wrap(cls)
