"""PLC010 interleaved 1F1B: virtual_stages > 1 needs a pipeline (> 2 without Megatron's overlapped
p2p) and m % pipeline == 0.

Base: llama3-70b-8x8: 80 layers, tensor 8, pipeline 4, data 2, m = 512 / 2 = 256.
"""

from __future__ import annotations

from planc.findings import FileResult, Finding, Severity

from conftest import check_overlay, check_text, rules_fired, spec_text, value_position


def findings_of(result: FileResult, rule: str = "PLC010") -> list[Finding]:
    return [f for f in result.findings if f.rule == rule]


BASE = "llama3-70b-8x8.yaml"


def test_interleaving_on_four_stages_with_a_whole_number_of_rounds_passes() -> None:
    # 256 % 4 = 0; 80 % (4 × 2) = 0.
    assert "PLC010" not in rules_fired(check_overlay({"parallelism": {"virtual_stages": 2}}, BASE))


def test_interleaving_over_two_stages_passes_with_megatrons_overlapped_p2p() -> None:
    # pipeline 2: tensor 8 × 2 × data 4 = 64; m = 512 / 4 = 128 = 2 × 64; 80 % (2 × 2) = 0.
    # Megatron-LM overlaps the interleaved schedule's p2p by default and then allows p = 2.
    overlay = {"parallelism": {"pipeline": 2, "data": 4, "virtual_stages": 2}}
    assert "PLC010" not in rules_fired(check_overlay(overlay, BASE))


def test_interleaving_over_two_stages_without_overlapped_p2p_fails() -> None:
    # --no-overlap-p2p-communication: Megatron's validate_args asks for pipeline > 2.
    overlay = {
        "parallelism": {"pipeline": 2, "data": 4, "virtual_stages": 2},
        "training": {"overlap_p2p_comm": False},
    }
    text = spec_text(overlay, BASE)
    result = check_text(text)
    (finding,) = findings_of(result)
    assert finding.field == "training.overlap_p2p_comm"
    assert finding.severity is Severity.ERROR
    assert "virtual_stages = 2" in finding.message and "pipeline = 2" in finding.message
    assert "overlap_p2p_comm: true" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "  overlap_p2p_comm: false")


def test_three_stages_are_enough() -> None:
    # 6 nodes × 8 = 48 = 8 × 3 × 2. stage_layers [26, 28, 26] (sum 80, even for v = 2).
    # global_batch 510: m = 255 = 3 × 85, so micro-batches come in whole rounds of 3.
    overlay = {
        "hardware": {"nodes": 6, "hosts": "gpu-{000..005}"},
        "parallelism": {"pipeline": 3, "virtual_stages": 2, "stage_layers": [26, 28, 26]},
        "training": {"global_batch": 510},
    }
    assert "PLC010" not in rules_fired(check_overlay(overlay, BASE))
    # 512 gives m = 256, and 256 % 3 = 1.
    overlay["training"] = {"global_batch": 512}
    (finding,) = findings_of(check_overlay(overlay, BASE))
    assert "m = 256" in finding.message and "pipeline = 3" in finding.message


def test_micro_batches_not_a_multiple_of_pipeline() -> None:
    # global_batch 68: m = 34, 34 % 4 = 2. The fix names the step micro_batch × data × pipeline
    # = 1 × 2 × 4 = 8. The bubble 3 / (2 × 34 + 3) = 4.2% is fine.
    overlay = {"parallelism": {"virtual_stages": 2}, "training": {"global_batch": 68}}
    text = spec_text(overlay, BASE)
    result = check_text(text)
    assert rules_fired(result) == {"PLC010"}
    (finding,) = findings_of(result)
    assert finding.field == "training.global_batch"
    assert "m = 34" in finding.message and "pipeline = 4" in finding.message
    assert "= 8" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "  global_batch: 68")


def test_plain_1f1b_has_no_such_constraint() -> None:
    # virtual_stages 1, m = 34 is not a multiple of 4 but plain 1F1B does not care.
    overlay = {"training": {"global_batch": 68}}
    assert "PLC010" not in rules_fired(check_overlay(overlay, BASE))


def test_two_stages_need_whole_rounds_too() -> None:
    # pipeline 2, data 4, global_batch 12: m = 12 / 4 = 3, and 3 % 2 = 1: the rounds finding
    # (only the first unmet need is reported, and overlapped p2p is on).
    overlay = {
        "parallelism": {"pipeline": 2, "data": 4, "virtual_stages": 2},
        "training": {"global_batch": 12},
    }
    (finding,) = findings_of(check_overlay(overlay, BASE))
    assert finding.field == "training.global_batch"
    assert "m = 3" in finding.message and "pipeline = 2" in finding.message
