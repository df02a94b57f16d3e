"""The hostile-input corpus (issue 7): every file ends with exit 1 or 2, a located
`path:line:col: severity PLCnnn message` line, no traceback, with bounded work and memory.

Expected outcomes live in tests/hostile/manifest.yaml (derived by hand from each file). Inputs
that cannot be committed are made here: a 50 MB file, 1,000 levels of block mappings, a
directory, a missing file, an unreadable file and an empty stdin.

The bounds below count work, not time (timings belong in benchmarks/): the YAML events planc
pulls from the parser (at most 1,000 an input: the largest corpus file gives 131, and the
1,000-level file read to its end would give over 2,000) and the traced peak memory (200 MB an
input). An alias bomb or a 10^9-rank spec that is not stopped early takes gigabytes, far past
them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from click.testing import CliRunner

from planc.cli.main import main

from conftest import EXAMPLES, ROOT

HOSTILE = Path(__file__).resolve().parent / "hostile"
MANIFEST: dict[str, dict[str, Any]] = yaml.safe_load(
    (HOSTILE / "manifest.yaml").read_text(encoding="utf-8")
)
GUARD_EVENTS = 1_000
GUARD_BYTES = 200 * 1024 * 1024
SPEC_BODY = (EXAMPLES / "llama3-8b-1node.yaml").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Run:
    exit_code: int
    output: str
    events: int
    peak_bytes: int


def run_check(*args: str, stdin: str | None = None) -> Run:
    """`planc check ARGS` in-process, with the YAML events it pulled from the parser and its
    traced peak memory as bounds on its work."""
    parse = yaml.parse
    events = 0

    def counted(*parse_args: Any, **parse_kwargs: Any) -> Any:
        nonlocal events
        for event in parse(*parse_args, **parse_kwargs):
            events += 1
            yield event

    tracemalloc.start()
    try:
        with mock.patch.object(yaml, "parse", counted):
            result = CliRunner().invoke(main, ["check", *args], input=stdin)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    unexpected = result.exception is not None and not isinstance(result.exception, SystemExit)
    assert not unexpected, repr(result.exception)
    return Run(result.exit_code, result.output, events, peak)


def assert_clean_failure(
    run: Run, path: str, exit_code: int, rule: str, at: tuple[int, int] | None
) -> None:
    assert run.exit_code == exit_code, run.output
    assert "Traceback" not in run.output
    located = rf"^{re.escape(path)}:(\d+):(\d+): (error|warning) ({rule}) \S"
    match = re.search(located, run.output, re.MULTILINE)
    assert match, run.output
    if at is not None:
        assert (int(match.group(1)), int(match.group(2))) == at, run.output
    # Bounded work: planc stops reading early instead of walking a hostile document to its end.
    assert run.events <= GUARD_EVENTS, f"guard: {run.events} YAML events"
    assert run.peak_bytes < GUARD_BYTES, f"guard: {run.peak_bytes / 2**20:.0f} MiB"


def test_manifest_lists_every_corpus_file() -> None:
    files = {p.name for p in HOSTILE.iterdir() if p.name not in ("manifest.yaml", ".gitattributes")}
    assert files == set(MANIFEST)
    assert all(
        entry["exit"] in (1, 2) and re.fullmatch(r"PLC\d{3}", entry["rule"])
        for entry in MANIFEST.values()
    )


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_hostile_file(name: str) -> None:
    entry = MANIFEST[name]
    path = str(HOSTILE / name)
    run = run_check(path)
    assert_clean_failure(run, path, entry["exit"], entry["rule"], tuple(entry["at"]))


def test_all_hostile_files_in_one_call_are_each_reported() -> None:
    # pre-commit passes many files at once: every file gets its own located finding, and the
    # fatal ones (binary, non-UTF-8) make the whole call exit 2.
    paths = [str(HOSTILE / name) for name in sorted(MANIFEST)]
    run = run_check(*paths)
    assert run.exit_code == 2
    for path, name in zip(paths, sorted(MANIFEST), strict=True):
        assert re.search(
            rf"^{re.escape(path)}:\d+:\d+: \w+ {MANIFEST[name]['rule']} ", run.output, re.MULTILINE
        ), name
    assert f"{len(paths)} files checked" in run.output
    assert run.events <= len(paths) * GUARD_EVENTS and run.peak_bytes < GUARD_BYTES


def test_crlf_and_bom_files_are_otherwise_accepted(tmp_path: Path) -> None:
    # The corpus's BOM and CRLF files fail only for the error planted in them.
    for name, data in (
        ("bom.yaml", b"\xef\xbb\xbf" + SPEC_BODY.encode()),
        ("crlf.yaml", SPEC_BODY.replace("\n", "\r\n").encode()),
    ):
        path = tmp_path / name
        path.write_bytes(data)
        assert run_check(str(path)).exit_code == 0


# --- inputs made at test time -----------------------------------------------------------------


def test_fifty_megabyte_file_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as handle:
        handle.write(SPEC_BODY.encode())
        line = b"# " + b"x" * 1022 + b"\n"
        for _ in range(50 * 1024):
            handle.write(line)
    assert path.stat().st_size > 50 * 1024 * 1024
    run = run_check(str(path))
    assert_clean_failure(run, str(path), 2, "PLC102", (1, 1))
    assert "2,097,152 bytes" in run.output


def test_thousand_levels_of_block_mappings(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(
        "".join("  " * i + "k:\n" for i in range(1000)) + "  " * 1000 + "v: 1\n", encoding="utf-8"
    )
    # Level 65 is the mapping whose key is on line 65, indented 64 × 2 = 128 spaces.
    assert_clean_failure(run_check(str(path)), str(path), 1, "PLC102", (65, 129))


def test_directory_instead_of_a_file(tmp_path: Path) -> None:
    # A plain directory is walked for specs (planc.cli.discover); one named like a spec file is not.
    path = tmp_path / "spec.yaml"
    path.mkdir()
    assert_clean_failure(run_check(str(path)), str(path), 2, "PLC100", (1, 1))


def test_missing_file(tmp_path: Path) -> None:
    path = str(tmp_path / "missing.yaml")
    assert_clean_failure(run_check(path), path, 2, "PLC100", (1, 1))


def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "unreadable.yaml"
    path.write_text(SPEC_BODY, encoding="utf-8")
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as root: a mode-000 file is still readable")
        run = run_check(str(path))
    finally:
        path.chmod(0o600)
    assert_clean_failure(run, str(path), 2, "PLC100", (1, 1))


def test_empty_stdin() -> None:
    assert_clean_failure(run_check("-", stdin=""), "-", 1, "PLC105", (1, 1))


def test_hostile_stdin_is_treated_like_a_file() -> None:
    bomb = (HOSTILE / "alias-bomb.yaml").read_text(encoding="utf-8")
    assert_clean_failure(run_check("-", stdin=bomb), "-", 1, "PLC102", (7, 4))


# --- a real process, as CI and pre-commit run it ----------------------------------------------


@pytest.mark.parametrize(
    ("name", "exit_code", "rule"),
    [
        ("alias-bomb.yaml", 1, "PLC102"),
        ("binary.yaml", 2, "PLC101"),
        ("python-object.yaml", 1, "PLC106"),
    ],
)
def test_subprocess_run(name: str, exit_code: int, rule: str) -> None:
    path = str(HOSTILE / name)
    proc = subprocess.run(
        [sys.executable, "-m", "planc", "check", path],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == exit_code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert re.search(rf"^{re.escape(path)}:\d+:\d+: error {rule} ", proc.stdout, re.MULTILINE)
