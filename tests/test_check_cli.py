"""`planc check` as CI, pre-commit and editors call it: directories, excludes, configuration,
output files, quiet, exit-zero, stdin names, colour and source snippets."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from planc.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
GOOD_TEXT = (ROOT / "examples" / "llama3-8b-1node.yaml").read_text(encoding="utf-8")
BAD = ROOT / "examples" / "invalid" / "PLC006" / "llama3-70b-8x8.yaml"
BAD_TEXT = BAD.read_text(encoding="utf-8")
K8S = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: train}\nspec: {}\n"
PLAIN = {"GITHUB_ACTIONS": "", "NO_COLOR": "", "FORCE_COLOR": ""}


def run(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["check", *args], input=stdin, env={**PLAIN, **(env or {})})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with specs under arbitrary folder names and unrelated YAML."""
    (tmp_path / ".git").mkdir()
    files = {
        "clusters/prod/llama.yaml": GOOD_TEXT,
        "jobs/bubble.yml": BAD_TEXT,
        "k8s/training-job.yaml": K8S,
        ".github/workflows/ci.yaml": "on: [push]\njobs: {}\n",
        "notes.md": "version: 1\nmodel: x\n",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


def _paths(output: str) -> list[str]:
    return sorted({m.group(1) for m in re.finditer(r"^(\S+?):\d+:\d+: ", output, re.MULTILINE)})


def test_a_directory_is_walked_for_specs_only(repo: Path) -> None:
    code, out = run(str(repo))
    assert code == 1
    assert _paths(out) == [str(repo / "jobs" / "bubble.yml")]
    assert out.splitlines()[-1].startswith("2 files checked: 1 error(s)")


def test_exclude_is_repeatable(repo: Path) -> None:
    code, out = run(str(repo), "--exclude", "jobs", "--exclude", "nothing")
    assert code == 0 and "1 file checked" in out


def test_a_named_non_spec_is_checked_unless_skipped(repo: Path) -> None:
    k8s = str(repo / "k8s" / "training-job.yaml")
    code, out = run(k8s)
    assert code == 1 and "PLC108" in out  # apiVersion is not a spec key
    code, out = run("--skip-non-specs", k8s, str(repo / "clusters" / "prod" / "llama.yaml"))
    assert code == 0 and "1 file checked" in out


def test_nothing_found_is_said_on_stderr_and_passes(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["check", str(tmp_path)], env=PLAIN)
    assert result.exit_code == 0
    assert "no planc specs found" in result.stderr
    assert "0 files checked" in result.stdout


def test_configuration_and_precedence(repo: Path) -> None:
    bubble = str(repo / "jobs" / "bubble.yml")
    (repo / "pyproject.toml").write_text('[tool.planc]\nseverity = {PLC006 = "warning"}\n')
    code, out = run(bubble)
    assert code == 0 and " warning PLC006 " in out
    # The spec's own rules section wins over the configuration.
    spec = repo / "jobs" / "own.yaml"
    spec.write_text(BAD_TEXT + "  severity: {PLC006: error}\n", encoding="utf-8")
    assert run(str(spec))[0] == 1
    # --config replaces the search; --ignore adds to it; --select replaces its select.
    other = repo / "strict.toml"
    other.write_text('select = ["PLC001"]\n')
    assert run("--config", str(other), str(spec))[0] == 0
    assert run("--config", str(other), "--select", "PLC001,PLC006", str(spec))[0] == 1
    assert run("--ignore", "PLC005", "--ignore", "PLC006", str(spec))[0] == 0


def test_exclude_from_configuration_is_relative_to_it(repo: Path) -> None:
    (repo / ".planc.toml").write_text('exclude = ["jobs"]\n')
    code, out = run(str(repo))
    assert code == 0 and "1 file checked" in out
    # pre-commit names files: the hook's --force-exclude applies the configuration there too.
    bubble = str(repo / "jobs" / "bubble.yml")
    assert run(bubble)[0] == 1
    assert run("--force-exclude", bubble)[0] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ignore", "PLC108"], "cannot be ignored"),
        (["--select", "E501"], "not a rule id"),
    ],
)
def test_bad_options_exit_2(repo: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["check", *args, str(repo)], env=PLAIN)
    assert result.exit_code == 2 and message in result.stderr and result.stdout == ""


def test_bad_configuration_exits_2_naming_the_file(repo: Path) -> None:
    (repo / ".planc.toml").write_text("max_bubble = 2\n")
    result = CliRunner().invoke(main, ["check", str(repo)], env=PLAIN)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"planc: error: {repo / '.planc.toml'}: max_bubble")
    assert "Traceback" not in result.output


def test_output_file_quiet_and_exit_zero(repo: Path, tmp_path: Path) -> None:
    bubble = str(repo / "jobs" / "bubble.yml")
    target = tmp_path / "out" / "report.json"
    target.parent.mkdir()
    code, out = run(bubble, "--format", "json", "--output-file", str(target))
    assert code == 1 and out == ""
    assert json.loads(target.read_text())["files"][0]["findings"][0]["rule"] == "PLC006"
    code, out = run(bubble, "-q")
    assert code == 1 and len(out.splitlines()) == 1 and out.startswith(f"{bubble}:31:17: error ")
    assert run(bubble, "--exit-zero")[0] == 0
    assert run(bubble, str(repo / "missing.yaml"), "--exit-zero")[0] == 2  # unusable input


def test_quiet_github_leaves_out_the_summary(repo: Path) -> None:
    _, out = run(str(repo / "jobs" / "bubble.yml"), "--format", "github", "-q")
    assert out.startswith("::error ") and len(out.splitlines()) == 1


@pytest.mark.parametrize("fmt", ["text", "json", "github", "sarif"])
def test_stdin_has_one_name_in_every_format(fmt: str) -> None:
    for name, args in (("-", []), ("clusters/a.yaml", ["--stdin-filename", "clusters/a.yaml"])):
        code, out = run("-", "--format", fmt, *args, stdin=BAD_TEXT)
        assert code == 1
        shown = {
            "text": lambda o: o.split(":", 1)[0],
            "json": lambda o: json.loads(o)["files"][0]["path"],
            "github": lambda o: o.split("file=", 1)[1].split(",", 1)[0],
            "sarif": lambda o: json.loads(o)["runs"][0]["results"][0]["locations"][0][
                "physicalLocation"
            ]["artifactLocation"]["uri"],
        }[fmt](out)
        assert shown == name


def test_stdin_configuration_is_found_from_its_name(repo: Path) -> None:
    (repo / "jobs" / ".planc.toml").write_text("max_bubble = 0.3\n")
    body = BAD_TEXT.split("\nrules:\n")[0] + "\n"
    assert run("-", stdin=body)[0] == 1
    named = str(repo / "jobs" / "piped.yaml")
    assert run("-", "--stdin-filename", named, stdin=body)[0] == 0


def test_text_shows_the_source_line_with_a_caret() -> None:
    _, out = run(str(BAD))
    lines = out.splitlines()
    assert lines[1] == "31 |   global_batch: 16"
    assert lines[2] == "   |                 ^^"


@pytest.mark.parametrize(
    ("env", "colored"),
    [({}, False), ({"FORCE_COLOR": "1"}, True), ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, False)],
)
def test_colour_follows_no_color_and_force_color(env: dict[str, str], colored: bool) -> None:
    _, out = run(str(BAD), env=env)
    assert ("\x1b[" in out) is colored
    assert re.sub(r"\x1b\[[0-9;]*m", "", out) == run(str(BAD))[1]


def test_colour_never_reaches_an_output_file(tmp_path: Path) -> None:
    target = tmp_path / "report.txt"
    run(str(BAD), "--output-file", str(target), env={"FORCE_COLOR": "1"})
    assert "\x1b[" not in target.read_text()


def test_use_color_on_a_terminal() -> None:
    from planc.cli.reporters import use_color

    assert use_color(True, {}) and not use_color(False, {})
    assert not use_color(True, {"NO_COLOR": "1"}) and use_color(True, {"NO_COLOR": ""})
    assert use_color(False, {"FORCE_COLOR": "1"}) and not use_color(False, {"FORCE_COLOR": ""})


def test_rules_speaks_the_same_severities_as_check() -> None:
    listing = CliRunner().invoke(main, ["rules"]).output
    assert "fatal" not in listing
    assert re.search(r"^PLC100  error ", listing, re.MULTILINE)
    explained = CliRunner().invoke(main, ["rules", "PLC101"]).output
    assert explained.startswith("PLC101 (error; unusable input: exit 2)")
    assert "docs/rules.md#plc101" in explained


def test_completion_offers_rule_ids() -> None:
    env = {"_PLANC_COMPLETE": "bash_complete", "COMP_WORDS": "planc rules PLC00", "COMP_CWORD": "2"}
    out = CliRunner().invoke(main, [], env=env, prog_name="planc").output
    assert "plain,PLC001" in out and "plain,PLC009" in out and "PLC100" not in out
    env = {
        "_PLANC_COMPLETE": "bash_complete",
        "COMP_WORDS": "planc check --ignore PLC006,PLC01",
        "COMP_CWORD": "3",
    }
    out = CliRunner().invoke(main, [], env=env, prog_name="planc").output
    assert "plain,PLC006,PLC011" in out


def test_snippets_never_pass_control_characters_to_the_terminal(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    # U+202E (right-to-left override) is printable to YAML, so it reaches the snippet.
    spec.write_text(GOOD_TEXT.replace("seq_len: 8192", 'seq_len: "8192\u202e"'), encoding="utf-8")
    code, out = run(str(spec))
    assert code == 1 and "PLC110" in out
    assert "\u202e" not in out and '"8192\ufffd"' in out
    from planc.cli.reporters import snippet
    from planc.findings import Finding, Severity

    (line, _) = snippet("name: \x1b[2Jx\n", Finding(1, 7, "PLC110", Severity.ERROR, "m"))
    assert line == "1 | name: \ufffd[2Jx"


def test_a_long_line_is_shown_as_a_window_around_the_column() -> None:
    from planc.cli.reporters import SNIPPET_WIDTH, snippet
    from planc.findings import Finding, Severity

    source = "a: 1\nlong: " + "x" * 500 + " y\n"
    line, carets = snippet(source, Finding(2, 508, "PLC110", Severity.ERROR, "m"))
    assert len(line) <= len("2 | ") + SNIPPET_WIDTH + 2 and line.startswith("2 | …")
    assert line[carets.index("^")] == "y"


def test_finding_lines_and_annotations_are_safe_too(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(GOOD_TEXT.replace("seq_len: 8192", "seq_len: 8192\n  \u202eevil: 1"), "utf-8")
    for fmt in ("text", "github"):
        code, out = run(str(spec), "--format", fmt)
        assert code == 1 and "PLC108" in out and "\u202e" not in out, out
