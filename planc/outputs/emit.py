"""The one writer of planc's single-file outputs: complete or not at all, and never where it
would destroy something.

`write_text_atomic(path, text, inputs=...)` is what every `-o FILE` of planc calls (report, search's
`--write` and `--report`, check's `--output-file`, calibrate, schema):

- `-` is standard output.
- A file the command read (`inputs`: the spec, the measurements) is refused, compared by
  identity (device and inode), so a symbolic link, a hard link or `./s.yaml` is caught too.
- A character device or a FIFO (`/dev/null`, `/dev/stdout`, a pipe, a symbolic link to
  `/proc/self/fd/1`) is written in place, as the shell's `>` does: no temporary file beside it
  and no rename over it.
- A regular file, or a name that does not exist yet, is replaced atomically: the text goes to a
  temporary file beside it, is fsynced and renamed into place. A symbolic link to a regular
  file is followed: the file it points to is replaced, the link stays.
- A directory, a block device or a socket is refused.

Every refusal is an `OSError` naming the path (`OutputRefused`), which the process boundary
(`planc.cli.boundary`) prints as one line with exit 2.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

STDOUT = "-"


class OutputRefused(OSError):
    """An output planc will not write: an input of the command, a directory, not a file."""


def write_text_atomic(
    path: str | os.PathLike[str], text: str, inputs: Iterable[str | os.PathLike[str]] = ()
) -> None:
    """Write `text` to `path` as the module docstring says; `inputs` are the files the command
    read (`-`, standard input, among them is ignored)."""
    if os.fspath(path) == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    found = _stat(path)
    if found is not None:
        _refuse_inputs(path, found, inputs)
        if stat.S_ISCHR(found.st_mode) or stat.S_ISFIFO(found.st_mode):
            _write_in_place(path, text)
            return
        _refuse_kind(path, found)
    target = os.path.realpath(path) if os.path.islink(path) else path
    _replace(target, text, shown=path)


def check_output(
    path: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]] = ()
) -> None:
    """Raise `OutputRefused` now for an output `write_text_atomic` would refuse, before the
    work that produces it (a search); the writer checks again when it writes."""
    if os.fspath(path) == STDOUT:
        return
    found = _stat(path)
    if found is not None:
        _refuse_inputs(path, found, inputs)
        if not (stat.S_ISCHR(found.st_mode) or stat.S_ISFIFO(found.st_mode)):
            _refuse_kind(path, found)


def _stat(path: str | os.PathLike[str]) -> os.stat_result | None:
    """What `path` names, symbolic links followed; None when nothing is there yet."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _refuse_inputs(
    path: str | os.PathLike[str], found: os.stat_result, inputs: Iterable[str | os.PathLike[str]]
) -> None:
    """Refuse a regular file that is one of `inputs` (writing to a device destroys nothing)."""
    if not stat.S_ISREG(found.st_mode):
        return
    for source in inputs:
        if os.fspath(source) == STDOUT:
            continue
        try:
            known = os.stat(source)
        except OSError:  # not there (check reports it) or not reachable: not this file
            continue
        if os.path.samestat(known, found):
            raise OutputRefused(
                errno.EEXIST,
                f"is the same file as {os.fspath(source)}, which this command reads; "
                "planc never writes over its input: choose another output file",
                os.fspath(path),
            )


def _refuse_kind(path: str | os.PathLike[str], found: os.stat_result) -> None:
    if stat.S_ISDIR(found.st_mode):
        raise OutputRefused(
            errno.EISDIR, "is a directory; give the name of a file to write", os.fspath(path)
        )
    if not stat.S_ISREG(found.st_mode):
        raise OutputRefused(
            errno.EINVAL,
            "is neither a regular file, a character device nor a FIFO; planc writes only those",
            os.fspath(path),
        )


def _write_in_place(path: str | os.PathLike[str], text: str) -> None:
    """Write to a character device or FIFO as opened; it is never replaced."""
    fd = os.open(path, os.O_WRONLY | getattr(os, "O_NOCTTY", 0))
    with open(fd, "wb") as handle:
        mode = os.fstat(handle.fileno()).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):  # it changed since: write nothing
            raise OutputRefused(
                errno.EINVAL, "changed while planc opened it; try again", os.fspath(path)
            )
        handle.write(text.encode("utf-8"))


def _replace(path: str | os.PathLike[str], text: str, shown: str | os.PathLike[str]) -> None:
    """Write `text` to a temporary file beside `path`, fsync it, then rename it into place.

    Only for a regular file or a new name (`write_text_atomic` decides). The file gets the
    mode a plain `open` would give it (0666 less the umask; mkstemp makes 0600). An `OSError`
    names `shown`, the path as given, not the temporary file.
    """
    target = Path(path)
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            os.fchmod(handle.fileno(), 0o666 & ~_umask())
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as error:
        raise type(error)(error.errno, error.strerror, os.fspath(shown)) from error
    finally:
        if tmp is not None and os.path.lexists(tmp):
            Path(tmp).unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
