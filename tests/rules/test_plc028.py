"""PLC028 the expert all-to-all across NVLink domains takes no longer than the expert compute.

Base: Mixtral 8x7B on 8 nodes of 8 H100 (EP = 8, EDP = 2, p = 4, m = 32), T = 4,096 tokens per
rank, k = 2: one dispatch or combine moves 8,192 rows of 4,096 bf16 values = 67,108,864 bytes,
7/8 of them off the rank. With dp faster than ep (EP stride 2) each EP group has 4 members on
each of 2 nodes: 4/8 of the buffer crosses the network, 3/8 stays on NVLink.
"""

from __future__ import annotations

from typing import Any

from planc.findings import Severity
from planc.rules.perf import expert_order, smaller_expert_parallel

from conftest import check_overlay, job_of, resolved_of, rules_fired

BASE = "mixtral-8x7b-64xh100.yaml"
CROSSING = {"parallelism": {"order": "tp-cp-dp-ep-pp"}}  # dp faster than ep: EP stride 2


def _with(inter_gbs: float, order: str = "tp-cp-dp-ep-pp") -> dict[str, Any]:
    return {"hardware": {"inter_node": {"bandwidth_gbs": inter_gbs}}, "parallelism": {"order": order}}


def test_fails_when_the_crossing_exchange_outlasts_the_experts() -> None:
    result = check_overlay(_with(10), BASE)
    (finding,) = [f for f in result.findings if f.rule == "PLC028"]
    assert finding.severity is Severity.WARNING and finding.field == "parallelism.expert"
    # By hand: the network part, (n − g)/n = 4/8 of 67,108,864 B = 33,554,432 B, is the longer
    # of the two: 2 × (33,554,432 B / (10 GB/s × 0.96 all-to-all efficiency) + 1 latency × 5 µs:
    # NCCL runs the 7 peers in one batch of 8) = 7.00 ms, beside about 5.1 ms of experts.
    assert "(the alltoall dispatcher) takes 7.00 ms per micro-batch on the network" in (
        finding.message
    )
    assert "EP groups of 8 ranks cross NVLink domains" in finding.message
    # Both fixes are checked with planc's model: EP 1 (no exchange at all) and the default
    # order, where the EP groups are the 8 GPUs of one node: on NVLink, 2 × (58,720,256 B /
    # (450 GB/s × 0.82) + 1 × 2 µs) = 0.32 ms.
    assert "order: tp-cp-ep-dp-pp (all-to-all on NVLink, 0.32 ms)" in finding.fix


def test_each_listed_fix_passes_when_applied() -> None:
    assert "PLC028" not in rules_fired(check_overlay(_with(10, "tp-cp-ep-dp-pp"), BASE))
    overlay = _with(10)
    overlay["parallelism"]["expert"] = 1
    overlay["parallelism"]["data"] = 16
    assert "PLC028" not in rules_fired(check_overlay(overlay, BASE))


def test_passes_inside_the_domain_however_slow_the_network() -> None:
    assert "PLC028" not in rules_fired(check_overlay(_with(1, "tp-cp-ep-dp-pp"), BASE))


def test_passes_when_the_network_exchange_is_shorter_than_the_experts() -> None:
    # 20 GB/s: 2 × (33,554,432 / 19.2e9 + 5 µs) = 3.51 ms, below the experts' ~5.1 ms (with
    # (n − 1)/n = 7/8 of the buffer counted on the network it was 6.13 ms, and fired).
    assert "PLC028" not in rules_fired(check_overlay(_with(20), BASE))


def test_dense_models_never_fire() -> None:
    assert "PLC028" not in rules_fired(
        check_overlay({"hardware": {"inter_node": {"bandwidth_gbs": 1}}}, "llama3-70b-8x8.yaml")
    )


def test_fix_candidates() -> None:
    job = resolved_of(CROSSING, BASE)
    # Divisors of E = 8 below EP = 8, largest first; the order fix only when it changes things.
    assert [words for words, _ in smaller_expert_parallel(job)] == [
        "expert: 4",
        "expert: 2",
        "expert: 1",
    ]
    assert [words for words, _ in expert_order(job)] == ["order: tp-cp-ep-dp-pp"]
    assert expert_order(resolved_of(None, BASE)) == []
    assert job_of(CROSSING, BASE).layout.ep == 8
