"""planc's GitHub Action: action.yml is a composite action GitHub can run, and its script
(scripts/action.sh) writes SARIF and annotations, records planc's exit code in the step's
outputs and exits with it, for a spec with findings and for a clean one."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "action.sh"
GOOD = ROOT / "examples" / "llama3-8b-1node.yaml"
BAD = ROOT / "examples" / "invalid" / "PLC006" / "llama3-70b-8x8.yaml"
SARIF_SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text("utf-8"))

needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="the action runs bash")


def action() -> dict[str, Any]:
    # PyYAML reads `on`/`true` as YAML 1.1 would; action.yml has neither as a key.
    data: dict[str, Any] = yaml.safe_load((ROOT / "action.yml").read_text("utf-8"))
    return data


def test_action_yml_is_a_composite_action_whose_steps_all_name_a_shell() -> None:
    data = action()
    assert {"name", "description", "runs"} <= data.keys()
    assert data["runs"]["using"] == "composite"
    steps = data["runs"]["steps"]
    for step in steps:
        assert ("run" in step) != ("uses" in step), step
        if "run" in step:
            assert step["shell"] == "bash", step  # composite run steps must name their shell
    for name, spec in data["inputs"].items():
        assert spec["description"] and isinstance(spec.get("default", ""), str), name


def test_action_installs_its_own_checkout_and_uploads_sarif_before_failing() -> None:
    steps = action()["runs"]["steps"]
    run = "\n".join(step.get("run", "") for step in steps)
    assert '"$GITHUB_ACTION_PATH"' in run  # the planc of the ref in `uses:`
    assert "scripts/action.sh" in run
    uses = [step.get("uses", "") for step in steps]
    upload = next(
        i for i, u in enumerate(uses) if u.startswith("github/codeql-action/upload-sarif")
    )
    assert steps[upload]["if"].startswith("always()")  # runs when planc exited 1
    last = steps[-1]
    assert last["if"] == "always()" and last["run"].startswith("exit ")
    assert upload < len(steps) - 1  # the job fails only after the upload
    # Every input the steps read is declared, and every declared one is read.
    text = (ROOT / "action.yml").read_text("utf-8")
    for name in action()["inputs"]:
        assert f"inputs.{name}" in text, name


def run_action(tmp_path: Path, **inputs: str) -> tuple[int, str, dict[str, str], str]:
    """The script as the action's step runs it: planc on PATH, the runner's files in tmp_path."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    planc = bin_dir / "planc"
    planc.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m planc "$@"\n', encoding="utf-8")
    planc.chmod(planc.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "out").write_text("", "utf-8")  # each run's outputs alone
    (tmp_path / "summary").write_text("", "utf-8")
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "GITHUB_ACTIONS": "true",
        "GITHUB_OUTPUT": str(tmp_path / "out"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"),
        **{f"INPUT_{k.upper()}": v for k, v in inputs.items()},
    }
    done = subprocess.run(
        ["bash", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    lines = (tmp_path / "out").read_text("utf-8").splitlines()
    outputs = dict(line.split("=", 1) for line in lines)
    return done.returncode, done.stdout, outputs, (tmp_path / "summary").read_text("utf-8")


def specs(tmp_path: Path, *sources: Path) -> None:
    for source in sources:
        shutil.copy(source, tmp_path / source.name)


@needs_bash
def test_findings_fail_after_writing_sarif_and_annotations(tmp_path: Path) -> None:
    specs(tmp_path, GOOD, BAD)
    code, stdout, outputs, summary = run_action(tmp_path, paths=f"{GOOD.name} {BAD.name}")
    assert code == 1
    assert outputs == {"exit-code": "1", "sarif-file": "planc.sarif"}
    log = json.loads((tmp_path / "planc.sarif").read_text("utf-8"))
    assert log["version"] == "2.1.0"
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(log)
    results = log["runs"][0]["results"]
    assert [r["ruleId"] for r in results] == ["PLC006"]
    location = results[0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location == {"uri": BAD.name, "uriBaseId": "%SRCROOT%"}
    # One annotation, on the file and line SARIF names.
    line = results[0]["locations"][0]["physicalLocation"]["region"]["startLine"]
    annotations = [s for s in stdout.splitlines() if s.startswith("::")]
    assert len(annotations) == 1
    assert annotations[0].startswith(f"::error file={BAD.name},line={line},")
    assert "title=PLC006::PLC006 pipeline bubble" in annotations[0]
    assert "Failed (exit 1)" in summary and "1 failed" in summary


@needs_bash
def test_a_clean_spec_passes_with_an_empty_sarif_run(tmp_path: Path) -> None:
    specs(tmp_path, GOOD)
    code, stdout, outputs, summary = run_action(tmp_path)  # paths default to "."
    assert code == 0
    assert outputs == {"exit-code": "0", "sarif-file": "planc.sarif"}
    log = json.loads((tmp_path / "planc.sarif").read_text("utf-8"))
    assert log["version"] == "2.1.0" and log["runs"][0]["results"] == []
    assert not [s for s in stdout.splitlines() if s.startswith("::")]
    assert "Passed (exit 0): 1 file checked" in summary


@needs_bash
def test_fail_on_never_passes_findings_and_fail_on_warning_fails_warnings(tmp_path: Path) -> None:
    specs(tmp_path, BAD)
    code, _, outputs, _ = run_action(tmp_path, paths=BAD.name, fail_on="never")
    assert (code, outputs["exit-code"]) == (0, "0")
    warned = tmp_path / "warned.yaml"
    # ZeRO-3 with pipeline parallelism is PLC011, a warning.
    text = BAD.read_text("utf-8")
    assert text.count("zero_stage: 1") == 1
    warned.write_text(text.replace("zero_stage: 1", "zero_stage: 3"), "utf-8")
    code, _, _, _ = run_action(tmp_path, paths=warned.name, args="--select PLC011")
    assert code == 0
    code, stdout, _, _ = run_action(
        tmp_path, paths=warned.name, args="--select PLC011", fail_on="warning"
    )
    assert code == 1 and "::warning file=warned.yaml" in stdout


@needs_bash
def test_unusable_input_exits_2_and_a_bad_input_of_the_action_is_refused(tmp_path: Path) -> None:
    code, _, outputs, summary = run_action(tmp_path, paths="missing.yaml")
    assert (code, outputs["exit-code"]) == (2, "2")
    assert "exit 2" in summary
    code, stdout, outputs, _ = run_action(tmp_path, format="sarif")
    assert (code, outputs) == (2, {"exit-code": "2"})
    assert stdout.startswith("::error title=planc action::format must be github or text")
