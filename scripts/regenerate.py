"""Regenerate what planc derives from its data files: run after editing a preset or a spec model.

    python scripts/regenerate.py          # rewrite the files
    python scripts/regenerate.py --check  # exit 1 and name the stale files (what CI's tests check)

Writes `planc/presets/names.py` (the preset names, from the keys of `gpus.json` and
`models.json`), then `schemas/spec.schema.json` and its packaged copy `planc/spec/schema.json`
(from the pydantic models in `planc/spec/models.py`, which offer those names as enums).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRESETS = ROOT / "planc" / "presets"
NAMES = PRESETS / "names.py"
SCHEMAS = (ROOT / "schemas" / "spec.schema.json", ROOT / "planc" / "spec" / "schema.json")


def preset_names(file: str) -> tuple[str, ...]:
    data = json.loads((PRESETS / file).read_text(encoding="utf-8"))
    return tuple(key for key in data if not key.startswith("_"))


def names_module() -> str:
    def block(name: str, values: tuple[str, ...]) -> str:
        return f"{name}: tuple[str, ...] = (\n" + "".join(f'    "{v}",\n' for v in values) + ")\n"

    return (
        '"""Preset names, generated from gpus.json and models.json by scripts/regenerate.py: do not\n'
        'edit; add a preset to the JSON file and run the script."""\n\n'
        + block("GPU_NAMES", preset_names("gpus.json"))
        + "\n"
        + block("MODEL_NAMES", preset_names("models.json"))
    )


def schema_text() -> str:
    # A fresh interpreter, so the schema is built from the names module just written.
    code = "import json; from planc.spec.models import json_schema; print(json.dumps(json_schema(), indent=2, ensure_ascii=False))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    names = names_module()
    if NAMES.read_text(encoding="utf-8") != names:
        stale.append(NAMES)
        if not check:
            NAMES.write_text(names, encoding="utf-8")
    schema = schema_text()
    for path in SCHEMAS:
        if path.read_text(encoding="utf-8") != schema:
            stale.append(path)
            if not check:
                path.write_text(schema, encoding="utf-8")
    for path in stale:
        print(f"{'stale' if check else 'rewrote'}: {path.relative_to(ROOT)}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
