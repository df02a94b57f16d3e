"""Issue 30, items 2, 3 and 12 (the lock): what planc's writes do to the files around them.

Every single-file output goes through one writer (planc.outputs.emit.write_text): it never
writes over a file the command read, writes to a character device or FIFO in place, replaces
only regular files and takes `-` for standard output. A compile killed between its two renames
loses no plan, and a compile that finds its target locked says whose lock it is and gives up.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from test_hardening_output import ENV, SMALL, beside, paused, plan_files, planc, world

from planc.compile import OutputError
from planc.compile import write as write_module
from planc.compile.write import write_files
from planc.outputs.emit import OutputRefused, write_text_atomic

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


# ----------------------------------------------------------------------------- item 2: the writer


def spec_copy(tmp_path: Path) -> Path:
    spec = tmp_path / "s.yaml"
    spec.write_bytes(SMALL.read_bytes())
    return spec


def runs_csv(tmp_path: Path) -> Path:
    """Three small runs and made-up step times: enough for calibrate to fit and write."""
    rows = ["spec,seconds per step"]
    for model, b, seconds in (("gpt-22b", 1, 0.5), ("gpt-22b", 4, 1.7), ("llama3-8b", 2, 0.4)):
        (tmp_path / f"{model}-{b}.yaml").write_text(
            f"version: 1\nname: {model}-{b}\nmodel: {{preset: {model}, layers: 4}}\n"
            f"hardware: {{gpu: a100-80gb, nodes: 1}}\nparallelism: {{tensor: 8}}\n"
            f"training: {{seq_len: 2048, micro_batch: {b}, global_batch: {4 * b}, "
            f"attention: eager}}\n",
            encoding="utf-8",
        )
        rows.append(f"{model}-{b}.yaml,{seconds}")
    path = tmp_path / "runs.csv"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def refused(done: subprocess.CompletedProcess[bytes], out: str | Path, source: Path) -> None:
    """Exit 2, one line naming the output and the input it is, no traceback."""
    text = done.stderr.decode()
    assert done.returncode == 2, text
    assert "Traceback" not in text and len(text.splitlines()) == 1, text
    assert f"{out}: is the same file as {source}, which this command reads" in text, text


@pytest.mark.parametrize(
    "command",
    [
        ["report", "{spec}", "-o", "{spec}"],
        ["search", "{spec}", "--allow", "tensor=2", "--write", "{spec}"],
        ["search", "{spec}", "--allow", "tensor=2", "--report", "{spec}"],
        ["check", "{spec}", "--output-file", "{spec}"],
    ],
    ids=["report", "search-write", "search-report", "check"],
)
def test_an_output_over_the_spec_is_refused(tmp_path: Path, command: list[str]) -> None:
    """The reproducers: each of these replaced the spec it read."""
    spec = spec_copy(tmp_path)
    done = planc(*(arg.format(spec=spec) for arg in command))
    if command[0] == "search":  # search says it before searching, in its own words
        text = done.stderr.decode()
        assert done.returncode == 2 and len(text.splitlines()) == 1, text
        assert text.startswith(f"{spec}: error: cannot write {spec}: is the same file as {spec}")
        assert done.stdout == b""
    else:
        refused(done, spec, spec)
    assert spec.read_bytes() == SMALL.read_bytes()


@pytest.mark.parametrize("spelling", ["dot", "symlink", "hardlink", "absolute"])
def test_the_spec_is_recognised_however_it_is_spelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    spec = spec_copy(tmp_path)
    monkeypatch.chdir(tmp_path)
    out = {"dot": "./s.yaml", "absolute": str(spec)}.get(spelling, "other.yaml")
    if spelling == "symlink":
        Path(out).symlink_to("s.yaml")
    elif spelling == "hardlink":
        os.link("s.yaml", out)
    refused(planc("check", "s.yaml", "--output-file", out), out, Path("s.yaml"))
    assert spec.read_bytes() == SMALL.read_bytes()
    assert Path(out).is_symlink() == (spelling == "symlink")


def test_calibrate_never_writes_over_its_measurements_or_specs(tmp_path: Path) -> None:
    csv = runs_csv(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    refused(planc("calibrate", csv, "-o", csv), csv, csv)
    spec = tmp_path / "llama3-8b-2.yaml"
    refused(planc("calibrate", csv, "-o", spec), spec, spec)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    done = planc("calibrate", csv, "-o", "-")  # the file on stdout, the table on stderr
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout)["gemm"] and b"leave-one-out" in done.stderr


def drain(fifo: Path, into: list[bytes]) -> None:
    into.append(fifo.read_bytes())


def test_a_fifo_is_written_in_place(tmp_path: Path) -> None:
    """`schema -o FIFO` (and through a symbolic link to it): written, not renamed over."""
    fifo, link = tmp_path / "pipe", tmp_path / "link"
    os.mkfifo(fifo)
    link.symlink_to(fifo)
    inode = fifo.stat().st_ino
    expected = planc("schema").stdout
    for target in (fifo, link):
        got: list[bytes] = []
        # A daemon: should planc rename over the FIFO, the blocked reader must not hang pytest.
        reader = threading.Thread(target=drain, args=(fifo, got), daemon=True)
        reader.start()
        done = planc("schema", "-o", target)
        reader.join(timeout=60)
        assert done.returncode == 0, done.stderr.decode()
        assert got == [expected]
        assert stat.S_ISFIFO(fifo.lstat().st_mode) and fifo.stat().st_ino == inode
    assert link.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == ["link", "pipe"]


@pytest.mark.skipif(not Path("/proc/self/fd/1").exists(), reason="Linux /proc")
@pytest.mark.parametrize("command", [["schema", "-o"], ["check", str(SMALL), "--output-file"]])
def test_a_link_to_proc_self_fd_1_writes_to_stdout(tmp_path: Path, command: list[str]) -> None:
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    expected = planc(*[arg for arg in command if not arg.startswith("-")])
    done = planc(*command, link)
    assert done.returncode == expected.returncode, done.stderr.decode()
    assert done.stdout == expected.stdout and done.stdout
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stdout"]


def test_dev_null_is_opened_not_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    """First proven in this process with renames and temporary files forbidden; only then a
    real `planc schema -o /dev/null`, after which /dev/null is still the same device."""
    before = os.stat(os.devnull)
    assert stat.S_ISCHR(before.st_mode)

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("a rename or a temporary file beside a device")

    with monkeypatch.context() as patched:
        for module, name in ((os, "replace"), (os, "rename"), (tempfile, "mkstemp")):
            patched.setattr(module, name, forbidden)
        write_text_atomic(os.devnull, "planc\n")
    done = planc("schema", "-o", os.devnull)
    assert done.returncode == 0 and done.stdout == b"", done.stderr.decode()
    after = os.stat(os.devnull)
    assert (after.st_ino, after.st_rdev, after.st_mode) == (
        before.st_ino,
        before.st_rdev,
        before.st_mode,
    )


def test_only_regular_files_are_replaced(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    (tmp_path / "to-folder").symlink_to(folder)
    for target in (folder, tmp_path / "to-folder"):
        with pytest.raises(OutputRefused, match="is a directory") as raised:
            write_text_atomic(target, "x")
        assert raised.value.errno == errno.EISDIR and raised.value.filename == str(target)
    assert list(folder.iterdir()) == []
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "sock"))
        with pytest.raises(OutputRefused, match="neither a regular file"):
            write_text_atomic(tmp_path / "sock", "x")
    finally:
        sock.close()
    assert stat.S_ISSOCK((tmp_path / "sock").lstat().st_mode)


def test_a_directory_on_the_command_line_is_exit_2(tmp_path: Path) -> None:
    done = planc("schema", "-o", tmp_path)
    assert done.returncode == 2 and b"Traceback" not in done.stderr
    assert tmp_path.is_dir()


def test_a_link_to_a_regular_file_replaces_the_file_and_keeps_the_link(tmp_path: Path) -> None:
    real, link = tmp_path / "real.json", tmp_path / "link.json"
    real.write_text("old\n")
    link.symlink_to("real.json")
    write_text_atomic(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_a_dash_is_standard_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert planc("schema", "-o", "-").stdout == planc("schema").stdout
    plain = planc("check", SMALL)
    dashed = planc("check", SMALL, "--output-file", "-")
    assert (dashed.returncode, dashed.stdout) == (plain.returncode, plain.stdout)
    page = planc("report", SMALL, "-o", "-")
    assert page.returncode == 0, page.stderr.decode()
    assert page.stdout.startswith(b"<!DOCTYPE html>") and page.stdout.endswith(b"</html>\n")
    assert page.stderr.decode().startswith(f"{SMALL}: wrote - (")
    assert list(tmp_path.iterdir()) == []  # no file named -


@pytest.mark.parametrize("option", ["--write", "--report"])
def test_search_keeps_stdout_for_its_ranking(tmp_path: Path, option: str) -> None:
    done = planc("search", SMALL, "--allow", "tensor=2", option, "-")
    assert done.returncode == 2 and done.stdout == b""
    assert done.stderr.decode() == (
        f"{SMALL}: error: {option} -: standard output carries the ranked layouts; "
        "give a file name\n"
    )


def test_search_still_writes_a_new_file(tmp_path: Path) -> None:
    out = tmp_path / "best.yaml"
    done = planc("search", SMALL, "--allow", "tensor=2", "--write", out)
    assert done.returncode == 0, done.stderr.decode()
    assert out.read_text().startswith("# Written by planc search from")
