"""The rotary embedding as the kernel it is (issue 24).

Neither the QKV GEMM nor the attention kernel applies RoPE: Megatron-Core rotates the query and
the key with apply_rotary_pos_emb between them (megatron/core/transformer/attention.py
Attention.forward; Transformer Engine's fused_apply_rotary_pos_emb with apply_rope_fusion), one
kernel per tensor, and torch.compile fuses torchtitan's apply_rotary_emb into one kernel. Each
reads and writes every query and key element once, forward and backward. The expected bytes are
Llama 3 8B's (32 query and 8 key/value heads of 128 channels) worked by hand.
"""

from __future__ import annotations

from typing import Any

import pytest

from planc.perf.inputs import layer_shape
from planc.perf.ops import layer_ops, rotary

from conftest import job_of

HEADS, KV, K = 32, 8, 128


def _rotary(**overlay: Any) -> dict[str, Any]:
    shape = layer_shape(job_of(overlay))
    ops = {op.name: op for op in layer_ops(shape)}
    return {"shape": shape, "ops": ops, "rotary": rotary(shape)}


def test_megatron_rotates_queries_and_keys_in_a_kernel_of_its_own() -> None:
    got = _rotary(parallelism={"tensor": 1})
    (op,) = got["rotary"]
    rows = got["shape"].tokens
    elements = rows * (HEADS + KV) * K
    assert op.forward.bytes == pytest.approx(2 * 2 * elements)  # bf16 read and written
    assert op.backward.bytes == op.forward.bytes
    assert op.forward.flops == pytest.approx(3 * elements)
    assert got["ops"]["rotary"] == op


def test_tensor_parallel_ranks_rotate_their_own_heads() -> None:
    (whole,) = _rotary(parallelism={"tensor": 1})["rotary"]
    (half,) = _rotary(parallelism={"tensor": 2})["rotary"]
    # 16 + 4 heads of 32 + 8 on each of two ranks: half the bytes
    assert half.forward.bytes == pytest.approx(whole.forward.bytes / 2)


@pytest.mark.parametrize(
    "model",
    [
        {"position_embedding": "learned"},  # GPT's learned table: no rotation
        {"preset": "deepseek-v3"},  # latent attention: its decoupled RoPE channels, not priced apart
    ],
)
def test_no_rotary_kernel_without_rope_on_every_head(model: dict[str, Any]) -> None:
    got = _rotary(model=model)
    assert got["rotary"] == ()
    assert "rotary" not in got["ops"] and "rotary (eager)" not in got["ops"]


def test_eager_kernels_rotate_only_a_rope_model() -> None:
    eager = _rotary(training={"framework": "fsdp2", "kernels": "unfused"})
    assert [op.name for op in eager["rotary"]] == ["rotary (eager)"]
    learned = _rotary(
        model={"position_embedding": "learned"},
        training={"framework": "fsdp2", "kernels": "unfused"},
    )
    assert learned["rotary"] == ()
