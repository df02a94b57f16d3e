"""A rule owns its options: a threshold is declared once, in its rule, and the spec's `rules:`
and `search:` sections, the schema, `[tool.planc]`, the resolved job and `planc search`'s flags
all follow the declaration.

Hand derivations used below:
- examples/invalid/PLC006/llama3-70b-8x8.yaml: p = 4, m = 16 / (1 × 2) = 8 micro-batches, so the
  bubble is (p − 1)/(m + p − 1) = 3/11 = 27.27 %: above max_bubble 0.27, under 0.28.
- llama3-8b-1node.yaml on an H100 (80 GiB): memory_headroom 0.99 leaves 80 × 0.01 = 0.80 GiB,
  less than the CUDA context reserve alone, so PLC007 fails whatever the layout.
- With max_bubble 0 any pipeline p > 1 has a bubble (p − 1)/(v·m + p − 1) > 0, so only
  pipeline 1 layouts survive a search.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from planc.check import check_paths
from planc.cli.common import about_the_run as _about_the_run
from planc.cli.main import main
from planc.cli.rules_doc import options_module, readme_table
from planc.plannable import PRECONDITIONS
from planc.rules import OPTIONS, REGISTRY, RuleKind, declared_options
from planc.rules.base import Context, Option, rule
from planc.rules.config import KEYS, ConfigError, Resolver, parse_table
from planc.spec import rule_options
from planc.spec.models import json_schema, option_models

from conftest import check_text, resolved_of, rules_fired, spec_text

ROOT = Path(__file__).resolve().parent.parent
BUBBLE = ROOT / "examples" / "invalid" / "PLC006" / "llama3-70b-8x8.yaml"  # bubble 3/11
PLAIN = {"NO_COLOR": "1", "FORCE_COLOR": ""}
SMALL = """\
version: 1
name: small
model: {preset: llama3-8b}
hardware: {gpu: h100-sxm, nodes: 2}
training: {seq_len: 4096, global_batch: 64}
"""


def _without_rules() -> str:
    return BUBBLE.read_text(encoding="utf-8").split("\nrules:\n")[0] + "\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository root: the configuration search stops here."""
    (tmp_path / ".git").mkdir()
    return tmp_path


def _fired(path: Path) -> set[str]:
    (result,) = check_paths([str(path)], Resolver())
    return rules_fired(result)


# --- a threshold reaches its rule from every place it can be set ------------------------------


def test_the_threshold_in_the_spec_reaches_the_rule() -> None:
    text = _without_rules()
    assert "PLC006" in rules_fired(check_text(text + "rules: {max_bubble: 0.27}\n"))
    assert "PLC006" not in rules_fired(check_text(text + "rules: {max_bubble: 0.28}\n"))
    job = resolved_of({"rules": {"max_bubble": 0.28, "memory_headroom": 0.3}})
    assert (job.rules.options["max_bubble"], job.rules.options["memory_headroom"]) == (0.28, 0.3)


def test_an_option_left_out_is_its_declared_default() -> None:
    job = resolved_of()
    assert dict(job.rules.options) == {o.name: o.default for o in OPTIONS}
    assert job.rules.options["max_bubble"] == 0.10  # PLC006's declaration


def test_the_threshold_in_tool_planc_reaches_the_rule(repo: Path) -> None:
    spec = repo / "spec.yaml"
    spec.write_text(_without_rules(), encoding="utf-8")
    assert "PLC006" in _fired(spec)  # planc's default 0.10 < 27.27 %
    (repo / "pyproject.toml").write_text("[tool.planc]\nmax_bubble = 0.28\n")
    assert "PLC006" not in _fired(spec)
    # The spec's own rules: section wins over the configuration.
    spec.write_text(_without_rules() + "rules: {max_bubble: 0.27}\n", encoding="utf-8")
    assert "PLC006" in _fired(spec)


def test_memory_headroom_in_a_planc_toml_reaches_plc007(repo: Path) -> None:
    spec = repo / "spec.yaml"
    spec.write_text(spec_text(), encoding="utf-8")
    assert "PLC007" not in _fired(spec)
    (repo / ".planc.toml").write_text("memory_headroom = 0.99\n")
    (result,) = check_paths([str(spec)], Resolver())
    (finding,) = [f for f in result.findings if f.rule == "PLC007"]
    assert "0.80 GiB usable" in finding.message  # 80 GiB × (1 − 0.99)


def _search_json(text: str, tmp_path: Path, *flags: str) -> dict[str, Any]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text, encoding="utf-8")
    done = CliRunner().invoke(main, ["search", str(spec), "--format", "json", *flags], env=PLAIN)
    assert done.exit_code == 0, done.output
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def test_search_flags_reach_the_rules(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    out = _search_json(SMALL, tmp_path, "--max-bubble", "0", "--memory-headroom", "0.5")
    assert (out["space"]["max_bubble"], out["space"]["memory_headroom"]) == (0.0, 0.5)
    assert out["results"] and out["rejected_by_rule"]["PLC006"] > 0
    for entry in out["results"]:
        assert entry["parallelism"]["pipeline"] == 1  # max_bubble 0: no pipeline survives
        assert entry["memory_headroom"] >= 0.5  # PLC007 kept half of HBM free


def test_search_section_then_rules_section_give_the_thresholds(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    text = SMALL + "rules: {memory_headroom: 0.2}\nsearch: {max_bubble: 0.3}\n"
    out = _search_json(text, tmp_path)
    assert (out["space"]["max_bubble"], out["space"]["memory_headroom"]) == (0.3, 0.2)
    flagged = _search_json(text, tmp_path, "--max-bubble", "0.05")
    assert flagged["space"]["max_bubble"] == 0.05


# --- refused values: unknown keys and bounds --------------------------------------------------


def test_an_unknown_option_in_the_spec_is_a_located_finding() -> None:
    text = _without_rules() + "rules: {max_bubbel: 0.2}\n"
    (finding,) = [f for f in check_text(text).findings if f.rule == "PLC108"]
    assert finding.field == "rules.max_bubbel"
    assert finding.line == len(text.splitlines()) and "'max_bubble'" in finding.fix


def test_an_unknown_key_in_tool_planc_is_refused_naming_the_keys() -> None:
    with pytest.raises(ConfigError, match="unknown key 'max_bubbel'") as caught:
        parse_table({"max_bubbel": 0.2}, "pyproject.toml: [tool.planc]")
    assert str(caught.value).endswith(", ".join(KEYS))
    assert KEYS[4:] == tuple(o.name for o in OPTIONS)


def _outside(option: Option) -> list[float]:
    """Values just outside an option's declared bounds."""
    step = 1 if option.value_type is int else 0.01
    found = [] if option.ge is None else [option.ge - step]
    found += [] if option.gt is None else [option.gt]
    found += [] if option.le is None else [option.le + step]
    return found + ([] if option.lt is None else [option.lt])


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.name)
def test_bounds_are_enforced_in_the_spec(option: Option) -> None:
    for value in _outside(option):
        text = _without_rules() + f"rules: {{{option.name}: {value}}}\n"
        findings = [f for f in check_text(text).findings if f.rule == "PLC110"]
        assert [f.field for f in findings] == [f"rules.{option.name}"], value


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.name)
def test_bounds_are_enforced_in_tool_planc(option: Option) -> None:
    where = "pyproject.toml: [tool.planc]"
    for value in [*_outside(option), True, "0.1"]:
        with pytest.raises(ConfigError, match=f"{option.name} must be"):
            parse_table({option.name: value}, where)
    assert parse_table({option.name: option.default}, where).options == {
        option.name: option.default
    }


@pytest.mark.parametrize("name", ["max_bubble", "memory_headroom"])
def test_the_fractions_say_their_bounds(name: str) -> None:
    where = "pyproject.toml: [tool.planc]"
    with pytest.raises(ConfigError, match=f"{name} must be at least 0 and below 1, got 1$"):
        parse_table({name: 1}, where)
    with pytest.raises(ConfigError, match=f"{name} must be a number, got True"):
        parse_table({name: True}, where)
    assert parse_table({name: 0}, where).options == {name: 0.0}


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.name)
def test_bounds_are_enforced_on_the_search_command_line(option: Option, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SMALL, encoding="utf-8")
    for value in _outside(option):
        done = CliRunner().invoke(main, ["search", str(spec), option.flag, str(value)], env=PLAIN)
        assert done.exit_code == 2 and f"Invalid value for '{option.flag}'" in done.output


# --- derived, not copied ------------------------------------------------------------------------


def test_the_generated_table_is_the_registrys_declarations() -> None:
    assert rule_options.OPTIONS == OPTIONS == declared_options(REGISTRY.values())
    owners = {o.name: o.rule for o in OPTIONS}
    assert (owners["max_bubble"], owners["memory_headroom"]) == ("PLC006", "PLC007")
    assert all(REGISTRY[o.rule].options.count(o) == 1 for o in OPTIONS)


def test_the_schemas_rules_section_is_the_declarations() -> None:
    definitions: dict[str, Any] = json_schema()["$defs"]  # type: ignore[assignment]
    rules = definitions["RulesSpec"]["properties"]
    search = definitions["SearchSpec"]["properties"]
    assert [name for name in rules if name not in ("ignore", "severity")] == [
        o.name for o in OPTIONS
    ]
    for option in OPTIONS:
        keywords = {
            "minimum": option.ge,
            "exclusiveMinimum": option.gt,
            "maximum": option.le,
            "exclusiveMaximum": option.lt,
        }
        declared = {k: v for k, v in keywords.items() if v is not None}
        declared["type"] = "integer" if option.value_type is int else "number"
        assert {key: rules[option.name][key] for key in declared} == declared
        assert rules[option.name]["default"] == option.default
        assert rules[option.name]["description"].endswith(f"({option.rule}).")
        assert search[option.name]["default"] is None
        branch = search[option.name]["anyOf"][0]
        assert {key: branch[key] for key in declared} == declared


def _probe_table() -> tuple[Option, ...]:
    """The table regenerate.py would write with one more rule that owns an integer option."""

    def probe_check(ctx: Context) -> Any:
        """Probe: a rule that reads an option only its declaration names."""
        return iter(())

    limit = Option("probe_limit", 4, "Largest probe count", value_type=int, ge=1, le=8)
    probe = rule("PLC900", options=(limit,))(probe_check)
    namespace: dict[str, Any] = {}
    exec(options_module([*REGISTRY.values(), probe]), namespace)
    table: tuple[Option, ...] = namespace["OPTIONS"]
    return table


def test_a_probe_option_declared_only_in_its_rule_reaches_schema_and_config() -> None:
    table = _probe_table()
    assert table[-1] == Option(
        "probe_limit", 4, "Largest probe count", value_type=int, ge=1, le=8, rule="PLC900"
    )
    rules_spec, search_spec = option_models(table)
    schema = rules_spec.model_json_schema()["properties"]["probe_limit"]
    assert (schema["type"], schema["minimum"], schema["maximum"], schema["default"]) == (
        "integer",
        1,
        8,
        4,
    )
    assert rules_spec().model_dump()["probe_limit"] == 4
    assert rules_spec.model_validate({"probe_limit": 8}).model_dump()["probe_limit"] == 8
    for bad in (9, 0, 2.5, True):
        with pytest.raises(ValidationError):
            rules_spec.model_validate({"probe_limit": bad})
    assert search_spec().model_dump()["probe_limit"] is None
    where = ".planc.toml"
    assert parse_table({"probe_limit": 3}, where, options=table).options == {"probe_limit": 3}
    with pytest.raises(ConfigError, match="probe_limit must be at least 1 and at most 8, got 9"):
        parse_table({"probe_limit": 9}, where, options=table)
    with pytest.raises(ConfigError, match=r"probe_limit must be an integer, got 2\.5"):
        parse_table({"probe_limit": 2.5}, where, options=table)


def test_two_rules_cannot_own_one_option_name() -> None:
    taken = rule("PLC900", options=(Option("max_bubble", 0.5, "Again", ge=0.0, lt=1.0),))(
        lambda ctx: iter(())
    )
    with pytest.raises(ValueError, match="'max_bubble' is taken by PLC006"):
        declared_options([*REGISTRY.values(), taken])


def test_the_input_side_does_not_import_the_registry() -> None:
    code = (
        "import sys; import planc.spec.load, planc.spec.job, planc.spec.models, "
        "planc.spec.fastcheck; print(sorted(m for m in sys.modules if m.startswith('planc.rules')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


# --- a rule's kind is a field ---------------------------------------------------------------


def test_a_rules_kind_is_a_field() -> None:
    by_kind = {kind: {r.id for r in REGISTRY.values() if r.kind is kind} for kind in RuleKind}
    assert by_kind[RuleKind.INPUT] == {f"PLC{n}" for n in range(100, 112)}  # rules/inputs.py
    assert by_kind[RuleKind.PRECONDITION] == {rule_id for rule_id, _ in PRECONDITIONS}
    assert {"PLC006", "PLC007", "PLC019"} <= by_kind[RuleKind.RUN]
    assert all(r.check is None for r in REGISTRY.values() if r.kind is RuleKind.INPUT)


def test_force_passes_run_rules_but_not_input_rules(tmp_path: Path) -> None:
    # PLC006 fails (a run rule): --force compiles anyway; PLC108 (input) still stops it.
    spec = tmp_path / "spec.yaml"
    spec.write_text(_without_rules(), encoding="utf-8")
    out = tmp_path / "out"
    stopped = CliRunner().invoke(main, ["compile", str(spec), "-o", str(out)], env=PLAIN)
    assert stopped.exit_code == 1
    forced = CliRunner().invoke(main, ["compile", str(spec), "-o", str(out), "--force"], env=PLAIN)
    assert forced.exit_code == 0, forced.output
    spec.write_text(_without_rules() + "rules: {max_bubbel: 0.2}\n", encoding="utf-8")
    broken = CliRunner().invoke(
        main, ["compile", str(spec), "-o", str(tmp_path / "b"), "--force"], env=PLAIN
    )
    assert broken.exit_code == 1 and "PLC108" in broken.output
    assert not (tmp_path / "b").exists()
    # What --force may pass: run rules and preconditions (whose refusal stops planning anyway).
    assert [_about_the_run(i) for i in ("PLC006", "PLC001", "PLC108", "PLC999")] == [
        True,
        True,
        False,
        False,
    ]


# --- the README's table -------------------------------------------------------------------------


def test_readme_rule_table_is_current_and_lists_every_rule() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme_table()
    assert table in readme, "README.md's rule table is stale: run `python scripts/regenerate.py`"
    for rule_id, each in REGISTRY.items():
        (row,) = [line for line in table.splitlines() if line.startswith(f"| [{rule_id}]")]
        assert f"| {each.kind.value} |" in row
    (bubble,) = [line for line in table.splitlines() if line.startswith("| [PLC006]")]
    assert bubble.endswith("| `max_bubble` 0.1 |")


def test_an_option_cannot_shadow_a_search_axis_or_be_a_bad_name() -> None:
    with pytest.raises(ValueError, match="'tensor' is also a search axis"):
        option_models((Option("tensor", 8, "Widest", value_type=int, ge=1, rule="PLC900"),))
    bad = rule("PLC900", options=(Option("Max-Bubble", 0.5, "Bad", ge=0.0, lt=1.0),))(
        lambda ctx: iter(())
    )
    with pytest.raises(ValueError, match="not a snake_case name"):
        declared_options([bad])
