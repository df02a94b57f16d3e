"""PLC002 tensor parallelism stays inside one NVLink domain.

Ranks are numbered with the first axis of `order` varying fastest; an NVLink domain is a block
of nvlink_domain consecutive ranks. A TP group with stride s holds ranks r, r + s, ... .
"""

from __future__ import annotations

from planc.findings import FileResult, Finding, Severity

from conftest import check_overlay, check_text, rules_fired, spec_text, value_position


def findings_of(result: FileResult, rule: str = "PLC002") -> list[Finding]:
    return [f for f in result.findings if f.rule == rule]


def names_one_of(message: str, groups: list[list[int]]) -> bool:
    """Whether the message shows one of `groups` (derived by hand in the test) as its rank list."""
    return any(str(group) in message for group in groups)


TWO_NODES = {"nodes": 2, "hosts": ["gpu-a01", "gpu-a02"]}


def test_tensor_larger_than_the_domain() -> None:
    # 2 nodes × 8 = 16 GPUs, tensor 16 > nvlink_domain 8. 32 heads, 8 kv heads (16 is a multiple
    # of 8) and ffn 14336 = 16 × 896 all split, so PLC002 is the only error.
    overlay = {"hardware": TWO_NODES, "parallelism": {"tensor": 16, "data": 1, "zero_stage": 0}}
    text = spec_text(overlay)
    result = check_text(text)
    assert rules_fired(result) == {"PLC002"}
    (finding,) = findings_of(result)
    assert finding.field == "parallelism.tensor"
    assert finding.severity is Severity.ERROR
    assert "tensor = 16" in finding.message and "8 GPUs" in finding.message
    assert "≤ 8" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "  tensor: 16")


def test_tensor_equal_to_the_domain_passes() -> None:
    # tensor 8 on one 8-GPU node: ranks 0..7, one domain.
    result = check_overlay({"parallelism": {"tensor": 8, "data": 1, "zero_stage": 0}})
    assert "PLC002" not in rules_fired(result)


def test_strided_order_crosses_domains() -> None:
    # 2 nodes × 4 GPUs, domains {0..3} and {4..7}. order dp-tp-cp-pp with data 4: tp's stride is
    # 4, so every TP group is {r, r + 4} with one rank in each domain.
    overlay = {
        "hardware": {"nodes": 2, "gpus_per_node": 4, "nvlink_domain": 4, "hosts": ["a", "b"]},
        "parallelism": {"tensor": 2, "data": 4, "order": "dp-tp-cp-pp"},
    }
    text = spec_text(overlay)
    result = check_text(text)
    assert rules_fired(result) == {"PLC002"}
    (finding,) = findings_of(result)
    assert finding.field == "parallelism.order"
    assert "dp-tp-cp-pp" in finding.message
    # dp varies fastest (stride 1, size 4), so tp has stride 4: groups {i, i + 4}, each with one
    # rank in domain 0 (ranks 0..3) and one in domain 1 (4..7).
    assert names_one_of(finding.message, [[i, i + 4] for i in range(4)]), finding.message
    assert "domains 0 and 1" in finding.message
    assert "tp" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "  order: dp-tp-cp-pp")


def test_strided_order_with_data_1_keeps_groups_contiguous() -> None:
    # order dp-tp-cp-pp but data 1: tp's stride is 1, the group is ranks 0..7 in one domain.
    overlay = {"parallelism": {"tensor": 8, "data": 1, "zero_stage": 0, "order": "dp-tp-cp-pp"}}
    assert "PLC002" not in rules_fired(check_overlay(overlay))


def test_strided_groups_inside_one_domain_pass() -> None:
    # order cp-tp-dp-pp, context 2, tensor 4: stride 2, groups {0,2,4,6} and {1,3,5,7}, all in
    # the single 8-GPU domain. sequence_parallel off keeps PLC013 out (8192 / 2 / 4 is whole
    # anyway); seq 8192 % (2 × 2) = 0 keeps PLC009 out.
    overlay = {
        "parallelism": {"tensor": 4, "context": 2, "data": 1, "order": "cp-tp-dp-pp"},
    }
    result = check_overlay(overlay)
    assert "PLC002" not in rules_fired(result)


def test_strided_groups_cross_on_two_nodes() -> None:
    # 16 GPUs, domains of 8. order dp-tp-cp-pp with data 4, tensor 4: stride 4, the group of
    # rank 0 is {0, 4, 8, 12}: two ranks in domain 0 and two in domain 1.
    overlay = {
        "hardware": TWO_NODES,
        "parallelism": {"tensor": 4, "data": 4, "order": "dp-tp-cp-pp"},
    }
    (finding,) = findings_of(check_overlay(overlay))
    # Every TP group {i, i + 4, i + 8, i + 12} (i < 4) crosses from domain 0 into domain 1.
    groups = [[i, i + 4, i + 8, i + 12] for i in range(4)]
    assert names_one_of(finding.message, groups), finding.message
    assert "domains 0 and 1" in finding.message


def test_gb200_tensor_24_inside_a_72_gpu_domain_passes() -> None:
    # Two NVL72 racks: 144 GPUs, domains {0..71} and {72..143}. tensor 24 with tp first: groups
    # of 24 consecutive ranks, and 72 = 3 × 24, so no group straddles a rack.
    result = check_overlay(None, "gpt3-175b-gb200-nvl72.yaml")
    assert result.findings == ()


def test_gb200_tensor_above_the_rack_fails() -> None:
    # 48 trays × 4 = 192 GPUs; tensor 96 > 72 (96 heads and ffn 49152 = 96 × 512 still split).
    overlay = {
        "hardware": {"nodes": 48},
        "parallelism": {"tensor": 96, "pipeline": 2, "data": 1, "zero_stage": 0},
    }
    (finding,) = findings_of(check_overlay(overlay, "gpt3-175b-gb200-nvl72.yaml"))
    assert finding.field == "parallelism.tensor"
    assert "96" in finding.message and "72" in finding.message


def test_gb200_tensor_not_dividing_the_rack_straddles_it() -> None:
    # tensor 48 ≤ 72, but 72 % 48 ≠ 0: ranks 48..95 form a TP group across the rack boundary 72.
    overlay = {"parallelism": {"tensor": 48, "pipeline": 3, "data": 1, "zero_stage": 0}}
    (finding,) = findings_of(check_overlay(overlay, "gpt3-175b-gb200-nvl72.yaml"))
    # Groups 0..47, 48..95 and 96..143: only 48..95 crosses the rack boundary at 72. The message
    # shows its first ranks.
    assert "[48, 49, 50," in finding.message
    assert "domains 0 and 1" in finding.message


def test_gb200_straddle_with_tp_first_does_not_blame_the_order() -> None:
    overlay = {"parallelism": {"tensor": 48, "pipeline": 3, "data": 1, "zero_stage": 0}}
    (finding,) = findings_of(check_overlay(overlay, "gpt3-175b-gb200-nvl72.yaml"))
    assert "put tp first" not in finding.fix
    assert "72" in finding.fix or "divide" in finding.fix
