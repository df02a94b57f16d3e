"""plan.json read bounded and checked against its published schema before anything uses it.

The file is read only when it is a regular file of at most MAX_PLAN_BYTES; the JSON is parsed
so that NaN, Infinity and a float that overflows to infinity become a value no schema type
accepts (refused at validation, naming the field), integers of more digits than Python converts
are refused, and nesting is bounded by MAX_DEPTH. The result is then validated against
`plan.schema.json` (the packaged copy of `schemas/plan.schema.json`) with exact types: an
integer is a JSON integer, never 3.0 or true.

Validating every element of a million-rank plan one by one takes minutes, so arrays longer
than LONG are first summarised into representatives that the schema judges as it would judge
every element (`summarise`): numbers by their least and greatest (the schema's constraints on
numbers in long arrays are types and bounds; a few distinct values are kept as they are);
strings by their distinct values, or by the shortest, the longest and those among the first
MAX_DISTINCT (its constraints on strings in long arrays are lengths); objects grouped by their
keys and lists by their lengths, each group summarised field by field (its constraints on an
object's fields, and on a list's items, apply to each one by itself). A refusal names the
first element that holds the refused value (`ranks[37].memory.total`).
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

# A plan of 1,000,000 ranks has 75 MB; parsed, JSON of small integers takes 4× its size.
MAX_PLAN_BYTES = 256 * 2**20
MAX_DEPTH = 16  # plan.json nests 6 deep
LONG = 16  # arrays longer than this are summarised before validation
MAX_DISTINCT = 64
_SCALARS = frozenset({int, float, str, bool, type(None)})
SCHEMA_FILE = Path(__file__).with_name("plan.schema.json")


class PlanFormatError(ValueError):
    """plan.json is not a planc plan this verifier can read (not JSON, wrong format, a key
    missing or of the wrong type)."""


_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def read_plan_file(path: Path) -> str:
    """The text of a plan.json that is a regular file of at most MAX_PLAN_BYTES. Opened without
    blocking and checked before reading, so a FIFO or a device neither hangs nor floods."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise PlanFormatError(f"cannot read the plan: {error.strerror}") from None
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode):
        os.close(descriptor)
        kind = next((name for test, name in _NOT_REGULAR if test(status.st_mode)), "not a file")
        raise PlanFormatError(f"plan.json is {kind}, not a regular file")
    with open(descriptor, "rb", closefd=True) as handle:
        data = b"" if status.st_size > MAX_PLAN_BYTES else handle.read(MAX_PLAN_BYTES + 1)
    if status.st_size > MAX_PLAN_BYTES or len(data) > MAX_PLAN_BYTES:
        size = max(status.st_size, len(data))
        raise PlanFormatError(
            f"plan.json has {size:,} bytes, above the {MAX_PLAN_BYTES:,} a plan may have "
            "(one of 1,048,576 ranks has about 80 MB)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise PlanFormatError(f"plan.json is not UTF-8 (byte {error.start})") from None


class NonFinite(str):
    """NaN, Infinity, -Infinity or a number beyond a 64-bit float, as written: parsed into a
    value no schema type accepts, so validation refuses it naming its field."""

    def __repr__(self) -> str:
        return str(self)[:40]


def _constant(name: str) -> NonFinite:
    return NonFinite(name)


def _float(text: str) -> float | NonFinite:
    value = float(text)
    return value if math.isfinite(value) else NonFinite(text)


def parse(text: str) -> Any:
    """JSON text as Python values, bounded: NaN, Infinity and floats beyond 64 bits as
    NonFinite (for validation to refuse); no integer of more digits than Python converts
    (sys.get_int_max_str_digits(), 4,300 by default; the schema's bounds then refuse any
    integer above 2^62)."""
    if len(text) > MAX_PLAN_BYTES:
        raise PlanFormatError(f"plan.json is larger than {MAX_PLAN_BYTES:,} bytes")
    try:
        return json.loads(text, parse_constant=_constant, parse_float=_float)
    except RecursionError:
        raise PlanFormatError(f"plan.json nests deeper than {MAX_DEPTH} levels") from None
    except PlanFormatError:
        raise
    except json.JSONDecodeError as error:
        raise PlanFormatError(f"plan.json is not JSON: {error}") from None
    except ValueError:  # the one other error json.loads raises: int() refusing its digits
        raise PlanFormatError(
            f"plan.json holds an integer of more than {sys.get_int_max_str_digits():,} digits"
        ) from None


def _deeper(depth: int) -> int:
    if depth >= MAX_DEPTH:
        raise PlanFormatError(f"plan.json nests deeper than {MAX_DEPTH} levels")
    return depth + 1


def _scalars(values: list[Any]) -> list[Any]:
    """Scalars of one exact type: numbers by their least and greatest when these are
    MAX_DISTINCT or more apart (the schema bounds numbers, it lists no long enum of them), else
    by their distinct values; strings by their distinct values, or by the shortest, the longest
    and the distinct among the first MAX_DISTINCT (the schema bounds a long array's strings by
    their length)."""
    first = values[0]
    if type(first) in (int, float):
        low, high = min(values), max(values)
        if high - low >= MAX_DISTINCT or type(first) is float:
            return sorted({low, high})
    distinct = set(values)
    if len(distinct) <= MAX_DISTINCT:
        return sorted(distinct, key=repr) if first is None else sorted(distinct)
    return [min(distinct, key=len), max(distinct, key=len), *sorted(set(values[:MAX_DISTINCT]))]


def _fields(columns: list[list[Any]]) -> range:
    return range(max((len(c) for c in columns), default=1))


def _merge(values: list[Any], depth: int) -> list[Any]:
    """Representatives of values of one exact type (objects with one key order, lists of one
    length): field by field, the i-th representative taking each field's i-th (or last)."""
    first = values[0]
    if isinstance(first, dict):
        keys = list(first)
        columns = [_merge_any([v[k] for v in values], depth) for k in keys]
        return [
            {k: c[min(i, len(c) - 1)] for k, c in zip(keys, columns, strict=True)}
            for i in _fields(columns)
        ]
    if isinstance(first, list):
        columns = [_merge_any([v[j] for v in values], depth) for j in range(len(first))]
        return [[c[min(i, len(c) - 1)] for c in columns] for i in _fields(columns)]
    return _scalars(values)


def _shape(value: Any) -> tuple[str, Any]:
    """The exact JSON type, with an object's keys and a list's length."""
    if isinstance(value, dict):
        return ("object", tuple(value))
    if isinstance(value, list):
        return ("array", len(value))
    return (type(value).__name__, ())


def _merge_any(values: list[Any], depth: int) -> list[Any]:
    """Representatives of a long array's items, grouped by exact type first."""
    depth = _deeper(depth)
    kinds = set(map(type, values))
    if kinds <= _SCALARS and len(kinds) == 1:
        return _scalars(values)
    groups: dict[tuple[str, Any], list[Any]] = {}
    for value in values:
        groups.setdefault(_shape(value), []).append(value)
    return [
        summarise(rep, depth)
        for key in sorted(groups, key=repr)
        for rep in _merge(groups[key], depth)
    ]


def summarise(value: Any, depth: int = 0) -> Any:
    """The value with every array longer than LONG replaced by its representatives. Raises
    PlanFormatError when it nests deeper than MAX_DEPTH."""
    if isinstance(value, dict):
        depth = _deeper(depth)
        return {k: summarise(v, depth) for k, v in value.items()}
    if isinstance(value, list):
        if len(value) > LONG:
            return _merge_any(value, depth)
        depth = _deeper(depth)
        return [summarise(v, depth) for v in value]
    return value


@lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema  # type: ignore[import-untyped]  # start-up: only verify reads plan.json

    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    base = jsonschema.Draft202012Validator
    exact = base.TYPE_CHECKER.redefine_many(
        {
            "integer": lambda _, v: type(v) is int,
            "number": lambda _, v: type(v) in (int, float),
            "string": lambda _, v: type(v) is str,
        }
    )
    return jsonschema.validators.extend(base, type_checker=exact)(schema)


def validate(raw: Any) -> None:
    """Raise PlanFormatError naming the first field that breaks the published plan schema."""
    summarised = summarise(raw)
    import jsonschema  # start-up: only verify reads plan.json

    error = jsonschema.exceptions.best_match(_validator().iter_errors(summarised))
    if error is None:
        return
    message = error.message if len(error.message) <= 160 else error.message[:157] + "..."
    parts = list(error.absolute_path)
    found = _find(raw, parts, error.instance)
    where = _joined(found) if found is not None else _path(parts, raw)
    raise PlanFormatError(f"{where}: {message}")


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and bool(a == b)


def _find(node: Any, parts: list[Any], instance: Any) -> list[Any] | None:
    """The path as written to a value equal to `instance` (same type) along `parts`, an index
    into a summarised array replaced by the first element's that holds it; None when none does
    (a representative built field by field need not be any one element)."""
    if not parts:
        return [] if _same(node, instance) else None
    part, rest = parts[0], parts[1:]
    if isinstance(part, int) and isinstance(node, list) and len(node) > LONG:
        for index, item in enumerate(node):
            inner = _find(item, rest, instance)
            if inner is not None:
                return [index, *inner]
        return None
    present = (isinstance(node, list) and isinstance(part, int) and part < len(node)) or (
        isinstance(node, dict) and part in node
    )
    inner = _find(node[part], rest, instance) if present else None
    return None if inner is None else [part, *inner]


def _joined(parts: list[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "plan.json"


def _path(path: Any, raw: Any) -> str:
    """The field's path as written, an index into a summarised array shown as [*] (when no one
    element holds the representative the schema refused)."""
    out, node = "", raw
    for part in path:
        if isinstance(part, int):
            long = isinstance(node, list) and len(node) > LONG
            out += "[*]" if long else f"[{part}]"
            node = None if long or not isinstance(node, list) else node[part]
        else:
            out += f".{part}" if out else str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out or "plan.json"
