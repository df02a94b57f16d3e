"""The published spec schema is generated from the models and never stale."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from planc.presets import GPU_NAMES, MODEL_NAMES, all_gpu_presets, all_model_presets
from planc.spec.models import json_schema

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ROOT / "schemas" / "spec.schema.json"


def test_published_schema_is_current() -> None:
    current = json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"
    assert PUBLISHED.read_text(encoding="utf-8") == current, (
        "schemas/spec.schema.json is stale: run `python scripts/regenerate.py`"
    )


def test_package_ships_the_published_schema() -> None:
    # The fast path of `planc check` validates against the copy inside the package.
    packaged = ROOT / "planc" / "spec" / "schema.json"
    assert packaged.read_bytes() == PUBLISHED.read_bytes(), (
        "planc/spec/schema.json differs: run `python scripts/regenerate.py`"
    )


def test_generated_files_are_current() -> None:
    # A new preset is one edit of gpus.json or models.json, then this one command.
    done = subprocess.run(
        [sys.executable, "scripts/regenerate.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, f"{done.stdout}run `python scripts/regenerate.py`"


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_examples_validate_against_published_schema(path: Path) -> None:
    schema = json.loads(PUBLISHED.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(yaml.safe_load(path.read_text(encoding="utf-8")), schema)


def test_every_field_is_described() -> None:
    schema = json_schema()
    for name, definition in schema["$defs"].items():
        for field, prop in definition["properties"].items():
            assert prop.get("description"), f"{name}.{field} has no description"


def test_preset_names_match_data() -> None:
    assert tuple(all_gpu_presets()) == GPU_NAMES
    assert tuple(all_model_presets()) == MODEL_NAMES
    for preset in [*all_gpu_presets().values(), *all_model_presets().values()]:
        assert preset["source"]
