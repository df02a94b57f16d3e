"""Multi-token prediction modules (model.mtp_layers) priced as Megatron-Core runs them: their
time, exchanges, activations and the last stage's embedding copy.

What is checked, each against an independent source:
- the model FLOPs the modules add per token are DeepSeek-V3's, written out from its config.json
  here (an MoE layer as layer 60, eh_proj 2h × h, a pass of the 129,280-word head), and agree
  with Megatron-Bridge's published TFLOP column (flop_utils.py transformer_flops: 259.99 GFLOP
  per token with one module, 249.81 without; Bridge counts causal attention at half);
- the last stage's compute grows by exactly one layer shaped like the last, its projection and
  a second head and loss (MultiTokenPredictionLayer, d98e8a64), and by nothing on the other
  stages;
- the expert all-to-alls of the module's MoE layer are in the schedule, and `planc verify`
  recounts them from the plan;
- the saved tensors are worked by hand: enorm's input and eh_proj's [rows, 2h] input, the
  module's final norm, head input and loss;
- Megatron-Core keeps a synced copy of the word embedding on the last stage for the modules
  (LanguageModule.setup_embeddings_and_output_layer), with its gradient all-reduce.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from planc.analysis import analyse
from planc.compile import compile_job
from planc.compile.plan import plan_json
from planc.memory.activations import stage_activation_terms
from planc.memory.fp8 import quantized_share
from planc.memory.params import rank_parameters
from planc.perf.compute import pass_times
from planc.perf.inputs import (
    device_of,
    efficiency_of,
    layer_shape,
    model_flops,
    stage_chunk_times,
)
from planc.perf.ops import last_stage_ops
from planc.plannable import Plannable
from planc.spec.load import load_text
from planc.verify import render, verify_text

from conftest import plannable_of

# DeepSeek-V3 config.json (deepseek-ai/DeepSeek-V3): hidden 7168, 128 heads, q_lora_rank 1536,
# kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head 128, moe_intermediate 2048, 256 routed
# experts, 1 shared, top 8, vocabulary 129,280.
H, N, VOCAB, F_E = 7168, 128, 129_280, 2048
ATTENTION = H * 1536 + 1536 * N * 192 + H * (512 + 64) + 512 * N * 256 + N * 128 * H
ACTIVE_MOE_MATRICES = ATTENTION + H * 256 + 9 * 3 * H * F_E  # router, 8 routed + 1 shared
SEQ = 4096


def _deepseek(
    mtp: int, precision: str = "bf16", param_gather: bool = False, **parallelism: Any
) -> Plannable:
    """DeepSeek-V3 with `mtp` modules on 32 B200s, four pipeline stages by default."""
    layout = {
        "tensor": 1, "pipeline": 4, "stage_layers": [16, 15, 15, 15], "expert": 8,
        "expert_tensor": 1, "order": "tp-cp-ep-dp-pp", **parallelism,
    }
    layout = {key: value for key, value in layout.items() if value is not None}
    recipes = {"fp8": "mxfp8", "fp4": "nvfp4"}
    recipe = (
        {"fp8": {"recipe": recipes[precision], "param_gather": param_gather}}
        if precision in recipes
        else {}
    )
    spec = {
        "version": 1,
        "name": "t",
        "model": {"preset": "deepseek-v3", "mtp_layers": mtp},
        "hardware": {"gpu": "b200", "nodes": 4},
        "parallelism": layout,
        "training": {
            "seq_len": SEQ, "micro_batch": 1, "global_batch": 64, "precision": precision,
            "recompute": "selective", "attention": "flash", **recipe,
        },
    }
    loaded = load_text("t.yaml", yaml.safe_dump(spec))
    assert loaded.job is not None, loaded.findings
    return plannable_of(loaded.job)


def test_the_modules_flops_are_deepseek_v3s_and_bridges() -> None:
    with_mtp, without = _deepseek(1), _deepseek(0)
    tokens = with_mtp.training.B * SEQ
    added = (model_flops(with_mtp) - model_flops(without)) / tokens
    # forward per token: the layer's active matrices, its attention over the whole sequence
    # (2·s·n·(k + v), planc's convention: no causal discount), eh_proj 2·2h·h, the head 2·h·V
    core = 2 * SEQ * N * (192 + 128)
    by_hand = 3 * (2 * ACTIVE_MOE_MATRICES + core + 2 * 2 * H * H + 2 * H * VOCAB)
    assert added == pytest.approx(by_hand, rel=1e-9)
    # Megatron-Bridge 26.08's table: 259.99 − 249.81 GFLOP per token, attention counted causal
    assert (added - 3 * core / 2) / 1e9 == pytest.approx(259.99 - 249.81, rel=2e-3)


def test_the_last_stage_runs_one_more_layer_a_projection_and_a_second_head() -> None:
    with_mtp, without = _deepseek(1), _deepseek(0)
    eff = efficiency_of(with_mtp)
    for stage in range(3):
        assert stage_chunk_times(with_mtp, eff, stage) == stage_chunk_times(without, eff, stage)
    last, base = stage_chunk_times(with_mtp, eff, 3)[-1], stage_chunk_times(without, eff, 3)[-1]
    # one MoE layer of the stage costs (its 15 layers over its MoE and dense passes) ...
    layer_s = (base.forward_s - _head_forward(without, eff)) / 15
    extra = last.forward_s - base.forward_s
    # ... and the module adds that layer, eh_proj, its embedding and a second final norm, head
    # and loss: more than a layer and one head, less than a layer and two
    head = _head_forward(without, eff)
    assert layer_s + head < extra < layer_s + 2 * head
    assert last.recompute_s > base.recompute_s  # selective recompute repeats its core


def _head_forward(job: Plannable, eff: Any) -> float:
    """The forward seconds of the last stage's final norm, LM head and loss."""
    return pass_times(last_stage_ops(layer_shape(job)), device_of(job), eff).forward_s


def test_the_modules_moe_layer_exchanges_tokens() -> None:
    with_mtp, without = _deepseek(1), _deepseek(0)

    def calls(job: Plannable, stage: int) -> int:
        return sum(op.calls for op in analyse(job).ops if op.stage == stage and op.group == "ep")

    assert calls(with_mtp, 0) == calls(without, 0)
    # the last stage's 15 MoE layers and the module's one exchange alike
    assert calls(without, 3) > 0
    assert calls(with_mtp, 3) * 15 == calls(without, 3) * 16


def test_verify_recounts_the_modules_exchanges_under_tp_and_sp() -> None:
    job = _deepseek(1, tensor=2, expert=4, sequence_parallel=True)
    text = plan_json(compile_job(analyse(job)))
    assert verify_text(text).ok
    # a plan that says two modules where the schedule ran one is caught
    corrupted = text.replace('"mtp_layers":1', '"mtp_layers":2', 1)
    assert corrupted != text
    assert not verify_text(corrupted).ok


def test_the_modules_saved_tensors() -> None:
    job = _deepseek(1)
    terms = {t.name: t.bytes for t in stage_activation_terms(job, 3)[0]}
    base = {t.name: t.bytes for t in stage_activation_terms(_deepseek(0), 3)[0]}
    rows = SEQ  # b = 1, t = 1
    in_flight = _in_flight(terms, base)
    assert terms["MTP enorm input"] == in_flight * 2 * rows * H
    assert terms["MTP eh_proj input"] == in_flight * 2 * rows * 2 * H
    assert terms["MTP final norm input"] == in_flight * 2 * rows * H
    assert terms["MTP LM head input"] == in_flight * 2 * rows * H
    assert "MTP enorm input" not in base


def _in_flight(terms: dict[str, int], base: dict[str, int]) -> int:
    """Micro-batches the last chunk holds at the peak: the final norm's input over one's."""
    one = 2 * SEQ * H
    assert terms["final norm input"] % one == 0
    return terms["final norm input"] // one


def test_the_lm_head_input_is_saved_in_16_bits_under_fp8() -> None:
    # Megatron's output layer is its own ColumnParallelLinear, outside TE's FP8 autocast.
    job = _deepseek(1, "fp8")
    terms = {t.name: t.bytes for t in stage_activation_terms(job, 3)[0]}
    held = terms["final norm input"] // (2 * SEQ * H)
    assert terms["LM head input"] == held * 2 * SEQ * H
    # eh_proj's input is a TE linear's: MXFP8, rowwise and columnwise, a scale per 32
    assert terms["MTP eh_proj input"] < held * 2 * SEQ * 2 * H


def test_the_last_stage_keeps_an_embedding_copy_for_the_modules() -> None:
    with_mtp, without = _deepseek(1), _deepseek(0)
    slice_ = VOCAB * H  # t = 1: the padded vocabulary is 129,280 (a multiple of 128)
    assert rank_parameters(with_mtp, 3).embedding == slice_
    assert rank_parameters(without, 3).embedding == 0
    assert rank_parameters(with_mtp, 0).embedding == slice_
    reduce = [op for op in analyse(with_mtp).ops if op.group == "embedding"]
    assert {op.stage for op in reduce} == {0, 3}
    # the main gradients' bytes: 16-bit here (no training.grad_accum_fp32)
    assert all(op.buffer_bytes == slice_ * 2 for op in reduce)
    assert not [op for op in analyse(without).ops if op.group == "embedding"]
    plan = json.loads(plan_json(compile_job(analyse(with_mtp))))
    copies = {rank["coords"]["pp"]: rank["embedding_copy"] for rank in plan["ranks"]}
    assert copies == {0: False, 1: False, 2: False, 3: True}


def test_one_stage_keeps_one_embedding() -> None:
    job = _deepseek(1, pipeline=1, stage_layers=None, expert=32)
    assert rank_parameters(job, 0).embedding == VOCAB * H
    assert not [op for op in analyse(job).ops if op.group == "embedding"]


def test_the_modules_linears_are_fp8_weights_under_fp8_and_16_bit_under_fp4() -> None:
    shared, expert = 3 * H * F_E, 3 * H * F_E

    def added(precision: str) -> tuple[int, int]:
        with_mtp = quantized_share(_deepseek(1, precision), 3)
        without = quantized_share(_deepseek(0, precision), 3)
        return with_mtp.dense - without.dense, with_mtp.experts - without.experts

    # the module's attention projections (with the latent norms, 1536 + 512, which Megatron fuses
    # into the up projections' LayerNormLinear, as in every layer), its shared expert, eh_proj
    # 2h·h, and its 256/8 experts
    assert added("fp8") == (ATTENTION + 1536 + 512 + shared + 2 * H * H, 32 * expert)
    assert added("fp4") == (0, 0)


def test_verify_recounts_the_modules_fp8_parameter_gather() -> None:
    job = _deepseek(1, "fp8", param_gather=True, zero_stage=1)
    text = plan_json(compile_job(analyse(job)))
    result = verify_text(text)
    assert result.ok, render(result)
