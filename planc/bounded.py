"""The one bounded reader of the files planc reads besides a spec: calibration files, project
configuration, measurement CSVs.

`read_regular` reads a regular file and nothing else, at most `limit` bytes: it opens without
blocking (a FIFO with no writer does not hang), refuses a FIFO, device, socket or directory before
reading (`/dev/zero` does not flood memory), and refuses a file longer than the limit without
reading the rest. `strict_json` parses JSON as planc's models need it: no NaN or Infinity (which
`json.loads` accepts by default), no number that is not finite as a float, no integer of more
than `MAX_JSON_DIGITS` digits, and no nesting deeper than a bound (checked without recursion).
Both raise :class:`InputError`, whose message is one line.

`read_pipe` reads a pipe the user named on the command line (`--hosts <(...)`, `planc check
<(cat spec.yaml)`: a FIFO or /dev/fd/N), to its end and at most `limit` + 1 bytes; a FIFO that no
program writes to reads as empty at once instead of waiting for a writer.
"""

from __future__ import annotations

import json
import math
import os
import select
import stat
from typing import Any

# What a path may name besides a regular file, for the message.
_NOT_A_FILE = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
# An integer in a JSON file planc reads: far more digits than any count or size it holds (a
# float holds about 17 significant digits), far fewer than Python's 4,300-digit limit.
MAX_JSON_DIGITS = 40


class InputError(ValueError):
    """A file planc cannot use, with a one-line reason (the caller adds where it was named)."""


def read_regular(path: str, limit: int) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them; InputError otherwise."""
    try:
        descriptor = os.open(
            path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
        )
    except OSError as error:
        raise InputError(f"cannot be read: {error.strerror or error}") from None
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            what = next((name for test, name in _NOT_A_FILE if test(mode)), "not a regular file")
            raise InputError(f"is {what}, not a regular file")
        with os.fdopen(os.dup(descriptor), "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as error:
        raise InputError(f"cannot be read: {error.strerror or error}") from None
    finally:
        os.close(descriptor)
    if len(data) > limit:
        raise InputError(f"is larger than {limit:,} bytes")
    return data


def read_pipe(descriptor: int, limit: int) -> bytes:
    """Up to `limit` + 1 bytes of a pipe or FIFO opened without blocking, read to its end (the
    caller compares the length with `limit`). While a writer holds the pipe open with nothing
    written yet it waits for data (select, no timeout: as `cat` would); a FIFO no program holds
    open for writing is at its end, so an unattended FIFO returns b"" without waiting."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        try:
            chunk = os.read(descriptor, min(1 << 16, limit + 1 - size))
        except BlockingIOError:
            select.select([descriptor], [], [])  # a writer, nothing written yet
            continue
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_text(path: str, limit: int) -> str:
    """`read_regular` decoded as UTF-8 (a byte-order mark dropped); InputError otherwise."""
    data = read_regular(path, limit)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InputError(
            f"is not UTF-8: byte 0x{data[error.start]:02x} at offset {error.start}"
        ) from None


def _no_constant(name: str) -> Any:
    raise InputError(f"{name} is not a number planc accepts (numbers must be finite)")


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_JSON_DIGITS:
        raise InputError(f"an integer of {digits:,} digits (at most {MAX_JSON_DIGITS})")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InputError(f"{text[:24]} is not a finite number")
    return value


def depth(data: Any) -> int:
    """How deeply lists and objects nest in `data` (a scalar is 0), walked without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, level + 1)
        stack.extend((child, level + 1) for child in children)
    return deepest


def strict_json(text: str, max_depth: int) -> Any:
    """JSON text as data: finite numbers, bounded integers, nesting of at most `max_depth`."""
    try:
        data = json.loads(
            text, parse_constant=_no_constant, parse_int=_bounded_int, parse_float=_finite_float
        )
    except json.JSONDecodeError as error:
        raise InputError(
            f"is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
        ) from None
    except InputError as error:
        raise InputError(f"is not valid JSON for planc: {error}") from None
    except RecursionError:
        raise InputError(f"nests lists or objects more than {max_depth} deep") from None
    except ValueError as error:
        raise InputError(f"is not valid JSON: {str(error)[:80]}") from None
    if depth(data) > max_depth:
        raise InputError(f"nests lists or objects more than {max_depth} deep")
    return data


def named_entries(path: str, limit: int, max_depth: int) -> dict[str, Any]:
    """The entries of a JSON object of named entries at `path` (a table file of `validation/`),
    those whose name starts with `_` (notes such as `_about`) left out; InputError naming the
    path when it cannot be read or is not such an object."""
    try:
        data = strict_json(read_text(path, limit), max_depth)
    except InputError as error:
        raise InputError(f"{path} {error}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path} must be a JSON object of named entries")
    return {name: item for name, item in data.items() if not name.startswith("_")}
