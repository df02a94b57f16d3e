"""Latent attention's tensor-parallel traffic: the latents, not the hidden state, at the
attention block's input (Megatron-Core MLASelfAttention: the down projections duplicated on
every TP rank, the up projections column-parallel over the latents, k_pos_emb gathered).

Expected calls and bytes are written out by hand for a small latent-attention model: L = 4,
h = 1,024, 16 heads, d_c' = 256, d_c = 128, d_h^R = 32, d_h = v = 64; t = 4 on one node of
8 GPUs (d = 2), s = 2,048, b = 1, B = 16 (m = 8 micro-batches), bf16 (β_a = 2)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
import yaml

from planc.analysis import analyse
from planc.compile.plan import compile_job, plan_json
from planc.perf.inputs import comm_time_s, tp_per_layer
from planc.plannable import Plannable, plannable
from planc.spec.load import load_text
from planc.verify import render, verify_text

S, H, M = 2048, 1024, 8
TOKENS = S * 2  # b·(s/c)·β_a: bytes per unit of width for one micro-batch


def plan_of(q_lora: int | None = 256, recompute: str = "selective", **parallel: Any) -> Plannable:
    spec = {
        "version": 1,
        "name": "mla",
        "model": {
            "layers": 4,
            "hidden": H,
            "heads": 16,
            "ffn_hidden": 4096,
            "vocab": 32000,
            "mlp": "swiglu",
            "norm": "rmsnorm",
            "position_embedding": "rope",
            "mla": {
                "q_lora_rank": q_lora,
                "kv_lora_rank": 128,
                "qk_nope_head_dim": 64,
                "qk_rope_head_dim": 32,
                "v_head_dim": 64,
            },
        },
        "hardware": {"gpu": "h100-sxm", "nodes": 1},
        "parallelism": {"tensor": 4, "pipeline": 1, **parallel},
        "training": {"seq_len": S, "micro_batch": 1, "global_batch": 16, "recompute": recompute},
    }
    loaded = load_text("mla.yaml", yaml.safe_dump(spec))
    assert loaded.job is not None, loaded.findings
    plan = plannable(loaded.job)
    assert isinstance(plan, Plannable), plan
    return plan


def tp_calls(plan: Plannable) -> Counter[tuple[str, int]]:
    found: Counter[tuple[str, int]] = Counter()
    for op in analyse(plan).ops:
        if op.group == "tp":
            found[(str(op.op), op.buffer_bytes)] += op.calls
    return found


# One stage holds both ends (p = 1; tests/test_tp_ends.py): with SP the word embedding's
# output reduce-scattered and its gradient gathered, the LM head's input gathered, gathered
# again for its weight gradient and its gradient reduce-scattered; without SP one all-reduce
# each; and the unfused loss's three fp32 all-reduces of the s rows. Once a micro-batch.
ENDS_SP = Counter(
    {
        ("all_gather", TOKENS * H): 3 * M,
        ("reduce_scatter", TOKENS * H): 2 * M,
        ("all_reduce", S * 4): 3 * M,
    }
)
ENDS = Counter({("all_reduce", TOKENS * H): 2 * M, ("all_reduce", S * 4): 3 * M})


def test_sequence_parallel_gathers_the_latents() -> None:
    plan = plan_of(sequence_parallel=True)
    assert plan.m == M
    layers = 4
    # Attention: each latent gathered forward and its gradient scattered backward; the two the
    # up projections take (query, key/value) gathered again in backward for their weight
    # gradients, not the RoPE key; h scattered after the output projection and its gradient
    # gathered. MLP: h both ways, both passes, and its input gathered again in backward.
    want = Counter(
        {
            ("all_gather", TOKENS * 256): 2 * layers * M,
            ("all_gather", TOKENS * 128): 2 * layers * M,
            ("all_gather", TOKENS * 32): layers * M,
            ("reduce_scatter", TOKENS * 256): layers * M,
            ("reduce_scatter", TOKENS * 128): layers * M,
            ("reduce_scatter", TOKENS * 32): layers * M,
            ("all_gather", TOKENS * H): layers * M + 3 * layers * M,
            ("reduce_scatter", TOKENS * H): layers * M + 2 * layers * M,
        }
    )
    assert tp_calls(plan) == want + ENDS_SP


def test_without_sequence_parallelism_the_latent_gradients_are_all_reduced() -> None:
    plan = plan_of(sequence_parallel=False)
    want = Counter(
        {
            # Attention output forward, MLP output forward, MLP input gradient backward.
            ("all_reduce", TOKENS * H): 3 * 4 * M,
            ("all_reduce", TOKENS * 256): 4 * M,
            ("all_reduce", TOKENS * 128): 4 * M,
        }
    )
    assert tp_calls(plan) == want + ENDS


def test_without_a_query_latent_the_query_input_is_the_hidden_state() -> None:
    plan = plan_of(q_lora=None, sequence_parallel=True)
    calls = tp_calls(plan)
    # The query projection gathers h like a dense block's input, again in backward too.
    assert calls[("all_gather", TOKENS * H)] == 2 * 4 * M + 4 * M + 3 * 4 * M + 3 * M  # + ends
    assert calls[("reduce_scatter", TOKENS * H)] == 4 * M + 4 * M + 2 * 4 * M + 2 * M
    assert ("all_gather", TOKENS * 256) not in calls


def test_full_recompute_gathers_the_latents_again() -> None:
    plan = plan_of(sequence_parallel=True, recompute="full")
    calls = tp_calls(plan)
    # forward, recomputed forward, and again for the up projection's weight gradient
    assert calls[("all_gather", TOKENS * 128)] == 3 * 4 * M
    assert calls[("reduce_scatter", TOKENS * 128)] == 4 * M  # backward only
    # h: attention out scatter twice, its gradient gather once; the MLP's both, three times,
    # and its input gathered once more for the weight gradient.
    # The ends are not recomputed (ENDS_SP).
    assert calls[("reduce_scatter", TOKENS * H)] == 2 * 4 * M + 3 * 4 * M + 2 * M
    assert calls[("all_gather", TOKENS * H)] == 4 * M + 3 * 4 * M + 4 * M + 3 * M


@pytest.mark.parametrize("sp", [True, False])
def test_the_compiled_plan_verifies(sp: bool) -> None:
    plan = plan_of(sequence_parallel=sp)
    data = json.loads(plan_json(compile_job(analyse(plan))))
    result = verify_text(json.dumps(data))
    assert result.ok, render(result)
    # And verify's own recount notices a latent op with the wrong size.
    latent = next(o for o in data["communication"]["ops"] if o["buffer_bytes"] == TOKENS * 128)
    latent["buffer_bytes"] += 2
    assert not verify_text(json.dumps(data)).ok


def test_the_step_model_prices_the_latent_messages() -> None:
    plan = plan_of(sequence_parallel=True)
    analysis = analyse(plan)
    eff = analysis.efficiency
    link = next(str(op.link) for op in analysis.ops if op.group == "tp")

    def call(collective: str, width: int) -> float:
        return comm_time_s(plan, eff, collective, 4, TOKENS * width, link)

    per_layer = tp_per_layer(plan, eff, analysis.ops, 0)
    # Forward: the attention block gathers its three latents and scatters h; the MLP gathers
    # and scatters h.
    attention = call("all_gather", 256) + call("all_gather", 128) + call("all_gather", 32)
    attention += call("reduce_scatter", H)
    mlp = call("all_gather", H) + call("reduce_scatter", H)
    assert per_layer.forward_s == pytest.approx(attention + mlp, rel=1e-12)


def test_context_parallel_exchanges_the_expanded_heads() -> None:
    # c = 2 (t = 4, d = 1): K of 64 + 32 and V of 64 channels for each of 16/4 heads, on the
    # b·(s/c) tokens of the rank.
    plan = plan_of(sequence_parallel=True, context=2, data=1)
    cp = [op for op in analyse(plan).ops if op.group == "cp"]
    assert [op.buffer_bytes for op in cp] == [(S // 2) * 4 * (96 + 64) * 2]
    data = json.loads(plan_json(compile_job(analyse(plan))))
    result = verify_text(json.dumps(data))
    assert result.ok, render(result)
