"""DeepSpeed's pipeline engine (planc.perf.pipe_engine): blocking, serial transfers of each TP
rank's 1/t share with the receiver's all-gather, no message delay of its own in the simulation,
gradients reduced after the schedule, the ZeRO parameter gather inside the step. Expected values
by hand from DeepSpeed's engine.py, schedule.py and p2p.py (v0.5.10, v0.19.5)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from planc.analysis import analyse
from planc.perf.inputs import build_inputs, comm_time_s, efficiency_of, op_seconds
from planc.perf.pipe_engine import Transfer, blocking_p2p
from planc.perf.step import StageInputs, StepInputs, pipeline_step
from planc.pipeline import registry
from planc.plannable import Plannable, plannable
from planc.spec.load import load_text
from planc.vocab import ScheduleKind

S, H, T, P = 2048, 4096, 8, 4


def plan_of(framework: str, **training: Any) -> Plannable:
    spec = {
        "version": 1,
        "name": "pipe-engine",
        "model": {
            "layers": 8,
            "hidden": H,
            "heads": 32,
            "ffn_hidden": 4 * H,
            "vocab": 51200,
            "mlp": "gelu",
            "norm": "layernorm",
            "bias": True,
            "position_embedding": "learned",
            "max_seq_len": S,
        },
        "hardware": {"gpu": "a100-80gb", "nodes": 8},
        "parallelism": {"tensor": T, "pipeline": P, "zero_stage": 1},
        "training": {
            "seq_len": S,
            "micro_batch": 1,
            "global_batch": 16,
            "precision": "bf16",
            "recompute": "full",
            "attention": "eager",
            "framework": framework,
            **training,
        },
        "rules": {"ignore": ["PLC006"]},
    }
    job = load_text("pipe-engine.yaml", yaml.safe_dump(spec)).job
    assert job is not None
    plan = plannable(job)
    assert isinstance(plan, Plannable)
    return plan


def inputs_of(plan: Plannable) -> StepInputs:
    analysis = analyse(plan)
    params = [share.total for share in analysis.parameters]
    experts = [share.expert_total for share in analysis.parameters]
    return build_inputs(plan, params, experts, efficiency_of(plan), analysis.ops)


def test_each_stage_waits_for_its_own_transfers() -> None:
    # p = 4, send 2 ms, gather 1 ms. Stage 0 sends activations and receives gradients; the last
    # stage receives activations and sends gradients; the middle ones do all four. Every stage
    # but the last gathers its own partitioned output again before each backward (1 ms more).
    plan = plan_of("deepspeed")
    one = Transfer(2e-3, 1e-3)
    every = (one,) * P  # each boundary on the same tier
    first, middle, last = (blocking_p2p(plan, every, r) for r in (0, 1, P - 1))
    assert (first.forward_s, first.backward_s) == pytest.approx((2e-3, 4e-3))
    assert (middle.forward_s, middle.backward_s) == pytest.approx((5e-3, 6e-3))
    assert (last.forward_s, last.backward_s) == pytest.approx((3e-3, 2e-3))


def test_the_transfer_is_one_ranks_share_and_a_gather() -> None:
    # [s, b, h] in bf16 = 2048·4096·2 bytes; each of the 8 TP ranks sends 1/8 of it across nodes
    # and the receiver all-gathers the whole over NVLink.
    plan = plan_of("deepspeed")
    eff = efficiency_of(plan)
    ops = analyse(plan).ops
    whole = S * H * 2
    pp_link = next(op.link for op in ops if op.group == "pp")
    tp_link = next(op.link for op in ops if op.group == "tp")
    send = comm_time_s(plan, eff, "send_recv", 2, whole // T, pp_link)
    gather = comm_time_s(plan, eff, "all_gather", T, whole, tp_link)
    inputs = inputs_of(plan)
    assert inputs.p2p_s == 0.0  # no message delay beside the stages' own transfers
    middle = inputs.stages[1]
    assert middle.p2p_forward_s == pytest.approx(2 * send + gather, rel=1e-12)
    assert middle.p2p_backward_s == pytest.approx(2 * send + 2 * gather, rel=1e-12)
    assert inputs.stages[0].p2p_forward_s == pytest.approx(send, rel=1e-12)


def test_megatron_keeps_its_message_delay_and_no_blocking_transfers() -> None:
    inputs = inputs_of(plan_of("megatron"))
    assert inputs.p2p_s > 0.0
    assert all(st.p2p_forward_s == st.p2p_backward_s == 0.0 for st in inputs.stages)


def test_gradients_reduce_after_the_schedule_and_the_gather_is_exposed() -> None:
    # Megatron's buckets run during the last backward and its parameter gather hides behind
    # the next forward; DeepSpeed's engine reduces all its buckets in one block after the
    # schedule (ReduceGrads), and the ZeRO step's gather is exposed whole.
    plan = plan_of("deepspeed")
    analysis = analyse(plan)
    seconds = dict(zip(analysis.ops, op_seconds(plan, efficiency_of(plan), analysis.ops), strict=True))
    deepspeed, megatron = inputs_of(plan), inputs_of(plan_of("megatron"))
    for r, (mine, theirs) in enumerate(zip(deepspeed.stages, megatron.stages, strict=True)):
        ops = [op for op in analysis.ops if op.stage == r and op.group == "dp_cp"]
        reduce = sum(seconds[op] for op in ops if op.op == "reduce_scatter")
        gather = sum(seconds[op] for op in ops if op.op == "all_gather")
        assert len(theirs.dp_buckets_s) > 1
        assert mine.dp_buckets_s == pytest.approx((reduce,), rel=1e-12)
        assert mine.after_step_s >= gather * (1 - 1e-12)
        assert mine.after_step_s > theirs.after_step_s


def test_the_transfers_lie_on_the_pipeline_path() -> None:
    # p = 2, m = 1: F0 → F1 → B1 → B0 one after the other, each with its stage's transfers:
    # 1 + 0.1, 1 + 0.2, 2 + 0.3, 2 + 0.4 = 7.0 s.
    stages = (
        StageInputs((1.0,), (2.0,), (0.0,), (0.0,), p2p_forward_s=0.1, p2p_backward_s=0.4),
        StageInputs((1.0,), (2.0,), (0.0,), (0.0,), p2p_forward_s=0.2, p2p_backward_s=0.3),
    )
    step = pipeline_step(StepInputs(stages=stages, m=1, v=1, p2p_s=0.0))
    assert step.pipeline_s == pytest.approx(7.0)


def train_schedule_slots(p: int, m: int, stage: int) -> list[tuple[bool, int | None]]:
    """DeepSpeed's TrainSchedule (deepspeed/runtime/pipe/schedule.py, v0.5.10 and v0.19.5),
    written out: 2·(m + p − 1) slots, forward when slot and stage have the same parity; the
    micro-batch of each slot, None when it has none."""
    out: list[tuple[bool, int | None]] = []
    for k in range(2 * (m + p - 1)):
        forward = k % 2 == stage % 2
        half = k // 2 if k % 2 == 0 else (k - 1) // 2
        if forward:
            mb = half - stage // 2
        elif k % 2 == 0:
            mb = half - p + (stage + 1) // 2
        else:
            mb = half - p + 1 + stage // 2
        out.append((forward, mb if 0 <= mb < m else None))
    return out


def train_schedule_makespan(p: int, m: int, t_f: list[float], t_b: list[float]) -> float:
    """The slots run with blocking exchanges: a forward slot exchanges with the previous stage
    (RecvActivation, SendGrad), a backward slot with the next (SendActivation, RecvGrad), so
    both partners start the slot when both ended the one before; a slot without a micro-batch
    and without a message to send is idle."""
    slots = [train_schedule_slots(p, m, r) for r in range(p)]
    end = [0.0] * p
    for k in range(2 * (m + p - 1)):
        new = []
        for r in range(p):
            forward, mb = slots[r][k]
            sends = k > 0 and slots[r][k - 1][1] is not None
            partner = r - 1 if forward else r + 1
            start = end[r]
            if 0 <= partner < p and (mb is not None or sends):
                start = max(start, end[partner])
            work = 0.0 if mb is None else (t_f[r] if forward else t_b[r])
            new.append(start + work)
        end = new
    return max(end)


@pytest.mark.parametrize(("p", "m"), [(2, 1), (4, 8), (5, 7), (8, 3), (6, 24)])
def test_train_schedule_runs_as_1f1b(p: int, m: int) -> None:
    # Uneven stages, no message time: DeepSpeed's slot stream ends when Megatron's 1F1B does,
    # which is why the step model simulates it as 1F1B.
    t_f = [1.0 + 0.1 * ((3 * r) % 5) for r in range(p)]
    t_b = [2.0 * f + 0.05 * (r % 3) for r, f in enumerate(t_f)]
    ours = registry.run(ScheduleKind.ONE_F_ONE_B, p, m, 1, t_f, t_b, 0.0)
    assert train_schedule_makespan(p, m, t_f, t_b) == pytest.approx(max(ours.stage_end_s))
