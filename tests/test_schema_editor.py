"""The published schema as an editor uses it: the model requirement (PLC109) as an anyOf, human
titles, titled union branches, a stable $id; the fast path agrees and PLC109 keeps its place."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from planc.spec.fastcheck import fast_validate
from planc.spec.load import load_text
from planc.spec.models import SCHEMA_ID, Spec, json_schema

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = json.loads((ROOT / "schemas" / "spec.schema.json").read_text(encoding="utf-8"))
SPEC = (ROOT / "examples" / "llama3-8b-1node.yaml").read_text(encoding="utf-8")
DIMENSIONS = {"layers": 32, "hidden": 4096, "heads": 32, "vocab": 128256}


def _with_model(model: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(SPEC)
    data["model"] = model
    return data


@pytest.mark.parametrize(
    ("model", "valid"),
    [
        ({"preset": "llama3-8b"}, True),
        ({"preset": "llama3-8b", "layers": 16}, True),
        (DIMENSIONS, True),
        ({**DIMENSIONS, "preset": None}, True),
        ({}, False),
        ({"layers": 32, "hidden": 4096, "heads": 32}, False),
        ({"preset": None, "layers": 32}, False),
        ({**DIMENSIONS, "vocab": None}, False),
    ],
    ids=repr,
)
def test_model_needs_a_preset_or_its_dimensions(model: dict[str, Any], valid: bool) -> None:
    data = _with_model(model)
    errors = list(jsonschema.Draft202012Validator(PUBLISHED).iter_errors(data))
    assert (not errors) is valid, errors
    fast = fast_validate(data)
    assert (fast is not None) is valid
    if fast is not None:
        assert fast == Spec.model_validate(data).model_dump()


def test_planc_still_reports_plc109_on_the_model() -> None:
    text = SPEC.replace("  preset: llama3-8b\n", "  layers: 32\n  hidden: 4096\n")
    findings = load_text("spec.yaml", text).findings
    assert {f.rule for f in findings} == {"PLC109"}
    model_line = text.splitlines().index("model:") + 1
    assert all(model_line <= f.line <= model_line + 2 for f in findings), findings


def _nodes(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [("Spec", schema), *schema["$defs"].items()]


def test_titles_are_for_people() -> None:
    schema = json_schema()
    titles = {name: node["title"] for name, node in _nodes(schema)}
    assert titles["ModelSpec"] == "Model" and titles["GpuSpec"] == "Custom GPU"
    assert not any(t.endswith("Spec") for t in titles.values())
    hardware = schema["$defs"]["HardwareSpec"]["properties"]
    assert hardware["gpus_per_node"]["title"] == "GPUs per node"
    assert schema["$defs"]["LinkSpec"]["properties"]["bandwidth_gbs"]["title"] == "Bandwidth GB/s"
    for name, node in _nodes(schema):
        for field, prop in node["properties"].items():
            assert prop.get("title"), f"{name}.{field}"
            branch_titles = [b.get("title") for b in prop.get("anyOf", [])]
            assert all(branch_titles) and len(set(branch_titles)) == len(branch_titles), field


def test_schema_id_is_the_published_url() -> None:
    assert json_schema()["$id"] == SCHEMA_ID == PUBLISHED["$id"]
    assert SCHEMA_ID.endswith("/schemas/spec.schema.json")
    assert SCHEMA_ID in (ROOT / "README.md").read_text(encoding="utf-8")
