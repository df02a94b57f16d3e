"""PLC040 pipeline neighbours stay inside a leaf or pod when an order keeps them there.

Base: Llama 3 70B on 8 nodes of 8 H100, t = 8, p = 4, d = 2. Order tp-cp-dp-pp: strides tp 1,
dp 8, pp 16, so a pipeline group is r, r + 16, r + 32, r + 48 over all 64 GPUs; order
tp-cp-pp-dp: pp stride 8, a pipeline group spans 32 GPUs, dp stride 32.
"""

from __future__ import annotations

from typing import Any

from planc.analysis import analyse, estimate_step
from planc.comm.schedule import link_class
from planc.findings import Severity
from planc.vocab import Axis

from conftest import check_overlay, job_of, rules_fired

BASE = "llama3-70b-8x8.yaml"
LEAF_SPINE = [{"name": "leaf", "nodes": 4}, {"name": "spine"}]  # leaf: 32 GPUs


def _spec(order: str, fabric: Any = None, **more: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "hardware": {"nodes": 8, "hosts": [], "fabric": fabric or LEAF_SPINE},
        "parallelism": {"tensor": 8, "pipeline": 4, "data": 2, "order": order},
    }
    for key, value in more.items():
        spec.setdefault(key, {}).update(value)
    return spec


def test_fails_when_the_pipeline_crosses_the_spine_and_an_order_keeps_it_on_the_leaf() -> None:
    (finding,) = [
        f for f in check_overlay(_spec("tp-cp-dp-pp"), BASE).findings if f.rule == "PLC040"
    ]
    assert finding.severity is Severity.WARNING and finding.field == "parallelism.order"
    assert (
        "the pipeline groups (4 stages 16 ranks apart) span 64 GPUs: their sends cross spine "
        "(50 GB/s per GPU), past the leaf blocks of 32 GPUs" in finding.message
    )
    assert finding.fix.startswith(
        "use order: tp-cp-pp-dp: planc places the pipeline groups on leaf (50 GB/s per GPU)"
    )


def test_passes_under_the_order_it_proposes() -> None:
    assert "PLC040" not in rules_fired(check_overlay(_spec("tp-cp-pp-dp"), BASE))


def test_two_tier_fabrics_never_fire() -> None:
    # The same layout on today's nvlink + network: nothing lies between them.
    spec = _spec("tp-cp-dp-pp")
    del spec["hardware"]["fabric"]
    assert "PLC040" not in rules_fired(check_overlay(spec, BASE))


# The probe: Llama 3 8B at s = 32,768 without sequence parallelism (a pipeline send is
# s·h·2 = 32,768 · 4,096 · 2 = 268 MB), pods of 4 nodes (32 GPUs) joined 1:7.
PODS = [{"name": "pod", "nodes": 4}, {"name": "aggregation", "oversubscription": 7}]
PROBE = {
    "model": {"preset": "llama3-8b"},
    "parallelism": {"sequence_parallel": False, "zero_stage": 0},
    "training": {"global_batch": 64, "seq_len": 32768, "recompute": "full"},
}


def _probe(order: str) -> dict[str, Any]:
    return _spec(order, PODS, **PROBE)


def test_pipeline_neighbours_in_different_pods_get_the_finding_and_its_fix_helps() -> None:
    before, after = _probe("tp-cp-dp-pp"), _probe("tp-cp-pp-dp")
    (finding,) = [f for f in check_overlay(before, BASE).findings if f.rule == "PLC040"]
    # The sends cross the 1:7 layer: 50 / 7 = 7.14 GB/s.
    assert (
        "cross aggregation (7.14 GB/s per GPU), past the pod blocks of 32 GPUs" in finding.message
    )
    assert "use order: tp-cp-pp-dp" in finding.fix
    # Applied, the pipeline stays in the pod, the finding goes, the step and the pipeline's
    # communication time both drop.
    assert link_class(job_of(after, BASE), (Axis.PP,)) == "pod"
    assert "PLC040" not in rules_fired(check_overlay(after, BASE))
    old, new = (
        estimate_step(analyse(job_of(before, BASE))),
        estimate_step(analyse(job_of(after, BASE))),
    )
    assert new.step_time_s < old.step_time_s
    assert new.pp_comm_s < old.pp_comm_s


def test_no_finding_when_every_inner_order_is_slower() -> None:
    # Llama 3 70B on the 1:7 pods: keeping the pipeline in the pod puts the (far larger) data-
    # parallel reduction through the 1:7 layer as a flat ring, which planc prices slower; the
    # rule does not propose it.
    spec = _spec("tp-cp-dp-pp", PODS)
    assert link_class(job_of(spec, BASE), (Axis.PP,)) == "aggregation"
    assert "PLC040" not in rules_fired(check_overlay(spec, BASE))
