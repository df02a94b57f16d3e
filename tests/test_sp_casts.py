"""Under sequence parallelism Transformer Engine quantizes the local shard, not the gathered tensor.

What a user relies on: a tensor-parallel FP8/FP4 run with sequence parallelism pays for the
casts TE runs, which quantize each rank's 1/t of the sequence before the quantized all-gather
(layernorm_linear.py and linear.py forward, base.py grad_output_preprocess; TE 2.14): the input
of a column-parallel linear (qkv, fc1) and the output gradient of a row-parallel one (attention
output, fc2). A per-tensor FP8 tensor on Hopper gathers its rowwise data and transposes the
gathered copy in backward; a block-scaled recipe casts both copies on the shard. The expected
bytes below are counted from that code path by hand, not read from planc.
"""

from __future__ import annotations

import pytest

from planc.dims import Quantized
from planc.perf.cast_table import recipe_formats
from planc.perf.inputs import layer_shape
from planc.perf.ops import OpCost, gemm, quantization, sp_cast_share, with_quantized_gemms
from planc.spec.job import preset_gpu
from planc.vocab import Fp8Recipe

from conftest import job_of

T = 4
M, H, F = 8192, 8192, 28672  # tokens of a micro-batch (gathered), hidden, MLP inner


def _q(recipe: Fp8Recipe, gpu: str) -> Quantized:
    return recipe_formats(recipe, preset_gpu(gpu))


def _bytes(ops: tuple[OpCost, ...], name: str) -> tuple[float, float]:
    """Forward and backward bytes of `name`'s quantization kernels."""
    casts = [op for op in ops if op.name.startswith(f"{name} quantize")]
    return sum(op.forward.bytes for op in casts), sum(op.backward.bytes for op in casts)


def test_blackwell_current_scaling_casts_the_shard() -> None:
    q = _q(Fp8Recipe.CURRENT, "b300")
    qkv = gemm("qkv", M, H, 3 * H // T, 2)
    fc2 = gemm("mlp fc2", M, F // T, H, 2)
    w_qkv, w_fc2 = H * 3 * H // T, F // T * H
    # amax (2 B) and cast (2 B read, 1 B written; Blackwell reads one copy both ways), per
    # element: the input of qkv on M/t rows, its weight whole (a micro-batch's 1/m of it here 1)
    fwd, _ = _bytes(quantization(qkv, q, 2, 1.0, 1 / T), "qkv")
    assert fwd == pytest.approx(5 * (M // T) * H + 5 * w_qkv)
    # fc2: its input is the gathered activation's local slice (not gathered), its output
    # gradient gathered: dY cast on M/t rows of h
    fwd, bwd = _bytes(quantization(fc2, q, 2, 1.0, 1 / T), "mlp fc2")
    assert fwd == pytest.approx(5 * M * (F // T) + 5 * w_fc2)
    assert bwd == pytest.approx(5 * (M // T) * H)


def test_hopper_current_scaling_transposes_the_gathered_copy_in_backward() -> None:
    q = _q(Fp8Recipe.CURRENT, "h100-sxm")
    assert q.usages == 2
    qkv = gemm("qkv", M, H, 3 * H // T, 2)
    fwd, bwd = _bytes(quantization(qkv, q, 2, 1.0, 1 / T), "qkv")
    w = H * 3 * H // T
    # the shard cast writes the rowwise copy only; the weight keeps both copies (6 B)
    assert fwd == pytest.approx(5 * (M // T) * H + 6 * w)
    # backward: the gathered input transposed (1 B read, 1 B written per element), and the
    # output gradient of a column-parallel linear, not gathered, cast whole with both copies
    assert bwd == pytest.approx(2 * M * H + 6 * M * (3 * H // T))


def test_mxfp8_casts_both_copies_on_the_shard() -> None:
    q = _q(Fp8Recipe.MXFP8, "gb200-nvl72")
    attn = gemm("attention output", M, H // T, H, 2)
    _, bwd = _bytes(quantization(attn, q, 2, 1.0, 1 / T), "attention output")
    # one read (2 B), two copies of 1 + 1/32 B, on M/t rows of the output gradient
    assert bwd == pytest.approx((2 + 2 * (1 + 1 / 32)) * (M // T) * H)


def test_without_a_shard_every_cast_is_whole() -> None:
    q = _q(Fp8Recipe.CURRENT, "b300")
    qkv = gemm("qkv", M, H, 3 * H // T, 2)
    assert _bytes(quantization(qkv, q, 2, 1.0), "qkv") == _bytes(
        quantization(qkv, q, 2, 1.0, 1.0), "qkv"
    )
    fwd, _ = _bytes(quantization(qkv, q, 2, 1.0), "qkv")
    assert fwd == pytest.approx(5 * M * H + 5 * H * 3 * H // T)


@pytest.mark.parametrize(
    ("overlay", "share"),
    [
        ({"parallelism": {"tensor": 4, "sequence_parallel": True}}, 0.25),
        ({"parallelism": {"tensor": 4, "sequence_parallel": False}}, 1.0),
        ({"parallelism": {"tensor": 1}}, 1.0),
    ],
)
def test_the_share_follows_the_layout(overlay: dict[str, object], share: float) -> None:
    spec = {"training": {"precision": "fp8", "fp8": {"recipe": "current"}}, **overlay}
    job = job_of(spec)
    q = job.numerics.quantized
    assert q is not None
    assert sp_cast_share(q, layer_shape(job)) == share


def test_torchaos_casts_stay_whole() -> None:
    # torchao's Float8 TP casts before its gather too, but planc has not checked its code path
    # (sp_cast_share): its casts are priced on the gathered tensor as before.
    q = recipe_formats(Fp8Recipe.TENSORWISE, preset_gpu("h100-sxm"), "fsdp2")
    job = job_of({"parallelism": {"tensor": 4, "sequence_parallel": True}})
    shape = layer_shape(job)
    assert sp_cast_share(q, shape) == 1.0
    qkv = gemm("qkv", M, H, 3 * H // T, 2)
    assert with_quantized_gemms((qkv,), q, 2, 1.0, shape) == with_quantized_gemms((qkv,), q, 2, 1.0)
