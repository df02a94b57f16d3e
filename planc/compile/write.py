"""Write a plan directory atomically: it appears complete, or the previous one stays.

The files go into a fresh directory beside the target; then the old directory is renamed
aside, the new one renamed in, and the old one deleted. An exception, Ctrl-C or SIGTERM before
the swap leaves the previous plan as it was and removes the temporary directory. From the
swap to the deletion of the old plan, SIGINT and SIGTERM are held, whichever thread the kernel
gives them to (Python runs signal handlers in the main thread only, so a handler that records
the signal covers numpy's worker threads as well): once the swap has begun the write
completes, and the signal is dropped, since the new plan is then in place. Between the two
renames the target is briefly absent (POSIX has no portable directory swap). Files are not
fsynced: this guards against interruption, not power loss.

Writers of one target are serialised by `flock` on a lock file beside it, which records the
holder's pid, host and start time; a writer that cannot take the lock says whose it is on
stderr and gives up after `LOCK_WAIT_SECONDS` (`OutputError`). The writer holding the lock
first recovers from a killed writer: when the target is missing and a `.old` directory is
beside it (a kill between the two renames), that plan is renamed back into place; only then
are the killed writers' temporary and `.old` directories removed. An `.old` directory is only
ever removed after a rename to a `.trash` name, so a `.old` directory is always a whole plan
and no sequence of interrupted writes loses both the old plan and the new.
Temporary names are `.planc-<hash of the target name>.<random>`, so their length does not grow
with the target's name.

A directory is planc's to replace when its manifest (`.planc-plan`, written last into the
temporary directory) lists every file in it; any other file is refused unless
`overwrite=True`. The current directory, the home directory, a directory holding a protected
path (the spec) or any directory containing one of those is never replaced.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from types import FrameType

from planc.compile.frameworks import framework_files
from planc.compile.launchers import launcher_files, readme
from planc.compile.plan import Plan, coords_json, plan_json
from planc.outputs.progress import tracked

if sys.platform != "win32":
    import fcntl

MANIFEST = ".planc-plan"
MANIFEST_HEADER = (
    "planc plan manifest 1: planc compile wrote this directory and every file listed below;\n"
    "it replaces the directory on the next compile only while no other file is in it.\n"
)
_EXECUTABLE = (".sh", ".sbatch")
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_SHOWN = 3  # foreign files named in a refusal
_POLL_SECONDS = 0.02  # between attempts to take the lock of a target another writer holds
LOCK_WAIT_SECONDS = 60.0  # how long a writer waits for the lock before it gives up
_HOLDER_BYTES = 256  # the most of a lock file's holder record that is read
_HOLDER = re.compile(
    r"pid (\d{1,10}) on host ([!-~]{1,64}) since (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)\n"
)


class OutputError(ValueError):
    """The output directory cannot be written: not planc's, protected, a file, no permission."""


def render_files(plan: Plan) -> dict[str, str]:
    """Every file of the plan directory, {relative path: text}, in a fixed order."""
    files = {
        "README.md": readme(plan),
        "plan.json": plan_json(plan),
        "coords.json": coords_json(plan),
        **launcher_files(plan),
        **framework_files(plan),
    }
    return {MANIFEST: manifest(files), **files}


def manifest(names: Iterable[str]) -> str:
    """The manifest text: the header, then one relative path per line."""
    return MANIFEST_HEADER + "".join(f"{name}\n" for name in names if name != MANIFEST)


def _listed(target: Path) -> frozenset[str]:
    """The files the manifest in `target` lists (empty when there is no planc manifest)."""
    try:
        with open(target / MANIFEST, encoding="utf-8") as handle:
            text = handle.read()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, UnicodeDecodeError):
        return frozenset()
    if not text.startswith(MANIFEST_HEADER):
        return frozenset()
    return frozenset([MANIFEST, *text[len(MANIFEST_HEADER) :].splitlines()])


def foreign_files(target: Path) -> list[str]:
    """Entries of `target` its manifest does not list, as sorted relative paths.

    A directory counts as listed when a listed file is inside it; a symlink never does.
    """
    listed = _listed(target)
    folders = {str(parent) for name in listed for parent in PurePosixPath(name).parents}
    foreign: list[str] = []

    def walk(folder: Path, prefix: str) -> None:
        with os.scandir(folder) as entries:
            for entry in entries:
                name = prefix + entry.name
                if entry.is_dir(follow_symlinks=False) and name in folders:
                    walk(Path(entry.path), name + "/")
                elif not (entry.is_file(follow_symlinks=False) and name in listed):
                    foreign.append(name + ("/" if entry.is_dir(follow_symlinks=False) else ""))

    walk(target, "")
    return sorted(foreign)


def _contains(folder: str, path: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _protected(target: Path, shown: str, protect: Iterable[str | os.PathLike[str]]) -> None:
    """Refuse a target that is or holds the current directory, the home directory or a spec."""
    real = os.path.realpath(target)
    places = [(os.getcwd(), "the current directory")]
    with contextlib.suppress(RuntimeError, KeyError):
        places.append((os.fspath(Path.home()), "the home directory"))
    places += [(os.fspath(path), f"the spec {os.fspath(path)}") for path in protect]
    for path, what in places:
        inside = os.path.realpath(path)
        if _contains(real, inside):
            relation = "is" if inside == real else "contains"
            raise OutputError(
                f"{shown} {relation} {what}; planc never replaces it, whatever the flags: "
                "choose a new directory for the plan"
            )


def _check_target(
    target: Path, shown: str, overwrite: bool, protect: Iterable[str | os.PathLike[str]]
) -> None:
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise OutputError(f"{shown} exists and is not a directory; choose another output path")
    if not target.exists():
        return
    _protected(target, shown, protect)
    if os.path.ismount(target):
        raise OutputError(
            f"{shown} is a mount point, which cannot be replaced by a rename; "
            f"write the plan into a directory inside it (-o {os.path.join(shown, 'plan')})"
        )
    if overwrite:
        return
    foreign = foreign_files(target)
    if not foreign:
        return
    names = ", ".join(foreign[:_SHOWN]) + (
        f" and {len(foreign) - _SHOWN} more" if len(foreign) > _SHOWN else ""
    )
    if _listed(target):
        whose = "its planc manifest does not list"
    elif (target / MANIFEST).is_file():
        whose = f"its {MANIFEST} is not a manifest; an older planc wrote it without a file list"
    else:
        whose = f"no {MANIFEST} manifest"
    raise OutputError(
        f"{shown} holds files planc did not write ({whose}): {names}; choose another "
        "directory, or pass --overwrite to replace it and everything in it"
    )


def _fresh_dir(parent: Path, stem: str) -> Path:
    """A new directory beside the target, created with the user's umask (mkdtemp forces 0700)."""
    while True:
        path = parent / f"{stem}.{secrets.token_hex(4)}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path


def _fill(root: Path, files: Mapping[str, str]) -> None:
    for folder in sorted({PurePosixPath(name).parent for name in files}):
        (root / folder).mkdir(parents=True, exist_ok=True)
    base = os.fspath(root)  # plain strings: pathlib costs more than the syscalls per small file
    # The manifest goes last: a directory with a manifest holds every file it lists.
    ordered = sorted(files.items(), key=lambda item: item[0] == MANIFEST)
    for name, text in tracked("planc compile: writing files", ordered):  # progress on a TTY
        # Scripts get x wherever the umask leaves r; creating them so saves a chmod per node.
        mode = 0o777 if name.endswith(_EXECUTABLE) else 0o666
        fd = os.open(os.path.join(base, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with open(fd, "wb") as handle:  # bytes: no text-layer setup per file
            handle.write(text.encode("utf-8"))


class _Terminated(BaseException):
    """SIGTERM turned into an exception, so `finally` blocks run."""


class _Guard:
    """SIGINT and SIGTERM while planc writes: exceptions, held, or dropped once committed.

    One handler for the whole write, installed once: a handler and not a signal mask, since
    masks are per thread and the kernel may hand a signal to any thread that does not block
    it (numpy's OpenBLAS threads), while Python runs handlers in the main thread whichever
    thread received the signal. Outside held sections a signal raises (KeyboardInterrupt,
    `_Terminated`) so the clean-up runs; inside one it is recorded and raised on `release`.
    A section begins with `guard.depth += 1` written out: a method call would let a pending
    handler run before the count changes. From `commit` on, the new plan is being put in
    place: signals are dropped and the write completes.
    """

    def __init__(self) -> None:
        self.depth = 0
        self.pending: list[int] = []
        self.committed = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.depth or self.committed:
            self.pending.append(signum)
            return
        self.raise_for(signum)

    @staticmethod
    def raise_for(signum: int) -> None:
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise _Terminated(signum)

    def release(self) -> None:
        self.depth -= 1
        if self.depth or self.committed or not self.pending:
            return
        signum = self.pending[0]
        self.pending.clear()
        self.raise_for(signum)

    def commit(self) -> None:
        self.committed = True


@contextlib.contextmanager
def _guarded() -> Iterator[_Guard]:
    guard = _Guard()
    if threading.current_thread() is not threading.main_thread():
        yield guard  # handlers can only be set in the main thread
        return
    previous: dict[signal.Signals, signal._HANDLER] = {}
    try:
        for signum in _SIGNALS:
            previous[signum] = signal.signal(signum, guard.handle)
        yield guard
    finally:
        guard.depth += 1  # what arrives while the handlers are put back is held, then
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if guard.pending and not guard.committed:  # delivered again, to the previous handler
            signal.raise_signal(guard.pending[0])


def _swap_in(fresh: Path, target: Path, guard: _Guard) -> None:
    """Rename `fresh` to `target`, moving a previous `target` aside and deleting it after."""
    guard.depth += 1
    try:
        if not target.exists():
            guard.commit()
            fresh.rename(target)
            return
        old = fresh.with_name(fresh.name + ".old")
        target.rename(old)
        try:
            guard.commit()
            fresh.rename(target)
        except BaseException:
            guard.committed = False
            old.rename(target)
            raise
        _discard(old)
    finally:
        guard.release()


def _discard(old: Path) -> None:
    """Delete a moved-aside plan: renamed to a `.trash` name first, so that a `.old` directory
    is never a partly deleted plan (recovery may put a `.old` directory back)."""
    trash = old.with_name(old.name[: -len(".old")] + ".trash")
    try:
        old.rename(trash)
    except OSError:
        trash = old
    shutil.rmtree(trash, ignore_errors=True)


def _stem(target: Path) -> str:
    """The prefix of every name planc puts beside `target`: fixed length, one per target name."""
    digest = hashlib.sha256(os.fsencode(target.name)).hexdigest()[:12]
    return f".planc-{digest}"


@contextlib.contextmanager
def _locked(target: Path, shown: str, guard: _Guard) -> Iterator[None]:
    """Hold the lock of `target`, then recover from killed writers of it (`_recover`).

    The lock file is removed on release, so a writer polls: it opens the path and takes the
    lock without blocking, and keeps it only if the file it locked is still the one at the
    path. Each attempt is a held section, so an interrupted writer never leaves a lock file;
    between attempts Ctrl-C works as usual. A writer that finds the lock held says whose it is
    on stderr, once, and raises `OutputError` after `LOCK_WAIT_SECONDS`.
    """
    stem = _stem(target)
    path = target.parent / f"{stem}.lock"
    if sys.platform == "win32":  # no flock: writers are not serialised
        yield
        return
    fd = -1
    wait = LOCK_WAIT_SECONDS
    deadline: float | None = None
    try:
        while True:
            guard.depth += 1
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
                if _lock(fd, path):
                    _record_holder(fd)
                    break
                holder = _holder(fd)
                os.close(fd)
                fd = -1
            finally:
                guard.release()
            now = time.monotonic()
            if deadline is None:
                deadline = now + wait
                _say(f"planc: {shown} is being written by {holder}; waiting up to {wait:g} s")
            elif now >= deadline:
                raise OutputError(
                    f"{shown} is being written by {holder}, which still holds its lock "
                    f"({path.name}) after {wait:g} s; wait for it to finish, or stop it"
                )
            time.sleep(_POLL_SECONDS)
        _recover(target, stem)
        yield
    finally:
        if fd >= 0:
            guard.depth += 1
            try:
                with contextlib.suppress(OSError):
                    path.unlink()
                os.close(fd)
            finally:
                guard.release()


def _lock(fd: int, path: Path) -> bool:
    """Lock `fd` if no other writer holds it and it is still the file at `path`."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def _record_holder(fd: int) -> None:
    """Write who holds the lock into the lock file: pid, host and start time (UTC)."""
    host = "".join(c for c in socket.gethostname()[:64] if "!" <= c <= "~") or "unknown"
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record = f"pid {os.getpid()} on host {host} since {since}\n".encode("ascii")
    with contextlib.suppress(OSError):  # the record only informs a waiting writer
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)


def _holder(fd: int) -> str:
    """Who holds the lock, as its lock file records it (read bounded, shown only if well formed)."""
    try:
        data = os.pread(fd, _HOLDER_BYTES, 0)
    except OSError:
        data = b""
    match = _HOLDER.fullmatch(data.decode("ascii", "replace"))
    if match is None:
        return "another process (its lock file does not say which)"
    pid, host, since = match.groups()
    return f"process {pid} on host {host} (since {since})"


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):  # stderr closed or gone
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _recover(target: Path, stem: str) -> None:
    """Recover from killed writers of `target`: put back the plan one of them moved aside,
    then remove their temporary, `.old` and `.trash` directories.

    A writer killed between its two renames leaves no target and the previous plan in a `.old`
    directory: that directory is renamed back to the target (the newest, should there be
    several). Also recognises the names of planc versions before the lock,
    `.<target name>.planc-XXXXXXXX`.
    """
    prefixes = f"{re.escape(stem)}\\.|{re.escape(f'.{target.name}.planc-')}"
    pattern = re.compile(f"(?:{prefixes})[0-9a-f]{{8}}(\\.old|\\.trash)?")
    with os.scandir(target.parent) as entries:
        stale = sorted(Path(e.path) for e in entries if pattern.fullmatch(e.name))
    aside = [path for path in stale if path.name.endswith(".old") and path.is_dir()]
    if aside and not os.path.lexists(target):
        newest = max(aside, key=lambda path: (path.lstat().st_ctime_ns, path.name))
        newest.rename(target)
        stale.remove(newest)
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)


def write_files(
    files: Mapping[str, str],
    out_dir: Path,
    *,
    overwrite: bool = False,
    protect: Iterable[str | os.PathLike[str]] = (),
) -> list[Path]:
    """Write `files` as the directory `out_dir`, atomically; return the paths written.

    Raises `OutputError` for a target planc may not replace (see the module docstring) or
    cannot write; SIGTERM before the swap exits with status 143 after the clean-up.
    """
    target = Path(out_dir).absolute()
    shown = os.fspath(out_dir)
    try:
        with _guarded() as guard:
            target.parent.mkdir(parents=True, exist_ok=True)
            with _locked(target, shown, guard):
                _check_target(target, shown, overwrite, protect)
                _write_atomically(files, target, guard)
    except _Terminated:
        raise SystemExit(128 + signal.SIGTERM) from None
    except OSError as error:
        raise OutputError(f"cannot write {shown}: {_reason(error)}") from error
    return [Path(out_dir) / name for name in files]


def _reason(error: OSError) -> str:
    reason = error.strerror or str(error)
    return f"{os.fsdecode(error.filename)}: {reason}" if error.filename else reason


def _write_atomically(files: Mapping[str, str], target: Path, guard: _Guard) -> None:
    fresh: Path | None = None
    try:
        guard.depth += 1
        try:  # `fresh` names the directory as soon as it exists
            fresh = _fresh_dir(target.parent, _stem(target))
        finally:
            guard.release()
        _fill(fresh, files)
        _swap_in(fresh, target, guard)
    finally:
        guard.depth += 1  # a second Ctrl-C does not cut the clean-up short
        try:
            if fresh is not None and fresh.exists():
                shutil.rmtree(fresh, ignore_errors=True)
        finally:
            guard.release()


def write_plan(
    plan: Plan,
    out_dir: Path,
    *,
    overwrite: bool = False,
    protect: Iterable[str | os.PathLike[str]] = (),
) -> list[Path]:
    """Render `plan` and write it to `out_dir`. Raises `OutputError` for an unusable target."""
    return write_files(render_files(plan), out_dir, overwrite=overwrite, protect=protect)
