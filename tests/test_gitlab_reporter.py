"""`planc check --format gitlab`: GitLab Code Quality JSON (the `codequality` report artifact),
in the shape GitLab's documentation gives: a list of issues with description, check_name,
fingerprint, severity (info, minor, major, critical, blocker) and location {path, lines: {begin}}."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from planc.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
GOOD = ROOT / "examples" / "llama3-8b-1node.yaml"
BAD = ROOT / "examples" / "invalid" / "PLC006" / "llama3-70b-8x8.yaml"

# GitLab's documented Code Quality report format (docs.gitlab.com, "Code Quality", "Import code
# quality results from a CI/CD job"): the required keys and severities, written out here.
ISSUE = {
    "type": "object",
    "required": ["description", "check_name", "fingerprint", "severity", "location"],
    "properties": {
        "description": {"type": "string", "minLength": 1},
        "check_name": {"type": "string", "minLength": 1},
        "fingerprint": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
        "severity": {"enum": ["info", "minor", "major", "critical", "blocker"]},
        "location": {
            "type": "object",
            "required": ["path", "lines"],
            "properties": {
                "path": {"type": "string", "not": {"pattern": "^(\\./|/)"}},
                "lines": {
                    "type": "object",
                    "required": ["begin"],
                    "properties": {"begin": {"type": "integer", "minimum": 1}},
                },
            },
        },
    },
}
REPORT = {"type": "array", "items": ISSUE}


def gitlab(tmp_path: Path, *names: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, Any]:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["check", "--format", "gitlab", *names])
    return result.exit_code, json.loads(result.stdout)


def test_findings_have_the_code_quality_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "specs").mkdir()
    shutil.copy(BAD, tmp_path / "specs" / "bad.yaml")
    (tmp_path / "specs" / "binary.yaml").write_bytes(b"version: 1\nmodel: \x00\n")
    code, issues = gitlab(
        tmp_path, "./specs/bad.yaml", "specs/binary.yaml", monkeypatch=monkeypatch
    )
    assert code == 2  # the binary file is unusable input
    jsonschema.Draft7Validator(REPORT).validate(issues)
    by_rule = {issue["check_name"]: issue for issue in issues}
    assert set(by_rule) == {"PLC006", "PLC101"}
    bubble = by_rule["PLC006"]
    assert bubble["location"] == {"path": "specs/bad.yaml", "lines": {"begin": 31}}
    assert bubble["severity"] == "major"  # an error finding
    assert bubble["description"].startswith("PLC006 pipeline bubble (p − 1)/(v·m + p − 1)")
    assert by_rule["PLC101"]["severity"] == "critical"  # unusable input (exit 2)
    assert by_rule["PLC101"]["location"] == {"path": "specs/binary.yaml", "lines": {"begin": 2}}


def test_a_clean_run_is_an_empty_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(GOOD, tmp_path / "good.yaml")
    assert gitlab(tmp_path, "good.yaml", monkeypatch=monkeypatch) == (0, [])


def test_the_report_is_deterministic_and_fingerprints_do_not_follow_the_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(BAD, tmp_path / "bad.yaml")
    first = gitlab(tmp_path, "bad.yaml", monkeypatch=monkeypatch)
    assert gitlab(tmp_path, "bad.yaml", monkeypatch=monkeypatch) == first
    # Two comment lines on top move the finding, not its fingerprint: GitLab still knows it.
    (tmp_path / "bad.yaml").write_text("# a\n# b\n" + BAD.read_text("utf-8"), "utf-8")
    _, moved = gitlab(tmp_path, "bad.yaml", monkeypatch=monkeypatch)
    assert moved[0]["location"]["lines"]["begin"] == first[1][0]["location"]["lines"]["begin"] + 2
    assert moved[0]["fingerprint"] == first[1][0]["fingerprint"]


def test_fingerprints_are_unique_within_a_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same finding in two files, and two equal findings in one file, are distinct issues.
    shutil.copy(BAD, tmp_path / "a.yaml")
    shutil.copy(BAD, tmp_path / "b.yaml")
    (tmp_path / "dup.yaml").write_text("version: 1\nversion: 1\nversion: 1\n", "utf-8")
    _, issues = gitlab(tmp_path, "a.yaml", "b.yaml", "dup.yaml", monkeypatch=monkeypatch)
    prints = [issue["fingerprint"] for issue in issues]
    assert len(issues) >= 4 and len(set(prints)) == len(prints)


RECIPE = ROOT / "docs" / "ci" / "gitlab-ci.yml"


def test_the_gitlab_recipe_keeps_the_report_of_a_failing_check(tmp_path: Path) -> None:
    """The recipe's script, run as GitLab's shell runner runs it (one bash script, stopping at
    the first failing command), with planc on PATH: the job fails with planc's exit code and
    the artifact its `reports: codequality` names exists."""
    import os
    import subprocess
    import sys

    import yaml

    job = yaml.safe_load(RECIPE.read_text("utf-8"))["planc-check"]
    artifact = job["artifacts"]["reports"]["codequality"]
    assert job["artifacts"]["when"] == "always"
    if shutil.which("bash") is None:
        pytest.skip("the runner's shell is bash")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "planc").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m planc "$@"\n', "utf-8")
    (bin_dir / "planc").chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    script = "set -eo pipefail\n" + "\n".join(job["script"]) + "\n"
    for spec, expected in ((GOOD, 0), (BAD, 1)):
        work = tmp_path / spec.stem
        work.mkdir()
        shutil.copy(spec, work / "spec.yaml")
        done = subprocess.run(
            ["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == expected, done.stderr
        issues = json.loads((work / artifact).read_text("utf-8"))
        jsonschema.Draft7Validator(REPORT).validate(issues)
        assert [i["check_name"] for i in issues] == (["PLC006"] if expected else [])
        assert "checked" in done.stdout  # the text run's summary reached the log
