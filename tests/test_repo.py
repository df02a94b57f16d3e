"""Repository contracts: the README's Quick start and the CI script agree."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def quick_start() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_quick_start_is_two_commands() -> None:
    install_and_check, install_and_test = quick_start()
    assert install_and_check.startswith("pip install . && planc ")
    assert "pytest" in install_and_test


def test_ci_runs_the_second_command_verbatim() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert quick_start()[1] in ci


def test_quick_start_example_exists() -> None:
    command = quick_start()[0]
    example = command.rsplit(" ", 1)[-1]
    assert (ROOT / example).is_file()
