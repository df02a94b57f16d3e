"""One derivation of a rank's dims and the run's number formats (planc.dims), read by memory,
the step model and the communication schedule alike. Expected values are divided by hand."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from planc.analysis import analyse, estimate_step
from planc.cli.main import main
from planc.comm.schedule import schedule
from planc.dims import numerics_for, routed_rows
from planc.memory.activations import expert_shape as memory_expert_shape
from planc.memory.activations import shape_of
from planc.perf.inputs import device_of, layer_shape
from planc.plannable import Plannable, plannable
from planc.presets.efficiency import for_gpu, from_json, to_json
from planc.vocab import DType, Precision

from conftest import EXAMPLES, check_text, job_of, resolved_of, rules_fired

LLAMA70 = "llama3-70b-8x8.yaml"


@pytest.mark.parametrize(
    ("precision", "fp32_grads", "expected"),
    [
        # (weight, master, gradient, activation, loss scaling): Micikevicius et al. 2018 mixed
        # precision; Megatron's fp32 main grads; plain fp32 training.
        ("bf16", False, (2, 4, 2, 2, False)),
        ("bf16", True, (2, 4, 4, 2, False)),
        ("fp16", False, (2, 4, 2, 2, True)),
        ("fp32", False, (4, 0, 4, 4, False)),
        ("fp32", True, (4, 0, 4, 4, False)),
    ],
)
def test_number_formats_by_precision(
    precision: Precision, fp32_grads: bool, expected: tuple[int, int, int, int, bool]
) -> None:
    n = numerics_for(precision, fp32_grads)
    assert (n.weight, n.master, n.gradient, n.activation, n.loss_scaling) == expected
    assert n.gemm is DType(precision)


def test_llama3_70b_rank_dims_by_hand() -> None:
    # Llama 3 70B: h 8,192, 64 heads, 8 kv heads, f 28,672, V 128,256; t = 8, SP, s = 8,192.
    plan = job_of({"parallelism": {"context": 2, "data": 1}}, LLAMA70)
    d = plan.dims
    assert (d.n, d.g, d.f, d.k) == (64 // 8, 8 // 8, 28672 // 8, 8192 // 64)
    assert (d.s, d.s_c, d.s_r) == (8192, 8192 // 2, 8192 // 2 // 8)
    # V' = ⌈128,256 / (128·8)⌉ · 1,024 = 126 · 1,024 = 129,024; each TP rank holds 16,128.
    assert (d.V_padded, d.vocab) == (129024, 16128)
    assert d.experts is None


def test_memory_perf_and_comm_read_the_same_dims() -> None:
    plan = job_of({"parallelism": {"context": 2, "data": 1}}, LLAMA70)
    memory, perf = shape_of(plan), layer_shape(plan)
    assert (memory.n, memory.f, memory.s, memory.s_r) == (perf.n, perf.f, perf.s_c, perf.s_r)
    # The TP all-gather under SP moves b·(s/c)·h·β_a: the same s/c the memory budget holds.
    ops = schedule(plan, [1] * plan.layout.p, [0] * plan.layout.p)
    gather = next(op for op in ops if op.group == "tp" and op.op == "all_gather")
    assert gather.buffer_bytes == 1 * (8192 // 2) * 8192 * 2


def test_a_tensor_split_that_does_not_divide_heads_is_refused_before_planning() -> None:
    # gpt2-small's 12 heads over tensor 8: ignoring PLC003 no longer reaches memory or the
    # step model with two different shares of a layer; the job has no plan.
    text = (
        "version: 1\nname: g\nmodel: {preset: gpt2-small}\nhardware: {gpu: a100-80gb, nodes: 1}\n"
        "parallelism: {tensor: 8}\ntraining: {seq_len: 1024, global_batch: 8}\n"
        "rules: {ignore: [PLC003]}\n"
    )
    result = check_text(text)
    assert rules_fired(result, include_info=True) == {"PLC003"}
    (note,) = result.findings
    assert note.severity == "info" and note.field == "model.heads"
    job = resolved_of(text)
    refused = plannable(job)
    assert isinstance(refused, tuple)
    assert {r.rule for r in refused} == {"PLC003"}
    assert {r.violation.field for r in refused} == {"model.heads", "model.kv_heads"}


def test_experts_dims_bound_memory_and_price_the_exchange_at_the_expectation() -> None:
    # Mixtral example: T = 4,096 tokens per rank, top-2 of 8, capacity factor 1.25:
    # C = ⌈4,096·2/8·1.25⌉ = 1,280 rows per expert; the memory bound E·C = 10,240 rows, the
    # exchange at its balanced T·k = 8,192.
    plan = job_of({"model": {"moe": {"capacity_factor": 1.25}}}, "mixtral-8x7b-64xh100.yaml")
    y = plan.dims.experts
    assert y is not None
    assert (y.tokens, y.routed, y.sent, y.received) == (4096, 8192, 8 * 1280, 8 * 1280)
    assert memory_expert_shape(plan).rows == y.received
    dispatch = next(op for op in analyse(plan).ops if op.group == "ep")
    assert dispatch.buffer_bytes == 8192 * 4096 * 2


def test_an_fp32_run_is_priced_at_the_fp32_peak() -> None:
    bf16 = job_of({"training": {"precision": "bf16"}})
    fp32 = job_of({"training": {"precision": "fp32"}})
    # H100 SXM datasheet: BF16 989 TFLOPS dense, FP32 67 TFLOPS.
    assert device_of(bf16).matrix_flops == 989e12
    assert device_of(fp32).matrix_flops == 67e12
    slow, fast = estimate_step(analyse(fp32)), estimate_step(analyse(bf16))
    assert slow.compute_s > 5 * fast.compute_s
    # MFU is against the peak of the data type the GEMMs run in.
    assert slow.mfu == pytest.approx(
        slow.model_flops / slow.step_time_s / (fp32.world * 67e12), rel=1e-9
    )


def test_a_custom_gpu_needs_the_peak_of_its_precision() -> None:
    text = (
        "version: 1\nname: c\nmodel: {preset: llama3-8b, layers: 2}\n"
        "hardware: {gpu: {memory_gb: 96, bf16_tflops: 500, intra_node: {bandwidth_gbs: 200}, "
        "inter_node: {bandwidth_gbs: 25}}, nodes: 1}\n"
        "parallelism: {tensor: 8}\n"
        "training: {seq_len: 4096, micro_batch: 1, global_batch: 8, precision: fp32}\n"
    )
    result = check_text(text)
    (finding,) = [f for f in result.findings if f.rule == "PLC109"]
    assert finding.field == "hardware.gpu" and "fp32_tflops" in finding.fix
    given = text.replace("bf16_tflops: 500", "bf16_tflops: 500, fp32_tflops: 60")
    assert "PLC109" not in rules_fired(check_text(given))


def test_every_command_reads_one_step_time() -> None:
    # The Mixtral example: `planc explain` and the analysis give the same step (one path).
    spec = EXAMPLES / "mixtral-8x7b-64xh100.yaml"
    shown = CliRunner().invoke(main, ["explain", str(spec), "--format", "json"])
    assert shown.exit_code == 0, shown.output
    plan = job_of(None, "mixtral-8x7b-64xh100.yaml")
    assert isinstance(plan, Plannable)
    step = estimate_step(analyse(plan))
    assert json.loads(shown.output)["step"]["step_time_s"] == pytest.approx(
        step.step_time_s, rel=1e-12
    )


def test_efficiency_tables_key_gemm_curves_by_data_type() -> None:
    base = for_gpu("h100-sxm")
    assert base.gemm_for(DType.FP32) == base.gemm  # no measured fp32 curve: the 16-bit one
    data = to_json(base)
    data["gemm_by_dtype"] = {"fp32": {**data["gemm"], "peak_fraction": 0.5, "half_dim": 64}}
    keyed = from_json(data)
    assert keyed.gemm_for(DType.FP32).peak_fraction == 0.5
    assert keyed.gemm_for(DType.BF16) == base.gemm
    assert from_json(to_json(keyed)) == keyed  # what planc calibrate writes reads back
    data["gemm_by_dtype"] = {"bf16": data["gemm"]}
    with pytest.raises(ValueError, match="fp32, fp8 or fp4"):
        from_json(data)
    data["gemm_by_dtype"] = {"int4": data["gemm"]}
    with pytest.raises(ValueError, match="not a data type"):
        from_json(data)
    # The fp32 curve prices an fp32 run's GEMMs: a lower fraction, a longer step.
    fp32 = job_of({"training": {"precision": "fp32"}})
    analysis = analyse(fp32)
    assert estimate_step(analysis, keyed).compute_s > estimate_step(analysis, base).compute_s


@settings(max_examples=200, deadline=None)
@given(
    tokens=st.integers(1, 1 << 20),
    k=st.integers(1, 16),
    E=st.integers(1, 512),
    cf=st.floats(1.0, 8.0),
)
def test_padded_rows_are_at_least_the_balanced_rows(
    tokens: int, k: int, E: int, cf: float
) -> None:
    """Drop and pad sends E·C rows, C = ⌈(T·k/E)·CF⌉: with CF ≥ 1 never fewer than the
    balanced T·k, at most T·k·CF + E (one ceiling per expert), a whole C for every expert;
    without padding, or without a capacity, the balanced T·k."""
    assume(k <= E)
    padded = routed_rows(tokens, k, E, cf, True)
    assert tokens * k <= padded <= tokens * k * cf * (1 + 1e-12) + E
    assert padded % E == 0 and padded // E == math.ceil((tokens * k / E) * cf)
    assert routed_rows(tokens, k, E, cf, False) == tokens * k
    assert routed_rows(tokens, k, E, None, True) == tokens * k
