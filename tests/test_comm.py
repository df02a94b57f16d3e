"""Communication schedule and step-time estimate, against hand-derived numbers and Table 5."""

from __future__ import annotations

from fractions import Fraction

import pytest

from planc.analysis import analyse, estimate_step
from planc.comm.cost import bus_factor, ring_steps, wire_bytes
from planc.comm.schedule import link_class, schedule, wire_budget
from planc.perf.inputs import model_flops
from planc.pipeline.bubble import bubble_fraction
from planc.spec.load import load_text

from conftest import analysis_of, job_of, plannable_of


def test_nccl_bus_factors() -> None:
    # nccl-tests PERFORMANCE.md: all-reduce 2(n-1)/n, reduce-scatter and all-gather (n-1)/n.
    assert bus_factor("all_reduce", 4) == Fraction(3, 2)
    assert bus_factor("reduce_scatter", 8) == Fraction(7, 8)
    assert bus_factor("all_gather", 1) == 0
    assert wire_bytes("all_reduce", 4, 800) == 1200
    assert wire_bytes("all_gather", 3, 10) == 7  # ceil(20/3)
    assert (
        ring_steps("all_reduce", 8),
        ring_steps("all_gather", 8),
        ring_steps("send_recv", 2),
    ) == (14, 7, 1)


def _ops(base: str, overlay: str | None = None):  # type: ignore[no-untyped-def]
    job = job_of(overlay, base)
    return job, schedule(job, [10_000_000] * job.layout.p)


def test_tp_with_sequence_parallel_on_70b_example() -> None:
    _, ops = _ops("llama3-70b-8x8.yaml")
    tp = [o for o in ops if o.stage == 0 and o.group == "tp"]
    assert {o.op for o in tp} == {"all_gather", "reduce_scatter"}
    calls = {kind: sum(o.calls for o in tp if o.op == kind) for kind in ("all_gather", "reduce_scatter")}
    # Per block (attention, MLP), 2 a layer, and micro-batch, 20 layers, m = 256: all-gathers of
    # the input (forward), of the output's gradient and of the input again for the weight
    # gradient (backward); reduce-scatters of the output (forward) and the input's gradient.
    # Stage 0 also reduce-scatters the word embedding's output and gathers its gradient, once a
    # micro-batch (VocabParallelEmbedding with SP).
    assert calls == {"all_gather": 3 * 2 * 20 * 256 + 256, "reduce_scatter": 2 * 2 * 20 * 256 + 256}
    for op in tp:
        # gathered b·s·h·2 bytes = 1·8192·8192·2.
        assert op.buffer_bytes == 8192 * 8192 * 2
        assert op.link == "nvlink" and op.group_size == 8


def test_tp_without_sequence_parallel_all_reduces_and_full_recompute_repeats_forward() -> None:
    _, ops = _ops(
        "llama3-70b-8x8.yaml",
        "{parallelism: {sequence_parallel: false}, training: {recompute: full}}",
    )
    fwd, bwd, embedding = [o for o in ops if o.stage == 0 and o.group == "tp"]
    assert (fwd.op, bwd.op) == ("all_reduce", "all_reduce")
    assert fwd.calls == 2 * 20 * 256
    assert bwd.calls == 2 * 20 * 256 + 2 * 20 * 256
    # the word embedding's output, all-reduced once a micro-batch (not recomputed)
    assert (embedding.op, embedding.calls) == ("all_reduce", 256)
    assert "word embedding" in embedding.phase


def test_pipeline_sends_per_stage() -> None:
    job, ops = _ops("llama3-70b-8x8.yaml")
    pp = [o for o in ops if o.group == "pp"]
    by_stage = {(o.stage, "next" in o.phase): o.calls for o in pp}
    # 1F1B: every stage but the last sends m activations forward; all but the first send m grads back.
    assert by_stage == {
        (0, True): 256,
        (1, True): 256,
        (2, True): 256,
        (1, False): 256,
        (2, False): 256,
        (3, False): 256,
    }
    # [s/t, b, h] with sequence parallelism: 8192/8 · 1 · 8192 · 2 bytes, across nodes.
    assert {o.buffer_bytes for o in pp} == {1024 * 8192 * 2}
    assert {o.link for o in pp} == {"network"}
    wires = wire_budget(job, ops)
    assert sum(w.tiers["network"].sent for w in wires) == sum(w.tiers["network"].received for w in wires)


def test_zero_stages_change_dp_traffic() -> None:
    base = "llama3-8b-1node.yaml"
    for zero, kinds in (
        (0, ["all_reduce"]),
        (1, ["reduce_scatter", "all_gather"]),
        (3, ["reduce_scatter", "all_gather"]),
    ):
        _, ops = _ops(base, f"{{parallelism: {{zero_stage: {zero}}}}}")
        dp = [o for o in ops if o.group == "dp_cp"]
        assert [o.op for o in dp] == kinds
        assert {o.group_size for o in dp} == {4}
    _, zero3 = _ops(base, "{parallelism: {zero_stage: 3}}")
    gather = next(o for o in zero3 if o.group == "dp_cp" and o.op == "all_gather")
    # m = 64 / (1 · 4) = 16 micro-batches; Ψ_r = 10^7 < one 4·10^7-element bucket; gathered
    # before forward and before backward of every micro-batch: 2 · 16 · 1.
    assert gather.calls == 2 * 16 * 1


def test_link_class_follows_the_order() -> None:
    job = job_of(
        "{parallelism: {tensor: 2, data: 4, order: dp-tp-cp-pp}, hardware: {nvlink_domain: 4, gpus_per_node: 4, nodes: 2, hosts: [a, b]}}"
    )
    assert link_class(job, ("tp",)) == "network"
    assert link_class(job, ("dp", "cp")) == "nvlink"


def test_model_flops_match_the_gpt_closed_form() -> None:
    # Narayanan et al. 2021: 72·B·s·L·h²·(1 + s/(6h) + V/(12hL)) without recompute (MHA, f = 4h,
    # weight matmuls only, the LM head over V).
    job = job_of(None, "gpt3-175b-1024xa100.yaml")
    B, s, L, h, V = 1536, 2048, 96, 12288, 50257
    closed = Fraction(72 * B * s * L * h * h) * (1 + Fraction(s, 6 * h) + Fraction(V, 12 * h * L))
    assert model_flops(job) == pytest.approx(float(closed), rel=1e-12)


# Korthikanti et al. 2022, Table 5: measured seconds per iteration on A100 (full recompute,
# sequence parallel + selective recompute). Configurations from the paper's Table 3.
TABLE5 = [
    ("gpt-22b", 8, 1, 1, 4, 4, 1.42, 1.10),
    ("gpt3-175b", 64, 8, 3, 64, 1, 18.13, 13.75),
    ("gpt-530b", 280, 35, 3, 280, 1, 49.05, 37.83),
    ("gpt-1t", 512, 64, 1, 512, 1, 94.42, 71.49),
]
# Issue 12's targets, for the estimate users get (`planc explain`: analyse → estimate_step, with
# the memory model's parameter counts): mean absolute error ≤ 3.5 %, worst ≤ 8 %. The GEMM curve
# was fitted to the four full-recompute runs only (docs/explain.md); the selective runs did not
# inform it.
MEAN_TARGET, WORST_TARGET = 0.035, 0.08


def table5_step(case: tuple[str, int, int, int, int, int, float, float], mode: str) -> float:
    name, gpus, p, v, B, b, _, _ = case
    sp = "true" if mode == "selective" else "false"
    text = (
        f"version: 1\nname: t5\nmodel: {{preset: {name}}}\nhardware: {{gpu: a100-80gb, nodes: {gpus // 8}}}\n"
        f"parallelism: {{tensor: 8, pipeline: {p}, virtual_stages: {v}, sequence_parallel: {sp}}}\n"
        f"training: {{seq_len: 2048, micro_batch: {b}, global_batch: {B}, precision: fp16, recompute: {mode}, attention: eager}}\n"
    )
    job = plannable_of(load_text("t5.yaml", text).job)
    return estimate_step(analyse(job)).step_time_s


def test_step_time_against_table5() -> None:
    errors = []
    for case in TABLE5:
        for mode, measured in (("full", case[6]), ("selective", case[7])):
            errors.append((table5_step(case, mode) - measured) / measured)
    worst = max(abs(e) for e in errors)
    mean = sum(abs(e) for e in errors) / len(errors)
    assert worst <= WORST_TARGET, errors
    assert mean <= MEAN_TARGET, errors


def test_simulated_pipeline_is_bounded_by_the_slowest_stage() -> None:
    analysis = analysis_of(None, "llama3-70b-8x8.yaml")
    step = estimate_step(analysis)
    assert step.pipeline.method == "simulated" and step.pipeline.simulated_ops == 2 * 4 * 256
    slowest = max(t.forward_s + t.backward_s for t in analysis.times)
    # The slowest stage must run all m micro-batches, and everything waits for it to fill.
    assert step.pipeline.makespan_s >= 256 * slowest
    # Unequal stages (embedding first, LM head last) only add idle time to the closed form.
    assert step.pipeline.bubble_fraction >= bubble_fraction(4, 256, 1) - 1e-12


def test_no_bubble_without_a_pipeline() -> None:
    analysis = analysis_of()
    step = estimate_step(analysis)
    assert step.pipeline.bubble_fraction == 0 and step.bubble_s == 0
