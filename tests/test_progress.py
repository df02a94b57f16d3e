"""Progress reports on a terminal only, after a delay, and clears its line."""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import pytest
from click.testing import CliRunner

from planc.cli.main import main
from planc.outputs.progress import progress, tracked

T = TypeVar("T")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_sees_progress_then_a_clean_line() -> None:
    stream = Terminal()
    assert list(tracked("writing", ["a", "b", "c"], stream)) == ["a", "b", "c"]
    assert stream.getvalue() == ""  # under a second: silent
    with progress("writing", 4, stream, delay=0.0) as tick:
        tick(1)
        drawn = stream.getvalue()
        tick(3)
    assert drawn == "\rwriting: 1/4 25%\x1b[K"
    assert stream.getvalue().endswith("\r\x1b[K")


def test_nothing_is_written_off_a_terminal() -> None:
    stream = io.StringIO()
    with progress("writing", 2, stream, delay=0.0) as tick:
        tick(2)
    assert stream.getvalue() == ""


def test_compile_reports_every_file_it_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from planc.compile import write

    seen: list[tuple[str, int]] = []

    def recording(label: str, items: Sequence[T], stream: object = None) -> Iterator[T]:
        seen.append((label, len(items)))
        yield from tracked(label, items)

    monkeypatch.setattr(write, "tracked", recording)
    spec = Path(__file__).resolve().parent.parent / "examples" / "llama3-8b-1node.yaml"
    result = CliRunner().invoke(main, ["compile", str(spec), "-o", str(tmp_path / "plan")])
    assert result.exit_code == 0, result.output
    written = [p for p in (tmp_path / "plan").rglob("*") if p.is_file()]
    assert seen == [("planc compile: writing files", len(written))]
    assert "writing files" not in result.stderr  # not a terminal
