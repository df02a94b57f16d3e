"""FP8/FP4 memory (planc.memory.fp8 and the quantized activation lines), against hand
derivations and the sources' per-parameter counts.

Base: llama3-8b-1node with tensor 1, pipeline 1, data 8, ZeRO-1: every rank holds all 32
layers whole. Llama 3 8B: h = 4096, n = 32 heads of k = 128, g = 8 kv heads, f = 14,336,
SwiGLU. Its GEMM weights per layer, by hand: Q and O 2·h·n·k = 2·4096² = 33,554,432; K and V
2·h·g·k = 8,388,608; gate, up and down 3·h·f = 176,160,768; together 218,103,808, and over 32
layers Ψ_q = 6,979,321,856. The norms, the embedding and the LM head stay 16-bit.
"""

from __future__ import annotations

from typing import Any

import pytest

from planc.memory import budget
from planc.memory.budget import rank_memory
from planc.memory.terms import Term

from conftest import job_of

PSI_Q_PER_LAYER = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336
PSI_Q = 32 * PSI_Q_PER_LAYER
ONE_RANK = {"tensor": 1, "pipeline": 1, "sequence_parallel": False, "zero_stage": 1}


def spec(training: dict[str, Any], gpu: str = "h100-sxm", **parallelism: Any) -> dict[str, Any]:
    return {
        "hardware": {"gpu": gpu},
        "parallelism": {**ONE_RANK, **parallelism},
        "training": training,
    }


def terms(overlay: dict[str, Any]) -> tuple[Term, ...]:
    return rank_memory(job_of(overlay), 0).terms


def weight_side(overlay: dict[str, Any]) -> int:
    return sum(t.bytes for t in terms(overlay) if t.component == "weights")


def fp8(gpu: str = "h100-sxm", **options: Any) -> dict[str, Any]:
    return spec({"precision": "fp8", "fp8": options}, gpu)


def bf16(gpu: str = "h100-sxm") -> dict[str, Any]:
    return spec({"precision": "bf16"}, gpu)


def test_hand_count_of_the_quantized_weights() -> None:
    assert PSI_Q_PER_LAYER == 218_103_808 and PSI_Q == 6_979_321_856


def test_te_defaults_on_hopper_keep_four_bytes_per_quantized_parameter() -> None:
    # TE keeps the 16-bit weight (2), its FP8 copy (1) and the cached transpose (1): 4 bytes,
    # 2 more than bf16 for each quantized parameter (TE #257, #1261, #1764). Current scaling
    # keeps no amax history, so nothing else is added.
    extra = weight_side(fp8(recipe="current")) - weight_side(bf16())
    assert extra == 2 * PSI_Q
    assert (2 * PSI_Q + extra) / PSI_Q == 4


def test_fp8_parameters_on_hopper_keep_two_bytes() -> None:
    # --fp8-param-gather drops the 16-bit copy: the FP8 parameter and its transpose, 2 bytes,
    # the same as bf16 (verl #7232) — the fp32 master stays in the optimizer.
    assert weight_side(fp8(recipe="current", param_gather=True)) == weight_side(bf16())


def test_fp8_parameters_on_blackwell_keep_one_byte() -> None:
    # Blackwell reads columnwise FP8 natively: the FP8 parameter only, 1 byte (TE #1880).
    extra = weight_side(fp8("b200", recipe="current", param_gather=True)) - weight_side(bf16("b200"))
    assert extra == -PSI_Q


def test_mxfp8_parameters_keep_two_copies_and_their_scales() -> None:
    # Rowwise 1×32 and columnwise 32×1 copies, each with one E8M0 byte per 32 values:
    # 2·(1 + 1/32) = 2.0625 bytes per parameter (TE #1880: 'MXFP8 requires 2 bytes/param').
    extra = weight_side(fp8("b200", recipe="mxfp8", param_gather=True)) - weight_side(bf16("b200"))
    assert extra + 2 * PSI_Q == 2 * (PSI_Q + PSI_Q // 32)
    assert (extra + 2 * PSI_Q) / PSI_Q == pytest.approx(2.0625)


def test_delayed_scaling_adds_its_amax_state() -> None:
    # 32 layers × 4 linears × 5 FP8 tensors × (scale + scale_inv + a history of 1) × 4 bytes.
    (amax,) = [t for t in terms(fp8(recipe="delayed")) if "amax" in t.name]
    assert amax.bytes == 32 * 4 * 5 * 12 == 7_680


def test_first_last_layers_in_bf16_keep_no_fp8_copy() -> None:
    # Two layers at each end stay BF16: 28 layers quantized.
    extra = weight_side(fp8(recipe="current", first_last_bf16=2)) - weight_side(bf16())
    assert extra == 2 * 28 * PSI_Q_PER_LAYER


def _activation(overlay: dict[str, Any], name: str) -> int:
    return sum(t.bytes for t in terms(overlay) if t.name.startswith(name) and t.component == "activations")


def test_linear_inputs_are_saved_in_fp8() -> None:
    # s·b = 8192 tokens, 64 micro-batches of 1 over d = 8: m = 8, no pipeline, one
    # micro-batch in flight per layer, 32 layers. QKV and fc1 inputs s·b·h, fc2 input s·b·f:
    # 2 bytes each in bf16, 1 in FP8.
    tokens, layers = 8192, 32
    for name, width in (("QKV input", 4096), ("fc1 input", 4096), ("fc2 input", 14336)):
        assert _activation(bf16(), name) == 2 * tokens * width * layers
        assert _activation(fp8(recipe="current"), name) == tokens * width * layers


def test_flash_attention_keeps_its_16_bit_output_beside_the_fp8_copy() -> None:
    # FlashAttention's backward reads O, so the out-projection's FP8 copy is extra: 2 + 1 bytes.
    tokens, layers, width = 8192, 32, 4096
    both = _activation(fp8(recipe="current"), "out-projection input")
    assert both == (2 + 1) * tokens * width * layers
    eager = spec({"precision": "fp8", "fp8": {"recipe": "current"}, "attention": "eager", "recompute": "full"})
    assert not [t for t in terms(eager) if "quantized copy" in t.name]


def test_torchao_saves_high_precision_inputs() -> None:
    # torchao's Float8Linear saves its high-precision input: activations unchanged.
    torchao = spec({"precision": "fp8", "framework": "fsdp2", "fp8": {"recipe": "tensorwise"}})
    plain = spec({"precision": "bf16", "framework": "fsdp2"})
    assert _activation(torchao, "fc2 input") == _activation(plain, "fc2 input")


def test_bf16_layers_save_16_bit_inputs() -> None:
    # With the first and last layer in BF16, two of the 32 layers keep 16-bit linear inputs:
    # per layer (2 − 1)·s·b·(h + h + f) above the quantized lines, less the out-projection's
    # FP8 copy (1·s·b·n·k) they do not make.
    (line,) = [t for t in terms(fp8(recipe="current", first_last_bf16=1)) if t.name.startswith("BF16 first/last")]
    assert line.bytes == 2 * 8192 * (4096 + 4096 + 14336 - 32 * 128)


def test_bf16_layers_save_16_bit_attention_inputs_under_fp8_attention() -> None:
    # FP8 attention (delayed) saves Q, K, V and O at one byte; the two BF16 layers keep them at
    # two: per layer (2 − 1)·s·b·(n·k + g·k + g·k + n·k) more than the linear inputs above.
    overlay = spec(
        {"precision": "fp8", "recompute": "none",
         "fp8": {"recipe": "current", "first_last_bf16": 1, "attention": "delayed"}}
    )
    (line,) = [t for t in terms(overlay) if t.name.startswith("BF16 first/last")]
    linear = 4096 + 4096 + 14336 - 32 * 128
    attention = 32 * 128 + 8 * 128 + 8 * 128 + 32 * 128
    assert line.bytes == 2 * 8192 * (linear + attention)


def test_llama3_70b_stage_0_on_64_h100() -> None:
    # Llama 3 70B, 64 H100, t4 p8 v5, SP, selective recompute, ZeRO-1: the layout NVIDIA
    # publishes for FP8 (landscape §2.6). Stage 0 holds 94 layer-micro-batches. Per one:
    # QKV and fc1 inputs s·b·h/t = 8192·8192/4 = 16,777,216 elements each; fc2 input
    # s·b·f/t = 8192·7168 = 58,720,256; the out-projection input s·b·n·k/t = 16,777,216.
    overlay = {
        "model": {"preset": "llama3-70b"},
        "hardware": {"gpu": "h100-sxm", "nodes": 8, "hosts": "gpu-{000..007}"},
        "parallelism": {"tensor": 4, "pipeline": 8, "virtual_stages": 5, "sequence_parallel": True, "zero_stage": 1},
        "training": {"seq_len": 8192, "global_batch": 128, "precision": "fp8", "fp8": {"recipe": "current"}},
    }
    plain = {**overlay, "training": {**overlay["training"], "precision": "bf16"}}
    del plain["training"]["fp8"]
    fp8_stage = budget(job_of(overlay)).stages[0].memory
    bf16_stage = budget(job_of(plain)).stages[0].memory
    halved = 94 * (16_777_216 + 16_777_216 + 58_720_256)  # QKV, fc1, fc2: 2 → 1 byte
    copy = 94 * 16_777_216  # the out-projection's FP8 copy beside flash attention's O
    assert bf16_stage.activations - fp8_stage.activations == halved - copy
    change = (fp8_stage.activations - bf16_stage.activations) / bf16_stage.activations
    assert change == pytest.approx(-0.134, abs=0.002)
    # weights: Ψ_q of 10 layers on a TP rank, 2 FP8 copies more
    per_layer = (8192 * 128 * (64 + 8) * 2 // 4) + 3 * 8192 * 28672 // 4
    assert fp8_stage.weights - bf16_stage.weights == 2 * 10 * per_layer


def test_experts_save_their_gemm_inputs_in_fp8() -> None:
    # TE's GroupedLinear saves its inputs quantized as Linear does: Mixtral's experts' fc1 and
    # fc2 inputs (R·h and R·f_e/ETP) drop from 2 to 1 byte per element; the SwiGLU input stays.
    base = "mixtral-8x7b-64xh100.yaml"
    plain = rank_memory(job_of(None, base), 0).terms
    fp8 = rank_memory(job_of({"training": {"precision": "fp8", "fp8": {"recipe": "current"}}}, base), 0).terms

    def line(terms: tuple[Term, ...], name: str) -> int:
        (term,) = [t for t in terms if t.name.startswith(name)]
        return term.bytes

    for name in ("expert fc1 input", "expert fc2 input"):
        assert 2 * line(fp8, name) == line(plain, name)
    assert line(fp8, "expert activation input") == line(plain, "expert activation input")


def test_precision_aware_optimizer_keeps_bf16_moments() -> None:
    # --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16: each moment
    # 2 bytes per parameter of the shard instead of 4; the fp32 master stays.
    def optimizer(moments: str) -> dict[str, int]:
        overlay = fp8(recipe="current", moments=moments)
        return {t.name: t.bytes for t in terms(overlay) if t.component == "optimizer"}

    fp32, bf16 = optimizer("fp32"), optimizer("bf16")
    assert bf16["Adam m (bf16)"] * 2 == fp32["Adam m (fp32)"]
    assert bf16["Adam v (bf16)"] * 2 == fp32["Adam v (fp32)"]
    assert bf16["fp32 master weights"] == fp32["fp32 master weights"]
