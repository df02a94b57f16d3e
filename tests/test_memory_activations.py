"""Activations: Korthikanti et al. 2022 Table 2 exactly, its generalisations, the schedule."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from planc.memory.activations import (
    layer_bytes,
    layer_shape,
    layer_terms,
    stage_activation_terms,
)
from planc.pipeline.counts import num_warmup
from planc.pipeline.inflight import in_flight
from planc.plannable import Plannable
from planc.spec.job import Model
from planc.spec.load import load_text

from conftest import plannable_of

# The configuration Table 2 assumes: GPT, f = 4h, GeLU, LayerNorm, dropout, eager, g = n.
# s, b, h, a, t chosen so that every division in the table is whole:
# 5as/h = 5·8·128/256 = 20, 24/t = 6, 5as/(ht) = 5.
s, b, h, a, t = 128, 2, 256, 8, 4
GPT = Model(
    L=8,
    h=h,
    n=a,
    g=a,
    k=h // a,
    f=4 * h,
    V=1024,
    mlp="gelu",
    norm="layernorm",
    bias=True,
    dropout=0.1,
    tied=True,
    position="learned",
    max_seq_len=s,
    preset=None,
)


def per_layer(model: Model = GPT, recompute: str = "none", **degrees: Any) -> int:
    shape = layer_shape(
        model, s=s, b=b, precision="bf16", attention=degrees.pop("attention", "eager"), **degrees
    )
    return layer_bytes(shape, recompute)


def test_table2_dims_are_whole() -> None:
    assert (
        (5 * a * s) % h == 0 and 24 % t == 0 and (5 * a * s) % (h * t) == 0 and (s * b * h) % t == 0
    )


def test_table2_no_parallelism() -> None:
    assert per_layer() == s * b * h * (34 + 5 * a * s // h)


def test_table2_tensor_parallel() -> None:
    assert per_layer(t=t) == s * b * h * (10 + 24 // t + 5 * a * s // (h * t))


def test_table2_tensor_and_sequence_parallel() -> None:
    assert per_layer(t=t, sp=True) == s * b * h // t * (34 + 5 * a * s // h)


def test_table2_tensor_parallel_selective_recompute() -> None:
    assert per_layer(recompute="selective", t=t) == s * b * h * (10 + 24 // t)


def test_table2_tensor_sequence_parallel_selective_recompute() -> None:
    assert per_layer(recompute="selective", t=t, sp=True) == s * b * h * 34 // t


def test_table2_full_recompute() -> None:
    assert per_layer(recompute="full") == 2 * s * b * h
    assert per_layer(recompute="full", t=t) == 2 * s * b * h  # the input stays replicated
    assert per_layer(recompute="full", t=t, sp=True) == 2 * s * b * h // t


def test_korthikanti_breakdown_by_hand() -> None:
    # §4.1, in units of sbh and as²b: attention 11sbh + 5as²b, MLP 19sbh, norms 4sbh.
    sbh, as2b = s * b * h, a * s * s * b
    terms = {term.name: term.bytes for term in layer_terms(layer_shape(GPT, s=s, b=b))}
    assert terms["softmax output"] == 2 * as2b
    assert terms["attention dropout mask"] == as2b
    assert terms["attention dropout output"] == 2 * as2b
    assert terms["Q (QKᵀ input)"] + terms["K (QKᵀ input)"] == 4 * sbh
    assert terms["MLP activation input (fc1 output)"] == terms["fc2 input"] == 8 * sbh
    assert terms["attention residual dropout mask"] == terms["MLP residual dropout mask"] == sbh
    assert terms["attention norm input"] + terms["MLP norm input"] == 4 * sbh


def test_flash_drops_scores_keeps_statistics() -> None:
    # No s×s terms; fp32 log-sum-exp: 4 bytes × a·s·b.
    assert per_layer(attention="flash") == 34 * s * b * h + 4 * a * s * b


def test_no_dropout_no_masks() -> None:
    # −2sbh (two residual masks), −as²b (mask), −2as²b (the dropout output is the softmax output).
    model = replace(GPT, dropout=0.0)
    assert per_layer(model) == 32 * s * b * h + 2 * a * s * s * b


def test_llama_style_layer_by_hand() -> None:
    # SwiGLU, RMSNorm, GQA (g = 2), flash, no dropout, f = 3h, no parallelism:
    # norms 4sbh + QKV input 2sbh + Q 2sbh + K, V 2·s·b·g·k each + out-proj input 2sbh
    # + fc1 input 2sbh + fc1 output (gate, up) 2·2sbf + fc2 input 2sbf + LSE 4asb.
    model = replace(GPT, g=2, f=3 * h, mlp="swiglu", norm="rmsnorm", dropout=0.0, bias=False)
    k = h // a
    expected = 12 * s * b * h + 4 * s * b * 2 * k + 6 * s * b * 3 * h + 4 * a * s * b
    assert per_layer(model, attention="flash") == expected


def test_eager_expands_kv_heads() -> None:
    # Eager GQA keeps K and V at n heads (repeat_interleave before the matmuls): like g = n.
    gqa = replace(GPT, g=2)
    assert per_layer(gqa) == per_layer(GPT)


def test_tensor_beyond_kv_heads_replicates_them() -> None:
    # g = 2, t = 4, flash: each rank keeps ⌈2/4⌉ = 1 kv head for K and V.
    gqa = replace(GPT, g=2, dropout=0.0)
    terms = {
        x.name: x.bytes for x in layer_terms(layer_shape(gqa, s=s, b=b, attention="flash", t=4))
    }
    assert terms["K (QKᵀ input)"] == terms["V (attention-over-V input)"] == 2 * s * b * 1 * (h // a)


def test_context_parallel() -> None:
    # c = 2: s/2 tokens per rank; eager scores are a·(s/2)·s·b (ring attention keeps every step).
    c = 2
    expected = (s // c) * b * h * 34 + 5 * a * (s // c) * s * b
    assert per_layer(c=c) == expected
    assert per_layer(c=c, attention="flash") == (s // c) * b * h * 34 + 4 * a * (s // c) * b


def test_fp32_activations() -> None:
    # Every 16-bit tensor doubles; the 1-byte masks do not.
    masks = 2 * s * b * h + a * s * s * b
    assert (
        per_layer() - masks
        == (layer_bytes(layer_shape(GPT, s=s, b=b, precision="fp32")) - masks) // 2
    )


def test_formulas_name_their_source() -> None:
    for term in layer_terms(layer_shape(GPT, s=s, b=b, t=2, c=2, sp=True)):
        assert term.source and term.formula and term.component == "activations"
    formulas = {x.name: x.formula for x in layer_terms(layer_shape(GPT, s=s, b=b, t=2, sp=True))}
    assert formulas["softmax output"] == "2·a·s²·b/t"
    assert formulas["attention norm input"] == "2·s·b·h/t"


# --- the schedule ------------------------------------------------------------------------------


def forward_order(p: int, v: int, m: int) -> list[int]:
    """Megatron's get_schedule_table: groups of p micro-batches, each group chunk by chunk."""
    order: list[int] = []
    for start in range(0, m, p):
        size = min(p, m - start)
        order += [chunk for chunk in range(v) for _ in range(size)]
    return order


def megatron_warmup(p: int, v: int, m: int, r: int) -> int:
    """Warm-up forwards of rank r, as Megatron-Core's `get_pp_rank_microbatches`
    (megatron/core/pipeline_parallel/schedules.py) counts them: `p − r − 1` without
    interleaving; `(p − r − 1)·2 + (v − 1)·microbatch_group_size_per_vp_stage` with it (the group
    size defaults to p); then capped at the m·v virtual micro-batches."""
    warmup = p - r - 1 if v == 1 else (p - r - 1) * 2 + (v - 1) * p
    return min(warmup, m * v)


def test_the_oracles_warmup_is_the_papers() -> None:
    # Narayanan et al. 2021 Fig. 4 (top): with p = 4 and 8 micro-batches, 1F1B's first device
    # runs four forwards before its first backward (three of warm-up, then one of the steady
    # 1F1B pair) and the last device one. Interleaved, v = 2: the first stage fills chunk 0 and
    # chunk 1 for a group of p = 4 micro-batches (8) and the round trip to the last stage
    # adds 2·(p − r − 1): 10, 8, 6, 4.
    assert [megatron_warmup(4, 1, 8, r) for r in range(4)] == [3, 2, 1, 0]
    assert [megatron_warmup(4, 2, 8, r) for r in range(4)] == [10, 8, 6, 4]
    assert megatron_warmup(4, 2, 2, 0) == 4  # fewer micro-batches than the warm-up: all of them


def simulate(p: int, v: int, m: int, r: int, weights: tuple[int, ...]) -> int:
    """The largest Σ weight × held over the schedule, by walking it step by step."""
    forwards = forward_order(p, v, m)
    backwards = [v - 1 - chunk for chunk in forwards]
    total = m * v
    if p == 1:
        return sum(weights)
    W = megatron_warmup(p, v, m, r)
    held = [0] * v
    for chunk in forwards[:W]:
        held[chunk] += 1
    best = sum(w * n for w, n in zip(weights, held, strict=True))
    for i in range(total - W):
        held[forwards[W + i]] += 1
        best = max(best, sum(w * n for w, n in zip(weights, held, strict=True)))
        held[backwards[i]] -= 1
    return best


@settings(max_examples=300, deadline=None)
@given(
    p=st.integers(1, 6),
    v=st.integers(1, 4),
    m=st.integers(1, 20),
    data=st.data(),
)
def test_in_flight_matches_a_step_by_step_walk(p: int, v: int, m: int, data: st.DataObject) -> None:
    r = data.draw(st.integers(0, p - 1))
    weights = tuple(data.draw(st.lists(st.integers(0, 1000), min_size=v, max_size=v)))
    held = in_flight(p, v, m, r, weights)
    assert all(0 <= n <= m for n in held)
    assert sum(w * n for w, n in zip(weights, held, strict=True)) == simulate(p, v, m, r, weights)


def test_in_flight_exhaustive_small_grid() -> None:
    # Every p ≤ 5, v ≤ 3, m ≤ 15, rank and weight mix in {0, 1, 5}: including short last groups
    # (m not a multiple of p), where the mix stops repeating (e.g. p=5, v=3, m=13, r=0).
    import itertools

    for p in range(1, 6):
        for v in range(1, 4):
            for m in range(1, 16):
                for r in range(p):
                    for weights in itertools.product((0, 1, 5), repeat=v):
                        held = in_flight(p, v, m, r, weights)
                        found = sum(w * n for w, n in zip(weights, held, strict=True))
                        assert found == simulate(p, v, m, r, weights), (p, v, m, r, weights)


@pytest.mark.parametrize(("p", "m"), [(4, 8), (4, 2), (8, 64), (1, 4)])
def test_one_f_one_b_holds_p_minus_r(p: int, m: int) -> None:
    for r in range(p):
        assert in_flight(p, 1, m, r, (1,)) == (min(p - r, m),)


def test_interleaved_warmup_matches_megatron() -> None:
    # 2(p − r − 1) + (v − 1)·p, capped at m·v (Megatron-Core's get_pp_rank_microbatches).
    assert [num_warmup(4, 8, 2, r) for r in range(4)] == [10, 8, 6, 4]
    assert num_warmup(4, 4, 2, 0) == 8  # capped: m·v = 8
    assert sum(in_flight(4, 2, 8, 0, (1, 1))) == 11


def test_interleaved_first_stage_factor() -> None:
    # Megatron / Korthikanti: the first stage holds L·(1 + (p−1)/(p·v)) layers' activations.
    p, v, L = 4, 3, 24
    held = in_flight(p, v, 12, 0, (1,) * v)
    chunk = L // (p * v)
    assert sum(held) * chunk * p * v == L * (p * v + p - 1)


# --- a stage's terms ---------------------------------------------------------------------------


def job_of(
    parallelism: dict[str, Any], training: dict[str, Any] | None = None, **model: Any
) -> Plannable:
    spec = {
        "version": 1,
        "name": "t",
        "model": {"preset": "gpt2-small", **model},
        "hardware": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 8},
        "parallelism": parallelism,
        "training": {
            "seq_len": 1024,
            "global_batch": 64,
            "micro_batch": 2,
            "attention": "eager",
            "recompute": "none",
            **(training or {}),
        },
    }
    return plannable_of(load_text("t.yaml", yaml.safe_dump(spec)).job)


def test_first_stage_holds_p_micro_batches_of_its_layers() -> None:
    # GPT-2 small, p = 4, d = 2, m = 64/(2·2) = 16: stage 0 holds 4 micro-batches × 3 layers.
    job = job_of({"pipeline": 4, "data": 2})
    acts, _ = stage_activation_terms(job, 0)
    layer = layer_bytes(layer_shape(job.model, s=1024, b=2))
    assert sum(x.bytes for x in acts if "× 12 layer-micro-batches" in x.formula) == 12 * layer
    names = {x.name for x in acts}
    assert {
        "embedding token ids (int64)",
        "embedding dropout mask",
        "position ids (int64)",
    } <= names
    assert "cross-entropy softmax (fp32)" not in names


def test_last_stage_logits() -> None:
    # GPT-2 small on the last of p = 4 stages: 4·s·b·V'/t fp32 softmax, V' = 50304.
    job = job_of({"pipeline": 4, "data": 2})
    acts, buffers = stage_activation_terms(job, 3)
    by_name = {x.name: x.bytes for x in acts}
    assert by_name["cross-entropy softmax (fp32)"] == 4 * 1024 * 2 * 50304
    assert by_name["cross-entropy targets (int64 + bool)"] == 9 * 1024 * 2
    assert [x.bytes for x in buffers] == [2 * 1024 * 2 * 50304]


def test_full_recompute_charges_one_layer_working_set() -> None:
    job = job_of({"pipeline": 1, "data": 8}, {"recompute": "full"})
    acts, _ = stage_activation_terms(job, 0)
    work = [x for x in acts if x.name.startswith("recompute working set")]
    assert [x.bytes for x in work] == [layer_bytes(layer_shape(job.model, s=1024, b=2))]
