"""The shipped examples are the golden corpus: valid ones pass, each invalid/PLCnnn/ file fails with PLCnnn."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from planc.check import check_paths
from planc.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
VALID = sorted((ROOT / "examples").glob("*.yaml"))
INVALID = sorted(p for p in (ROOT / "examples" / "invalid").glob("PLC*/*.yaml"))


def test_corpus_is_not_empty() -> None:
    assert len(VALID) >= 4
    rules = {p.parent.name for p in INVALID}
    assert {f"PLC{n:03d}" for n in range(1, 21)} <= rules
    assert {f"PLC{n:03d}" for n in range(100, 112)} <= rules


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_example_has_no_findings(path: Path) -> None:
    (result,) = check_paths([str(path)])
    assert result.findings == ()


@pytest.mark.parametrize("path", INVALID, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_invalid_example_fails_with_exactly_its_rule(path: Path) -> None:
    (result,) = check_paths([str(path)])
    assert {f.rule for f in result.findings} == {path.parent.name}
    for finding in result.findings:
        assert finding.line >= 1 and finding.column >= 1
        assert finding.message


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_cli_exit_0_on_valid(path: Path) -> None:
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code == 0, result.output
    assert "all passed" in result.output


def _expected_exit(path: Path) -> int:
    fatal = path.parent.name in ("PLC100", "PLC101")
    warning_only = path.parent.name in (
        "PLC011",
        "PLC017",
        "PLC018",
        "PLC019",
        "PLC020",
        "PLC028",
        "PLC040",
        "PLC041",
        "PLC042",
        "PLC046",
        "PLC047",
        "PLC051",
    )
    return 2 if fatal else 0 if warning_only else 1


@pytest.mark.parametrize("path", INVALID, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_cli_exit_code_on_invalid(path: Path) -> None:
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code == _expected_exit(path), result.output
    assert f"{path}:" in result.output and path.parent.name in result.output
    assert "Traceback" not in result.output
