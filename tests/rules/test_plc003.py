"""PLC003 heads and widths divide over tensor.

heads % tensor == 0; kv_heads % tensor == 0 or tensor % kv_heads == 0 (replicated KV heads);
ffn_hidden % tensor == 0. Base: llama3-8b on one 8-GPU node.
"""

from __future__ import annotations

import pytest

from planc.findings import FileResult, Finding, Severity

from conftest import check_overlay, check_text, rules_fired, spec_text, value_position


def findings_of(result: FileResult, rule: str = "PLC003") -> list[Finding]:
    return [f for f in result.findings if f.rule == rule]


TP8 = {"tensor": 8, "data": 1, "zero_stage": 0}


def test_heads_not_divisible_by_tensor() -> None:
    # 12 heads over tensor 8: 12 % 8 = 4. kv 4 is replicated (8 % 4 = 0), ffn 14336 = 8 × 1792,
    # hidden 1536 = 12 × 128: only the heads check fails.
    overlay = {"model": {"hidden": 1536, "heads": 12, "kv_heads": 4}, "parallelism": TP8}
    text = spec_text(overlay)
    result = check_text(text)
    assert rules_fired(result) == {"PLC003"}
    (finding,) = findings_of(result)
    assert finding.field == "model.heads"
    assert finding.severity is Severity.ERROR
    assert "heads = 12" in finding.message and "tensor = 8" in finding.message
    assert "12" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "  heads: 12")


def test_heads_divisible_by_tensor_pass() -> None:
    # 16 heads over 8: 2 each; kv 4 replicated; hidden 2048 = 16 × 128.
    overlay = {"model": {"hidden": 2048, "heads": 16, "kv_heads": 4}, "parallelism": TP8}
    assert "PLC003" not in rules_fired(check_overlay(overlay))


def test_kv_heads_neither_divisor_nor_multiple() -> None:
    # 48 heads, 12 kv heads over tensor 8: 12 % 8 = 4 and 8 % 12 = 8. 48 % 8 = 0, 48 % 12 = 0.
    overlay = {"model": {"hidden": 6144, "heads": 48, "kv_heads": 12}, "parallelism": TP8}
    text = spec_text(overlay)
    result = check_text(text)
    assert rules_fired(result) == {"PLC003"}
    (finding,) = findings_of(result)
    assert finding.field == "model.kv_heads"
    assert "kv_heads = 12" in finding.message and "tensor = 8" in finding.message
    assert finding.fix
    assert (finding.line, finding.column) == value_position(text, "  kv_heads: 12")


@pytest.mark.parametrize(
    ("kv_heads", "tensor"),
    [
        (8, 8),  # kv heads split one per rank
        (8, 4),  # kv heads split two per rank
        (2, 8),  # 8 is a multiple of 2: each kv head replicated on 4 ranks
        (1, 8),  # multi-query attention: one kv head replicated on all 8 ranks
    ],
)
def test_kv_heads_that_split_or_replicate_pass(kv_heads: int, tensor: int) -> None:
    overlay = {
        "model": {"kv_heads": kv_heads},
        "parallelism": {"tensor": tensor, "data": 8 // tensor, "zero_stage": 0},
    }
    assert "PLC003" not in rules_fired(check_overlay(overlay))


def test_ffn_hidden_not_divisible_by_tensor() -> None:
    # ffn 14340 over tensor 8: 14340 = 8 × 1792 + 4.
    overlay = {"model": {"ffn_hidden": 14340}, "parallelism": TP8}
    text = spec_text(overlay)
    (finding,) = findings_of(check_text(text))
    assert finding.field == "model.ffn_hidden"
    assert "ffn_hidden = 14340" in finding.message and "tensor = 8" in finding.message
    assert (finding.line, finding.column) == value_position(text, "  ffn_hidden: 14340")


def test_ffn_hidden_divisible_passes() -> None:
    # 14344 = 8 × 1793.
    overlay = {"model": {"ffn_hidden": 14344}, "parallelism": TP8}
    assert "PLC003" not in rules_fired(check_overlay(overlay))


def test_all_three_checks_report_together() -> None:
    # 12 heads, 3 kv heads, ffn 14337 over tensor 8: 12 % 8 = 4; 3 ∤ 8 and 8 ∤ 3; 14337 odd.
    overlay = {
        "model": {"hidden": 1536, "heads": 12, "kv_heads": 3, "ffn_hidden": 14337},
        "parallelism": TP8,
    }
    fields = {f.field for f in findings_of(check_overlay(overlay))}
    assert fields == {"model.heads", "model.kv_heads", "model.ffn_hidden"}


def test_preset_values_are_located_at_the_tensor_degree() -> None:
    # llama3-8b from its preset: 32 heads, 8 kv heads, ffn 14336 over tensor 6 on a 6-GPU node:
    # 32 % 6 = 2, 8 % 6 = 2 and 6 % 8 = 6, 14336 % 6 = 2. None of the model fields is written in
    # the file, so all three point at parallelism.tensor.
    overlay = {
        "hardware": {"gpus_per_node": 6, "nvlink_domain": 6},
        "parallelism": {"tensor": 6, "data": 1, "zero_stage": 0, "sequence_parallel": False},
    }
    text = spec_text(overlay)
    found = findings_of(check_text(text))
    assert {f.field for f in found} == {"model.heads", "model.kv_heads", "model.ffn_hidden"}
    at = value_position(text, "  tensor: 6")
    assert all((f.line, f.column) == at for f in found)
    heads = next(f for f in found if f.field == "model.heads")
    assert "heads = 32" in heads.message
