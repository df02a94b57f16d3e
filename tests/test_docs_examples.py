"""The Python examples in docs/*.md run as written (on a shipped example's spec), so that an API
change cannot leave a documented call broken."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from planc.spec.load import load_text

from conftest import EXAMPLES, ROOT

BLOCK = re.compile(r"```python\n(.*?)```", re.S)
EXAMPLES_IN_DOCS = [
    pytest.param(code, id=f"{doc.name}#{i}")
    for doc in sorted((ROOT / "docs").glob("*.md"))
    for i, code in enumerate(BLOCK.findall(doc.read_text(encoding="utf-8")))
]


@pytest.mark.parametrize("code", EXAMPLES_IN_DOCS)
def test_a_documented_example_runs(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The names the docs take as given: `text`, a spec's YAML, and `job`, its resolved job.
    text = (EXAMPLES / "llama3-8b-1node.yaml").read_text(encoding="utf-8")
    job = load_text("spec.yaml", text).job
    assert job is not None
    monkeypatch.chdir(tmp_path)  # an example that writes ("out/") writes here
    exec(compile(code, "<docs>", "exec"), {"text": text, "job": job})


def test_the_docs_have_examples() -> None:
    assert len(EXAMPLES_IN_DOCS) >= 4
