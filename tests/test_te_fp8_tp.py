"""Sequence-parallel gathers as Transformer Engine runs them under an FP8/FP4 recipe.

With sequence parallelism TE's column-parallel linears (LayerNormLinear, Linear) quantize their
input before gathering it, gather it so again in backward for the weight gradient, and a
row-parallel linear's backward gathers its output's gradient quantized; a block recipe's scales
travel with the data (transformer_engine/pytorch/module/layernorm_linear.py, linear.py, base.py
grad_output_preprocess, distributed.py _all_gather_fp8, _all_gather_mxfp8, _all_gather_nvfp4,
_start_all_gather_fp8_blockwise; TE 2.14.1). The reduce-scatters stay 16-bit, and so do the
gathers of the layers Megatron keeps in BF16. The expected bytes below are the TE formats'
sizes, not planc's output: data bits per element plus one scale per block."""

from __future__ import annotations

import json
from typing import Any

import pytest

from planc.analysis import analyse
from planc.comm.ends import end_collectives
from planc.compile.plan import plan_json
from planc.perf.inputs import (
    build_inputs,
    comm_time_s,
    efficiency_of,
    ends_tp_times,
    tp_link,
    tp_per_layer,
    tp_per_layer_on,
)
from planc.plannable import Plannable
from planc.verify import render, verify_text

from conftest import check_overlay, compiled, job_of

# b·s·h of Llama 3 70B at b = 1, s = 8192 (SP gathers the whole sequence's rows)
ROWS = 1 * 8192 * 8192
H100 = "llama3-70b-64xh100-fp8.yaml"  # t 4, SP, p 8, v 5 over 80 layers: two a chunk
B200 = "llama3-70b-64xb200-mxfp8.yaml"  # t 2, SP


def overlay(recipe: str, framework: str = "megatron", kept: int = 0) -> dict[str, Any]:
    """The example's training in `recipe`, `kept` layers at each end in BF16."""
    precision = "fp4" if recipe == "nvfp4" else "fp8"
    fp8: dict[str, Any] = {"recipe": recipe} | ({"first_last_bf16": kept} if kept else {})
    return {"training": {"precision": precision, "fp8": fp8, "framework": framework}}


def gathers(job: Plannable, stage: int = 0) -> dict[int, int]:
    """Calls per step of the stage's layers' TP all-gathers, by bytes per call (not the
    embedding's and the head's at the model's ends, tests/test_tp_ends.py)."""
    ends = {one.phase for one, _ in end_collectives(job, stage).every}
    found: dict[int, int] = {}
    for op in analyse(job).ops:
        if op.phase in ends:
            continue
        if op.group == "tp" and op.stage == stage and str(op.op) == "all_gather":
            found[op.buffer_bytes] = found.get(op.buffer_bytes, 0) + op.calls
    return found


def scatter_bytes(job: Plannable) -> set[int]:
    return {
        op.buffer_bytes
        for op in analyse(job).ops
        if op.group == "tp" and str(op.op) == "reduce_scatter"
    }


@pytest.mark.parametrize(
    ("recipe", "base", "expected"),
    [
        # per-tensor scales: one byte per element, the scale the same on every rank (amax
        # reduced over the TP group) and not moved
        ("delayed", H100, ROWS),
        ("current", H100, ROWS),
        # 1x128 blocks, one fp32 scale each
        ("blockwise", H100, ROWS + ROWS // 128 * 4),
        # 1x32 blocks, one E8M0 byte each
        ("mxfp8", B200, ROWS + ROWS // 32),
        # E2M1 nibbles, one E4M3 byte per 16
        ("nvfp4", B200, ROWS // 2 + ROWS // 16),
    ],
)
def test_megatron_gathers_what_te_quantizes(recipe: str, base: str, expected: int) -> None:
    job = job_of(overlay(recipe), base)
    assert set(gathers(job)) == {expected}
    assert scatter_bytes(job) == {2 * ROWS}


def test_each_gather_of_a_block_is_quantized() -> None:
    # Three gathers per block (forward input, its re-gather for the weight gradient, the
    # output's gradient) and two reduce-scatters, all per micro-batch: the 16-bit plan's counts.
    job = job_of(overlay("current"), H100)
    bf16 = job_of({"training": {"precision": "bf16"}}, H100)
    assert gathers(job) == {ROWS: gathers(bf16)[2 * ROWS]}
    blocks = 5 * 2 * 2 * job.m  # five chunks of two layers a stage, two blocks a layer
    assert gathers(job)[ROWS] == 3 * blocks


def test_deepspeed_gathers_in_16_bit() -> None:
    # Megatron-DeepSpeed's own SP gathers run outside Transformer Engine's quantizers.
    job = job_of(overlay("current", "deepspeed"), H100)
    assert set(gathers(job)) == {2 * ROWS}


def test_the_layers_kept_in_bf16_gather_16_bit() -> None:
    # --first-last-layers-bf16: layer 0 on stage 0 and layer 79 on stage 7 run outside
    # fp8_autocast, so each gathers its two blocks' inputs and gradients in 16-bit.
    spec = overlay("current", kept=1)
    assert not [f for f in check_overlay(spec, H100).findings if f.severity.value == "error"]
    job = job_of(spec, H100)
    per_block = 3 * job.m  # forward, re-gather and gradient gathers of one block
    for stage in (0, job.layout.p - 1):
        assert gathers(job, stage) == {
            ROWS: 5 * 2 * 2 * per_block - 2 * per_block,
            2 * ROWS: 2 * per_block,
        }
    assert gathers(job, 3) == {ROWS: 5 * 2 * 2 * per_block}


def tp_total_s(job: Plannable) -> float:
    """Every TP collective of one layer on stage 0 (exposed and hidden), seconds."""
    layer = tp_per_layer(job, efficiency_of(job), analyse(job).ops, 0)
    return layer.forward_s + layer.backward_exposed_s + layer.backward_overlapped_s


def test_the_step_prices_the_quantized_gathers() -> None:
    # Megatron and DeepSpeed run the same collectives around the same GEMMs; Megatron's six
    # gathers a layer (three a block) move one byte per element where DeepSpeed's move two.
    megatron = job_of(overlay("current"), H100)
    deepspeed = job_of(overlay("current", "deepspeed"), H100)
    link = next(str(op.link) for op in analyse(megatron).ops if op.group == "tp")
    eff = efficiency_of(megatron)

    def gather(size: int) -> float:
        return comm_time_s(megatron, eff, "all_gather", 4, size, link)

    saved = 6 * (gather(2 * ROWS) - gather(ROWS))
    assert saved > 0.0
    # current scaling all-reduces each quantized tensor's amax first: four a layer (each
    # block's input and its output's gradient), DeepSpeed's 16-bit gathers none
    amax = 4 * comm_time_s(megatron, eff, "all_reduce", 4, 4, link)
    assert tp_total_s(megatron) + saved - amax == pytest.approx(tp_total_s(deepspeed), rel=1e-12)


def test_verify_recounts_te_gathers_and_their_scales() -> None:
    text = plan_json(compiled(job_of(overlay("mxfp8"), B200)))
    data = json.loads(text)
    record = data["training"]["quantized"]
    assert record["tp_gather"] is True and record["scale_block"] == 32
    result = verify_text(text)
    assert result.ok, render(result)
    # Without the scales' block the gathers' bytes disagree with the shapes; without the
    # record at all, too.
    for corrupt in ("scale_block", "tp_gather"):
        broken = json.loads(text)
        del broken["training"]["quantized"][corrupt]
        failed = verify_text(json.dumps(broken))
        assert not failed.ok
        assert "tp all_gather" in render(failed)


def test_the_step_prices_the_kept_layers_gathers_16_bit() -> None:
    # Stage 0's first chunk holds layer 0 (kept in BF16) and layer 1: its TP forward time is one
    # layer at 16-bit gathers and one at fp8; a middle stage's chunks are two fp8 layers each.
    job = job_of(overlay("current", kept=1), H100)
    analysis = analyse(job)
    eff = efficiency_of(job)
    params = [share.total for share in analysis.parameters]
    experts = [share.expert_total for share in analysis.parameters]
    stages = build_inputs(job, params, experts, eff, analysis.ops).stages
    link = tp_link(analysis.ops, 0)
    fp8 = tp_per_layer_on(job, eff, link)
    bf16 = tp_per_layer_on(job, eff, link, bf16=True)
    assert bf16.forward_s > fp8.forward_s
    # and the word embedding's reduce-scatter at the model's start (tests/test_tp_ends.py)
    embedding = ends_tp_times(job, eff, 0, link).first_forward_s
    assert embedding > 0.0
    assert stages[0].tp_forward_s[0] == pytest.approx(
        fp8.forward_s + bf16.forward_s + embedding, rel=1e-12
    )
    assert stages[0].tp_forward_s[1] == pytest.approx(2 * fp8.forward_s, rel=1e-12)
    assert stages[3].tp_forward_s[0] == pytest.approx(2 * fp8.forward_s, rel=1e-12)


def amax_calls(job: Plannable) -> int:
    return sum(
        op.calls
        for op in analyse(job).ops
        if op.group == "tp" and op.stage == 0 and str(op.op) == "all_reduce" and op.buffer_bytes == 4
    )


@pytest.mark.parametrize(
    ("recipe", "base", "reduced"),
    [
        # a per-tensor scale computed from the sequence-sharded tensor itself needs every
        # shard's amax (TE's with_amax_reduction over the TP group)
        ("current", H100, True),
        ("nvfp4", B200, True),
        # delayed scaling takes its scale from the amax history; block scales are local
        ("delayed", H100, False),
        ("blockwise", H100, False),
        ("mxfp8", B200, False),
    ],
)
def test_per_tensor_scales_all_reduce_their_amax(recipe: str, base: str, reduced: bool) -> None:
    job = job_of(overlay(recipe), base)
    # one before each block's input gather and each output-gradient gather, not the re-gather
    # (it gathers the saved quantized input): two of the three gathers a block
    quantized_gathers = gathers(job)[min(gathers(job))]
    assert amax_calls(job) == (2 * quantized_gathers // 3 if reduced else 0)
    if reduced:
        text = plan_json(compiled(job))
        assert verify_text(text).ok
        broken = json.loads(text)
        del broken["training"]["quantized"]["tp_amax"]
        failed = verify_text(json.dumps(broken))
        assert not failed.ok
        assert "tp all_reduce" in render(failed)
