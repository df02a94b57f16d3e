"""planc diff OLD NEW (planc/outputs/diff.py): numbers against `planc explain --format json` of each side,
findings added and removed, refusals, git revisions and the exit codes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from planc.cli.main import main

from conftest import spec_text

PLAIN = {"NO_COLOR": "1", "GITHUB_ACTIONS": ""}


def planc(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> Result:
    here = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        return CliRunner().invoke(main, list(args), env={**PLAIN, **(env or {})})
    finally:
        os.chdir(here)


def write(folder: Path, name: str, overlay: dict[str, Any] | None = None) -> Path:
    path = folder / name
    path.write_text(spec_text(overlay), encoding="utf-8")
    return path


def diff_json(old: Path | str, new: Path | str, cwd: Path | None = None) -> tuple[int, Any]:
    result = planc("diff", str(old), str(new), "--format", "json", cwd=cwd)
    return result.exit_code, json.loads(result.output)


def explain_json(path: Path) -> Any:
    result = planc("explain", str(path), "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_numbers_are_explains_numbers(tmp_path: Path) -> None:
    old = write(tmp_path, "old.yaml")
    new = write(tmp_path, "new.yaml", {"parallelism": {"tensor": 4}})
    code, out = diff_json(old, new)
    assert code == 0
    for side, path in (("old", old), ("new", new)):
        plan, explained = out[side]["plan"], explain_json(path)
        stages = explained["memory"]["stages"]
        assert plan["memory_per_stage"] == [stage["total"] for stage in stages]
        assert plan["peak_memory_bytes"] == max(stage["total"] for stage in stages)
        assert plan["step_time_s"] == explained["step"]["step_time_s"]
        assert plan["tokens_per_s"] == explained["step"]["tokens_per_s"]
        assert plan["mfu"] == explained["step"]["mfu"]
        assert plan["bubble_fraction"] == explained["pipeline"]["bubble_fraction"]
        wires = explained["wire_bytes"]
        assert plan["nvlink_sent_bytes"] == max(w["nvlink_sent"] for w in wires)
        assert plan["network_sent_bytes"] == max(w["network_sent"] for w in wires)
    assert out["old"]["plan"]["layout"]["tensor"] == 2
    assert out["new"]["plan"]["layout"]["tensor"] == 4
    # Twice the tensor parallelism halves the weights per GPU: the peak falls.
    assert out["new"]["plan"]["peak_memory_bytes"] < out["old"]["plan"]["peak_memory_bytes"]


def test_a_new_error_exits_1_and_is_listed(tmp_path: Path) -> None:
    old = write(tmp_path, "old.yaml")
    new = write(tmp_path, "new.yaml", {"training": {"global_batch": 66}})  # 66 % (1·4) != 0
    code, out = diff_json(old, new)
    assert code == 1 and out["new_errors"] >= 1
    added = {(f["rule"], f["field"]) for f in out["findings"]["added"]}
    assert ("PLC005", "training.global_batch") in added
    assert out["findings"]["removed"] == []
    # The other way round the error is removed, and nothing new fails.
    code, back = diff_json(new, old)
    assert code == 0 and back["new_errors"] == 0
    removed = {(f["rule"], f["field"]) for f in back["findings"]["removed"]}
    assert ("PLC005", "training.global_batch") in removed


def test_an_error_old_already_had_is_not_new(tmp_path: Path) -> None:
    # Both sides fail PLC005 with different numbers: the message differs (added and removed),
    # but NEW brings no error OLD did not have.
    old = write(tmp_path, "old.yaml", {"training": {"global_batch": 66}})
    new = write(tmp_path, "new.yaml", {"training": {"global_batch": 70}})
    code, out = diff_json(old, new)
    assert code == 0 and out["new_errors"] == 0
    assert [f["rule"] for f in out["findings"]["added"]] == ["PLC005"]
    assert [f["rule"] for f in out["findings"]["removed"]] == ["PLC005"]


def test_a_spec_with_no_plan_still_diffs_its_findings(tmp_path: Path) -> None:
    old = write(tmp_path, "old.yaml")
    new = write(tmp_path, "new.yaml", {"parallelism": {"tensor": 3}})  # 3 does not divide 8
    code, out = diff_json(old, new)
    assert code == 1
    assert out["old"]["plan"] is not None and out["new"]["plan"] is None
    assert "PLC001" in {f["rule"] for f in out["findings"]["added"]}
    text = planc("diff", str(old), str(new)).output
    assert "no plan" in text and "+ error PLC001" in text


def test_a_spec_that_does_not_load_still_diffs(tmp_path: Path) -> None:
    old = write(tmp_path, "old.yaml")
    new = tmp_path / "new.yaml"
    new.write_text(old.read_text().replace("seq_len: 8192", "seq_len: [8192"), encoding="utf-8")
    code, out = diff_json(old, new)
    assert code == 1 and out["new"]["plan"] is None
    assert out["findings"]["added"][0]["rule"] == "PLC103"


def test_unusable_input_exits_2(tmp_path: Path) -> None:
    old = write(tmp_path, "old.yaml")
    result = planc("diff", str(old), str(tmp_path / "missing.yaml"))
    assert result.exit_code == 2 and "no such file" in result.output


def test_formats_are_deterministic(tmp_path: Path) -> None:
    old = write(tmp_path, "old.yaml")
    new = write(tmp_path, "new.yaml", {"parallelism": {"tensor": 4}})
    for fmt in ("text", "json", "markdown"):
        first = planc("diff", str(old), str(new), "--format", fmt).output
        assert first == planc("diff", str(old), str(new), "--format", fmt).output
    markdown = planc("diff", str(old), str(new), "--format", "markdown").output
    assert markdown.startswith(f"### planc diff: `{new}`")
    assert "| | before | after | change |" in markdown
    assert "| MFU |" in markdown and "**Findings added** (0)" in markdown
    text = planc("diff", str(old), str(new)).output
    assert "peak memory per GPU" in text and "tokens/s" in text


def test_markdown_escapes_table_cells(tmp_path: Path) -> None:
    old = write(tmp_path, "old.yaml", {"name": "a|b"})
    new = write(tmp_path, "new.yaml", {"name": "a|b", "training": {"global_batch": 66}})
    markdown = planc("diff", str(old), str(new), "--format", "markdown").output
    for line in markdown.splitlines():
        if line.startswith("| "):
            assert line.count(" | ") - line.count("\\|") == 3, line


# ----------------------------------------------------------------------------- git


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, env=env)
    write(tmp_path, "spec.yaml")
    for args in (
        ["add", "spec.yaml"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "spec"],
    ):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, env=env)
    write(tmp_path, "spec.yaml", {"parallelism": {"tensor": 4}})
    return tmp_path


def test_old_from_a_git_revision(repo: Path) -> None:
    code, out = diff_json("HEAD:spec.yaml", "spec.yaml", cwd=repo)
    assert code == 0
    assert out["old"]["source"] == "HEAD:spec.yaml"
    assert out["old"]["plan"]["layout"]["tensor"] == 2
    assert out["new"]["plan"]["layout"]["tensor"] == 4


@pytest.mark.parametrize(
    ("old", "words"),
    [
        ("nosuchrev:spec.yaml", "invalid object name 'nosuchrev'"),
        ("HEAD:missing.yaml", "does not exist in 'HEAD'"),
    ],
)
def test_a_bad_revision_exits_2(repo: Path, old: str, words: str) -> None:
    result = planc("diff", old, "spec.yaml", cwd=repo)
    assert result.exit_code == 2
    assert "cannot read" in result.output and words in result.output


def test_no_git_exits_2(repo: Path) -> None:
    result = planc("diff", "HEAD:spec.yaml", "spec.yaml", cwd=repo, env={"PATH": "/nonexistent"})
    assert result.exit_code == 2
    assert "git is not installed" in result.output


@pytest.mark.parametrize("revision", ["--output=FILE", "-p", "--no-index"])
def test_a_revision_that_is_an_option_is_refused(repo: Path, revision: str) -> None:
    # issue 30 item 10: `planc diff -- "--output=FILE:s.yaml" s.yaml` made git write FILE.
    before = sorted(p.name for p in repo.iterdir())
    result = planc("diff", "--", f"{revision}:spec.yaml", "spec.yaml", cwd=repo)
    assert result.exit_code == 2
    assert result.output.count("\n") == 1
    assert "a revision cannot start with '-'" in result.output
    assert sorted(p.name for p in repo.iterdir()) == before


def test_many_stages_show_the_first_and_last_eight(tmp_path: Path) -> None:
    old = write(tmp_path, "old.yaml")
    deep = {
        "model": {"preset": "gpt-1t"},
        "hardware": {"gpu": "a100-80gb", "nodes": 64, "hosts": []},
        "parallelism": {"tensor": 8, "pipeline": 64, "sequence_parallel": False, "zero_stage": 0},
        "training": {"seq_len": 2048, "global_batch": 512, "recompute": "full"},
    }
    new = write(tmp_path, "new.yaml", deep)
    _, out = diff_json(old, new)
    assert len(out["new"]["plan"]["memory_per_stage"]) == 64
    text = planc("diff", str(old), str(new)).output
    stage_rows = [line for line in text.splitlines() if line.startswith("  stage ")]
    assert [row.split()[1] for row in stage_rows] == [*map(str, range(8)), *map(str, range(56, 64))]
    assert "  stages 8 to 55" in text
    assert "GPU" in text and "a100-80gb, 80.00 GiB" in text
