"""One version everywhere a user meets it (issue 31): `planc --version`, pyproject.toml, the
newest release in CHANGELOG.md, and every tag the README and the pre-commit hooks pin
(`vX.Y.Z` in install URLs, `rev:` and schema URLs), so the recipes name the tag a release cuts."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from click.testing import CliRunner

from planc.cli.main import main

ROOT = Path(__file__).resolve().parent.parent


def version() -> str:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    value: str = data["project"]["version"]
    return value


def test_planc_version_prints_the_package_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"planc, version {version()}\n"


def test_the_changelog_names_this_version_and_how_to_cut_one() -> None:
    text = (ROOT / "CHANGELOG.md").read_text("utf-8")
    releases = re.findall(r"^## (\d+\.\d+\.\d+)\s*$", text, re.MULTILINE)
    assert releases and releases[0] == version()
    assert "## Cutting a release" in text and "git tag -a vX.Y.Z" in text


def test_every_pinned_tag_is_this_version() -> None:
    pinned = []
    for name in ("README.md", ".pre-commit-hooks.yaml", "CHANGELOG.md"):
        text = (ROOT / name).read_text("utf-8")
        pinned += re.findall(r"(?:rev: |@|planc/)v(\d+\.\d+\.\d+)", text)
    assert pinned and set(pinned) == {version()}
    readme = (ROOT / "README.md").read_text("utf-8")
    assert "pip install planc\n" not in readme  # planc is not on PyPI
