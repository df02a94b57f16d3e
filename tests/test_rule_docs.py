"""Every rule documents itself; each docstring's Passes/Fails examples really pass and fail."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from planc.cli.main import main
from planc.rules import REGISTRY, get

from conftest import check_overlay, rules_fired

CHECKED = [r for r in REGISTRY.values() if r.check is not None]


def test_ids_are_stable_and_unique() -> None:
    assert list(REGISTRY) == sorted(REGISTRY)
    assert all(len(rule_id) == 6 and rule_id.startswith("PLC") for rule_id in REGISTRY)


@pytest.mark.parametrize("rule", REGISTRY.values(), ids=lambda r: r.id)
def test_rule_has_a_title_and_explanation(rule: object) -> None:
    doc = rule.doc  # type: ignore[attr-defined]
    assert doc and len(doc.split()) >= 12


@pytest.mark.parametrize("rule", CHECKED, ids=lambda r: r.id)
def test_passing_example_passes(rule: object) -> None:
    example = rule.example("Passes")  # type: ignore[attr-defined]
    assert example, "every checked rule shows a passing example"
    result = check_overlay(example, rule.base)  # type: ignore[attr-defined]
    assert rule.id not in rules_fired(result)  # type: ignore[attr-defined]
    assert not [f for f in result.findings if f.severity.value == "error"], result.findings


@pytest.mark.parametrize("rule", CHECKED, ids=lambda r: r.id)
def test_failing_example_fails(rule: object) -> None:
    example = rule.example("Fails")  # type: ignore[attr-defined]
    assert example, "every checked rule shows a failing example"
    result = check_overlay(example, rule.base)  # type: ignore[attr-defined]
    assert rule.id in rules_fired(result)  # type: ignore[attr-defined]


def test_get_unknown_rule() -> None:
    with pytest.raises(ValueError, match="unknown rule"):
        get("PLC999")


def test_rules_command_lists_and_explains() -> None:
    runner = CliRunner()
    listing = runner.invoke(main, ["rules"])
    assert listing.exit_code == 0
    assert all(rule_id in listing.output for rule_id in REGISTRY)
    explained = runner.invoke(main, ["rules", "plc006"])
    assert explained.exit_code == 0
    assert "Passes:" in explained.output and "Fails:" in explained.output
    assert runner.invoke(main, ["rules", "PLC999"]).exit_code == 2
