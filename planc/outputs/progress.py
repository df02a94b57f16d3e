"""Progress on stderr for work that takes more than about a second.

    with progress("writing files", total=len(files)) as tick:
        for name in files:
            ...
            tick()

`progress` prints on a terminal only: nothing when stderr is not a terminal (CI logs, pipes,
pre-commit), nor before `delay` seconds have passed, so fast runs stay silent. The line is
redrawn at most ten times a second and cleared at the end.

`logged` is the same on a terminal and, off one, writes a plain line (no carriage return, no
escape) every `LOG_EVERY_S` seconds once that long has passed: for a command that can run for
minutes (`planc search`), so that a CI log shows it is alive. A run shorter than that prints
nothing.

`heartbeat` is for work that has no count to tick (one large plan analysed, rendered, read or
verified: `planc check`, `memory`, `explain`, `report`, `compile` and `verify` at the
1,048,576-rank cap run for seconds): while its block runs, a line saying how long it has run,
every `LOG_EVERY_S` seconds once that long has passed (redrawn in place on a terminal, a plain
line off one), from a daemon thread that stops with the block. `beating` runs a command in one.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO, TypeVar, cast

Tick = Callable[[int], None]
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

# Off a terminal, `logged` writes a line this often (seconds).
LOG_EVERY_S = 5.0


def _noop(n: int = 1) -> None:
    return None


class _Bar:
    def __init__(self, label: str, total: int, stream: TextIO, delay: float) -> None:
        self.label, self.total, self.stream = label, total, stream
        self.done = 0
        self.start = time.monotonic()
        self.next_draw = self.start + delay
        self.drawn = False

    def tick(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now < self.next_draw:
            return
        self.next_draw = now + 0.1
        share = f"{100 * self.done // self.total}%" if self.total else ""
        self.stream.write(f"\r{self.label}: {self.done:,}/{self.total:,} {share}\x1b[K")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


@contextmanager
def progress(
    label: str, total: int, stream: TextIO | None = None, delay: float = 1.0
) -> Iterator[Tick]:
    """A `tick(n=1)` callable that reports progress on `stream` (stderr) when it is a terminal."""
    out = sys.stderr if stream is None else stream
    if out is None or not _is_tty(out):
        yield _noop
        return
    bar = _Bar(label, total, out, delay)
    try:
        yield bar.tick
    finally:
        bar.close()


class _Log:
    """Plain progress lines, one every `every` seconds (from the start)."""

    def __init__(self, label: str, total: int, stream: TextIO, every: float) -> None:
        self.label, self.total, self.stream, self.every = label, total, stream, every
        self.done = 0
        self.next_line = time.monotonic() + every

    def tick(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now < self.next_line:
            return
        self.next_line = now + self.every
        share = f" {100 * self.done // self.total}%" if self.total else ""
        self.stream.write(f"{self.label}: {self.done:,}/{self.total:,}{share}\n")
        self.stream.flush()


@contextmanager
def logged(
    label: str, total: int, stream: TextIO | None = None, every: float | None = None
) -> Iterator[Tick]:
    """`progress` on a terminal; off one, a plain line on `stream` (stderr) every `every`
    seconds (default `LOG_EVERY_S`) once that long has passed."""
    out = sys.stderr if stream is None else stream
    every = LOG_EVERY_S if every is None else every
    if out is None or _is_tty(out):
        with progress(label, total, out) as tick:
            yield tick
        return
    yield _Log(label, total, out, every).tick


@contextmanager
def heartbeat(label: str, stream: TextIO | None = None, every: float | None = None) -> Iterator[None]:
    """While the block runs, `label: N s` on `stream` (stderr) every `every` seconds (default
    `LOG_EVERY_S`) once that long has passed: a plain line off a terminal, one redrawn line
    (cleared at the end) on one. A block shorter than `every` prints nothing."""
    out = sys.stderr if stream is None else stream
    if out is None:
        yield
        return
    every = LOG_EVERY_S if every is None else every
    terminal = _is_tty(out)
    done = threading.Event()
    start = time.monotonic()
    drawn = False

    def beat() -> None:
        nonlocal drawn
        while not done.wait(every):
            elapsed = f"{label}: {time.monotonic() - start:.0f} s"
            out.write(f"\r{elapsed}\x1b[K" if terminal else f"{elapsed}\n")
            out.flush()
            drawn = True

    thread = threading.Thread(target=beat, name=f"heartbeat: {label}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if terminal and drawn:
            out.write("\r\x1b[K")
            out.flush()


def beating(label: str) -> Callable[[F], F]:
    """A command's function, run inside `heartbeat(label)` (looked up when it runs)."""

    def wrap(function: F) -> F:
        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            with heartbeat(label):
                return function(*args, **kwargs)

        return cast(F, run)

    return wrap


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


def tracked(label: str, items: Sequence[T], stream: TextIO | None = None) -> Iterator[T]:
    """`items`, reporting progress as they are consumed (see `progress`)."""
    with progress(label, len(items), stream) as tick:
        for item in items:
            yield item
            tick(1)
