"""Eager PyTorch's element-wise kernels priced as the separate kernels it runs (issue 24).

Under `training.kernels: unfused` torchtitan's RMSNorm, SwiGLU and rotary embedding run one
kernel per PyTorch operator, each reading and writing its tensor in HBM. Bytes per element are
counted by hand from torchtitan's code (Dec 2024) below; the fused path is unchanged.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planc.perf.inputs import layer_shape
from planc.perf.ops import OpCost, layer_ops
from planc.scoring import analysed

ROOT = Path(__file__).resolve().parent.parent
EAGER = ROOT / "validation" / "runs" / "torchtitan-llama31-8b-8xh100-eager.yaml"
COMPILED = ROOT / "validation" / "runs" / "torchtitan-llama31-8b-8xh100-compile.yaml"

# Llama 3.1 8B on one rank of FSDP 8 (no TP, CP or SP): b = 2, s = 8192 → 16,384 rows;
# h = 4096, f = 14336, 32 query heads and 8 key/value heads of 128 channels; bf16 (β = 2).
ROWS = 2 * 8192
H, F, HEADS, KV, K = 4096, 14336, 32, 8, 128


def _ops(spec: Path) -> dict[str, OpCost]:
    job = analysed(str(spec))[1].plan
    return {op.name: op for op in layer_ops(layer_shape(job))}


def test_eager_rms_norm_moves_each_operators_tensor() -> None:
    # Forward: cast 2+4, square 4+4, mean 4, scale 4+4, cast back 4+2, times w 2+2 = 36 bytes an
    # element; backward 2+2, 2+2, 2+4, 4+4, 4+4, 4, 4+4+4, 4+4+4, 4+2 = 64.
    norm = _ops(EAGER)["input norm"]
    assert norm.forward.bytes == pytest.approx(36 * ROWS * H)
    assert norm.backward.bytes == pytest.approx(64 * ROWS * H)


def test_eager_swiglu_is_two_kernels() -> None:
    # silu 2+2 and the product 2+2+2 = 10 bytes an element of f forward; backward the product's
    # two gradients (2+2+2 each) and silu's (2+2+2) = 18.
    act = _ops(EAGER)["swiglu (eager)"]
    assert act.forward.bytes == pytest.approx(10 * ROWS * F)
    assert act.backward.bytes == pytest.approx(18 * ROWS * F)


def test_eager_rotary_is_priced_on_queries_and_keys() -> None:
    # cast 2+4, complex multiply 4+4, cast back 4+2 = 20 bytes an element, both passes, over
    # (32 + 8)·128 channels of every row.
    rope = _ops(EAGER)["rotary (eager)"]
    elements = ROWS * (HEADS + KV) * K
    assert rope.forward.bytes == pytest.approx(20 * elements)
    assert rope.backward.bytes == pytest.approx(20 * elements)


def test_fused_kernels_are_unchanged() -> None:
    # The compiled run is priced with fused kernels: RMSNorm 2β = 4 bytes an element forward,
    # one SwiGLU kernel, one rotary kernel (Inductor's) reading and writing q and k once.
    ops = _ops(COMPILED)
    assert ops["input norm"].forward.bytes == pytest.approx(4 * ROWS * H)
    assert "swiglu" in ops and "rotary (eager)" not in ops and "swiglu (eager)" not in ops
    assert ops["rotary"].forward.bytes == pytest.approx(4 * ROWS * (HEADS + KV) * K)
