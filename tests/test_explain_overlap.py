"""planc explain says, per class of communication, what hid behind compute and what was exposed
(issue 24), from the numbers the step composes. Expected values worked by hand below."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from planc.analysis import analyse, estimate_step
from planc.cli.main import main
from planc.perf.inputs import build_inputs, efficiency_of
from planc.perf.step import (
    StageInputs,
    StepInputs,
    dp_hidden_s,
    overlaps,
    pipeline_step,
    virtual_times,
)

from conftest import job_of

ROOT = Path(__file__).resolve().parent.parent


def _inputs(dp_overlapped: float) -> StepInputs:
    stage = StageInputs(
        forward_s=(1.0,),
        backward_s=(2.0,),
        tp_forward_s=(0.1,),
        tp_backward_s=(0.2,),
        dp_buckets_s=(0.5, 0.5),
        after_step_s=0.3,
        tp_overlapped_s=0.5,
        cp_exposed_s=0.05,
        cp_overlapped_s=0.15,
        dp_overlapped_s=dp_overlapped,
    )
    return StepInputs(
        stages=(stage,), m=2, v=1, p2p_s=0.0, tp_processor_usage=0.1, dp_processor_usage=0.02
    )


def _by_kind(dp_overlapped: float) -> dict[str, tuple[float, float, float]]:
    found = overlaps(_inputs(dp_overlapped), 0, pp_total_s=0.2, pp_exposed_s=0.05)
    return {o.kind: (o.hidden_s, o.exposed_s, o.slowdown_s) for o in found}


def test_each_class_hidden_and_exposed_by_hand() -> None:
    got = _by_kind(1.0)
    # TP: m = 2 micro-batches × 0.5 s hidden, × (0.1 + 0.2) s exposed; slows compute 0.1 × 1.0.
    assert got["tp"] == pytest.approx((1.0, 0.6, 0.1))
    # CP: m × 0.15 s hidden behind attention, m × 0.05 s exposed (no processor usage given).
    assert got["cp"] == pytest.approx((0.3, 0.1, 0.0))
    # DP: 1.0 s a micro-batch hides inside its 3.0 s of compute (2.0 s over two); that leaves
    # 2.0 s of the backward free for the two 0.5 s buckets, so only the last is exposed (0.5),
    # the other hidden (0.5); 0.3 s after the optimizer step: hidden 2.5, exposed 0.8,
    # slowing compute 0.02 × 2.5.
    assert got["dp"] == pytest.approx((2.5, 0.8, 0.05))
    # PP: 0.2 s of sends, 0.05 s on the critical path.
    assert got["pp"] == pytest.approx((0.15, 0.05, 0.0))
    assert "ep" not in got  # a stage without experts has no expert line


def test_gathers_longer_than_the_compute_are_exposed() -> None:
    # 4.0 s of FSDP gathers a micro-batch against 3.0 s of compute that they slow by 0.02: the
    # compute lasts 3.0/0.98 s beside them, all of which hides, and 4.0 − 3.0/0.98 is exposed
    # each; no backward left for the buckets, so both are exposed after the last one:
    # max(0.5, 1.0).
    hidden, exposed, _ = _by_kind(4.0)["dp"]
    assert hidden == pytest.approx(2 * 3.0 / 0.98)
    assert exposed == pytest.approx(2 * (4.0 - 3.0 / 0.98) + 1.0 + 0.3)


def test_communication_longer_than_the_slowed_compute_sets_the_time() -> None:
    # Per micro-batch: compute W = 3.0 s beside C of gathers that take u = 0.02 of its SMs.
    # C = 2.0 hides whole (2.0·0.98 < 3.0): the compute ends at W + u·C = 3.04 s. C = 4.0
    # outlasts the compute slowed to W/(1 − u) = 3.061 s: the micro-batch takes C, 4.0 s, not
    # C + u·W as charging the slowdown on top of the exposed part would give.
    for c, want in ((2.0, 3.0 + 0.02 * 2.0), (4.0, 4.0)):
        t_f, t_b = virtual_times(_inputs(c))
        stage = _inputs(c).stages[0]
        own = t_f[0] + t_b[0] - sum(stage.tp_forward_s) - sum(stage.tp_backward_s)
        tp_cp = 0.1 * 0.5 + stage.cp_exposed_s  # TP's slowdown and the exposed CP exchange
        assert own - tp_cp == pytest.approx(want, rel=1e-12)
    # A collective taking every SM stalls the compute: it hides whole and the window follows it.
    assert dp_hidden_s(4.0, 3.0, 1.0) == 4.0


def test_explain_prints_them_and_its_json_matches_the_step() -> None:
    spec = ROOT / "examples" / "llama3-70b-8x8.yaml"
    text = CliRunner().invoke(main, ["explain", str(spec)]).output
    assert "communication hidden and exposed (stage" in text
    data = json.loads(CliRunner().invoke(main, ["explain", str(spec), "--format", "json"]).output)
    step = data["step"]
    classes = {c["kind"]: c for c in step["communication_overlap"]["classes"]}
    # The TP exposure is the step's own figure for the busiest stage, and it shows in the text.
    assert classes["tp"]["exposed_s"] == pytest.approx(step["tp_comm_s"])
    assert f"exposed {classes['tp']['exposed_s']:8.3f} s" in text
    assert classes["pp"]["exposed_s"] == pytest.approx(step["pp_comm_s"])


def test_expert_exchanges_a_serial_schedule_hides_nothing_not_minus_zero() -> None:
    # Megatron-Core's default schedule serialises the expert exchanges: all of them exposed,
    # m = 2 micro-batches × (0.1 + 0.7 + 0.2 + 0.4) s = 2.8 s, and exactly nothing hidden
    # ((0.1 + 0.7) + (0.2 + 0.4) - (0.1 + 0.7) - (0.2 + 0.4) is -1.1e-16 in floating point,
    # which explain printed as "-0.000 s").
    base = _inputs(0.0)
    stage = replace(
        base.stages[0],
        forward_s=(1.0, 1.0),
        backward_s=(2.0, 2.0),
        tp_forward_s=(0.0, 0.0),
        tp_backward_s=(0.0, 0.0),
        ep_forward_s=(0.1, 0.7),
        ep_backward_s=(0.2, 0.4),
    )
    inputs = replace(base, stages=(stage,), v=2)
    ep = next(o for o in overlaps(inputs, 0, 0.0, 0.0) if o.kind == "ep")
    assert ep.hidden_s == 0.0 and math.copysign(1.0, ep.hidden_s) == 1.0
    assert ep.exposed_s == pytest.approx(2.8)


def test_a_hidden_context_exchange_slows_the_attention_beside_it() -> None:
    # 0.15 s of CP a micro-batch hidden behind attention on a link whose NCCL kernels take 0.2
    # of the SMs: each micro-batch's backward runs 0.2 × 0.15 = 0.03 s longer, and explain says
    # so for the m = 2 micro-batches (0.06 s). Without processor usage nothing changes.
    base = _inputs(0.0)
    stage = replace(base.stages[0], cp_overlapped_s=0.15)
    slowed = replace(base, stages=(stage,), cp_processor_usage=0.2)
    t_f, t_b = virtual_times(slowed)
    f0, b0 = virtual_times(base)
    assert t_f == f0
    assert t_b[0] - b0[0] == pytest.approx(0.03)
    cp = next(o for o in overlaps(slowed, 0, 0.0, 0.0) if o.kind == "cp")
    assert cp.slowdown_s == pytest.approx(0.06)
    assert virtual_times(replace(base, stages=(stage,))) == (f0, b0)


def test_the_step_charges_the_context_exchange_it_hides() -> None:
    # torchtitan's ring on 8 ranks of one node: the hidden exchange is the ops' time less the
    # exposed part, and it slows the compute by NVLink's processor usage.
    plan = job_of(
        {
            "parallelism": {"tensor": 1, "context": 8, "cp_comm_type": "allgather"},
            "training": {"seq_len": 131072, "global_batch": 1, "framework": "fsdp2"},
        }
    )
    an = analyse(plan)
    params = [share.total for share in an.parameters]
    experts = [share.expert_total for share in an.parameters]
    inputs = build_inputs(plan, params, experts, efficiency_of(plan), an.ops)
    st = inputs.stages[0]
    cp_total = sum(an.op_seconds[op] for op in an.ops if op.group == "cp" and op.stage == 0)
    assert st.cp_overlapped_s == pytest.approx(cp_total / inputs.m - st.cp_exposed_s)
    assert inputs.cp_processor_usage == 0.15  # H100 NVLink (efficiency.json)
    unslowed = replace(inputs, cp_processor_usage=0.0)
    step = estimate_step(an).step_time_s
    assert pipeline_step(inputs).step_time_s == pytest.approx(step)
    gap = step - pipeline_step(unslowed).step_time_s
    assert gap == pytest.approx(0.15 * inputs.m * st.cp_overlapped_s, rel=1e-9)
