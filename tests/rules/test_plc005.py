"""PLC005 global_batch splits into whole micro-batches: global_batch % (micro_batch × data) == 0.

Base: llama3-8b on 8 GPUs, tensor 2, data derived 8 / 2 = 4, micro_batch 1, global_batch 64.
"""

from __future__ import annotations

import re

import pytest

from planc.findings import FileResult, Finding, Severity

from conftest import check_overlay, check_text, rules_fired, spec_text, value_position


def findings_of(result: FileResult, rule: str = "PLC005") -> list[Finding]:
    return [f for f in result.findings if f.rule == rule]


def test_global_batch_not_divisible() -> None:
    # 66 % (1 × 4) = 2; the neighbouring multiples of 4 are 64 and 68.
    text = spec_text({"training": {"global_batch": 66}})
    result = check_text(text)
    assert rules_fired(result) == {"PLC005"}
    (finding,) = findings_of(result)
    assert finding.field == "training.global_batch"
    assert finding.severity is Severity.ERROR
    assert "66" in finding.message and "1 × 4 = 4" in finding.message
    assert "64" in finding.fix and "68" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "  global_batch: 66")


@pytest.mark.parametrize("global_batch", [4, 64, 68])
def test_multiples_of_micro_batch_times_data_pass(global_batch: int) -> None:
    result = check_overlay({"training": {"global_batch": global_batch}})
    assert "PLC005" not in rules_fired(result)


def test_micro_batch_counts_in_the_unit() -> None:
    # micro_batch 2: unit 2 × 4 = 8; 68 % 8 = 4, neighbours 64 and 72. 68 passes at micro_batch 1.
    (finding,) = findings_of(check_overlay({"training": {"global_batch": 68, "micro_batch": 2}}))
    assert "2 × 4 = 8" in finding.message
    assert "64" in finding.fix and "72" in finding.fix


def test_batch_below_one_micro_batch_per_rank_suggests_the_unit() -> None:
    # 3 < 4: the only useful suggestion is 4 itself (0 is not a batch).
    (finding,) = findings_of(check_overlay({"training": {"global_batch": 3}}))
    assert re.findall(r"\d+", finding.fix) == ["4"]


def test_context_parallel_ranks_share_their_sequences() -> None:
    # tensor 2, context 2, data 2: the unit is micro_batch × data = 1 × 2 = 2, not × context.
    # 66 % 2 = 0 passes; if context counted, 66 % 4 = 2 would fail.
    overlay = {
        "parallelism": {"context": 2, "data": 2},
        "training": {"global_batch": 66},
    }
    assert "PLC005" not in rules_fired(check_overlay(overlay))


def test_silent_when_data_cannot_be_derived() -> None:
    # World 6 with tensor 4: no data degree exists; PLC001 reports it, PLC005 does not guess.
    overlay = {
        "hardware": {"gpus_per_node": 6, "nvlink_domain": 6},
        "parallelism": {"tensor": 4},
        "training": {"global_batch": 65},
    }
    assert rules_fired(check_overlay(overlay)) == {"PLC001"}
