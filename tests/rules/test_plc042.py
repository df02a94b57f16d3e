"""PLC042 an oversubscribed tier costs no more than a hundredth of the step.

Base: Llama 3 70B (t = 8, p = 4) under pods of 4 or 8 nodes joined by a 1:7 aggregation layer.
The cost is the step planc estimates less the step of the same spec written at full bisection
(oversubscription 1), a separate spec loaded on its own.
"""

from __future__ import annotations

from typing import Any

import pytest

from planc.analysis import analyse, estimate_step
from planc.findings import Severity
from planc.vocab import GroupKind

from conftest import check_overlay, job_of, rules_fired

BASE = "llama3-70b-8x8.yaml"


def _spec(
    nodes: int, pod: int, data: int, order: str, k: float = 7, batch: int = 64
) -> dict[str, Any]:
    return {
        "hardware": {
            "nodes": nodes,
            "hosts": [],
            "fabric": [
                {"name": "pod", "nodes": pod},
                {"name": "aggregation", "oversubscription": k},
            ],
        },
        "parallelism": {"tensor": 8, "pipeline": 4, "data": data, "order": order},
        "training": {"global_batch": batch},
    }


def _finding(spec: dict[str, Any]) -> Any:
    (finding,) = [f for f in check_overlay(spec, BASE).findings if f.rule == "PLC042"]
    return finding


def test_fails_with_the_cost_against_full_bisection() -> None:
    # Order tp-cp-pp-dp: the DP pairs r, r + 32 sit in different pods: through the 1:7 layer.
    spec = _spec(8, 4, 2, "tp-cp-pp-dp")
    finding = _finding(spec)
    assert finding.severity is Severity.WARNING and finding.field == "parallelism.order"
    step = estimate_step(analyse(job_of(spec, BASE))).step_time_s
    full = estimate_step(analyse(job_of(_spec(8, 4, 2, "tp-cp-pp-dp", k=1), BASE))).step_time_s
    assert step - full > 0.01 * step
    assert (
        f"the 1:7 tier aggregation (7.14 GB/s per GPU) costs {step - full:.3f} s of the "
        f"{step:.3f} s step ({(step - full) / step:.1%}; at full bisection {full:.3f} s)"
    ) in finding.message
    # DP r, r + 32 has one member per pod: a hierarchical all-reduce is the flat ring; not shown.
    assert "hierarchical all-reduce would take" not in finding.message
    assert finding.fix.startswith("use order: tp-cp-dp-pp (")


def test_the_order_it_proposes_passes() -> None:
    assert "PLC042" not in rules_fired(check_overlay(_spec(8, 4, 2, "tp-cp-dp-pp"), BASE))


def test_full_bisection_never_fires() -> None:
    assert "PLC042" not in rules_fired(check_overlay(_spec(8, 4, 2, "tp-cp-pp-dp", k=1), BASE))


def test_the_hierarchical_alternative_by_hand() -> None:
    # 32 nodes, pods of 8 (64 GPUs), t = 8, p = 4, d = 8 in order tp-cp-pp-dp: DP stride 32,
    # members r, r + 32, …, r + 224: 2 in each pod, 4 pods. Each of the stage's DP ops of M bytes
    # hierarchically, at e and α of the network entry: half an all-reduce (reduce-scatter or
    # all-gather) of 2·(1/2)·M/(50e) + 2α in the pod, then 2·(3/4)·(M/2)/((50/7)e) + 6α across.
    spec = _spec(32, 8, 8, "tp-cp-pp-dp", batch=256)
    analysis = analyse(job_of(spec, BASE))
    eff = analysis.efficiency.network
    alpha = eff.latency_us * 1e-6
    want = 0.0
    for op in (o for o in analysis.ops if o.stage == 0 and o.group is GroupKind.DP_CP):
        e = eff.of(str(op.op))
        m = op.buffer_bytes
        inner = 2 * (1 / 2) * m / (50e9 * e) + 2 * alpha
        outer = 2 * (3 / 4) * (m / 2) / (50e9 / 7 * e) + 6 * alpha
        want += op.calls * 0.5 * (inner + outer)
    finding = _finding(spec)
    assert f"a hierarchical all-reduce would take {want:.3f} s" in finding.message


def test_a_large_run_in_meta_s_pods_fires() -> None:
    # The Llama 3 405B example ignores PLC042 (Meta's collectives are topology-aware); the same
    # spec with nothing ignored fires it.
    from conftest import EXAMPLES, check_text

    text = (EXAMPLES / "llama3-405b-16384xh100.yaml").read_text("utf-8")
    result = check_text(text.replace("  ignore: [PLC042]\n", ""))
    assert rules_fired(result) == {"PLC042"}


@pytest.mark.parametrize("order", ["tp-cp-dp-pp", "tp-cp-pp-dp"])
def test_two_tier_fabrics_never_fire(order: str) -> None:
    spec = _spec(8, 4, 2, order)
    del spec["hardware"]["fabric"]
    assert "PLC042" not in rules_fired(check_overlay(spec, BASE))
