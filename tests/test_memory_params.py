"""Parameter counts: published counts, hand counts, padding, each rank's share."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from planc.memory import parameter_count
from planc.memory.params import layer_parameters, padded_vocab, rank_parameters
from planc.plannable import Plannable, plannable
from planc.spec.job import Model
from planc.spec.load import load_text

PRESETS = json.loads(
    (Path(__file__).resolve().parent.parent / "planc" / "presets" / "models.json").read_text(
        "utf-8"
    )
)
PUBLISHED = {
    name: data["parameters"]
    for name, data in PRESETS.items()
    if isinstance(data, dict) and "parameters" in data
}


def job_of(
    model: dict[str, Any], parallelism: dict[str, Any] | None = None, **training: Any
) -> Plannable:
    spec = {
        "version": 1,
        "name": "t",
        "model": model,
        "hardware": {"gpu": "h100-sxm", "nodes": 64},
        "parallelism": parallelism or {},
        "training": {"seq_len": 2048, "global_batch": 4096, **training},
    }
    loaded = load_text("t.yaml", yaml.safe_dump(spec))
    assert loaded.job is not None, loaded.findings
    plan = plannable(loaded.job)
    assert not isinstance(plan, tuple), plan
    return plan


def chunk_layers(job: Plannable) -> tuple[tuple[int, ...], ...]:
    return tuple(job.layout.chunk_layers(r) for r in range(job.layout.p))


SMALL = Model(
    L=4,
    h=64,
    n=4,
    g=4,
    k=16,
    f=256,
    V=1000,
    mlp="gelu",
    norm="layernorm",
    bias=True,
    dropout=0.0,
    tied=False,
    position="rope",
    max_seq_len=32,
    preset=None,
)


def model_of(**dims: Any) -> Model:
    return replace(SMALL, **dims)


def test_every_preset_with_a_published_count_is_exercised() -> None:
    assert set(PUBLISHED) >= {"llama3-8b", "llama3-70b", "llama3-405b", "gpt3-175b", "gpt2-small"}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_parameter_counts(name: str) -> None:
    job = job_of({"preset": name})
    assert parameter_count(job.model).total == PUBLISHED[name]


def test_published_counts_by_hand() -> None:
    # Llama 3 70B, written out: per layer attention 2·8192·128·(64+8) = 150,994,944,
    # MLP 3·8192·28672 = 704,643,072, two RMSNorms 16,384: 855,654,400; ×80 = 68,452,352,000;
    # embedding and head 2·128256·8192 = 2,101,346,304; final norm 8,192.
    assert 80 * (150_994_944 + 704_643_072 + 16_384) + 2 * 128_256 * 8192 + 8192 == 70_553_706_496
    llama = parameter_count(job_of({"preset": "llama3-70b"}).model)
    assert llama.per_layer == 855_654_400
    assert llama.embedding == llama.lm_head == 1_050_673_152
    assert llama.final_norm == 8192 and llama.position == 0
    # GPT-3 175B: 12·L·h² + 13·L·h + (V + 2048)·h + 2h with tied embeddings.
    gpt3 = parameter_count(job_of({"preset": "gpt3-175b"}).model)
    h = 12288
    assert gpt3.per_layer == 12 * h * h + 13 * h
    assert gpt3.lm_head == 0 and gpt3.position == 2048 * h and gpt3.final_norm == 2 * h


def test_small_model_by_hand() -> None:
    # h=64, n=g=4, k=16, f=256, bias, LayerNorm: attention 2·64·16·8 = 16,384; MLP 2·64·256 =
    # 32,768; norms 2·128 = 256; biases QKV 12·16 = 192, O 64, fc1 256, fc2 64 = 576.
    model = model_of()
    count = parameter_count(model)
    assert count.per_layer == 16_384 + 32_768 + 256 + 576 == 49_984
    assert count.embedding == count.lm_head == 64_000
    assert count.final_norm == 128
    assert count.total == 4 * 49_984 + 2 * 64_000 + 128


def test_swiglu_rmsnorm_gqa_no_bias_by_hand() -> None:
    # h=64, n=4, g=2, k=16, f=160: attention 2·64·16·6 = 12,288; MLP 3·64·160 = 30,720;
    # RMSNorm 2·64 = 128.
    model = model_of(g=2, f=160, mlp="swiglu", norm="rmsnorm", bias=False)
    assert parameter_count(model).per_layer == 12_288 + 30_720 + 128


def test_swiglu_biases() -> None:
    # QKV (4 + 2·2)·16 = 128, fc1 gate+up 2·160 = 320, O and fc2 64 each.
    with_bias = model_of(g=2, f=160, mlp="swiglu", norm="rmsnorm", bias=True)
    without = model_of(g=2, f=160, mlp="swiglu", norm="rmsnorm", bias=False)
    assert (
        parameter_count(with_bias).per_layer - parameter_count(without).per_layer == 128 + 320 + 128
    )


def test_learned_positions_and_tied() -> None:
    model = model_of(position="learned", max_seq_len=32, tied=True)
    count = parameter_count(model)
    assert count.position == 32 * 64
    assert count.lm_head == 0


@pytest.mark.parametrize(
    ("V", "t", "padded"),
    [
        (50257, 1, 50304),
        (50257, 8, 51200),
        (128256, 1, 128256),
        (128256, 8, 129024),
        (32000, 3, 32256),
    ],
)
def test_padded_vocab(V: int, t: int, padded: int) -> None:
    # ⌈V/(128t)⌉·128t, worked by hand: 50257/128 = 392.6 → 393·128 = 50304; /1024 → 50·1024.
    assert padded_vocab(V, t) == padded


def test_parameters_padded_in_budget() -> None:
    from planc.memory import budget

    job = job_of({"preset": "gpt3-175b"}, {"tensor": 8, "pipeline": 8})
    b = budget(job)
    assert b.parameters == 174_604_259_328
    # Tied: one V' × h matrix; 51200 − 50257 = 943 extra rows of 12288.
    assert b.parameters_padded == 174_604_259_328 + 943 * 12288


def test_layer_share_over_tensor_by_hand() -> None:
    # t=2: attention 2·64·16·(2+2) = 8192, MLP 2·64·128 = 16,384, norms 256 (replicated),
    # column biases (2 + 2·2)·16 + 128 = 224, row biases 2·64 = 128 (replicated).
    assert layer_parameters(model_of(), 2) == 8192 + 16_384 + 256 + 224 + 128


def test_kv_heads_replicated_when_tensor_exceeds_them() -> None:
    # g = 2, t = 4: each rank keeps ⌈2/4⌉ = 1 kv head: attention 2·64·16·(1 + 1) = 4096.
    model = model_of(g=2, bias=False, norm="rmsnorm")
    assert layer_parameters(model, 4) == 4096 + 2 * 64 * 64 + 128


def test_chunks_even_and_interleaved() -> None:
    # Megatron's example: p=4, v=2, L=16: rank 0 holds layers {1,2} and {9,10}.
    job = job_of({"preset": "llama3-8b", "layers": 16}, {"pipeline": 4, "virtual_stages": 2})
    assert chunk_layers(job) == ((2, 2),) * 4
    job = job_of({"preset": "llama3-8b", "layers": 24}, {"pipeline": 4, "virtual_stages": 2})
    assert job.layout.chunks[1] == ((3, 6), (15, 18))  # blocks 1 and 5 of 3 layers each


def test_uneven_stage_layers() -> None:
    job = job_of({"preset": "llama3-8b"}, {"pipeline": 4, "stage_layers": [7, 9, 9, 7]})
    assert chunk_layers(job) == ((7,), (9,), (9,), (7,))
    assert rank_parameters(job, 1).layers == 9


def test_stage_ends_untied() -> None:
    job = job_of({"preset": "llama3-8b"}, {"pipeline": 4, "tensor": 2})
    first, middle, last = rank_parameters(job, 0), rank_parameters(job, 1), rank_parameters(job, 3)
    # V' = 128256 at t = 2 (a multiple of 256); V'/t·h = 64128·4096.
    assert first.embedding == 64_128 * 4096 and first.lm_head == 0 and first.final_norm == 0
    assert middle.embedding == middle.lm_head == middle.final_norm == 0
    assert last.lm_head == 64_128 * 4096 and last.final_norm == 4096 and last.embedding == 0


def test_tied_embedding_copy_on_last_stage() -> None:
    job = job_of({"preset": "gpt2-small"}, {"pipeline": 2})
    last = rank_parameters(job, 1)
    assert last.lm_head == 50_304 * 768  # the embedding group's copy
    assert rank_parameters(job, 0).position == 1024 * 768
    single = job_of({"preset": "gpt2-small"}, {"pipeline": 1})
    assert rank_parameters(single, 0).lm_head == 0
    assert rank_parameters(single, 0).embedding == 50_304 * 768


def test_shares_add_up_without_tensor_parallelism() -> None:
    job = job_of({"preset": "llama3-8b"}, {"pipeline": 4})
    assert sum(rank_parameters(job, r).total for r in range(4)) == 8_030_261_248


def test_rank_out_of_range() -> None:
    job = job_of({"preset": "llama3-8b"}, {"pipeline": 2})
    with pytest.raises(ValueError, match="pipeline rank"):
        rank_parameters(job, 2)


@settings(max_examples=60, deadline=None)
@given(
    n=st.sampled_from([8, 16, 32]),
    g=st.sampled_from([1, 2, 4, 8]),
    t=st.sampled_from([1, 2, 4, 8]),
    V=st.integers(1000, 200_000),
    mlp=st.sampled_from(["gelu", "swiglu"]),
    bias=st.booleans(),
)
def test_raising_tensor_never_raises_weights(
    n: int, g: int, t: int, V: int, mlp: str, bias: bool
) -> None:
    model = model_of(h=n * 16, n=n, g=min(g, n), k=16, f=n * 40, V=V, mlp=mlp, bias=bias)
    assert layer_parameters(model, 2 * t) <= layer_parameters(model, t)
    assert padded_vocab(V, 2 * t) // (2 * t) <= padded_vocab(V, t) // t
