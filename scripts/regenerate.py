"""Regenerate what planc derives from its data files and its rule registry: run after editing a
preset, a spec model or a rule (its options, title or docstring).

    python scripts/regenerate.py          # rewrite the files
    python scripts/regenerate.py --check  # exit 1 and name the stale files (what CI's tests check)

Writes `planc/presets/names.py` (the preset names, from the keys of `gpus.json`,
`models.json` and `fabrics.json`) and `planc/spec/rule_options.py` (the options the rules declare, from the rule
registry), then `schemas/spec.schema.json` and its packaged copy `planc/spec/schema.json` (from
the pydantic models in `planc/spec/models.py`, which offer those names as enums and the rule
options as fields of `rules:` and `search:`), the packaged copy `planc/verify/plan.schema.json`
of the hand-written `schemas/plan.schema.json`, then `docs/rules.md` and the rule table of
`README.md` (from the registry).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRESETS = ROOT / "planc" / "presets"
NAMES = PRESETS / "names.py"
RULE_OPTIONS = ROOT / "planc" / "spec" / "rule_options.py"
SCHEMAS = (ROOT / "schemas" / "spec.schema.json", ROOT / "planc" / "spec" / "schema.json")
# The plan schema is written by hand; verify reads its packaged copy.
PLAN_SCHEMA = (ROOT / "schemas" / "plan.schema.json", ROOT / "planc" / "verify" / "plan.schema.json")
RULES_DOC = ROOT / "docs" / "rules.md"
README = ROOT / "README.md"


def preset_names(file: str) -> tuple[str, ...]:
    data = json.loads((PRESETS / file).read_text(encoding="utf-8"))
    return tuple(key for key in data if not key.startswith("_"))


def names_module() -> str:
    def block(name: str, values: tuple[str, ...]) -> str:
        return f"{name}: tuple[str, ...] = (\n" + "".join(f'    "{v}",\n' for v in values) + ")\n"

    return (
        '"""Preset names, generated from gpus.json, models.json and fabrics.json by\n'
        'scripts/regenerate.py: do not edit; add a preset to the JSON file and run the script."""\n\n'
        + block("GPU_NAMES", preset_names("gpus.json"))
        + "\n"
        + block("MODEL_NAMES", preset_names("models.json"))
        + "\n"
        + block("FABRIC_NAMES", preset_names("fabrics.json"))
    )


def _fresh(code: str) -> str:
    # A fresh interpreter, so what it builds reads the modules just written.
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout


def schema_text() -> str:
    return _fresh(
        "import json; from planc.spec.models import json_schema; "
        "print(json.dumps(json_schema(), indent=2, ensure_ascii=False))"
    )


def from_registry(function: str) -> str:
    """The output of one of planc.cli.rules_doc's generators."""
    return _fresh(f"from planc.cli import rules_doc; print(rules_doc.{function}(), end='')")


def readme_text() -> str:
    """README.md with its rule table regenerated between the markers."""
    return _fresh(
        "from pathlib import Path; from planc.cli.rules_doc import readme_table, "
        "with_readme_table; text = Path('README.md').read_text(encoding='utf-8'); "
        "print(with_readme_table(text, readme_table()), end='')"
    )


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale: list[Path] = []

    def update(path: Path, text: str) -> None:
        if path.read_text(encoding="utf-8") != text:
            stale.append(path)
            if not check:
                path.write_text(text, encoding="utf-8")

    update(NAMES, names_module())
    update(RULE_OPTIONS, from_registry("options_module"))
    schema = schema_text()
    for path in SCHEMAS:
        update(path, schema)
    update(PLAN_SCHEMA[1], PLAN_SCHEMA[0].read_text(encoding="utf-8"))
    update(RULES_DOC, from_registry("markdown"))
    update(README, readme_text())
    for path in stale:
        print(f"{'stale' if check else 'rewrote'}: {path.relative_to(ROOT)}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
