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


def test_no_rotary_kernel_with_a_learned_position_table() -> None:
    got = _rotary(model={"position_embedding": "learned"})  # GPT's table: no rotation
    assert got["rotary"] == ()
    assert "rotary" not in got["ops"] and "rotary (eager)" not in got["ops"]


def test_latent_attention_rotates_its_rope_channels_and_builds_key_and_value() -> None:
    # DeepSeek-V3: 128 heads of 128 no-RoPE + 64 RoPE query/key channels, 128 value channels,
    # one shared 64-channel RoPE key (fused_mla_yarn_rope_apply.py). Forward per token: the
    # query's RoPE channels in place (read and written, 2 × n × 64); the kv up projection's
    # n × (128 + 128) and the RoPE key's 64 read; key n × (128 + 64) and value n × 128 written.
    got = _rotary(model={"preset": "deepseek-v3"}, parallelism={"tensor": 1, "expert": 8, "order": "tp-cp-ep-dp-pp"})
    (op,) = got["rotary"]
    n, tokens = 128, got["shape"].tokens
    per_token = 2 * n * 64 + n * 256 + 64 + n * (192 + 128)
    assert op.forward.bytes == pytest.approx(2 * tokens * per_token)  # bf16
    assert op.backward.bytes == op.forward.bytes
    assert op.modules == frozenset({"mla_up_proj"})  # Megatron recomputes it with the up projections
    assert got["ops"]["mla rotary"] == op


def test_eager_kernels_rotate_only_a_rope_model() -> None:
    eager = _rotary(training={"framework": "fsdp2", "kernels": "unfused"})
    assert [op.name for op in eager["rotary"]] == ["rotary (eager)"]
    learned = _rotary(
        model={"position_embedding": "learned"},
        training={"framework": "fsdp2", "kernels": "unfused"},
    )
    assert learned["rotary"] == ()
