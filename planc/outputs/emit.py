"""Atomic output: a file or a directory appears complete or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` to a temporary file beside `path`, fsync it, then rename it into place.

    The file gets the mode a plain `open` would give it (0666 less the umask; mkstemp makes
    0600). An `OSError` names `path`, not the temporary file.
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
        raise type(error)(error.errno, error.strerror, os.fspath(path)) from error
    finally:
        if tmp is not None and os.path.lexists(tmp):
            Path(tmp).unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
