"""Progress on stderr for work that takes more than about a second, on a terminal only.

    with progress("writing files", total=len(files)) as tick:
        for name in files:
            ...
            tick()

Nothing is printed when stderr is not a terminal (CI logs, pipes, pre-commit), nor before
`delay` seconds have passed, so fast runs stay silent. The line is redrawn at most ten times a
second and cleared at the end.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TextIO, TypeVar

Tick = Callable[[int], None]
T = TypeVar("T")


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
