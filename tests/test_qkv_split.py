"""The copies between Megatron-Core's fused QKV projection and Transformer Engine's attention.

Megatron views the projection's output per key/value group, [s, b, g, (n/g + 2)·k], and splits
it with TE's SplitAlongDim (megatron/core/transformer/attention.py get_query_key_value_tensors,
Megatron-Core 0.17.1). The query's reshape to [s, b, n, k] is a copy where n > g; once RoPE has
made the key a tensor of its own, TE's get_qkv_layout (v2.14.1, dot_product_attention/utils.py)
finds no layout for the value view and makes it contiguous; backward, SplitAlongDim concatenates
dq, dk and dv (transformer_engine/pytorch/utils.py). The bytes below are worked by hand from
Llama 3 8B's heads (32 query, 8 key/value, 128 channels) on one rank of the example.
"""

from __future__ import annotations

from typing import Any

import pytest

from planc.perf.inputs import layer_shape
from planc.perf.ops import OpShape, layer_ops, qkv_split

from conftest import job_of

N, G, K = 32, 8, 128


def _shape(**overlay: Any) -> OpShape:
    base: dict[str, Any] = {"parallelism": {"tensor": 1, "sequence_parallel": False}}
    base.update(overlay)
    return layer_shape(job_of(base))


def _copies(shape: OpShape) -> tuple[float, float]:
    (op,) = qkv_split(shape)
    return op.forward.bytes, op.backward.bytes


def test_gqa_with_rope_copies_the_query_and_the_value_and_concatenates_back() -> None:
    shape = _shape()
    tokens = shape.tokens
    forward, backward = _copies(shape)
    assert forward == pytest.approx(2 * 2 * tokens * (N + G) * K)  # bf16 read and written
    assert backward == pytest.approx(2 * 2 * tokens * (N + 2 * G) * K)
    assert "qkv split copies" in {op.name for op in layer_ops(shape)}


def test_mha_with_rope_copies_only_the_value() -> None:
    shape = _shape(model={"preset": "llama3-8b", "kv_heads": 32})
    forward, backward = _copies(shape)
    assert forward == pytest.approx(2 * 2 * shape.tokens * 32 * K)
    assert backward == pytest.approx(2 * 2 * shape.tokens * 3 * 32 * K)


def test_gqa_without_rope_copies_only_the_query() -> None:
    shape = _shape(model={"preset": "llama3-8b", "position_embedding": "learned"})
    forward, _ = _copies(shape)
    assert forward == pytest.approx(2 * 2 * shape.tokens * N * K)


def test_interleaved_mha_without_rope_copies_nothing() -> None:
    # GPT: TE finds its sbh3d layout in the three views, and hands back views of one buffer.
    shape = _shape(model={"preset": "llama3-8b", "kv_heads": 32, "position_embedding": "learned"})
    assert qkv_split(shape) == ()


@pytest.mark.parametrize(
    "training",
    [
        {"attention": "eager"},  # Megatron's local attention
        {"framework": "fsdp2", "kernels": "compiled"},  # torchtitan's separate wq, wk, wv
    ],
)
def test_only_megatron_s_te_attention_splits(training: dict[str, Any]) -> None:
    assert qkv_split(_shape(training=training)) == ()


def test_latent_attention_builds_its_own_tensors() -> None:
    shape = _shape(
        model={"preset": "deepseek-v3"},
        parallelism={"tensor": 1, "expert": 8, "order": "tp-cp-ep-dp-pp"},
    )
    assert qkv_split(shape) == ()
