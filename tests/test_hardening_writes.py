"""Issue 30, items 2, 3 and 12 (the lock): what planc's writes do to the files around them.

Every single-file output goes through one writer (planc.outputs.emit.write_text): it never
writes over a file the command read, writes to a character device or FIFO in place, replaces
only regular files and takes `-` for standard output. A compile killed between its two renames
loses no plan, and a compile that finds its target locked says whose lock it is and gives up.
"""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from test_hardening_output import ENV, SMALL, beside, paused, plan_files, planc, world

from planc.compile import OutputError
from planc.compile import write as write_module
from planc.compile.write import write_files

POSIX = pytest.mark.skipif(sys.platform == "win32", reason="POSIX renames, locks and signals")

# ----------------------------------------------------------------------------- item 3: the swap


def aside(parent: Path) -> list[str]:
    return [name for name in beside(parent) if name.endswith(".old")]


@POSIX
def test_a_kill_between_the_renames_then_an_interrupted_compile_keeps_the_old_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reproducer: SIGKILL between the renames, then a second compile interrupted too."""
    out = tmp_path / "plan"
    write_files(plan_files(64), out)
    child = paused(tmp_path, "compile", SMALL, "-o", out)  # the old plan is aside now
    child.kill()
    child.communicate(timeout=60)
    assert not out.exists() and len(aside(tmp_path)) == 1  # the state the kill leaves

    def interrupted(root: Path, files: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(write_module, "_fill", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_files(plan_files(8), out)
    assert world(out) == 64  # the moved-aside plan is back, complete
    assert beside(tmp_path) == []
    monkeypatch.undo()
    write_files(plan_files(8), out)
    assert world(out) == 8 and beside(tmp_path) == []


@POSIX
def test_a_compile_after_a_kill_at_the_swap_writes_its_plan(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    write_files(plan_files(64), out)
    child = paused(tmp_path, "compile", SMALL, "-o", out)
    child.kill()
    child.communicate(timeout=60)
    done = planc("compile", SMALL, "-o", out)
    assert done.returncode == 0, done.stderr.decode()
    assert world(out) == 8 and beside(tmp_path) == []


def test_recovery_puts_back_the_newest_aside_and_removes_the_rest(tmp_path: Path) -> None:
    """On disk as kills leave it: no target, two moved-aside plans (one of an older planc's
    names), a half-filled temporary directory and a half-deleted trash directory."""
    out = tmp_path / "plan"
    stem = write_module._stem(out)
    older, newer = tmp_path / ".plan.planc-0000aaaa.old", tmp_path / f"{stem}.1111bbbb.old"
    write_files(plan_files(8), older)
    write_files(plan_files(64), newer)  # moved aside last: its ctime is the later one
    for name in (f"{stem}.2222cccc", f"{stem}.3333dddd.trash"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "README.md").write_text("# part\n")
    write_module._recover(out, stem)
    assert world(out) == 64
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan"]


def test_a_trash_directory_is_never_put_back(tmp_path: Path) -> None:
    """What a kill during the deletion of the old plan leaves is deleted, not restored."""
    out = tmp_path / "plan"
    trash = tmp_path / f"{write_module._stem(out)}.4444eeee.trash"
    trash.mkdir()
    (trash / "plan.json").write_text("{}")
    write_files(plan_files(8), out)
    assert world(out) == 8 and beside(tmp_path) == []


def test_an_existing_target_is_kept_and_the_aside_one_removed(tmp_path: Path) -> None:
    """A kill after the second rename: the new plan is in place; the .old one is a leftover."""
    out = tmp_path / "plan"
    write_files(plan_files(8), out)
    write_files(plan_files(64), tmp_path / f"{write_module._stem(out)}.5555ffff.old")
    write_files(plan_files(8), out)
    assert world(out) == 8 and beside(tmp_path) == []


# ----------------------------------------------------------------------------- item 12: the lock


def hold_lock(out: Path, record: bool = True) -> int:
    """Take the lock of `out` as another compile would (this process is the holder)."""
    fd = os.open(out.parent / f"{write_module._stem(out)}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    if record:
        write_module._record_holder(fd)
    return fd


@POSIX
def test_a_held_lock_names_its_holder_and_gives_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan"
    write_files(plan_files(64), out)
    monkeypatch.setattr(write_module, "LOCK_WAIT_SECONDS", 0.2)
    fd = hold_lock(out)
    try:
        with pytest.raises(OutputError) as raised:
            write_files(plan_files(8), out)
    finally:
        os.close(fd)
    holder = f"process {os.getpid()} on host {socket.gethostname()} (since 20"
    message = str(raised.value)
    assert message.startswith(f"{out} is being written by {holder}") and "after 0.2 s" in message
    waiting = capsys.readouterr().err
    assert waiting.startswith(f"planc: {out} is being written by {holder}")
    assert waiting.endswith("; waiting up to 0.2 s\n") and waiting.count("\n") == 1
    assert world(out) == 64  # untouched
    assert [n for n in beside(tmp_path) if not n.endswith(".lock")] == []


@POSIX
def test_a_lock_file_without_a_record_still_gives_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "plan"
    monkeypatch.setattr(write_module, "LOCK_WAIT_SECONDS", 0.1)
    fd = hold_lock(out, record=False)
    os.write(fd, b"pid 1 on host evil\n::error::forged\n")  # not the record's form: not shown
    try:
        with pytest.raises(OutputError, match=r"by another process \(its lock file does not say"):
            write_files(plan_files(8), out)
    finally:
        os.close(fd)
    assert not out.exists()


LOCK_WAIT = """
import sys
from planc.compile import write
write.LOCK_WAIT_SECONDS = 0.3
sys.argv = ["planc", *sys.argv[1:]]
from planc.cli.main import entry
entry()
"""


@POSIX
def test_compile_against_a_held_lock_exits_2(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    fd = hold_lock(out)
    try:
        done = subprocess.run(
            [sys.executable, "-c", LOCK_WAIT, "compile", str(SMALL), "-o", str(out)],
            env=ENV, capture_output=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        os.close(fd)
    lines = done.stderr.decode().splitlines()
    assert done.returncode == 2, lines
    assert len(lines) == 2 and "Traceback" not in done.stderr.decode()
    assert lines[0].startswith(f"planc: {out} is being written by process {os.getpid()} ")
    assert lines[1].startswith(f"{SMALL}: error: {out} is being written by process {os.getpid()}")
    assert not out.exists() and done.stdout == b""


def test_the_lock_records_its_holder_while_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "plan"
    seen: list[str] = []
    real = write_module._check_target

    def look(target: Path, shown: str, overwrite: bool, protect: tuple[str, ...]) -> None:
        seen.append((tmp_path / f"{write_module._stem(out)}.lock").read_text())
        real(target, shown, overwrite, protect)

    monkeypatch.setattr(write_module, "_check_target", look)
    write_files(plan_files(8), out)
    assert len(seen) == 1 and seen[0].startswith(f"pid {os.getpid()} on host ")
    assert beside(tmp_path) == []
