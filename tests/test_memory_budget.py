"""The per-rank budget: a small configuration derived by hand, properties, the report."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from planc.memory import budget, rank_memory
from planc.memory.terms import COMPONENTS
from planc.outputs.memory import render_text, to_json
from planc.plannable import Plannable
from planc.spec.load import load_text

from conftest import plannable_of

RESERVE = 1_610_612_736  # 1.5 GiB


def spec(overlay: dict[str, Any] | None = None) -> dict[str, Any]:
    base: dict[str, Any] = {
        "version": 1,
        "name": "small",
        "model": {
            "layers": 4, "hidden": 64, "heads": 4, "ffn_hidden": 256, "vocab": 1000,
            "mlp": "gelu", "norm": "layernorm", "bias": True, "dropout": 0.1,
            "tied_embeddings": False, "position_embedding": "rope",
        },
        "hardware": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 8, "reserve_gib": 1.5},
        "parallelism": {"tensor": 2, "pipeline": 2, "zero_stage": 1},
        "training": {
            "seq_len": 32, "micro_batch": 2, "global_batch": 16, "precision": "bf16",
            "optimizer": "adam", "recompute": "none", "attention": "eager",
        },
    }
    for key, value in (overlay or {}).items():
        base[key] = {**base[key], **value}
    return base


def job_of(overlay: dict[str, Any] | None = None) -> Plannable:
    loaded = load_text("small.yaml", yaml.safe_dump(spec(overlay)))
    assert loaded.job is not None, loaded.findings
    return plannable_of(loaded.job)


def test_small_budget_by_hand() -> None:
    """4-layer GeLU model, t = 2, p = 2, d = 8/(2·2) = 2, m = 16/(2·2) = 4, ZeRO-1, eager.

    Parameters on one TP rank. V' = ⌈1000/256⌉·256 = 1024, V'/t = 512.
    Layer: attention 2·64·16·(2+2) = 8192, MLP 2·64·128 = 16,384, LayerNorms 2·128 = 256,
    column biases (2+4)·16 + 128 = 224, row biases 64 + 64 = 128: 25,184 (×2 layers = 50,368).
    Stage 0: 50,368 + embedding 512·64 = 32,768 → Ψ_0 = 83,136.
    Stage 1: 50,368 + final norm 128 + head 32,768 → Ψ_1 = 83,264.
    Static (N = d·c = 2): weights 2Ψ, gradients 2Ψ, optimizer 12·Ψ/2.

    Activations per layer, s·b = 64 tokens, t = 2, no SP (Table 2: sbh(10 + 24/t) + 5as²b/t):
    4096·22 + 5·2·32²·2... = 90,112 + 20,480 = 110,592.
    Stage 0 holds min(p, m) = 2 micro-batches × 2 layers; plus token ids 8·64 and the
    embedding dropout mask 64·64 per micro-batch.
    Stage 1 holds 1 micro-batch × 2 layers; plus final norm input 2·64·64, LM head input
    2·64·64, fp32 softmax 4·64·512, targets 9·64; buffer: bf16 logits 2·64·512.
    """
    b = budget(job_of())
    s0, s1 = (stage.memory for stage in b.stages)
    assert (s0.weights, s0.gradients, s0.optimizer) == (2 * 83_136, 2 * 83_136, 12 * 41_568)
    assert (s1.weights, s1.gradients, s1.optimizer) == (2 * 83_264, 2 * 83_264, 12 * 41_632)
    assert s0.activations == 4 * 110_592 + 2 * 512 + 2 * 4096
    assert s1.activations == 2 * 110_592 + 8192 + 8192 + 131_072 + 576
    assert (s0.buffers, s1.buffers) == (0, 65_536)
    assert s0.reserve == s1.reserve == RESERVE
    assert s0.total == 1_282_944 + RESERVE == 1_611_895_680
    assert s1.total == 1_267_392 + RESERVE == 1_611_880_128
    assert b.peak.stage == 0 and b.peak.rank == 0
    # tp-cp-dp-pp: rank = tp + 2·(cp + 1·(dp + 2·pp)) → stage 1 starts at rank 4.
    assert [stage.rank for stage in b.stages] == [0, 4]
    by_name = {term.name: term.bytes for term in s0.terms}
    assert by_name["word embedding weights (bf16)"] == 2 * 32_768
    assert by_name["layer weights (bf16)"] == 2 * 50_368
    assert "LM head weights (bf16)" in {term.name for term in s1.terms}


def test_shard_index_changes_only_the_sharded_lines() -> None:
    # d = 3 (12 GPUs): Ψ_1 = 83,264 = 3·27,754 + 2: shards 27,755, 27,755, 27,754.
    job = job_of(
        {"hardware": {"gpus_per_node": 12, "nvlink_domain": 12}, "training": {"global_batch": 18}}
    )
    assert job.layout.d == 3
    low, high = rank_memory(job, 1, 0), rank_memory(job, 1, 2)
    assert low.optimizer == 12 * 27_755 and high.optimizer == 12 * 27_754
    assert low.total - high.total == 12
    with pytest.raises(ValueError):
        rank_memory(job, 1, 3)


def test_rank_order_changes_stage_ranks() -> None:
    # pp fastest after tp: tp-pp-cp-dp → rank = tp + 2·pp: stage 1 starts at rank 2.
    job = job_of({"parallelism": {"order": "tp-pp-cp-dp"}})
    assert [stage.rank for stage in budget(job).stages] == [0, 2]


def test_context_parallel_shards_optimizer_over_data_and_context() -> None:
    # 4 GPUs, t = 2, c = 2: d = 1, yet the optimizer shards over N = d·c = 2 (Megatron's
    # distributed optimizer uses the DP×CP group). p = 1: Ψ = 4·25,184 + 32,768 + 128 + 32,768
    # = 166,400; optimizer 12·166,400/2 = 998,400.
    job = job_of(
        {"parallelism": {"context": 2, "pipeline": 1}, "hardware": {"gpus_per_node": 4}}
    )
    assert job.layout.d == 1
    mem = rank_memory(job, 0)
    assert mem.weights == 2 * 166_400
    assert mem.optimizer == 998_400


def test_zero3_buffers() -> None:
    # ZeRO-3 under Megatron-LM is Megatron-FSDP, whose units are the layers (25,184 on a TP
    # rank): two units' unsharded bf16 gradients, two units gathered, and the embedding slice
    # (32,768) gathered for the whole step.
    mem = rank_memory(job_of({"parallelism": {"zero_stage": 3}}), 0)
    names = {term.name: term.bytes for term in mem.terms if term.component == "buffers"}
    assert names["unsharded gradients of two units (bf16)"] == 2 * 2 * 25_184
    assert names["ZeRO-3 gathered units (bf16)"] == 2 * 2 * 25_184
    assert names["ZeRO-3 gathered embedding, final norm and head (bf16)"] == 2 * 32_768
    last = rank_memory(job_of({"parallelism": {"zero_stage": 3}}), 1)
    kept = {term.name: term.bytes for term in last.terms if term.component == "buffers"}
    # The last stage keeps its final norm (128) and head (32,768) gathered.
    assert kept["ZeRO-3 gathered embedding, final norm and head (bf16)"] == 2 * (128 + 32_768)
    assert mem.weights == 2 * (83_136 // 2)


def test_megatron_fsdp_gathers_and_shards_fp8_parameters() -> None:
    # FP8 current scaling on B200 with --fp8-param-gather under ZeRO-3 (Megatron-FSDP): the
    # GEMM weights, Ψ_q = 2·(8,192 + 16,384) = 49,152 on stage 0, are sharded and gathered in
    # FP8 (one byte, one copy on Blackwell); the rest of Ψ_0 = 83,136 in bf16 over N = 2.
    job = job_of(
        {
            "hardware": {"gpu": "b200"},
            "parallelism": {"zero_stage": 3},
            "training": {"precision": "fp8", "fp8": {"recipe": "current", "param_gather": True}},
        }
    )
    mem = rank_memory(job, 0)
    names = {term.name: term.bytes for term in mem.terms}
    assert names["fp8 weights shard (current)"] == 49_152 // 2
    assert names["weights shard (bf16)"] == 2 * (83_136 - 49_152) // 2
    # Two units gathered: their 24,576 GEMM weights in FP8, their 608 norm and bias elements in
    # bf16.
    assert names["fp8 gathered units (current)"] == 2 * 24_576
    assert names["ZeRO-3 gathered units (bf16)"] == 2 * 2 * (25_184 - 24_576)


def test_tied_embeddings_both_ends() -> None:
    b = budget(job_of({"model": {"tied_embeddings": True}}))
    last = {term.name for term in b.stages[1].memory.terms}
    assert "tied word embedding copy (bf16)" in last


def test_report_text_and_json() -> None:
    job = job_of()
    b = budget(job)
    text = render_text(job, b)
    assert "GiB = 2^30 bytes" in text and "GB = 10^9 bytes" in text
    assert "Stage 0" in text and "Stage 1" in text and "peak" in text
    data = to_json(job, b)
    json.dumps(data)
    assert data["parameters"] == b.parameters and data["parameters_padded"] == b.parameters_padded
    assert [stage["total"] for stage in data["stages"]] == [1_611_895_680, 1_611_880_128]
    first = data["stages"][0]
    assert sum(term["bytes"] for term in first["terms"]) == first["total"]
    assert all(isinstance(term["bytes"], int) for term in first["terms"])


def test_examples_budget() -> None:
    # The shipped Llama 3 70B example: stage 0 is the heaviest (it holds p micro-batches).
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "examples"
    for path in sorted(root.glob("*.yaml")):
        job = plannable_of(load_text(path.name, path.read_text("utf-8")).job)
        b = budget(job)
        assert b.peak.memory.total == max(stage.memory.total for stage in b.stages)
        render_text(job, b)


# --- properties --------------------------------------------------------------------------------

configs = st.fixed_dictionaries(
    {
        "t": st.sampled_from([1, 2, 4]),
        "p": st.sampled_from([1, 2, 4]),
        "zero": st.integers(0, 3),
        "sp": st.booleans(),
        "recompute": st.sampled_from(["none", "selective", "full"]),
        "attention": st.sampled_from(["flash", "eager"]),
        "mlp": st.sampled_from(["gelu", "swiglu", "quick_geglu"]),
        "precision": st.sampled_from(["bf16", "fp16", "fp32"]),
        "fp32_grads": st.booleans(),
        "tied": st.booleans(),
        "b": st.sampled_from([1, 2, 4]),
        "s": st.sampled_from([64, 128, 256]),
    }
)


def job_from(cfg: dict[str, Any]) -> Plannable:
    return job_of(
        {
            "model": {"mlp": cfg["mlp"], "tied_embeddings": cfg["tied"]},
            # d = 2 whatever t and p are: the world grows with them.
            "hardware": {"gpus_per_node": cfg["t"] * cfg["p"] * 2},
            "parallelism": {
                "tensor": cfg["t"], "pipeline": cfg["p"], "data": 2, "zero_stage": cfg["zero"],
                "sequence_parallel": cfg["sp"] and cfg["t"] > 1,
            },
            "training": {
                "recompute": cfg["recompute"], "attention": cfg["attention"], "precision": cfg["precision"],
                "grad_accum_fp32": cfg["fp32_grads"], "micro_batch": cfg["b"], "seq_len": cfg["s"],
                "global_batch": 64,
            },
        }
    )


@settings(max_examples=80, deadline=None)
@given(cfg=configs)
def test_totals_are_sums_of_nonnegative_int_terms(cfg: dict[str, Any]) -> None:
    for stage in budget(job_from(cfg)).stages:
        mem = stage.memory
        assert all(isinstance(t.bytes, int) and t.bytes >= 0 for t in mem.terms)
        for name in COMPONENTS:
            assert getattr(mem, name) == sum(t.bytes for t in mem.terms if t.component == name)
        assert mem.total == sum(getattr(mem, name) for name in COMPONENTS)
        assert all(t.formula and t.source for t in mem.terms)


@settings(max_examples=60, deadline=None)
@given(cfg=configs)
def test_raising_tensor_never_raises_weights(cfg: dict[str, Any]) -> None:
    if cfg["t"] == 4:
        return
    small, large = job_from(cfg), job_from({**cfg, "t": cfg["t"] * 2})
    for stage in range(cfg["p"]):
        assert rank_memory(large, stage).weights <= rank_memory(small, stage).weights


@settings(max_examples=60, deadline=None)
@given(cfg=configs)
def test_higher_zero_stage_never_uses_more_static_memory(cfg: dict[str, Any]) -> None:
    def static(zero: int, stage: int) -> int:
        mem = rank_memory(job_from({**cfg, "zero": zero}), stage)
        return mem.weights + mem.gradients + mem.optimizer

    for stage in range(cfg["p"]):
        sizes = [static(zero, stage) for zero in range(4)]
        assert sizes == sorted(sizes, reverse=True)


@settings(max_examples=60, deadline=None)
@given(cfg=configs)
def test_memory_is_monotone_in_micro_batch_and_sequence(cfg: dict[str, Any]) -> None:
    base = job_from(cfg)
    bigger_b = job_from({**cfg, "b": cfg["b"] * 2})
    longer_s = job_from({**cfg, "s": cfg["s"] * 2})
    for stage in range(cfg["p"]):
        total = rank_memory(base, stage).total
        assert rank_memory(bigger_b, stage).total >= total
        assert rank_memory(longer_s, stage).total >= total


@pytest.mark.parametrize("cp_comm_type", ["a2a", "allgather", "a2a+p2p"])
def test_exchanged_activations_equal_those_computed_afresh(cp_comm_type: str) -> None:
    # A search shares every stage's activations between context-parallel types and swaps in
    # the exchange's buffers (`exchanged`): what it gives, the heaviest stage of each class and
    # its bytes included, is what the job under that type computes itself.
    from planc.memory.budget import classwise_activations, exchanged

    def layout(kind: str) -> Plannable:
        return job_of({"parallelism": {"tensor": 1, "pipeline": 4, "context": 2, "cp_comm_type": kind}})

    fresh = classwise_activations(layout(cp_comm_type))
    shared = exchanged(classwise_activations(layout("p2p")), layout(cp_comm_type))
    assert shared == fresh
    assert shared.heaviest == fresh.heaviest
    assert all(stage.lines.exchange for stage in shared.stages)
    assert [s.bytes for s in shared.stages] == [s.bytes for s in fresh.stages]
