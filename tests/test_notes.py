"""hf_config's info notes are rules of their own (PLC066 attention planc does not model, PLC067 a
key not read, PLC068 a value approximated) and can be silenced like any other rule: the spec's
`rules: {ignore: [...]}` and `severity`, `[tool.planc] ignore`, `--ignore` and `--select`; the
input rule PLC110 (a config planc cannot read) still cannot be."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from planc.cli.main import main
from planc.rules import REGISTRY, RuleKind

ROOT = Path(__file__).resolve().parent.parent
HF = ROOT / "tests" / "data" / "hf"


def project(tmp_path: Path, rules: dict[str, Any] | None = None, *, extra: str = "") -> Path:
    """A spec reading Qwen3 8B's published config.json with its sliding window turned on
    (use_sliding_window: the layers from max_window_layers on, a pattern planc does not read:
    PLC066), with a RoPE scaling kind planc does not read added (PLC067)."""
    config = json.loads((HF / "qwen3-8b" / "config.json").read_text("utf-8"))
    config["use_sliding_window"] = True
    config["sliding_window"] = 4096
    config["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}
    (tmp_path / "config.json").write_text(json.dumps(config), "utf-8")
    spec: dict[str, Any] = {
        "version": 1,
        "name": "notes",
        "model": {"hf_config": "config.json"},
        "hardware": {"gpu": "h100-sxm", "nodes": 1},
        "parallelism": {"tensor": 4},
        "training": {"seq_len": 1024, "global_batch": 16},
    }
    if rules is not None:
        spec["rules"] = rules
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False), "utf-8")
    (tmp_path / ".git").mkdir(exist_ok=True)  # the configuration search stops here
    if extra:
        (tmp_path / ".planc.toml").write_text(extra, "utf-8")
    return tmp_path / "spec.yaml"


def notes(spec: Path, *args: str) -> tuple[int, list[tuple[str, str]]]:
    result = CliRunner().invoke(main, ["check", "--format", "json", *args, str(spec)])
    findings = json.loads(result.stdout)["files"][0]["findings"]
    return result.exit_code, [
        (f["rule"], f["severity"]) for f in findings if f["field"] == "model.hf_config"
    ]


def test_each_note_has_its_own_rule_id(tmp_path: Path) -> None:
    code, found = notes(project(tmp_path))
    assert code == 0
    assert found == [("PLC066", "info"), ("PLC067", "info")]
    for rule_id in ("PLC066", "PLC067", "PLC068"):
        assert REGISTRY[rule_id].kind is RuleKind.NOTE
        assert REGISTRY[rule_id].title.startswith("hf_config: ")


def test_the_spec_ignores_a_note_and_re_levels_another(tmp_path: Path) -> None:
    spec = project(tmp_path, {"ignore": ["PLC066"], "severity": {"PLC067": "warning"}})
    assert notes(spec) == (0, [("PLC067", "warning")])
    assert notes(spec, "--strict")[0] == 1  # a warning now, so --strict fails on it


def test_tool_planc_and_the_command_line_ignore_notes(tmp_path: Path) -> None:
    spec = project(tmp_path, extra='ignore = ["PLC067"]\n')
    assert notes(spec) == (0, [("PLC066", "info")])
    assert notes(spec, "--ignore", "PLC066") == (0, [])
    assert notes(spec, "--ignore", "PLC06") == (0, [])  # a prefix, as for any rule
    assert notes(spec, "--select", "PLC006") == (0, [])  # only PLC006 (and input rules) run


def test_the_input_rule_of_a_config_planc_cannot_read_still_cannot_be_ignored(
    tmp_path: Path,
) -> None:
    result = CliRunner().invoke(main, ["check", "--ignore", "PLC110", str(project(tmp_path))])
    assert result.exit_code == 2 and "cannot be ignored" in result.stderr


def test_the_rule_table_documents_the_notes() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    rules = (ROOT / "docs" / "rules.md").read_text("utf-8")
    for rule_id in ("PLC066", "PLC067", "PLC068"):
        assert f"| [{rule_id}](docs/rules.md#{rule_id.lower()}) | info | note |" in readme
        assert f"## {rule_id}" in rules


@pytest.mark.parametrize("name", ["llama3-8b", "llama3-70b", "gpt2-small"])
def test_published_configs_that_planc_reads_exactly_have_no_notes(
    tmp_path: Path, name: str
) -> None:
    (tmp_path / "config.json").write_bytes((HF / name / "config.json").read_bytes())
    spec = project(tmp_path)
    (tmp_path / "config.json").write_bytes((HF / name / "config.json").read_bytes())
    assert notes(spec)[1] == []
