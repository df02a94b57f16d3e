"""Issue 19, output side: what the OS can do to planc's output, each from its reproducer.

The error boundary (planc.cli.boundary) and the atomic write (planc.compile.write) are exercised
through real `python -m planc` processes wherever a descriptor, a signal, a locale or a second
process is involved; the overwrite rules through click's runner.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from planc.cli.main import main
from planc.compile import OutputError
from planc.compile import write as write_module
from planc.compile.write import MANIFEST, foreign_files, manifest, write_files

from conftest import EXAMPLES, ROOT

SMALL = EXAMPLES / "llama3-8b-1node.yaml"  # 8 ranks
LARGE = EXAMPLES / "llama3-70b-8x8.yaml"  # 64 ranks
BAD = EXAMPLES / "invalid" / "PLC006" / "llama3-70b-8x8.yaml"  # × − · in the message
POSIX = pytest.mark.skipif(sys.platform == "win32", reason="POSIX descriptors and signals")
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUTF8": "0"}


def planc(*args: str | Path, env: dict[str, str] | None = None, **kw: Any) -> Any:
    """Run `python -m planc ARGS` as a user would; stdout and stderr captured unless given."""
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    command = [sys.executable, "-m", "planc", *map(str, args)]
    return subprocess.run(command, env=env or ENV, timeout=60, check=False, **kw)


def one_error_line(stderr: bytes, starts: str) -> None:
    text = stderr.decode()
    assert "Traceback" not in text
    assert len(text.splitlines()) == 1 and text.startswith(starts), text


def world(out: Path) -> int:
    """The plan's world size, after checking the directory is complete and planc's alone."""
    assert foreign_files(out) == []
    listed = (out / MANIFEST).read_text().splitlines()[2:]
    assert listed and all((out / name).is_file() for name in listed)
    size: int = json.loads((out / "plan.json").read_text())["world_size"]
    return size


def plan_files(size: int) -> dict[str, str]:
    """A plan directory's files as render_files lays them out, for a world of `size` ranks."""
    nodes = {
        f"torchrun/node-{n:03d}.{ext}": f"{n}\n" for n in range(size // 8) for ext in ("sh", "env")
    }
    body = {"README.md": "# plan\n", "plan.json": json.dumps({"world_size": size}), **nodes}
    return {MANIFEST: manifest(body), **body}


def beside(parent: Path) -> list[str]:
    """What planc left beside its targets: temporary, .old and lock entries."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(".planc-"))


# ----------------------------------------------------------------------------- the boundary


@POSIX
@pytest.mark.parametrize("command", ["check", "memory", "compile"])
def test_full_disk_on_stdout_is_exit_2_and_one_line(command: str, tmp_path: Path) -> None:
    extra = ["-o", str(tmp_path / "plan")] if command == "compile" else []
    with open("/dev/full", "wb") as full:
        done = planc(command, SMALL, *extra, stdout=full)
    assert done.returncode == 2
    one_error_line(done.stderr, "planc: error: cannot write standard output: No space left")


@POSIX
def test_closed_stdout_is_exit_2() -> None:
    done = subprocess.run(
        f'"{sys.executable}" -m planc check "{SMALL}" >&-',
        shell=True,
        env=ENV,
        stderr=subprocess.PIPE,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    one_error_line(done.stderr, "planc: error: cannot write standard output: Bad file descriptor")


@POSIX
def test_closed_stdin_is_an_unreadable_spec() -> None:
    done = subprocess.run(
        f'"{sys.executable}" -m planc check - <&-',
        shell=True,
        env=ENV,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and b"Traceback" not in done.stderr
    assert done.stdout.startswith(b"-:1:1: error PLC100 standard input is closed")


@POSIX
def test_broken_pipe_ends_like_cat() -> None:
    """The reader is gone before planc writes: SIGPIPE, status 141 in a shell, no message."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = planc("check", SMALL, stdout=write)
    finally:
        os.close(write)
    assert done.returncode == -signal.SIGPIPE
    assert done.stderr == b""


@pytest.mark.parametrize("encoding", ["iso8859-1", "iso8859-5"])
def test_any_locale_encoding_keeps_json_valid_and_exact(encoding: str) -> None:
    """A stream encoding without ×, −, Ψ: escapes that JSON reads back as the same text."""
    legacy = {**ENV, "PYTHONIOENCODING": encoding}
    utf8 = planc("check", "--format", "json", BAD)
    done = planc("check", "--format", "json", BAD, env=legacy)
    assert (done.returncode, done.stderr) == (1, b"")
    assert json.loads(done.stdout.decode(encoding)) == json.loads(utf8.stdout)
    assert b"\\u2212" in done.stdout  # − as an escape, not a crash


@pytest.mark.parametrize(
    "args", [["memory", SMALL], ["explain", SMALL], ["rules", "PLC006"], ["check", BAD]]
)
def test_any_locale_encoding_writes_text(args: list[str | Path]) -> None:
    done = planc(*args, env={**ENV, "PYTHONIOENCODING": "iso8859-1"})
    assert done.returncode in (0, 1) and done.stderr == b"", done.stderr
    assert b"\\u" in done.stdout


def test_schema_into_a_missing_folder_names_the_file(tmp_path: Path) -> None:
    target = tmp_path / "no" / "schema.json"
    done = planc("schema", "-o", target)
    assert done.returncode == 2
    one_error_line(done.stderr, f"planc: error: {target}: No such file or directory")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root may write")
def test_compile_into_a_folder_without_permission(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    done = planc("compile", SMALL, "-o", locked / "plan")
    assert done.returncode == 2
    one_error_line(done.stderr, f"{SMALL}: error: cannot write {locked / 'plan'}: ")
    done = planc("schema", "-o", locked / "schema.json")
    assert done.returncode == 2
    one_error_line(done.stderr, "planc: error: ")


def test_unreadable_target_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The target check runs inside the error handling (as root, a folder is always readable)."""
    out = tmp_path / "plan"
    out.mkdir()
    (out / "x").write_text("x")

    def denied(target: Path) -> list[str]:
        raise PermissionError(13, "Permission denied", str(target))

    monkeypatch.setattr(write_module, "foreign_files", denied)
    result = CliRunner().invoke(main, ["compile", str(SMALL), "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert f"error: cannot write {out}: {out}: Permission denied" in result.output


INTERNAL = """
import sys
import planc.check
def broken(*args, **kwargs): raise RuntimeError("a bug")
planc.check.check_paths = broken
sys.argv = ["planc", "check", "x.yaml"]
from planc.cli.main import entry
entry()
"""


def test_a_bug_shows_its_traceback_and_exits_2() -> None:
    done = subprocess.run(
        [sys.executable, "-c", INTERNAL], env=ENV, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert b"RuntimeError: a bug" in done.stderr
    assert done.stderr.decode().splitlines()[-1].startswith("planc: error: internal error")


# ----------------------------------------------------------------------------- the atomic write

# `python -m planc ARGS` whose swap pauses after moving the old plan aside (the worst moment to
# be interrupted) until the file named by PLANC_GO exists.
PAUSED = """
import os, sys, time
from pathlib import Path
real = Path.rename
def rename(self, dest):
    result = real(self, dest)
    if str(dest).endswith(".old"):
        print("swapping", flush=True)
        while not os.path.exists(os.environ["PLANC_GO"]):
            time.sleep(0.01)
    return result
Path.rename = rename
sys.argv = ["planc", *sys.argv[1:]]
from planc.cli.main import entry
entry()
"""


def paused(tmp_path: Path, *args: str | Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-c", PAUSED, *map(str, args)]
    env = {**ENV, "PLANC_GO": str(tmp_path / "go")}
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout is not None
    assert child.stdout.readline() == b"swapping\n", child.communicate()
    return child


@POSIX
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_during_the_swap_completes_it(tmp_path: Path, signum: int) -> None:
    """Any thread may receive the signal (numpy's are running): the swap finishes, exit 0."""
    out = tmp_path / "plan"
    write_files(plan_files(64), out)
    child = paused(tmp_path, "compile", SMALL, "-o", out)
    for _ in range(3):
        child.send_signal(signum)
    (tmp_path / "go").touch()
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err.decode()
    assert world(out) == 8
    assert beside(tmp_path) == []


@POSIX
def test_two_compiles_into_one_folder_are_serialised(tmp_path: Path) -> None:
    """B starts while A is between its renames; B waits for A's lock and its plan wins."""
    out = tmp_path / "plan"
    write_files(plan_files(8), out)
    first = paused(tmp_path, "compile", LARGE, "-o", out)
    second = subprocess.Popen(
        [sys.executable, "-m", "planc", "compile", str(SMALL), "-o", str(out)],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(1.5)  # B is started up and waiting for the lock
    assert second.poll() is None
    (tmp_path / "go").touch()
    for child in (first, second):
        _, err = child.communicate(timeout=60)
        assert child.returncode == 0, err.decode()
    assert world(out) == 8
    assert beside(tmp_path) == []


# A loop of writes, alternating two plans, while the parent sends SIGINT and SIGTERM at random.
# Outside write_files the signals are ignored, so every one of them lands in some phase of a
# write; after each write the directory must be complete, and the new plan if the write returned.
STRESS = """
import json, os, signal, sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
import numpy  # its BLAS threads may receive the signals
from planc.compile.write import write_files
from test_hardening_output import beside, plan_files, world
out = Path(sys.argv[1])
plans = [(plan_files(8), 8), (plan_files(64), 64)]
armed = False
def handler(signum, frame):
    if armed:
        raise KeyboardInterrupt if signum == signal.SIGINT else SystemExit(143)
signal.signal(signal.SIGINT, handler)
signal.signal(signal.SIGTERM, handler)
write_files(plans[0][0], out)
print("ready", flush=True)
counts = {{"written": 0, "interrupted": 0}}
end = time.monotonic() + {seconds}
i = 0
while time.monotonic() < end:
    i += 1
    before = world(out)
    plan, size = plans[i % 2]
    try:
        armed = True
        write_files(plan, out)
        armed = False
        outcome = "written"
    except (KeyboardInterrupt, SystemExit):
        armed = False
        outcome = "interrupted"
    now = world(out)
    assert now == size if outcome == "written" else now in (before, size), (outcome, now)
    assert beside(out.parent) == [], beside(out.parent)
    counts[outcome] += 1
print(json.dumps(counts), flush=True)
os._exit(0)  # before the interpreter's shutdown puts the default handlers back
"""


@pytest.mark.slow
@POSIX
def test_signals_during_many_writes_never_leave_a_partial_plan(tmp_path: Path) -> None:
    out = tmp_path / "area" / "plan"
    script = STRESS.format(tests=str(ROOT / "tests"), seconds=2.5)
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(out)],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stdout.readline() == b"ready\n", child.communicate()
    rng = random.Random(19)
    sent = 0
    while child.poll() is None:
        time.sleep(rng.uniform(0.001, 0.03))
        try:
            child.send_signal(rng.choice([signal.SIGINT, signal.SIGTERM]))
        except ProcessLookupError:
            break
        sent += 1
    rest, err = child.communicate(timeout=60)
    assert child.returncode == 0, err.decode()[-2000:]
    counts = json.loads(rest)
    assert counts["written"] and counts["interrupted"], (counts, sent)  # both outcomes seen


SECOND_INTERRUPT = """
import os, shutil, signal, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from planc.compile import write
from test_hardening_output import plan_files
real_fill, real_rmtree = write._fill, shutil.rmtree
def fill(root, files):
    real_fill(root, dict(list(files.items())[:5]))
    raise KeyboardInterrupt
def rmtree(path, *args, **kw):
    os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, while the clean-up runs
    real_rmtree(path, *args, **kw)
write._fill = fill
shutil.rmtree = rmtree
try:
    write.write_files(plan_files(8), Path(sys.argv[1]))
except KeyboardInterrupt:
    print("interrupted once")
"""


@POSIX
def test_second_ctrl_c_does_not_cut_the_clean_up_short(tmp_path: Path) -> None:
    script = SECOND_INTERRUPT.format(tests=str(ROOT / "tests"))
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "plan")],
        env=ENV,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, b"interrupted once\n"), done.stderr.decode()
    assert beside(tmp_path) == [] and not (tmp_path / "plan").exists()


def test_the_next_write_removes_what_a_killed_one_left(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    write_files(plan_files(8), out)
    stem = write_module._stem(out)
    # A killed writer's temporary and .old directories, also as planc named them before the lock.
    for name in (f"{stem}.0123abcd", f"{stem}.0123abcd.old", ".plan.planc-89abcdef.old"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "plan.json").write_text("{")
    (tmp_path / f"{stem}.lock").touch()
    (tmp_path / ".planc-not-ours").mkdir()
    write_files(plan_files(8), out)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".planc-not-ours", "plan"]
    assert world(out) == 8


def test_a_marker_of_an_older_planc_asks_for_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    out.mkdir()
    (out / MANIFEST).write_text("This directory was written by planc compile; planc replaces it.\n")
    (out / "plan.json").write_text("{}")
    with pytest.raises(OutputError, match=r"an older planc wrote it .*: \.planc-plan, plan\.json"):
        write_files(plan_files(8), out)
    write_files(plan_files(8), out, overwrite=True)
    assert world(out) == 8


@pytest.mark.parametrize("length", [240, 255])
def test_a_long_target_name(tmp_path: Path, length: int) -> None:
    out = tmp_path / ("p" * length)
    for _ in range(2):  # the second write moves the first aside
        write_files(plan_files(8), out)
    assert world(out) == 8 and beside(tmp_path) == []


def test_a_mount_point_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "mnt"
    out.mkdir()
    monkeypatch.setattr(os.path, "ismount", lambda path: Path(path) == out)
    with pytest.raises(OutputError, match=r"mnt is a mount point, .* inside it \(-o .*mnt/plan\)"):
        write_files(plan_files(8), out)
    assert list(out.iterdir()) == []


# ----------------------------------------------------------------------------- overwrite rules


def compile_in(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["compile", *args])
    return result.exit_code, result.output


def test_a_copied_plan_json_does_not_make_a_folder_planc_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reproducer: `cp plan/plan.json repo/ && planc compile s.yaml -o repo`."""
    monkeypatch.chdir(tmp_path)
    assert compile_in(str(SMALL), "-o", "plan")[0] == 0
    Path("repo").mkdir()
    Path("repo/train.py").write_text("precious\n")
    Path("repo/plan.json").write_bytes(Path("plan/plan.json").read_bytes())
    code, output = compile_in(str(SMALL), "-o", "repo")
    assert code == 2 and "plan.json, train.py" in output and "--overwrite" in output
    code, output = compile_in(str(SMALL), "-o", "repo", "--force")
    assert code == 2 and Path("repo/train.py").read_text() == "precious\n"
    assert compile_in(str(SMALL), "-o", "repo", "--overwrite")[0] == 0
    assert not Path("repo/train.py").exists() and world(Path("repo")) == 8


def test_a_file_added_to_a_plan_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert compile_in(str(SMALL), "-o", "plan")[0] == 0
    Path("plan/torchrun/notes.txt").write_text("mine\n")
    Path("plan/logs").mkdir()
    code, output = compile_in(str(SMALL), "-o", "plan")
    assert code == 2 and "logs/, torchrun/notes.txt" in output
    assert compile_in(str(LARGE), "-o", "plan")[0] == 2
    Path("plan/torchrun/notes.txt").unlink()
    Path("plan/logs").rmdir()
    assert compile_in(str(LARGE), "-o", "plan")[0] == 0
    assert world(Path("plan")) == 64


@pytest.mark.parametrize(
    ("out", "what"),
    [
        (".", "is the current directory"),
        ("..", "contains the current directory"),
        ("specs", "contains the spec"),
        ("home", "is the home directory"),
    ],
)
def test_never_replaced_whatever_the_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, out: str, what: str
) -> None:
    """The reproducer `compile ok.yaml -o . --force` deleted the spec itself."""
    work = tmp_path / "work"
    (work / "specs").mkdir(parents=True)
    (work / "home").mkdir()
    spec = work / "specs" / "ok.yaml"
    spec.write_bytes(SMALL.read_bytes())
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(work / "home"))
    for flags in ([], ["--force"], ["--overwrite"], ["--force", "--overwrite"]):
        code, output = compile_in("specs/ok.yaml", "-o", out, *flags)
        assert code == 2 and f"{out} {what}" in output, output
    assert spec.read_bytes() == SMALL.read_bytes() and (work / "home").is_dir()


def test_empty_or_absent_folders_are_fine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("empty").mkdir()
    assert compile_in(str(SMALL), "-o", "empty")[0] == 0
    assert compile_in(str(SMALL), "-o", "new/plan")[0] == 0
    assert world(Path("empty")) == world(Path("new/plan")) == 8
