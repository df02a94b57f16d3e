"""Configuration: found upwards, nearest wins, the spec's own rules win, bad files are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from planc.check import check_paths
from planc.rules.config import (
    Config,
    ConfigError,
    Resolver,
    find_config,
    load_config,
    parse_table,
)
from planc.spec.load import fill_rule_defaults

ROOT = Path(__file__).resolve().parent.parent
BUBBLE = ROOT / "examples" / "invalid" / "PLC006" / "llama3-70b-8x8.yaml"  # bubble 27.3 %


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository root: the configuration search stops here."""
    (tmp_path / ".git").mkdir()
    return tmp_path


def _spec(folder: Path, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "spec.yaml"
    body = BUBBLE.read_text(encoding="utf-8").split("\nrules:\n")[0] + "\n"  # planc's defaults
    path.write_text(body + extra, encoding="utf-8")
    return path


def _rules(path: Path, configs: Resolver | None = None) -> dict[str, str]:
    (result,) = check_paths([str(path)], configs or Resolver())
    return {f.rule: f.severity.value for f in result.findings}


def test_no_configuration_means_planc_defaults(repo: Path) -> None:
    assert find_config(str(repo / "a")) is None
    assert _rules(_spec(repo / "a")) == {"PLC006": "error"}


def test_pyproject_table_sets_defaults(repo: Path) -> None:
    (repo / "pyproject.toml").write_text("[tool.planc]\nmax_bubble = 0.3\n")
    assert _rules(_spec(repo / "deep" / "er")) == {}


def test_pyproject_without_planc_table_is_passed_over(repo: Path) -> None:
    (repo / "pyproject.toml").write_text('[tool.planc]\nseverity = {PLC006 = "warning"}\n')
    (repo / "jobs").mkdir()
    (repo / "jobs" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert find_config(str(repo / "jobs")) == str(repo / "pyproject.toml")
    assert _rules(_spec(repo / "jobs")) == {"PLC006": "warning"}


def test_a_comment_about_tool_planc_is_not_a_table(repo: Path) -> None:
    (repo / "pyproject.toml").write_text("[project]\n# planc reads [tool.planc]\nname = 'x'\n")
    assert find_config(str(repo / "a")) is None


def test_nearest_wins_and_dot_planc_wins_in_one_directory(repo: Path) -> None:
    (repo / ".planc.toml").write_text('severity = {PLC006 = "info"}\n')
    (repo / "pyproject.toml").write_text("[tool.planc]\nmax_bubble = 0.3\n")
    near = repo / "team"
    near.mkdir()
    (near / ".planc.toml").write_text('severity = {PLC006 = "warning"}\n')
    assert _rules(_spec(repo / "other")) == {"PLC006": "info"}
    assert _rules(_spec(near)) == {"PLC006": "warning"}


def test_search_stops_at_the_repository_root(tmp_path: Path) -> None:
    (tmp_path / ".planc.toml").write_text("max_bubble = 0.3\n")
    inner = tmp_path / "checkout"
    (inner / ".git").mkdir(parents=True)
    assert find_config(str(inner / "specs")) is None
    assert find_config(str(tmp_path / "elsewhere")) == str(tmp_path / ".planc.toml")


def test_the_spec_own_rules_section_wins(repo: Path) -> None:
    (repo / ".planc.toml").write_text(
        'max_bubble = 0.3\nseverity = {PLC006 = "warning", PLC011 = "info"}\n'
    )
    assert _rules(_spec(repo / "a", "rules: {max_bubble: 0.05}\n")) == {"PLC006": "warning"}
    spec = _spec(repo / "b", "rules: {max_bubble: 0.05, severity: {PLC006: error}}\n")
    assert _rules(spec) == {"PLC006": "error"}


def test_fill_rule_defaults_per_key() -> None:
    data = {"rules": {"max_bubble": 0.2, "severity": {"PLC006": "error"}}}
    defaults = {
        "max_bubble": 0.5,
        "memory_headroom": 0.2,
        "severity": {"PLC006": "info", "PLC007": "warning"},
    }
    assert fill_rule_defaults(data, defaults) == {
        "rules": {
            "max_bubble": 0.2,
            "memory_headroom": 0.2,
            "severity": {"PLC006": "error", "PLC007": "warning"},
        }
    }
    assert fill_rule_defaults({}, {"max_bubble": 0.5}) == {"rules": {"max_bubble": 0.5}}
    assert fill_rule_defaults({"rules": 3}, {"max_bubble": 0.5}) == {"rules": 3}  # reported later
    ignored = {"rules": {"ignore": ["PLC011"]}}
    assert fill_rule_defaults(ignored, {"ignore": ["PLC006", "PLC011"]}) == {
        "rules": {"ignore": ["PLC011", "PLC006"]}
    }


def test_select_and_ignore_stop_rules_from_running(repo: Path) -> None:
    spec = _spec(repo / "a")
    assert _rules(spec, Resolver(ignore=["PLC006"])) == {}
    assert _rules(spec, Resolver(select=["PLC001,PLC002"])) == {}
    assert _rules(spec, Resolver(select=["PLC00"])) == {"PLC006": "error"}
    (repo / ".planc.toml").write_text('ignore = ["PLC006"]\n')
    assert _rules(spec) == {}
    # --select replaces the configuration's select; --ignore adds to its ignore.
    (repo / ".planc.toml").write_text('select = ["PLC001"]\n')
    assert _rules(spec) == {}
    assert _rules(spec, Resolver(select=["PLC006"])) == {"PLC006": "error"}


def test_input_rules_always_run_and_cannot_be_ignored(repo: Path) -> None:
    broken = repo / "broken.yaml"
    broken.write_text("version: 1\nversion: 1\n")
    (result,) = check_paths([str(broken)], Resolver(select=["PLC006"]))
    assert "PLC104" in {f.rule for f in result.findings}
    for value in ("PLC104", "PLC1", "plc10"):
        with pytest.raises(ConfigError, match="cannot be ignored"):
            Resolver(ignore=[value])
    assert Config(select=("PLC006",)).runs("PLC108")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_bubble = 1.5\n", "below 1"),
        ("max_bubble = 'a'\n", "must be a number"),
        ("selct = []\n", "unknown key 'selct'; did you mean 'select'\\?"),
        ("ignor = ['PLC006']\n", "unknown key 'ignor'; did you mean 'ignore'\\?"),
        ("select = 'PLC006'\n", "list of strings"),
        ("select = ['E501']\n", "not a rule id"),
        ("select = ['PLC9']\n", "no rule starts with"),
        ("severity = {PLC006 = 'fatal'}\n", "one of error, warning, info"),
        ("ignore = ['PLC100']\n", "cannot be ignored"),
        ("severity = {PLC108 = 'warning'}\n", "keep their severity"),
        ("severity = {PLC00 = 'warning'}\n", "whole rule ids"),
        ("max_bubble = \n", "not valid TOML"),
    ],
)
def test_bad_configuration_is_refused_with_its_place(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / ".planc.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(str(path))
    assert str(path) in str(caught.value)


def test_a_key_like_none_gets_no_guess(tmp_path: Path) -> None:
    path = tmp_path / ".planc.toml"
    path.write_text("zzzz = 1\n")
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    assert "did you mean" not in str(caught.value) and "planc takes select" in str(caught.value)


@pytest.mark.parametrize("header", ["[tool.planc\n", "[ tool . planc \nmax_bubble = 0.3\n"])
def test_an_unclosed_tool_planc_header_is_reported_not_passed_over(repo: Path, header: str) -> None:
    """A `[tool.planc` header without its `]` is a planc table the user meant: the TOML error
    and its line are reported, where it was once taken for a pyproject.toml without one."""
    (repo / "pyproject.toml").write_text("[project]\nname = 'x'\n" + header)
    found = find_config(str(repo / "a"))
    assert found == str(repo / "pyproject.toml")
    with pytest.raises(ConfigError, match=r"not valid TOML.*line 3"):
        load_config(found)
    # Another tool whose name starts with planc is not planc's table.
    (repo / "pyproject.toml").write_text("[tool.planck]\nx = 1\n[tool.planc-lint]\ny = 2\n")
    assert find_config(str(repo / "a")) is None


def test_tool_planc_table_is_named_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text("[tool.planc]\nmemory_headroom = -0.1\n")
    with pytest.raises(ConfigError, match=r"\[tool.planc\]: memory_headroom"):
        load_config(str(path))


def test_parse_table_upper_cases_severity_ids() -> None:
    config = parse_table({"severity": {"plc006": "warning"}}, "here")
    assert dict(config.severity) == {"PLC006": "warning"}


def _imports_after_check(spec: Path, cwd: Path) -> set[str]:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from planc.cli.main import main\n"
        f"try:\n    main(['check', '-q', {str(spec)!r}])\nexcept SystemExit:\n    pass\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True)
    return set(out.stdout.split())


def test_no_configuration_costs_no_toml_parser(repo: Path) -> None:
    spec = _spec(repo / "a")
    assert not {"tomllib", "tomli"} & _imports_after_check(spec, repo)
    (repo / ".planc.toml").write_text("max_bubble = 0.3\n")
    assert "tomllib" in _imports_after_check(spec, repo)
