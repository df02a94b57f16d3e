"""The process boundary of the `planc` program: how OS conditions become exit codes.

`run(main)` is what the console script and `python -m planc` call. Everything the OS can do
to a command — a folder it may not write, a full disk, a closed or non-UTF-8 terminal — ends
as exit 2 with one line on stderr, never a traceback:

- The standard streams are made safe before any command runs: a closed descriptor (`>&-`)
  gets a stand-in that fails on use (so it is not silently reused by the next file opened),
  and a character the locale's encoding cannot represent is written as a JSON-style
  `\\uXXXX` escape, which keeps JSON output valid JSON and means the same character.
- `OSError` and `UnicodeError` raised anywhere in a command are reported as
  `planc: error: ...`; writing to standard output that fails (`> /dev/full`) is reported as
  such, and what stays buffered is discarded so the interpreter's last flush does not fail
  again.
- A broken pipe (`planc check ... | head -1`) ends the process the way it ends `cat`: by
  SIGPIPE, silently, status 141 in the shell. The reader chose to stop reading; a message
  would be noise, and 141 is neither success nor one of planc's own codes.
- click's usage errors keep exit 2 and click's own message; Ctrl-C outside a write that
  holds it exits 130, the shell's status for SIGINT (click's default, 1, would read as
  "findings").
- Any other exception is a bug in planc: its traceback is printed (it is what a bug report
  needs), then one line saying so, and the exit code is 2 so that no script mistakes a crash
  for exit 1, "the spec has findings".
"""

from __future__ import annotations

import codecs
import errno
import io
import os
import signal
import sys
from typing import TYPE_CHECKING, NoReturn, TextIO

import click

from planc.outputs import escape

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

ESCAPE = "planc-escape"
"""Encoding error handler: unencodable characters become `\\uXXXX` (UTF-16 units, as in JSON)."""


def _escape(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    units = error.object[error.start : error.end].encode("utf-16-be", "surrogatepass")
    escaped = "".join(
        f"\\u{int.from_bytes(units[i : i + 2], 'big'):04x}" for i in range(0, len(units), 2)
    )
    return escaped, error.end


codecs.register_error(ESCAPE, _escape)


def _stand_in(fd: int, writing: bool) -> None:
    """Occupy a closed standard descriptor with /dev/null opened the wrong way round.

    Using it then fails with EBADF, as the closed descriptor would have, and the next file
    planc opens cannot land on descriptor 0, 1 or 2 and receive its output.
    """
    null = os.open(os.devnull, os.O_RDONLY if writing else os.O_WRONLY)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)


class _Descriptor(io.FileIO):
    """Standard output's descriptor, remembering whether a write to it failed."""

    failed = False

    def write(self, data: ReadableBuffer, /) -> int:
        try:
            return super().write(data)
        except OSError:
            self.failed = True
            raise


def _safe_streams() -> _Descriptor | None:
    """Make the standard streams safe to use; return standard output's descriptor if watched."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is None:  # the descriptor was closed when Python started
            _stand_in(fd, writing=fd != 0)
            setattr(sys, name, open(fd, "w" if fd else "r", closefd=False))  # noqa: SIM115
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if isinstance(sys.stderr, io.TextIOWrapper):
        sys.stderr.reconfigure(errors=ESCAPE)
    out = sys.stdout
    try:
        if not isinstance(out, io.TextIOWrapper) or out.fileno() != 1:
            return None
    except (OSError, ValueError):  # a stream without a descriptor
        return None
    out.flush()
    descriptor = _Descriptor(1, "w", closefd=False)
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(descriptor),
        encoding=out.encoding,
        errors=ESCAPE,
        line_buffering=out.line_buffering,
    )
    return descriptor


def _discard(stream: TextIO, fd: int) -> None:
    """Point a failed standard stream at /dev/null so its buffered rest is dropped quietly."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
        stream.flush()
    except (OSError, ValueError):
        pass


def _fail(message: str, code: int = 2) -> NoReturn:
    try:
        sys.stderr.write(f"planc: error: {escape.line(message)}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        _discard(sys.stderr, 2)
    sys.exit(code)


def describe(error: OSError) -> str:
    """One line for an OS error: what failed and on which path."""
    reason = error.strerror or str(error) or type(error).__name__
    if error.filename is None:
        return reason
    where = _path(error.filename)
    if error.filename2 is not None:
        where += f" -> {_path(error.filename2)}"
    return f"{where}: {reason}"


def _path(name: object) -> str:
    return os.fsdecode(name) if isinstance(name, (str, bytes)) else str(name)


def run(main: click.Command) -> NoReturn:
    """Run the click command as the `planc` program, inside the boundary described above."""
    stdout = _safe_streams()
    try:
        try:
            code = main.main(prog_name="planc", standalone_mode=False)
        except SystemExit as done:
            code = done.code
        sys.stdout.flush()
    except click.ClickException as usage:
        usage.show()
        code = usage.exit_code
    except click.Abort:
        _fail("interrupted", 130)
    except OSError as error:
        if (stdout is not None and stdout.failed) or error.errno == errno.EPIPE:
            _discard(sys.stdout, 1)
            if error.errno == errno.EPIPE:  # SIGPIPE is ignored (Windows, or by the parent)
                sys.exit(141)
            _fail(f"cannot write standard output: {error.strerror or error}")
        _fail(describe(error))
    except UnicodeError as error:
        _fail(f"cannot encode or decode text: {error}")
    except Exception:
        import traceback

        traceback.print_exc()
        _fail(
            "internal error: this is a bug in planc, not in the spec; "
            "please report it with the traceback above"
        )
    sys.exit(code)
