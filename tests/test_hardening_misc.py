"""Issue 30, item 12: a report of a spec whose file name is not UTF-8; a hostfile's slots=."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "llama3-8b-1node.yaml"


def _non_utf8(tmp_path: Path, name: bytes) -> str:
    """A path under tmp_path whose file name is the bytes `name` (not UTF-8)."""
    path = os.path.join(os.fsencode(tmp_path), name)
    try:
        with open(path, "wb"):
            pass
    except OSError:  # a file system that keeps names in Unicode
        pytest.skip("the file system refuses a file name that is not UTF-8")
    os.remove(path)
    return os.fsdecode(path)


def _planc(*args: str) -> subprocess.CompletedProcess[bytes]:
    """planc as a user runs it (its standard streams escape what they cannot encode)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [os.fsencode(sys.executable), b"-m", b"planc", *map(os.fsencode, args)]
    return subprocess.run(command, capture_output=True, env=env, check=False)


def test_report_accepts_a_spec_whose_name_is_not_utf8(tmp_path: Path) -> None:
    spec = _non_utf8(tmp_path, b"sp\xffec.yaml")
    shutil.copyfile(EXAMPLE, spec)
    assert _planc("check", spec).returncode == 0  # as check accepts it
    page = tmp_path / "page.html"
    result = _planc("report", spec, "-o", str(page))
    assert result.returncode == 0, result.stderr
    assert b"Traceback" not in result.stderr
    html = page.read_bytes().decode("utf-8")  # the page stays UTF-8
    assert "sp\\xffec.yaml" in html  # the byte shown as an escape
    out = _non_utf8(tmp_path, b"out\xfe.html")
    result = _planc("report", spec, "-o", out)
    assert result.returncode == 0, result.stderr
    assert os.path.getsize(os.fsencode(out)) == page.stat().st_size
