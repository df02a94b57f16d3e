"""Megatron-Core's deferred LM-head weight gradients (training.defer_embedding_wgrad_compute):
what the last stage saves per micro-batch, what its input-gradient reduction then exposes, what
the flush costs, the arguments planc emits, and the refusals Megatron-Core's own config holds."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from test_frameworks import MEGATRON_ARGUMENTS, _run, megatron_case, megatron_python

from planc.analysis import analyse, estimate_step
from planc.comm.ends import EndCollective, Hides, Linear, head_gather_bytes
from planc.compile.frameworks import megatron_arguments
from planc.deferral import deferred_calls, flush_s
from planc.perf.ends import GemmTimes, _seconds
from planc.perf.inputs import build_inputs, comm_time_s, efficiency_of
from planc.perf.op_table import op_table
from planc.perf.step import pipeline_step
from planc.plannable import Plannable
from planc.vocab import Collective

from conftest import check_overlay, compiled, job_of

BASE = "llama3-70b-8x8.yaml"  # t 8, p 4, d 2, SP, m = 512 / 2 = 256 micro-batches
DEFER = {"training": {"defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": 100}}


def _inputs(job: Plannable) -> Any:
    analysis = analyse(job)
    params = [share.total for share in analysis.parameters]
    experts = [share.expert_total for share in analysis.parameters]
    return build_inputs(job, params, experts, analysis.efficiency, analysis.schedule.first_ops)


def _head_weight_s(job: Plannable) -> float:
    """W: the LM head's weight-gradient GEMM, as `planc explain --ops` lists it."""
    table = op_table(job)
    (head,) = [t for t in table.head if t.op.name == "lm head"]
    return head.backward_weight_s


def test_the_limit_defers_that_many_of_the_steps_head_calls() -> None:
    job = job_of(DEFER, BASE)
    assert deferred_calls(job, 3) == (100, 256)
    assert deferred_calls(job, 0) == (0, 0)  # no head on the first stage
    every = job_of({"training": {"defer_embedding_wgrad_compute": True}}, BASE)
    assert deferred_calls(every, 3) == (256, 256)  # limit 0: Megatron's "all micro-batches"
    assert deferred_calls(job_of(None, BASE), 3) == (0, 256)


def test_the_flush_gathers_the_first_input_then_each_next_beside_a_gemm() -> None:
    # drain_embedding_wgrad_compute: one gather alone, then k − 1 (gather ∥ GEMM), the last GEMM.
    assert flush_s(4, 2.0, 0.5) == 0.5 + 3 * 2.0 + 2.0
    assert flush_s(4, 1.0, 3.0) == 3.0 + 3 * 3.0 + 1.0
    assert flush_s(3, 2.0, 0.0) == 3 * 2.0  # no sequence parallelism: nothing gathered
    assert flush_s(0, 2.0, 0.5) == 0.0


def test_a_deferred_calls_reduction_has_no_gemm_beside_it() -> None:
    # One head pass: its reduce-scatter (3 s) beside the weight gradient (2 s), its input
    # gathered again (4 s) beside the data gradient (1 s). Half of the calls deferred:
    #   reduce-scatter shown 0.5·3 + 0.5·(3 − 2) = 2, hidden 0.5·2 = 1;
    #   re-gather shown 0.5·(4 − 1) = 1.5, hidden 0.5·1 = 0.5 (the deferred ones gather nothing).
    scatter = EndCollective(Collective.REDUCE_SCATTER, "rs", 1, True, "", Hides.WGRAD)
    regather = EndCollective(Collective.ALL_GATHER, "ag", 2, True, "", Hides.DGRAD)
    seconds = {"rs": 3.0, "ag": 4.0}
    gemms = {Linear.HEAD: GemmTimes(data_s=1.0, weight_s=2.0)}
    counted = ((scatter, 1), (regather, 1))
    forward, backward, hidden = _seconds(counted, lambda one: seconds[one.phase], gemms, True, 0.5)
    assert (forward, backward, hidden) == (0.0, 2.0 + 1.5, 1.0 + 0.5)
    assert _seconds(counted, lambda one: seconds[one.phase], gemms, True, 0.0) == (
        0.0,
        1.0 + 3.0,
        2.0 + 1.0,
    )


def test_the_last_stage_saves_its_deferred_gemms_and_pays_them_in_the_flush() -> None:
    plain, deferred = job_of(None, BASE), job_of(DEFER, BASE)
    before, after = _inputs(plain).stages, _inputs(deferred).stages
    weight = _head_weight_s(deferred)
    share = 100 / 256
    # The head's stage loses f·W of backward per micro-batch; the others are untouched.
    assert after[3].backward_s[-1] == pytest.approx(
        before[3].backward_s[-1] - share * weight, rel=1e-12
    )
    assert [s.backward_s for s in after[:3]] == [s.backward_s for s in before[:3]]
    # Its reduce-scatter is exposed for the deferred calls, and its re-gather not run for them.
    eff = efficiency_of(deferred)
    t = deferred.layout.t
    scatter = comm_time_s(deferred, eff, "reduce_scatter", t, 1 * 8192 * 8192 * 2, "nvlink")
    gather = comm_time_s(deferred, eff, "all_gather", t, head_gather_bytes(deferred), "nvlink")
    table = op_table(deferred)
    (head,) = [x for x in table.head if x.op.name == "lm head"]
    data = head.backward_data_s
    more = share * (scatter - max(0.0, scatter - weight)) - share * max(0.0, gather - data)
    assert after[3].tp_backward_s[-1] - before[3].tp_backward_s[-1] == pytest.approx(more, rel=1e-9)
    # The flush: 100 weight gradients with their inputs gathered, after the last backward.
    assert after[3].flush_s == pytest.approx(gather + 99 * max(weight, gather) + weight, rel=1e-12)
    assert {s.flush_s for s in after[:3]} == {0.0}


def test_the_flush_hides_in_the_drain_until_it_outlasts_it() -> None:
    # 100 deferred GEMMs on the last stage fit in the drain, while stages 0-2 run their last
    # backwards; the step is then shorter by the steady state's saving.
    plain, deferred = (
        estimate_step(analyse(job_of(None, BASE))),
        estimate_step(analyse(job_of(DEFER, BASE))),
    )
    assert deferred.flush_s == 0.0
    assert deferred.step_time_s < plain.step_time_s
    # Make the GEMMs 20 times as long as priced and the flush outlasts the drain: exposed.
    job = job_of(DEFER, BASE)
    inputs = _inputs(job)
    heavy = dataclasses.replace(
        inputs,
        stages=(
            *inputs.stages[:3],
            dataclasses.replace(inputs.stages[3], flush_s=20 * inputs.stages[3].flush_s),
        ),
    )
    step = pipeline_step(heavy)
    assert step.flush_exposed_s > 0
    assert step.step_time_s > pipeline_step(inputs).step_time_s


def test_megatron_arguments_name_the_deferral_and_its_limit() -> None:
    args, _ = megatron_arguments(compiled(job_of(DEFER, BASE)))
    words = " ".join(args).split()
    assert "--defer-embedding-wgrad-compute" in words
    assert words[words.index("--wgrad-deferral-limit") + 1] == "100"
    every, _ = megatron_arguments(
        compiled(job_of({"training": {"defer_embedding_wgrad_compute": True}}, BASE))
    )
    assert "--wgrad-deferral-limit" not in " ".join(every)
    assert "--defer-embedding-wgrad-compute" not in " ".join(
        megatron_arguments(compiled(job_of(None, BASE)))[0]
    )


MEGATRON_DEFERRAL = MEGATRON_ARGUMENTS + r"""
out = {}
for case, (lines, world, vocab) in json.load(sys.stdin).items():
    args = parsed(lines, world, vocab)
    try:
        arguments.validate_args(args)
        config = core_transformer_config_from_args(args)
        out[case] = [None, config.defer_embedding_wgrad_compute, config.wgrad_deferral_limit]
    except (AssertionError, ValueError) as refused:
        out[case] = [str(refused), None, None]
print(json.dumps(out))
"""

DEFERRAL_CASES: dict[str, tuple[str, dict[str, Any], bool]] = {
    "pipeline": (BASE, DEFER, False),
    "no-pipeline": ("llama3-8b-1node.yaml", DEFER, True),
    "no-fusion": (BASE, {"training": {**DEFER["training"], "grad_accum_fusion": False}}, True),
}


def test_megatron_core_takes_the_deferral_plc048_lets_through() -> None:
    python = megatron_python()
    payload = {}
    for case, (base, overlay, _) in DEFERRAL_CASES.items():
        plan = compiled(job_of(overlay, base))
        payload[case] = megatron_case(plan)
    built = _run(python, MEGATRON_DEFERRAL, payload)
    for case, (base, overlay, refused) in DEFERRAL_CASES.items():
        reason, on, limit = built[case]
        assert (reason is not None) == refused, (case, reason)
        assert reason is None or "defer embedding wgrad" in reason, reason
        fired = [f for f in check_overlay(overlay, base).findings if f.rule == "PLC048"]
        assert bool(fired) == refused, (case, [f.message for f in fired])
        if not refused:
            assert (on, limit) == (True, 100)


def test_the_deferral_is_megatrons_and_the_limit_needs_it() -> None:
    elsewhere = check_overlay({"training": {**DEFER["training"], "framework": "fsdp2"}}, BASE)
    assert any(
        f.rule == "PLC051" and "defer_embedding_wgrad_compute is Megatron-Core's" in f.message
        for f in elsewhere.findings
    )
    alone = check_overlay({"training": {"wgrad_deferral_limit": 8}}, BASE)
    assert any(f.rule == "PLC051" and "wgrad_deferral_limit 8" in f.message for f in alone.findings)
    head = check_overlay(
        {
            "training": {
                **DEFER["training"],
                "precision": "fp8",
                "fp8": {"recipe": "mxfp8", "output_proj": True},
            },
            "hardware": {"gpu": "b200"},
        },
        BASE,
    )
    assert any(f.rule == "PLC048" and "MXFP8 LM head" in f.message for f in head.findings)


def test_the_head_rank_keeps_each_deferred_calls_logits_gradient_and_input() -> None:
    # k = 100 calls, each the logits gradient over the rank's vocabulary slice (s·b·V'/t, V'
    # 128,256 padded to a multiple of 128·t = 1,024: 129,024, over t = 8) and the head's
    # sequence-parallel input shard ((s/t)·b·h), in bf16.
    from planc.memory.activations import stage_lines

    per_call = 2 * (8192 * 1 * (129_024 // 8) + (8192 // 8) * 1 * 8192)
    deferred = stage_lines(job_of(DEFER, BASE), 3)
    (term,) = [t for t in deferred.once if "deferred" in t.name]
    assert term.bytes == 100 * per_call
    plain = stage_lines(job_of(None, BASE), 3)
    assert sum(t.bytes for t in deferred.once) - sum(t.bytes for t in plain.once) == 100 * per_call
    assert not [t for t in stage_lines(job_of(DEFER, BASE), 2).once if "deferred" in t.name]
