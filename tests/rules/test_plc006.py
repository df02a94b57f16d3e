"""PLC006 pipeline bubble (p − 1)/(v·m + p − 1) ≤ rules.max_bubble, m = B / (b·d).

Solving (p − 1)/(v·m + p − 1) ≤ 0.1 gives v·m ≥ 9(p − 1): with v = 1 the bubble flips between
m = 9(p − 1) − 1 (fails) and m = 9(p − 1) (exactly 10%, passes). Base: llama3-70b-8x8 with
tensor 8, pipeline 4, data 2, micro_batch 1.

Also here: severity overrides, `rules.ignore`, and that all violations of a spec are reported.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from planc.cli.main import main
from planc.findings import FileResult, Finding, Severity

from conftest import check_overlay, check_text, rules_fired, spec_text, value_position

BASE = "llama3-70b-8x8.yaml"


def findings_of(result: FileResult, rule: str = "PLC006") -> list[Finding]:
    return [f for f in result.findings if f.rule == rule]


def p8(global_batch: int) -> dict[str, object]:
    """pipeline 8 on 64 GPUs: tensor 8 × pipeline 8 × data 1, so m = global_batch."""
    return {
        "parallelism": {"pipeline": 8, "data": 1, "zero_stage": 0},
        "training": {"global_batch": global_batch},
    }


def test_p4_one_micro_batch_below_the_threshold_fails() -> None:
    # p = 4: threshold m = 9 × 3 = 27. m = 26 (global_batch 52 / data 2): 3 / 29 = 10.34%.
    # The fix asks for m = 27, i.e. global_batch ≥ 27 × 1 × 2 = 54.
    text = spec_text({"training": {"global_batch": 52}}, BASE)
    result = check_text(text)
    assert rules_fired(result) == {"PLC006"}
    (finding,) = findings_of(result)
    assert finding.field == "training.global_batch"
    assert finding.severity is Severity.ERROR
    assert "m = 26" in finding.message and "p = 4" in finding.message
    assert "10.3%" in finding.message
    assert "m = 27" in finding.fix and "54" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "  global_batch: 52")


def test_p4_at_the_threshold_passes() -> None:
    # m = 27: 3 / (27 + 3) = 10% exactly, not above max_bubble 10%.
    assert "PLC006" not in rules_fired(check_overlay({"training": {"global_batch": 54}}, BASE))


def test_p8_one_micro_batch_below_the_threshold_fails() -> None:
    # p = 8: threshold m = 9 × 7 = 63. m = 62: 7 / 69 = 10.14%; need m = 63, global_batch 63.
    (finding,) = findings_of(check_overlay(p8(62), BASE))
    assert "m = 62" in finding.message and "p = 8" in finding.message
    assert "10.1%" in finding.message
    assert "m = 63" in finding.fix and "63" in finding.fix


def test_p8_at_the_threshold_passes() -> None:
    # m = 63: 7 / 70 = 10%.
    assert "PLC006" not in rules_fired(check_overlay(p8(63), BASE))


def test_rule_of_thumb_nine_times_p_is_always_enough() -> None:
    # m = 9p > 9(p − 1), so (p − 1)/(m + p − 1) < 10% for every p.
    assert "PLC006" not in rules_fired(check_overlay(p8(72), BASE))
    assert "PLC006" not in rules_fired(check_overlay({"training": {"global_batch": 72}}, BASE))


def test_interleaving_divides_the_bubble_by_v() -> None:
    # v = 2, p = 4: 2m ≥ 27 needs m ≥ 14; the interleaved schedule wants m a multiple of 4, so
    # the fix asks for m = 16 (global_batch 32). m = 12: 3 / (24 + 3) = 11.1%; m = 16: 3/35.
    overlay = {"parallelism": {"virtual_stages": 2}, "training": {"global_batch": 24}}
    (finding,) = findings_of(check_overlay(overlay, BASE))
    assert "m = 12" in finding.message and "11.1%" in finding.message
    assert "m = 16" in finding.fix and "32" in finding.fix
    overlay["training"] = {"global_batch": 32}
    assert "PLC006" not in rules_fired(check_overlay(overlay, BASE))


def test_a_looser_limit_moves_the_threshold() -> None:
    # max_bubble 0.2: 3 / (m + 3) ≤ 0.2 ⇔ m ≥ 12. m = 11: 3/14 = 21.4% fails; m = 12 passes.
    fails = {"training": {"global_batch": 22}, "rules": {"max_bubble": 0.2}}
    (finding,) = findings_of(check_overlay(fails, BASE))
    assert "21.4%" in finding.message and "m = 12" in finding.fix
    passes = {"training": {"global_batch": 24}, "rules": {"max_bubble": 0.2}}
    assert "PLC006" not in rules_fired(check_overlay(passes, BASE))


def test_zero_limit_can_only_be_met_without_a_pipeline() -> None:
    # max_bubble 0 with p = 4: (p − 1)/(m + p − 1) > 0 for every m.
    overlay = {"rules": {"max_bubble": 0.0}}
    (finding,) = findings_of(check_overlay(overlay, BASE))
    assert "pipeline" in finding.fix
    # Without a pipeline there is no bubble (llama3-8b base has pipeline 1).
    assert "PLC006" not in rules_fired(check_overlay(overlay))


def test_message_bubble_matches_the_formula() -> None:
    # m = global batch / (micro-batch × data) = 16 / (1 × 2) = 8 with the example's p = 4: the
    # bubble (p − 1)/(m + p − 1) is 3 / 11 = 27.3%.
    (finding,) = findings_of(check_overlay({"training": {"global_batch": 16}}, BASE))
    assert "m = 8" in finding.message and "p = 4" in finding.message
    assert "27.3%" in finding.message


def test_silent_when_the_batch_does_not_split() -> None:
    # global_batch 53 % 2 ≠ 0: m is not whole, PLC005 reports it and PLC006 has no m to judge.
    assert rules_fired(check_overlay({"training": {"global_batch": 53}}, BASE)) == {"PLC005"}


# --- rule settings and reporting of several rules --------------------------------------------


def test_severity_override_turns_the_bubble_into_a_warning() -> None:
    overlay = {"training": {"global_batch": 16}, "rules": {"severity": {"PLC006": "warning"}}}
    (finding,) = findings_of(check_overlay(overlay, BASE))
    assert finding.severity is Severity.WARNING


def test_severity_override_to_info_is_not_a_failure() -> None:
    overlay = {"training": {"global_batch": 16}, "rules": {"severity": {"PLC006": "info"}}}
    result = check_overlay(overlay, BASE)
    assert [f.severity for f in findings_of(result)] == [Severity.INFO]
    assert result.ok(strict=True)


def test_severity_override_decides_the_exit_code(tmp_path: Path) -> None:
    overlay = {"training": {"global_batch": 16}, "rules": {"severity": {"PLC006": "warning"}}}
    path = tmp_path / "warned.yaml"
    path.write_text(spec_text(overlay, BASE), encoding="utf-8")
    runner = CliRunner()
    assert runner.invoke(main, ["check", str(path)]).exit_code == 0
    assert runner.invoke(main, ["check", "--strict", str(path)]).exit_code == 1


def test_ignore_silences_only_the_named_rule() -> None:
    # global_batch 16 breaks the bubble; zero_stage 2 with pipeline 4 is PLC011's warning.
    overlay = {
        "parallelism": {"zero_stage": 2},
        "training": {"global_batch": 16},
        "rules": {"ignore": ["PLC006"]},
    }
    assert rules_fired(check_overlay(overlay, BASE)) == {"PLC011"}


def test_all_violations_are_reported_not_only_the_first() -> None:
    # One spec breaking six rules at once on the 70B base (tensor 8, pipeline 4, data 2):
    #   kv_heads 12: 12 ∤ 8 and 8 ∤ 12 (PLC003), and 12 ∤ 64 heads (PLC012);
    #   layers 78 % 4 = 2 (PLC004);
    #   global_batch 16: m = 8, bubble 3/11 = 27% (PLC006);
    #   zero_stage 2 with pipeline 4 (PLC011, a warning);
    #   seq_len 8191 is odd, so it does not split over tensor 8 under sequence parallelism (PLC013).
    overlay = {
        "model": {"layers": 78, "kv_heads": 12},
        "parallelism": {"zero_stage": 2},
        "training": {"global_batch": 16, "seq_len": 8191},
    }
    fired = rules_fired(check_overlay(overlay, BASE))
    assert {"PLC003", "PLC004", "PLC006", "PLC011", "PLC012", "PLC013"} <= fired
