"""SARIF output is valid against the official SARIF 2.1.0 schema and describes every rule fully;
rule titles are whole sentences; docs/rules.md (the helpUri target) is generated and current."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from planc.cli.main import main
from planc.cli.reporters import rule_name, rule_url
from planc.cli.rules_doc import markdown
from planc.rules import REGISTRY

ROOT = Path(__file__).resolve().parent.parent
# The official schema, vendored unchanged from oasis-tcs/sarif-spec (see its .LICENSE.md).
SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text("utf-8"))
BAD = ROOT / "examples" / "invalid" / "PLC006" / "llama3-70b-8x8.yaml"
GOOD = ROOT / "examples" / "llama3-8b-1node.yaml"
DOCS = ROOT / "docs" / "rules.md"


def sarif(*args: str, stdin: str | None = None) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(
        main, ["check", "--format", "sarif", *args], input=stdin, env={"GITHUB_ACTIONS": ""}
    )
    return result.exit_code, json.loads(result.stdout)


def validate(log: dict[str, Any]) -> None:
    jsonschema.Draft4Validator.check_schema(SCHEMA)
    jsonschema.Draft4Validator(SCHEMA).validate(log)


def test_findings_from_many_files_validate(tmp_path: Path) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"version: 1\x00")
    hostile = sorted((ROOT / "tests" / "hostile").glob("*.yaml"))[:8]
    code, log = sarif(
        str(BAD), str(GOOD), str(binary), str(tmp_path / "gone.yaml"), *map(str, hostile)
    )
    assert code == 2
    validate(log)
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == sorted({r["ruleId"] for r in run["results"]})
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
    assert run["columnKind"] == "unicodeCodePoints"


def test_a_clean_run_validates() -> None:
    code, log = sarif(str(GOOD))
    assert code == 0
    validate(log)
    assert log["runs"][0]["results"] == [] and log["runs"][0]["tool"]["driver"]["rules"] == []


def test_stdin_is_named_like_everywhere_else() -> None:
    code, log = sarif("-", "--stdin-filename", "clusters/a b.yaml", stdin=BAD.read_text())
    assert code == 1
    validate(log)
    location = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "clusters/a%20b.yaml"


def test_the_vendored_schema_catches_what_github_rejects() -> None:
    # The test can fail: a result without a message is invalid SARIF.
    _, log = sarif(str(BAD))
    del log["runs"][0]["results"][0]["message"]
    with pytest.raises(jsonschema.ValidationError):
        validate(log)


@pytest.mark.parametrize("rule", REGISTRY.values(), ids=lambda r: r.id)
def test_every_rule_is_described_fully(rule: Any) -> None:
    name = rule_name(rule)
    assert re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", name) and name != rule.id  # SARIF1001
    # The title is the docstring's whole first paragraph: one line, one sentence.
    first_paragraph = rule.doc.split("\n\n")[0]
    assert first_paragraph == rule.title and rule.title.endswith("."), rule.title
    assert rule_url(rule.id).endswith(f"docs/rules.md#{rule.id.lower()}")
    assert f"\n## {rule.id}\n" in DOCS.read_text(encoding="utf-8")


def test_rule_names_are_unique() -> None:
    names = [rule_name(r) for r in REGISTRY.values()]
    assert len(set(names)) == len(names)


def test_sarif_rule_carries_name_descriptions_and_help_uri() -> None:
    _, log = sarif(str(BAD))
    (rule,) = log["runs"][0]["tool"]["driver"]["rules"]
    assert rule["name"] == "pipeline-bubble"
    assert rule["shortDescription"]["text"] == REGISTRY["PLC006"].title
    assert rule["fullDescription"]["text"] == REGISTRY["PLC006"].doc
    assert rule["helpUri"] == "https://github.com/planc/planc/blob/main/docs/rules.md#plc006"


def test_rules_doc_is_current() -> None:
    assert DOCS.read_text(encoding="utf-8") == markdown(), (
        "docs/rules.md is stale: run `python -m planc.cli.rules_doc > docs/rules.md`"
    )


def test_regions_span_the_token_and_paths_sit_on_srcroot(tmp_path: Path) -> None:
    """The PLC006 example's finding is at `global_batch: 16` (line 31, the value at column 17):
    the region spans the two characters of `16`, endColumn 19 (SARIF's is exclusive). The
    path, given relative to the working directory, is relative to %SRCROOT%, which
    originalUriBaseIds defines as that directory; a file outside it is an absolute file URI."""
    relative = BAD.relative_to(ROOT)
    result = CliRunner().invoke(
        main, ["check", "--format", "sarif", str(relative)], env={"GITHUB_ACTIONS": ""}
    )
    log = json.loads(result.stdout)
    validate(log)
    run = log["runs"][0]
    (found,) = run["results"]
    location = found["locations"][0]["physicalLocation"]
    assert location["region"] == {
        "startLine": 31,
        "startColumn": 17,
        "endLine": 31,
        "endColumn": 19,
    }
    assert location["artifactLocation"] == {"uri": str(relative), "uriBaseId": "%SRCROOT%"}
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == ROOT.as_uri() + "/"
    outside = tmp_path / "a b.yaml"
    outside.write_text(BAD.read_text("utf-8"), encoding="utf-8")
    _, log = sarif(str(outside))
    validate(log)
    artifact = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert artifact == {"uri": outside.as_uri()}


def test_github_annotations_span_the_token() -> None:
    result = CliRunner().invoke(
        main,
        ["check", "--format", "github", str(BAD.relative_to(ROOT))],
        env={"GITHUB_ACTIONS": ""},
    )
    (annotation,) = [line for line in result.stdout.splitlines() if line.startswith("::")]
    # GitHub's endColumn is the last column annotated: `16` covers columns 17 and 18.
    assert ",line=31,col=17,endLine=31,endColumn=18,title=PLC006::" in annotation
