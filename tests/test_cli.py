"""The CLI surface: help texts are snapshots, and check renders the same findings in four formats."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner
from syrupy.assertion import SnapshotAssertion

from planc.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
BAD = ROOT / "examples" / "invalid" / "PLC006" / "llama3-70b-8x8.yaml"
GOOD = ROOT / "examples" / "llama3-8b-1node.yaml"
COMMANDS = [[], ["check"], ["rules"], ["schema"], ["presets"], ["memory"], ["explain"], ["compile"], ["verify"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "planc")
def test_help_snapshot(command: list[str], snapshot: SnapshotAssertion) -> None:
    result = CliRunner().invoke(main, [*command, "--help"], prog_name="planc", terminal_width=100)
    assert result.exit_code == 0
    assert result.output == snapshot


def _run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=env)
    return result.exit_code, result.output


def test_text_format_is_one_line_per_finding() -> None:
    code, out = _run("check", str(BAD), "--format", "text")
    lines = out.splitlines()
    assert code == 1
    assert lines[0].startswith(f"{BAD}:31:17: error PLC006 ")
    assert lines[-1].startswith("1 file checked: 1 error(s)")


def test_json_format_contract() -> None:
    code, out = _run("check", str(BAD), str(GOOD), "--format", "json")
    doc = json.loads(out)
    assert code == 1
    assert doc["ok"] is False
    bad, good = doc["files"]
    assert good == {"path": str(GOOD), "ok": True, "findings": []}
    (finding,) = bad["findings"]
    assert {"rule", "severity", "message", "line", "column", "field"} <= set(finding)
    assert (finding["rule"], finding["severity"], finding["line"], finding["column"]) == (
        "PLC006",
        "error",
        31,
        17,
    )
    assert finding["field"] == "training.global_batch"


def test_github_format_is_chosen_on_actions() -> None:
    code, out = _run("check", str(BAD), env={"GITHUB_ACTIONS": "true"})
    assert code == 1
    first = out.splitlines()[0]
    assert first.startswith(
        f"::error file={BAD},line=31,col=17,endLine=31,endColumn=18,title=PLC006::PLC006 "
        "pipeline bubble"
    )
    assert "%0A" not in first


def test_sarif_format_validates_and_locates() -> None:
    code, out = _run("check", str(BAD), "--format", "sarif")
    log = json.loads(out)
    assert code == 1
    assert log["version"] == "2.1.0"
    run = log["runs"][0]
    rule = run["tool"]["driver"]["rules"][0]
    assert rule["id"] == "PLC006"
    assert {"shortDescription", "fullDescription", "help"} <= set(rule)
    (result,) = run["results"]
    region = result["locations"][0]["physicalLocation"]["region"]
    assert (result["ruleId"], result["level"], region["startLine"], region["startColumn"]) == (
        "PLC006",
        "error",
        31,
        17,
    )
    schema = json.loads((ROOT / "tests" / "data" / "sarif-2.1.0-subset.schema.json").read_text())
    jsonschema.validate(log, schema)


def test_strict_fails_on_warnings() -> None:
    warn = ROOT / "examples" / "invalid" / "PLC011" / "llama3-70b-8x8.yaml"
    assert _run("check", str(warn))[0] == 0
    assert _run("check", "--strict", str(warn))[0] == 1


def test_usage_error_exits_2() -> None:
    assert _run("check", "--format", "xml", str(GOOD))[0] == 2
    assert _run("check")[0] == 2
    assert _run("nonsense")[0] == 2


def test_compile_writes_a_complete_deterministic_plan(tmp_path: Path) -> None:
    spec = str(ROOT / "examples" / "llama3-70b-8x8.yaml")
    first, second = tmp_path / "a", tmp_path / "b"
    assert _run("compile", spec, "-o", str(first))[0] == 0
    assert _run("compile", spec, "-o", str(second))[0] == 0
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert Path("plan.json") in files and Path("slurm/job.sbatch") in files
    for name in files:
        assert (first / name).read_bytes() == (second / name).read_bytes()
    assert json.loads((first / "plan.json").read_text())["world_size"] == 64


def test_compile_writes_nothing_when_check_fails(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    code, output = _run("compile", str(BAD), "-o", str(out))
    assert code == 1 and "PLC006" in output
    assert not out.exists()


def test_compile_refuses_a_foreign_directory(tmp_path: Path) -> None:
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    code, _ = _run("compile", str(GOOD), "-o", str(foreign))
    assert code == 2
    assert (foreign / "notes.txt").read_text() == "keep me"


def test_explain_shows_a_short_step_to_three_significant_figures(tmp_path: Path) -> None:
    # a small model's sub-second step: two decimals would round it by up to 1.3 %
    spec = tmp_path / "small.yaml"
    spec.write_text(
        "version: 1\nname: small\nmodel: {preset: llama3-8b}\n"
        "hardware: {gpu: h100-sxm, nodes: 1}\nparallelism: {tensor: 1, pipeline: 1}\n"
        "training: {seq_len: 2048, micro_batch: 1, global_batch: 8}\n"
    )
    code, out = _run("explain", str(spec), "--format", "json")
    seconds = json.loads(out)["step"]["step_time_s"]
    assert code == 0 and 0.1 <= seconds < 1.0
    code, out = _run("explain", str(spec))
    shown = re.search(r"estimated step time: (\d+\.\d+) s", out)
    assert code == 0 and shown is not None
    assert shown.group(1) == f"{seconds:.3f}"


def test_explain_reports_step_time_and_traffic() -> None:
    code, out = _run("explain", str(ROOT / "examples" / "llama3-70b-8x8.yaml"))
    assert code == 0
    assert "estimated step time" in out and "MFU" in out and "network" in out
    code, out = _run("explain", str(ROOT / "examples" / "llama3-70b-8x8.yaml"), "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["step"]["step_time_s"] > 0 and doc["wire_bytes"][0]["nvlink_sent"] > 0


def test_memory_reports_even_when_it_does_not_fit() -> None:
    spec = ROOT / "examples" / "invalid" / "PLC007" / "llama3-8b-1node.yaml"
    code, out = _run("memory", str(spec), "--format", "json")
    doc = json.loads(out)
    assert code == 0
    assert doc["parameters"] == 8_030_261_248


def test_presets_give_every_gpu_memory_in_one_unit() -> None:
    """Every GPU's HBM in GiB (what memory budgets count), its GB beside it: an H200 reports
    143,771 MiB, 140.4 GiB or 150.8 GB; an H100 SXM 81,559 MiB, 79.6 GiB or 85.5 GB."""
    out = CliRunner().invoke(main, ["presets"]).output
    gpus = [line for line in out.splitlines() if "TFLOPS bf16" in line]
    assert gpus and all(re.search(r" \d+\.\d GiB +\d+\.\d GB ", line) for line in gpus)
    assert any(line.split()[:5] == ["h200", "140.4", "GiB", "150.8", "GB"] for line in gpus)
    assert any(line.split()[:5] == ["h100-sxm", "79.6", "GiB", "85.5", "GB"] for line in gpus)
