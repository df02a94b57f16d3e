"""Pipes the user names on the command line are read (issue 31): `--hosts <(...)` and
`planc check <(cat spec.yaml)` give planc /dev/fd/N, a pipe, and a FIFO a program writes is one
too. They are read to their end through the bounded reader (at most 2 MiB, then refused), a FIFO
nothing writes to is refused at once instead of waiting, and a terminal is never read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from planc.spec.hostfile import check_hosts
from planc.spec.load import MAX_BYTES, load_path

ROOT = Path(__file__).resolve().parent.parent
GOOD = ROOT / "examples" / "llama3-8b-1node.yaml"
BAD = ROOT / "examples" / "invalid" / "PLC006" / "llama3-70b-8x8.yaml"

pytestmark = pytest.mark.skipif(
    not (os.path.isdir("/dev/fd") and hasattr(os, "mkfifo")), reason="needs /dev/fd and FIFOs"
)


def write_all(descriptor: int, data: bytes) -> None:
    """Write `data` and close: what `cat` on the other end of `<(cat FILE)` does. A reader that
    stops early (the bound) breaks the pipe, as it would break cat's."""
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
    except BrokenPipeError:
        pass


@contextmanager
def pipe_of(data: bytes) -> Iterator[int]:
    """The read end of a pipe a thread writes `data` into, in pieces, then closes."""
    read, write = os.pipe()
    writer = threading.Thread(target=write_all, args=(write, data), daemon=True)
    writer.start()
    try:
        yield read
    finally:
        os.close(read)  # a writer still blocked gets a broken pipe and ends
        writer.join()


def planc(*args: str, keep: int, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """planc in its own process holding the pipe's read end `keep`, as a shell's `<(...)` would
    hand it over (the write end is the test's, not inherited)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GITHUB_ACTIONS": ""}
    return subprocess.run(
        [sys.executable, "-m", "planc", *args],
        pass_fds=(keep,),
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,  # a hang fails the test instead of stopping the suite
        check=False,
    )


def test_hosts_from_a_pipe_are_read_to_its_end() -> None:
    names = "".join(f"gpu-{i:03d}\n" for i in range(1, 9))
    with pipe_of(names.encode()) as read:
        result, hosts = check_hosts(f"/dev/fd/{read}", 8, 8)
    assert result.findings == ()
    assert hosts == tuple(f"gpu-{i:03d}" for i in range(1, 9))


def test_compile_takes_hosts_from_process_substitution(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    with pipe_of(b"# the job's node\ngpu-a01 slots=8\n") as read:
        done = planc("compile", str(GOOD), "-o", str(out), "--hosts", f"/dev/fd/{read}", keep=read)
    assert done.returncode == 0, done.stderr
    hostfile = (out / "deepspeed" / "hostfile").read_text("utf-8").splitlines()
    assert [line for line in hostfile if not line.startswith("#")] == ["gpu-a01 slots=8"]
    assert "gpu-a01" in json.dumps(json.loads((out / "plan.json").read_text("utf-8")))


def test_hosts_findings_are_located_in_the_pipe() -> None:
    with pipe_of(b"gpu-a01\ngpu a02\n") as read:
        result, hosts = check_hosts(f"/dev/fd/{read}", 2, 8)
    assert hosts == ()
    assert [(f.line, f.column, f.rule) for f in result.findings] == [(2, 5, "PLC014")]


def test_a_spec_through_a_pipe_is_checked_as_the_file_is(tmp_path: Path) -> None:
    text = BAD.read_bytes()
    with pipe_of(text) as read:
        piped = load_path(f"/dev/fd/{read}")
    direct = load_path(str(BAD))
    assert piped.findings == direct.findings and piped.job == direct.job
    # Its configuration is the working directory's (/dev/fd holds none): an ignore there counts.
    (tmp_path / ".planc.toml").write_text('ignore = ["PLC006"]\n', "utf-8")
    with pipe_of(text) as read:
        done = planc("check", f"/dev/fd/{read}", keep=read, cwd=tmp_path)
    assert done.returncode == 0, done.stdout
    assert "1 file checked: 0 error(s)" in done.stdout
    with pipe_of(text) as read:
        done = planc("check", f"/dev/fd/{read}", keep=read)
    assert done.returncode == 1 and f"/dev/fd/{read}:31:17: error PLC006" in done.stdout


def test_a_fifo_a_thread_writes_is_read_while_it_writes(tmp_path: Path) -> None:
    """A named FIFO, more than a pipe's buffer (64 KiB) written after planc opened it: planc
    waits for the data and reads it all."""
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    padding = b"".join(b"# %06d padding the spec past a pipe buffer\n" % i for i in range(4000))
    text = padding + GOOD.read_bytes()
    assert 64 * 1024 < len(text) < MAX_BYTES
    # A reader held open by the test lets the writer open without waiting for planc; it reads
    # nothing, so every byte reaches planc, and planc meets a writer whatever runs first.
    hold = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    write = os.open(fifo, os.O_WRONLY)
    writer = threading.Thread(target=write_all, args=(write, text), daemon=True)
    try:
        writer.start()
        loaded = load_path(str(fifo))
    finally:
        writer.join()
        os.close(hold)
    assert loaded.findings == () and loaded.job is not None
    assert loaded.job == load_path(str(GOOD)).job


def test_a_pipe_past_the_bound_is_refused_after_reading_the_bound(tmp_path: Path) -> None:
    with pipe_of(b"#" * (3 * MAX_BYTES)) as read:
        loaded = load_path(f"/dev/fd/{read}")
    assert [(f.rule, f.severity.word) for f in loaded.findings] == [("PLC102", "error")]
    assert f"larger than {MAX_BYTES:,} bytes" in loaded.findings[0].message


def test_a_fifo_nothing_writes_to_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "hosts")
    result, hosts = check_hosts(str(tmp_path / "hosts"), 1, 8)  # returns: it did not wait
    assert hosts == ()
    assert [(f.rule, f.message) for f in result.findings] == [
        ("PLC100", "is a pipe (FIFO) with nothing written to it: no program writes to it")
    ]


def test_a_terminal_is_not_read() -> None:
    """A terminal (`--hosts /dev/tty`) would wait for typing: refused before reading."""
    main, child = os.openpty()
    try:
        result, hosts = check_hosts(os.ttyname(child), 1, 8)
    finally:
        os.close(main)
        os.close(child)
    assert hosts == ()
    assert "is a character device, not a regular file or a pipe" in result.findings[0].message


def test_a_character_device_for_hosts_is_read_within_the_bound() -> None:
    result, hosts = check_hosts("/dev/null", 1, 8)
    assert hosts == () and result.findings[0].message == "the file names no hosts"
    result, hosts = check_hosts("/dev/zero", 1, 8)  # endless: stops at the bound
    assert hosts == () and f"larger than {MAX_BYTES:,} bytes" in result.findings[0].message
