"""Progress reports on a terminal only, after a delay, and clears its line."""

from __future__ import annotations

import io
import re
import threading
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


def test_logged_writes_plain_lines_off_a_terminal() -> None:
    from planc.outputs.progress import logged

    stream = io.StringIO()
    with logged("judging", 4, stream) as tick:
        tick(4)
    assert stream.getvalue() == ""  # shorter than LOG_EVERY_S: silent
    with logged("judging", 4, stream, every=0.0) as tick:
        tick(1)
        tick(3)
    assert stream.getvalue() == "judging: 1/4 25%\njudging: 4/4 100%\n"
    terminal = Terminal()
    with logged("judging", 4, terminal, every=0.0) as tick:
        tick(4)
    assert "\n" not in terminal.getvalue()  # a terminal gets the redrawn line, not a log


def test_search_logs_progress_off_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from planc.outputs import progress as module

    monkeypatch.setattr(module, "LOG_EVERY_S", 0.0)
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "version: 1\nname: small\nmodel: {preset: llama3-8b}\n"
        "hardware: {gpu: h100-sxm, nodes: 1}\ntraining: {seq_len: 4096, global_batch: 64}\n"
        "search: {tensor: [1, 2], pipeline: [1], zero_stage: [1], micro_batch: [1]}\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["search", str(spec), "--format", "json"])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert lines and all(": " in line and "\r" not in line for line in lines)
    assert lines[0].startswith("judging candidates: ")
    assert any(line.startswith("estimating step times: ") for line in lines)


class Beats(io.StringIO):
    """A stream that signals each write, so that a test waits for a beat instead of a time."""

    def __init__(self, terminal: bool = False) -> None:
        super().__init__()
        self.terminal = terminal
        self.written = threading.Event()

    def isatty(self) -> bool:
        return self.terminal

    def write(self, text: str) -> int:
        size = super().write(text)
        self.written.set()
        return size


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
def test_a_heartbeat_says_how_long_the_work_has_run(terminal: bool) -> None:
    from planc.outputs.progress import heartbeat

    stream = Beats(terminal)
    with heartbeat("planc compile", stream, every=0.001):
        # The work runs until the first beat is out (a guard, not a measured time).
        assert stream.written.wait(60)
    text = stream.getvalue()
    if terminal:
        assert text.startswith("\rplanc compile: ") and text.endswith("\r\x1b[K")
        assert "\n" not in text
    else:
        lines = text.splitlines()
        assert lines and all(re.fullmatch(r"planc compile: \d+ s", line) for line in lines)


def test_a_short_block_gets_no_heartbeat() -> None:
    from planc.outputs.progress import heartbeat

    for terminal in (False, True):
        stream = Beats(terminal)
        with heartbeat("planc verify", stream, every=1e9):
            pass
        assert stream.getvalue() == ""


def test_the_commands_that_run_long_at_the_cap_beat_while_they_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At the 1,048,576-rank cap these run for seconds with nothing to count: each runs inside
    # a heartbeat (benchmarks/bench_scale.py counts the lines off a terminal).
    from contextlib import contextmanager

    from planc.outputs import progress as module

    seen: list[str] = []

    @contextmanager
    def recording(label: str, stream: object = None, every: object = None) -> Iterator[None]:
        seen.append(label)
        yield

    monkeypatch.setattr(module, "heartbeat", recording)
    spec = str(Path(__file__).resolve().parent.parent / "examples" / "llama3-8b-1node.yaml")
    plan, page = str(tmp_path / "plan"), str(tmp_path / "page.html")
    commands = {
        "planc check": ["check", spec],
        "planc memory": ["memory", spec],
        "planc explain": ["explain", spec],
        "planc report": ["report", spec, "-o", page],
        "planc compile": ["compile", spec, "-o", plan],
        "planc verify": ["verify", plan],
    }
    for label, args in commands.items():
        assert CliRunner().invoke(main, args).exit_code == 0, label
        assert seen[-1] == label
    assert seen == list(commands)
