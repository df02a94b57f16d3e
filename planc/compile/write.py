"""Write a plan directory atomically: it appears complete, or the previous one stays.

The files go into a fresh directory beside the target; then the old directory is renamed
aside, the new one renamed in, and the old one deleted. An exception, Ctrl-C or SIGTERM
anywhere before the final rename leaves the previous plan as it was and removes the temporary
directory. (Between the two renames the target is briefly absent; POSIX has no portable
directory swap. Files are not fsynced: this guards against interruption, not power loss.)
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from types import FrameType

from planc.compile.launchers import launcher_files, readme
from planc.compile.plan import PLAN_FORMAT, Plan, coords_json, plan_json

MARKER = ".planc-plan"
MARKER_TEXT = (
    "This directory was written by planc compile; planc replaces it on the next compile.\n"
)
_EXECUTABLE = (".sh", ".sbatch")


class OutputError(ValueError):
    """The output directory cannot be written: not a plan directory, a file, no permission."""


def render_files(plan: Plan) -> dict[str, str]:
    """Every file of the plan directory, {relative path: text}, in a fixed order."""
    return {
        MARKER: MARKER_TEXT,
        "README.md": readme(plan),
        "plan.json": plan_json(plan),
        "coords.json": coords_json(plan),
        **launcher_files(plan),
    }


def is_plan_dir(path: Path) -> bool:
    """A directory planc wrote: it has the marker, or a plan.json of planc's format."""
    if (path / MARKER).is_file():
        return True
    try:
        with open(path / "plan.json", encoding="utf-8") as handle:
            head = handle.read(200)
    except OSError:
        return False
    return f'"format":"{PLAN_FORMAT}"' in head


def _check_target(target: Path, shown: str, force: bool) -> None:
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise OutputError(f"{shown} exists and is not a directory; choose another output path")
    if not target.exists() or force or is_plan_dir(target) or not any(target.iterdir()):
        return
    raise OutputError(
        f"{shown} exists and is not a planc plan directory (no {MARKER} file); "
        "choose another directory, or pass --force to replace it and everything in it"
    )


def _fresh_dir(parent: Path, stem: str) -> Path:
    """A new directory beside the target, created with the user's umask (mkdtemp forces 0700)."""
    while True:
        path = parent / f".{stem}.planc-{secrets.token_hex(4)}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path


def _fill(root: Path, files: Mapping[str, str]) -> None:
    for folder in sorted({PurePosixPath(name).parent for name in files}):
        (root / folder).mkdir(parents=True, exist_ok=True)
    base = os.fspath(root)  # plain strings: pathlib costs more than the syscalls per small file
    for name, text in files.items():
        # Scripts get x wherever the umask leaves r; creating them so saves a chmod per node.
        mode = 0o777 if name.endswith(_EXECUTABLE) else 0o666
        fd = os.open(os.path.join(base, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with open(fd, "wb") as handle:  # bytes: no text-layer setup per file
            handle.write(text.encode("utf-8"))


class _Terminated(BaseException):
    """SIGTERM turned into an exception, so `finally` blocks run."""


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    # Python's default SIGTERM action kills the process without unwinding; a handler that
    # raises lets the cleanup below run. Signal handlers can only be set in the main thread.
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise _Terminated(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends, so a rename pair is never cut in half."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no signal masks
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _swap_in(fresh: Path, target: Path) -> None:
    """Rename `fresh` to `target`, moving a previous `target` aside and deleting it after."""
    with _signals_deferred():
        if not target.exists():
            fresh.rename(target)
            return
        old = fresh.with_name(fresh.name + ".old")
        target.rename(old)
        try:
            fresh.rename(target)
        except BaseException:
            old.rename(target)
            raise
        shutil.rmtree(old, ignore_errors=True)


def write_files(files: Mapping[str, str], out_dir: Path, force: bool = False) -> list[Path]:
    """Write `files` as the directory `out_dir`, atomically; return the paths written."""
    target = Path(out_dir).absolute()
    _check_target(target, os.fspath(out_dir), force)
    try:
        _write_atomically(files, target)
    except OSError as error:
        raise OutputError(f"cannot write {out_dir}: {error.strerror or error}") from error
    return [Path(out_dir) / name for name in files]


def _write_atomically(files: Mapping[str, str], target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fresh: Path | None = None
    try:
        with _sigterm_raises():
            fresh = _fresh_dir(target.parent, target.name)
            _fill(fresh, files)
            _swap_in(fresh, target)
    except _Terminated:
        raise SystemExit(128 + signal.SIGTERM) from None
    finally:
        if fresh is not None and fresh.exists():
            shutil.rmtree(fresh, ignore_errors=True)


def write_plan(plan: Plan, out_dir: Path, force: bool = False) -> list[Path]:
    """Render `plan` and write it to `out_dir`. Raises `OutputError` for an unusable target."""
    return write_files(render_files(plan), out_dir, force)
