"""Every op's calls and bytes, recomputed from tensor shapes, and every rank's wire totals.

Shapes, per micro-batch on one rank: the hidden states of b sequences of s/c tokens are
b·⌈s/c⌉·h elements (the gathered buffer of a tensor-parallel collective); a pipeline message
is that divided along the sequence over t with sequence parallelism; a ring-attention step
carries K and V of the rank's kv heads. A MoE layer's dispatch and combine exchange, per
micro-batch, the T·k rows of h its T tokens are routed to (T = b·⌈s/c⌉, /t with sequence
parallelism), over the expert-parallel group; expert gradients go over the expert data-parallel
group in their own buckets. Gradients travel in buckets of Megatron DDP's default
size, max(4·10⁷, 10⁶·d) elements, over the parameters a stage holds, which are counted here
again from the model's shape. Bytes a rank sends per call follow the ring algorithm as
`planc.sim` simulates it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from fractions import Fraction
from itertools import pairwise
from typing import Any

import numpy as np

from planc.record import record
from planc.sim import (
    all_to_all_bytes,
    expected_blocks,
    reach_probability,
    ring_all_gather_bytes,
    ring_allreduce_bytes,
    ring_reduce_scatter_bytes,
    round_robin_blocks,
    round_robin_reach,
)
from planc.verify.grid import dispatch_position, expert_coordinates
from planc.verify.plandata import WIRE_FIELDS, Ints, PlanData
from planc.vocab import gated

Found = Iterator[str]


def cdiv(a: int, b: int) -> int:
    return int(-(-a // b))


def _moe_layers(moe: Mapping[str, Any], first: int, last: int) -> int:
    """Layers of [first, last) with experts, counted one by one (the plan's layer ranges are
    small; planc's own count is a closed form)."""
    dense, every = moe["first_dense_layers"], moe["layer_frequency"]
    offset = moe.get("layer_offset", 0)
    return sum(1 for i in range(first, last) if i >= dense and i % every == offset)


def _mlp(h: int, inner: int, matrices: int) -> int:
    return matrices * h * inner


def _mtp(plan: PlanData, stage: int) -> tuple[int, int]:
    """(modules, of them with experts) of the multi-token prediction modules `stage` holds: D on
    the last stage, each a layer shaped like layer L−1."""
    m: Mapping[str, Any] = plan.model
    modules = m.get("mtp_layers", 0) if stage == _last_stage(plan) else 0
    moe = m.get("moe")
    routed = modules if moe is not None and _moe_layers(moe, m["layers"] - 1, m["layers"]) else 0
    return modules, routed


def _routed_layers(plan: PlanData, stage: int) -> int:
    """The layers of `stage` with experts, its multi-token prediction modules' included."""
    moe = plan.model.get("moe")
    if moe is None:
        return 0
    return sum(_moe_layers(moe, a, b) for a, b in plan.stage_layers[stage]) + _mtp(plan, stage)[1]


def stage_expert_parameters(plan: PlanData, stage: int) -> int:
    """Ψ_expert: the routed-expert parameters one rank of `stage` holds: per MoE layer, E/EP
    whole experts, each a (gate,) up and down matrix with f_e split over ETP."""
    m: Mapping[str, Any] = plan.model
    moe = m.get("moe")
    if moe is None:
        return 0
    ep, et = plan.expert_degrees["ep"], plan.expert_degrees["tp"]
    matrices = 3 if gated(m["mlp"]) else 2
    inner = cdiv(moe["expert_ffn_hidden"], et)
    one = _mlp(m["hidden"], inner, matrices)
    if m["bias"]:  # fc1's (gate and) up bias and fc2's bias, per expert
        one += (2 if gated(m["mlp"]) else 1) * inner + m["hidden"]
    local = moe["experts"] // ep * one
    return int(local) * _routed_layers(plan, stage)


def _attention_matrices(m: Mapping[str, Any], t: int) -> int:
    """One layer's attention projections on one TP rank: Q and O of ⌈n/t⌉ heads, K and V of
    ⌈g/t⌉; or latent attention's down projections and latent norms (whole on every rank) and
    the up and output projections of ⌈n/t⌉ heads."""
    h, k, heads = m["hidden"], m["head_dim"], cdiv(m["heads"], t)
    mla = m.get("mla")
    if mla is None:
        return int(h * heads * k * 2 + h * cdiv(m["kv_heads"], t) * k * 2)
    q_lora, kv_lora, v = mla["q_lora_rank"], mla["kv_lora_rank"], mla["v_head_dim"]
    rope, nope = mla["qk_rope_head_dim"], mla["qk_nope_head_dim"]
    down = h * (kv_lora + rope) + kv_lora + (0 if q_lora is None else h * q_lora + q_lora)
    q_up = (h if q_lora is None else q_lora) * heads * (nope + rope)
    return int(down + q_up + kv_lora * heads * (nope + v) + heads * v * h)


def stage_parameters(plan: PlanData, stage: int) -> int:
    """Ψ_r: the parameters one tensor-parallel rank of pipeline stage `stage` holds, counted
    tensor by tensor (attention projections, MLP matrices, norms, QK-norm, biases, the word
    embedding and LM head slices of the padded vocabulary, learned positions; in MoE layers the
    router, the shared experts' MLP and the rank's routed experts instead of the dense MLP; on
    the last stage the multi-token prediction modules, each a layer and eh_proj 2h × h/t and
    three norms)."""
    m: Mapping[str, Any] = plan.model
    t = plan.degrees["tp"]
    h, k = m["hidden"], m["head_dim"]
    heads, kv, ffn = cdiv(m["heads"], t), cdiv(m["kv_heads"], t), cdiv(m["ffn_hidden"], t)
    matrices = 3 if gated(m["mlp"]) else 2
    norm = (2 if m["norm"] == "layernorm" else 1) * h
    attention = _attention_matrices(m, t) + 2 * norm + (2 * k if m.get("qk_norm") else 0)
    attention += heads if m.get("attention_sinks") else 0  # a softmax offset per head
    mlp = _mlp(h, ffn, matrices)
    if m["bias"]:
        attention += (heads + 2 * kv) * k + h
        mlp += (2 if gated(m["mlp"]) else 1) * ffn + h
    modules, _ = _mtp(plan, stage)
    layers = sum(b - a for a, b in plan.stage_layers[stage]) + modules
    total = layers * (attention + mlp) + modules * (2 * h * cdiv(h, t) + 3 * norm)
    moe = m.get("moe")
    if moe is not None:
        router = h * moe["experts"] + (moe["experts"] if moe["router_bias"] else 0)
        router += moe["experts"] if m["bias"] else 0  # the gate's own bias
        shared_inner = cdiv(moe["shared_experts"] * moe["shared_expert_ffn_hidden"], t)
        shared = _mlp(h, shared_inner, matrices) if moe["shared_experts"] else 0
        if m["bias"] and moe["shared_experts"]:
            shared += (2 if gated(m["mlp"]) else 1) * shared_inner + h
        total += _routed_layers(plan, stage) * (router + shared - mlp)
        total += stage_expert_parameters(plan, stage)
    vocab_slice = m["vocab_padded"] // t * h
    first, last = stage == 0, stage == _last_stage(plan)
    if first:
        total += vocab_slice + (m["max_seq_len"] * h if m["position_embedding"] == "learned" else 0)
    if last:
        total += norm + (vocab_slice if not m["tied_embeddings"] or _last_stage(plan) else 0)
        # untied, the multi-token prediction modules embed with a copy of their own
        total += vocab_slice if _embedding_copy(plan) and not m["tied_embeddings"] else 0
    return int(total)


@record
class ExpectedOp:
    """One expected op: what, how often per step, how large per call."""

    stage: int
    group: str
    op: str
    direction: str | None
    group_size: int
    calls: int
    buffer_bytes: int
    link: str | None = None  # a pipeline send's own tier (`boundary_tiers`); else the group's


def _hidden(plan: PlanData) -> int:
    tr = plan.training
    tokens = cdiv(int(tr["seq_len"]), plan.degrees["cp"])
    return int(tr["micro_batch"]) * tokens * int(plan.model["hidden"]) * int(tr["activation_bytes"])


def _regathers(plan: PlanData) -> bool:
    """Whether the column-parallel linears gather their sequence-parallel input again in
    backward: under Megatron's layers (megatron, deepspeed), not torchtitan's DTensor TP."""
    return bool(plan.sequence_parallel) and plan.training.get("framework") != "fsdp2"


def _gather_recomputed(plan: PlanData) -> bool:
    """Whether torchtitan's per-op activation checkpointing (recompute selective-op) runs each
    TP block's sequence-parallel input all-gather again in backward: the gather is not in its
    save list (torchtitan parallelize_llama.py _save_list)."""
    tr = plan.training
    return (
        bool(plan.sequence_parallel)
        and plan.degrees["tp"] > 1
        and tr.get("framework") == "fsdp2"
        and tr.get("recompute") == "selective-op"
    )


def _sp_gathered(plan: PlanData, width: int | None = None) -> int:
    """One SP all-gather of a width-w tensor (h when None) that a linear receives: where the
    recipe gathers quantized (quantized.tp_gather) data_bits per element plus one scale of
    scale_bytes per scale_block elements (none for a per-tensor scale), else the activations'
    bytes."""
    tr = plan.training
    w = int(plan.model["hidden"]) if width is None else width
    tokens = cdiv(int(tr["seq_len"]), plan.degrees["cp"])
    elements = int(tr["micro_batch"]) * tokens * w
    q = tr.get("quantized")
    if q is None or not q.get("tp_gather"):
        return elements * int(tr["activation_bytes"])
    block = int(q.get("scale_block", 0))
    scales = cdiv(elements, block) * int(q["scale_bytes"]) if block else 0
    return cdiv(elements * int(q["data_bits"]), 8) + scales


def _tp(plan: PlanData, stage: int, layers: int, m: int) -> list[ExpectedOp]:
    t = plan.degrees["tp"]
    if t == 1:
        return []
    size = _hidden(plan)
    kept = _kept_in_bf16(plan, stage)
    whole = _tp_blocks(plan, layers, _routed_layers(plan, stage), m)
    unread = _unread_outputs(plan, layers, _routed_layers(plan, stage), m)
    if plan.sequence_parallel:
        # All-gather before and reduce-scatter after each block, forward and backward; the
        # layers kept in BF16 gather 16-bit where the others gather quantized.
        scatters = 2 * whole[0] + whole[1] - unread
        ops = [ExpectedOp(stage, "tp", "reduce_scatter", None, t, scatters, size)]
        bf16 = _tp_blocks(plan, len(kept), _kept_moe_layers(plan, kept), m)
        for (forward, again), gathered in (
            ((whole[0] - bf16[0], whole[1] - bf16[1]), _sp_gathered(plan)),
            (bf16, _hidden(plan)),
        ):
            ops.append(ExpectedOp(stage, "tp", "all_gather", None, t, 2 * forward + again, gathered))
            if _regathers(plan):
                # Megatron's column-parallel linears gather their input again for the weight
                # gradient (they keep only their shard of it).
                ops.append(ExpectedOp(stage, "tp", "all_gather", None, t, forward, gathered))
            if _gather_recomputed(plan):
                # torchtitan's per-op checkpointing runs each block's input gather again
                ops.append(ExpectedOp(stage, "tp", "all_gather", None, t, forward, gathered))
        if _amax_reduced(plan):
            # an fp32 amax all-reduced before each quantized gather but Megatron's re-gather
            # (torchtitan's recomputed gather quantizes, and reduces its amax, again)
            gathers = 3 if _gather_recomputed(plan) else 2
            quantized = gathers * (whole[0] - bf16[0]) + whole[1] - bf16[1]
            ops.append(ExpectedOp(stage, "tp", "all_reduce", None, t, quantized, 4))
    else:
        forward, again = whole
        ops = [
            ExpectedOp(stage, "tp", "all_reduce", None, t, forward, size),
            ExpectedOp(stage, "tp", "all_reduce", None, t, forward + again - unread, size),
        ]
    if plan.model.get("mla") is not None:
        modules = _recomputed(plan)
        full = plan.training["recompute"] == "full"
        ops += _latent_tp(plan, stage, (layers - len(kept)) * m, len(kept) * m, full, "mla_up_proj" in modules)
    return [op for op in ops if op.calls]


def _ends(plan: PlanData, stage: int, m: int) -> list[ExpectedOp]:
    """The TP collectives at the model's ends, per micro-batch: the word embedding's reduction
    on stage 0 (a reduce-scatter forward and all-gather backward with SP, an all-reduce
    without), and on the last stage per head pass (the model's and each MTP module's) the LM
    head's input gathered forward and again for its weight gradient (Megatron's layers) and its
    gradient reduce-scattered (all-reduced without SP), the loss's fp32 reductions of the
    b·(s/c) rows (training.cross_entropy_fusion: none three all-reduces, native two, te one
    all-gather of three values a row); each MTP module also embeds as stage 0 does and runs
    eh_proj: its 2h-wide input gathered (quantized in the FP8 context where the plan gathers
    quantized), gathered again, its gradient reduced, its h/t-wide output all-gathered, and with
    SP the output's gradient all-gathered back (full recompute: the forward gathers again)."""
    t = plan.degrees["tp"]
    if t == 1:
        return []
    tr = plan.training
    hidden = _hidden(plan)
    modules = _mtp(plan, stage)[0]
    embeddings = (stage == 0) + modules
    heads = (stage == _last_stage(plan)) + modules
    sp = bool(plan.sequence_parallel)
    q = tr.get("quantized")
    calls: Counter[tuple[str, int]] = Counter()
    if sp:
        calls["reduce_scatter", hidden] += embeddings
        calls["all_gather", hidden] += embeddings
        head_input = _sp_gathered(plan) if q is not None and q.get("output_proj") else hidden
        calls["all_gather", head_input] += heads * (2 if _regathers(plan) else 1)
        calls["reduce_scatter", hidden] += heads
    else:
        calls["all_reduce", hidden] += embeddings + heads
    rows = int(tr["micro_batch"]) * cdiv(int(tr["seq_len"]), plan.degrees["cp"])
    fusion = tr.get("cross_entropy_fusion", "none")
    if fusion == "te":
        calls["all_gather", t * 3 * rows * 4] += heads
    elif fusion == "native":
        calls["all_reduce", rows * 4] += heads
        calls["all_reduce", 2 * rows * 4] += heads
    else:
        calls["all_reduce", rows * 4] += 3 * heads
    if modules:
        wide = 2 * hidden
        full = tr["recompute"] == "full"
        output = modules * (2 if full else 1)  # the output gather, again under full recompute
        calls["all_gather", hidden] += output
        if sp:
            fp8 = q is not None and q.get("gemm") == "fp8"
            gathered = _sp_gathered(plan, 2 * int(plan.model["hidden"])) if fp8 else wide
            calls["all_gather", gathered] += output + (modules if _regathers(plan) else 0)
            calls["reduce_scatter", wide] += modules
            calls["all_gather", hidden] += modules
            if fp8 and _amax_reduced(plan):
                calls["all_reduce", 4] += output
        else:
            calls["all_reduce", wide] += modules
    return [ExpectedOp(stage, "tp", op, None, t, n * m, size) for (op, size), n in calls.items() if n]


def _tp_blocks(plan: PlanData, layers: int, routed: int, m: int) -> tuple[int, int]:
    """(blocks, blocks run again in backward) of `layers` layers, `routed` of them MoE layers,
    over m micro-batches: two per layer (after attention and after the MLP), none around a MoE
    layer's MLP without shared experts (the experts' exchange replaces it), latent attention's
    counted apart (`_latent_tp`); full recompute runs the forward's again, selective recompute
    a module with collectives inside: a dense layer's MLP (mlp), a MoE layer's shared experts
    (shared_experts, or moe: the whole block)."""
    attention = 0 if plan.model.get("mla") is None else layers
    mlp_blocks = _mlp_blocks(plan, layers, routed)
    forward = (layers + mlp_blocks - attention) * m
    modules = _recomputed(plan)
    shared = mlp_blocks - (layers - routed)  # the MoE layers with shared experts
    mlps = (layers - routed) * ("mlp" in modules) + shared * bool({"shared_experts", "moe"} & modules)
    again = forward if plan.training["recompute"] == "full" else mlps * m
    return forward, again


def _unread_outputs(plan: PlanData, layers: int, routed: int, m: int) -> int:
    """The MLP blocks' output reductions full recompute does not run again over m micro-batches
    where torch's non-reentrant checkpoint recomputes only what the backward reads (framework
    fsdp2): one per dense layer's MLP and per MoE layer's shared experts."""
    tr = plan.training
    if tr["recompute"] != "full" or tr.get("framework") != "fsdp2":
        return 0
    return _mlp_blocks(plan, layers, routed) * m


def _mlp_blocks(plan: PlanData, layers: int, routed: int) -> int:
    """The TP-split MLP blocks of `layers` layers, `routed` of them MoE layers: every dense
    layer's MLP and every MoE layer's shared experts (none around routed experts alone)."""
    moe = plan.model.get("moe")
    return layers - (routed if moe is not None and not moe["shared_experts"] else 0)


def _amax_reduced(plan: PlanData) -> bool:
    """Whether each quantized SP all-gather first all-reduces one fp32 amax over the TP group
    (quantized.tp_amax: a per-tensor scale of a sequence-sharded tensor)."""
    q = plan.training.get("quantized")
    return bool(plan.sequence_parallel) and q is not None and bool(q.get("tp_amax"))


def _kept_in_bf16(plan: PlanData, stage: int) -> list[int]:
    """The layers of `stage` the recipe keeps in BF16 where its SP all-gathers move quantized
    data (quantized.tp_gather): their gathers stay 16-bit. None otherwise."""
    q = plan.training.get("quantized")
    if q is None or not q.get("tp_gather"):
        return []
    return [i for a, b in plan.stage_layers[stage] for i in _bf16_layers(plan, a, b)]


def _kept_moe_layers(plan: PlanData, kept: list[int]) -> int:
    moe = plan.model.get("moe")
    return 0 if moe is None else sum(_moe_layers(moe, i, i + 1) for i in kept)


def _recomputed(plan: PlanData) -> set[str]:
    """The modules selective recompute runs again: the plan's recompute_modules, else
    Megatron's default core_attn; none under another recompute mode."""
    if plan.training["recompute"] != "selective":
        return set()
    return set(plan.training.get("recompute_modules", ["core_attn"]))


def _latent_tp(
    plan: PlanData, stage: int, per_step: int, kept_steps: int, full: bool, up: bool
) -> list[ExpectedOp]:
    """Latent attention per layer and micro-batch (`per_step` of them in layers whose gathers
    move what the recipe gathers, `kept_steps` in layers kept in BF16, which gather 16-bit): its
    input moves the latents, not h (the down projections are duplicated on every TP rank, the
    up projections column-parallel over the latents; Megatron-Core MLASelfAttention). With SP:
    all-gather of the query latent (h without one), the key/value latent and the key's RoPE part
    forward, their reduce-scatter backward; reduce-scatter of h after the output projection, its
    all-gather backward. Without SP: all-reduce of h forward, of the two latents backward. Full
    recompute runs the forward's again; recomputed up projections (`up`) the two latents'
    all-gathers inside them."""
    t, model = plan.degrees["tp"], plan.model
    mla = model["mla"]
    token = _hidden(plan) // int(model["hidden"])  # b·(s/c)·β_a
    query = model["hidden"] if mla["q_lora_rank"] is None else mla["q_lora_rank"]
    steps = per_step + kept_steps
    again = steps if full else 0
    hidden = _hidden(plan)
    if not plan.sequence_parallel:
        ops = [ExpectedOp(stage, "tp", "all_reduce", None, t, steps + again, hidden)]
        for width in (query, mla["kv_lora_rank"]):
            ops.append(ExpectedOp(stage, "tp", "all_reduce", None, t, steps, token * width))
        return ops
    rope = mla["qk_rope_head_dim"]
    ops = [
        ExpectedOp(stage, "tp", "reduce_scatter", None, t, steps + again, hidden),
        ExpectedOp(stage, "tp", "all_gather", None, t, steps + again, token * rope),
        ExpectedOp(stage, "tp", "reduce_scatter", None, t, steps, token * rope),
    ]
    for width in (query, mla["kv_lora_rank"]):
        ops.append(ExpectedOp(stage, "tp", "reduce_scatter", None, t, steps, token * width))
    # the up projections' inputs as the recipe gathers them (16-bit in the layers kept in BF16),
    # and the output projection's gradient
    for n, kept in ((per_step, False), (kept_steps, True)):
        ops.append(ExpectedOp(stage, "tp", "all_gather", None, t, n, hidden if kept else _sp_gathered(plan)))
        for width in (query, mla["kv_lora_rank"]):
            gathered = token * width if kept else _sp_gathered(plan, width)
            redo = n if full or up else 0
            ops.append(ExpectedOp(stage, "tp", "all_gather", None, t, n + redo, gathered))
            if _regathers(plan):
                # the up projections gather their latents again for their weight gradients
                ops.append(ExpectedOp(stage, "tp", "all_gather", None, t, n, gathered))
    if _amax_reduced(plan) and per_step:
        # an fp32 amax before each quantized gather: the two latents' (again where recomputed)
        # and the output projection's gradient's
        redo = per_step if full or up else 0
        ops.append(ExpectedOp(stage, "tp", "all_reduce", None, t, 3 * per_step + 2 * redo, 4))
    return ops


def _v_shaped(plan: PlanData) -> bool:
    """Whether the plan's schedule holds virtual stages r and 2p − 1 − r on rank r."""
    return plan.pipeline is not None and plan.pipeline.get("schedule") in ("dualpipev", "zbv")


def _last_stage(plan: PlanData) -> int:
    """The rank of the last virtual stage (LM head, loss, MTP): p − 1, or 0 when V-shaped."""
    return 0 if _v_shaped(plan) else plan.degrees["pp"] - 1


def _pp(plan: PlanData, stage: int, m: int, boundaries: Sequence[str]) -> list[ExpectedOp]:
    """The stage's pipeline sends per direction and tier: forward over boundary r (the last
    rank's, from its earlier chunks, over the wrap), backward over boundary r − 1 mod p; in the
    V placement m each way to both neighbours, over boundaries r and r − 1, no wrap."""
    p, v = plan.degrees["pp"], plan.virtual_stages
    if p == 1:
        return []
    tr = plan.training
    tokens = cdiv(tr["seq_len"], plan.degrees["cp"])
    if plan.sequence_parallel:
        tokens = cdiv(tokens, plan.degrees["tp"])
    size = tr["micro_batch"] * tokens * plan.model["hidden"] * tr["activation_bytes"]
    # Each of the v chunks sends every micro-batch on, except the very last virtual stage
    # forward and the very first backward.
    crossed: dict[str, list[tuple[int, int]]] = {
        "fwd": [(stage, m * v - (m if stage == p - 1 else 0))],
        "bwd": [((stage - 1) % p, m * v - (m if stage == 0 else 0))],
    }
    if _v_shaped(plan):  # ranks r and 2p − 1 − r: the last rank turns locally, rank 0 ends both
        both = [(b, m) for b, there in ((stage, stage < p - 1), (stage - 1, stage > 0)) if there]
        crossed = {"fwd": both, "bwd": both}
    out = []
    for direction, sends in crossed.items():
        calls: Counter[str] = Counter()
        for boundary, n in sends:
            calls[boundaries[boundary % p]] += n
        out += [
            ExpectedOp(stage, "pp", "send_recv", direction, 2, n, size, tier)
            for tier, n in sorted(calls.items())
            if n
        ]
    return out


def _core_redone(plan: PlanData) -> bool:
    """Whether the attention core, the context-parallel exchange inside it, runs its forward
    again in backward: full recompute, or selective recompute of core_attn under Megatron's
    layers (not torchtitan's, whose selective policies save the attention's outputs)."""
    if plan.training["recompute"] == "full":
        return True
    return plan.training.get("framework") != "fsdp2" and "core_attn" in _recomputed(plan)


def _cp(plan: PlanData, stage: int, layers: int, m: int) -> list[ExpectedOp]:
    """The context-parallel exchange by layout.cp_comm_type, from the attention's shapes: the
    ring's K/V blocks (p2p), the whole K/V gathered and its gradient reduce-scattered
    (allgather), Ulysses' q/k/v and output all-to-alls (a2a), or those over the inner group
    with a ring across (a2a+p2p); a recomputed attention core exchanges its forward's again."""
    c = plan.degrees["cp"]
    if c == 1:
        return []
    tr, mod = plan.training, plan.model
    t, beta, b = plan.degrees["tp"], tr["activation_bytes"], tr["micro_batch"]
    heads = cdiv(mod["heads"], t)
    # the attention's K/V heads: repeated to every query head before it (repeat_kv) or grouped
    kv = heads if tr.get("repeat_kv") else max(mod["kv_heads"] // t, 1)
    mla = mod.get("mla")
    k = mod["head_dim"]
    k_v = k if mla is None else mla["v_head_dim"]
    tokens = cdiv(tr["seq_len"], c)
    # K and V of a rank's tokens: k and k_v channels per kv head.
    block = b * tokens * kv * (k + k_v) * beta
    kind = plan.cp_comm_type
    passes = 3 if _core_redone(plan) else 2  # forward's exchanges (once more if recomputed) + 1
    if tr.get("framework") == "fsdp2":
        # torch's ring attention: K/V all-gathered (allgather) or permuted c − 1 times (p2p) a
        # pass; backward permutes the fp32 dK/dV c times (4 bytes per element).
        fp32 = b * tokens * kv * (k + k_v) * 4
        if kind == "allgather":
            first = ExpectedOp(stage, "cp", "all_gather", None, c, passes * layers * m, c * block)
        else:
            first = ExpectedOp(stage, "cp", "send_recv", None, c, (c - 1) * passes * layers * m, block)
        return [first, ExpectedOp(stage, "cp", "send_recv", None, c, c * layers * m, fp32)]
    if kind == "p2p":
        return _ring(plan, stage, c, passes, layers * m, block // beta)
    if kind == "allgather":
        # Every rank's K/V gathered forward and again in backward; dK/dV reduce-scattered.
        return [
            ExpectedOp(stage, "cp", "all_gather", None, c, passes * layers * m, c * block),
            ExpectedOp(stage, "cp", "reduce_scatter", None, c, layers * m, c * block),
        ]
    inner = c if kind == "a2a" else plan.cp_a2a_size
    # Ulysses: q, k, v to whole sequences of heads / inner heads and the output back, each
    # forward and as its gradient backward.
    qkv = b * tokens * (heads * k + kv * (k + k_v)) * beta
    ops = [
        ExpectedOp(stage, "cp", "all_to_all", None, inner, passes * layers * m, qkv),
        ExpectedOp(
            stage, "cp", "all_to_all", None, inner, passes * layers * m, b * tokens * heads * k_v * beta
        ),
    ]
    ring = c // inner
    if kind == "a2a+p2p" and ring > 1:
        ops += _ring(plan, stage, ring, passes, layers * m, block // beta)
    return ops


def _ring(
    plan: PlanData, stage: int, ring: int, passes: int, layer_calls: int, elements: int
) -> list[ExpectedOp]:
    """Megatron's ring attention over `ring` ranks for `layer_calls` layer-micro-batches, its K/V
    blocks of `elements` each: c − 1 steps per pass, `passes` K/V passes (the forward's, once
    more where the core is recomputed, and the backward's) and backward the dK/dV's; under FP8
    attention (training.quantized.attention) K/V at one byte (the FP8 data; MXFP8: 16 bits) and
    dK/dV as one FP8 all-to-all of `ring` blocks (TE AttnFuncWithCPAndKVP2P)."""
    tr = plan.training
    beta = tr["activation_bytes"]
    steps = (ring - 1) * layer_calls
    recipe = (tr.get("quantized") or {}).get("attention")
    if recipe is None or tr.get("framework") != "megatron":
        return [ExpectedOp(stage, "cp", "send_recv", None, ring, (passes + 1) * steps, elements * beta)]
    kv = elements * (beta if recipe == "mxfp8" else 1)
    return [
        ExpectedOp(stage, "cp", "send_recv", None, ring, passes * steps, kv),
        ExpectedOp(stage, "cp", "all_to_all", None, ring, layer_calls, ring * elements),
    ]


def _tokens(plan: PlanData) -> int:
    """T: the tokens one rank routes per MoE layer per micro-batch, b·⌈s/c⌉ (/t with SP)."""
    tr = plan.training
    tokens = cdiv(tr["seq_len"], plan.degrees["cp"])
    if plan.sequence_parallel:
        tokens = cdiv(tokens, plan.degrees["tp"])
    return int(tr["micro_batch"] * tokens)


def _routed_rows(plan: PlanData) -> int:
    """The rows one rank dispatches per MoE layer per micro-batch: T·k, or with the plan's
    pad_to_capacity E·C, every one of the E experts filled to its capacity
    C = ⌈(T·k/E)·CF⌉ (Megatron-Core get_capacity, in its own float order)."""
    moe = plan.model["moe"]
    routed = _tokens(plan) * int(moe["top_k"])
    if not moe.get("pad_to_capacity"):
        return routed
    E = int(moe["experts"])
    return E * math.ceil((routed / E) * float(moe["capacity_factor"]))


def _dispatch_group(plan: PlanData) -> tuple[str, int, int]:
    """(kind, n, g): the dispatcher's group (tp_ep when the plan lists it, else ep), its size
    and its members per NVLink domain (the width of the listed ep_domain groups; n when they
    are not listed and the group lies in one domain, 1 when each member has a domain of its
    own: the ops then run over the group itself either way)."""
    kind = "tp_ep" if "tp_ep" in plan.groups else "ep"
    ep, et = plan.expert_degrees["ep"], plan.expert_degrees["tp"]
    n = ep * et if kind == "tp_ep" else ep
    domain = plan.groups.get("ep_domain")
    if domain is not None:
        return kind, n, int(domain.shape[1])
    members = plan.groups.get(kind)
    if members is None:
        return kind, n, n
    domains = plan.domain[members]
    return kind, n, n if bool((domains == domains[:, :1]).all()) else 1


def _flat_a2a(
    stage: int, kind: str, n: int, g: int, calls: int, size: int
) -> list[ExpectedOp]:
    """A flat all-to-all of `size` bytes per rank over the dispatcher's group: one op, or, when
    the group spans domains with several members in each, the whole buffer over the n/g
    ep_peers and its 1/(n/g) share over the g ep_domain members."""
    if not 1 < g < n:
        return [ExpectedOp(stage, kind, "all_to_all", None, n, calls, size)]
    domains = n // g
    return [
        ExpectedOp(stage, "ep_peers", "all_to_all", None, domains, calls, size),
        ExpectedOp(stage, "ep_domain", "all_to_all", None, g, calls, cdiv(size, domains)),
    ]


def _reached_bytes(tokens: int, reached: Fraction, row: int) -> int:
    return cdiv(tokens * reached.numerator * row, reached.denominator)


def _flex(plan: PlanData, stage: int, forward: int, again: int) -> list[ExpectedOp]:
    """The flex dispatcher (DeepEP or HybridEP): each token once to each rank holding one of its
    experts and, across NVLink domains, once to each domain (`planc.sim.routing`'s expected
    blocks on the plan's expert placement), rows of the backend's record; HybridEP all-gathers
    the routing maps first when the group spans domains."""
    moe = plan.model["moe"]
    kind, n, g = _dispatch_group(plan)
    ep, et = plan.expert_degrees["ep"], plan.expert_degrees["tp"]
    copies = et if kind == "tp_ep" else 1
    E, k = int(moe["experts"]), int(moe["top_k"])
    G, kg = int(moe.get("router_groups", 1)), int(moe.get("router_group_top_k", 1))
    per_rank = E // ep
    rank_of = np.arange(E, dtype=np.int64) // per_rank
    if _round_robin(plan):
        ranks = round_robin_blocks(rank_of, k) * copies
    else:
        ranks = expected_blocks(rank_of, k, G, kg) * copies
    hidden = int(plan.model["hidden"]) * int(plan.training["activation_bytes"])
    if plan.dispatcher == "deepep":
        rows = (cdiv(hidden + 8 + 8 * copies * k, 16) * 16, cdiv(hidden + 8 + 4 * copies * k, 16) * 16)
    else:
        rows = (hidden + 4 * copies * E // (n // g), hidden)
    T = _tokens(plan)
    calls = 2 * forward + again
    ops: list[ExpectedOp] = []
    for row in rows:
        if not 1 < g < n:
            ops.append(ExpectedOp(stage, kind, "all_to_all", None, n, calls, _reached_bytes(T, ranks, row)))
            continue
        domains = _domains_reached(plan, k, G, kg)
        ops.append(ExpectedOp(stage, "ep_peers", "all_to_all", None, n // g, calls, _reached_bytes(T, domains, row)))
        ops.append(ExpectedOp(stage, "ep_domain", "all_to_all", None, g, calls, _reached_bytes(T, ranks, row)))
    if plan.dispatcher == "hybridep" and g < n:
        gathered = n * T * copies * E
        ops.append(ExpectedOp(stage, kind, "all_gather", None, n, forward + again, gathered))
    return ops


def _domains_reached(plan: PlanData, k: int, G: int, kg: int) -> Fraction:
    """E[NVLink domains a token reaches]: over the ep_domain groups of the first dispatcher
    group, the chance that one of the experts its members hold (EP coordinate e holds experts
    [e·E/EP, (e + 1)·E/EP)) is among the token's, summed."""
    E = int(plan.model["moe"]["experts"])
    per_rank = E // plan.expert_degrees["ep"]
    ep = expert_coordinates(plan)["ep"]
    key, _, _ = dispatch_position(plan)
    domains = plan.groups["ep_domain"]
    mine = domains[key[domains[:, 0]] == key[domains[0, 0]]]
    total = Fraction(0)
    for members in mine:
        held = np.zeros(E, dtype=bool)
        for e in set(ep[members].tolist()):
            held[e * per_rank : (e + 1) * per_rank] = True
        if _round_robin(plan):
            total += round_robin_reach(held, k)
        else:
            total += reach_probability(held, k, G, kg)
    return total


def _round_robin(plan: PlanData) -> bool:
    """The plan's tokens pick their experts round robin (training.expert_routing, written into
    plan.json only when it is not the uniform default)."""
    return bool(plan.training.get("expert_routing", "uniform") == "round_robin")


def _allgather(plan: PlanData, stage: int, forward: int, again: int) -> list[ExpectedOp]:
    """The allgather dispatcher over tp_ep (n ranks): the n·T hidden states gathered and the
    outputs reduce-scattered (each the other way in backward), the n·T rows of E
    probabilities gathered (reduce-scattered in backward) and of E routing-map booleans
    gathered."""
    moe = plan.model["moe"]
    kind, n, _ = _dispatch_group(plan)
    beta = int(plan.training["activation_bytes"])
    gathered = n * _tokens(plan)
    rows, probs = gathered * int(plan.model["hidden"]) * beta, gathered * int(moe["experts"]) * beta
    return [
        ExpectedOp(stage, kind, "all_gather", None, n, 2 * forward + again, rows),
        ExpectedOp(stage, kind, "reduce_scatter", None, n, 2 * forward + again, rows),
        ExpectedOp(stage, kind, "all_gather", None, n, forward + again, probs),
        ExpectedOp(stage, kind, "reduce_scatter", None, n, forward, probs),
        ExpectedOp(stage, kind, "all_gather", None, n, forward + again, gathered * int(moe["experts"])),
    ]


def _experts(plan: PlanData, stage: int, m: int) -> list[ExpectedOp]:
    """Per MoE layer and micro-batch, as layout.expert.dispatcher runs the exchange. alltoall:
    three all-to-alls over ep forward (tokens, their routing probabilities, the outputs back)
    and three backward, each split into its network and NVLink parts when the plan lists
    ep_peers and ep_domain; the E token counts of every rank of the tp_ep group gathered before
    them (when ETP = 1 it is the ep group; none padded to capacity, whose counts the host
    knows); with ETP > 1 the received rows (and probabilities) gathered over etp and the
    outputs reduce-scattered, each the other way in backward.
    allgather and flex: `_allgather`, `_flex`. Full recompute, and selective recompute of the
    moe module, run the forward's again."""
    moe = plan.model.get("moe")
    layers = _routed_layers(plan, stage)
    if moe is None or layers == 0:
        return []
    ep, et = plan.expert_degrees["ep"], plan.expert_degrees["tp"]
    forward = layers * m
    redone = plan.training["recompute"] == "full" or "moe" in _recomputed(plan)
    again = forward if redone else 0
    if ep * et == 1:
        return []
    if plan.dispatcher == "allgather":
        return _allgather(plan, stage, forward, again)
    if plan.dispatcher in ("deepep", "hybridep"):
        return _flex(plan, stage, forward, again)
    beta = int(plan.training["activation_bytes"])
    rows, h = _routed_rows(plan), int(plan.model["hidden"])
    ops: list[ExpectedOp] = []
    if ep > 1:
        kind, n, g = _dispatch_group(plan)
        ops += _flat_a2a(stage, kind, n, g, 2 * (2 * forward + again), rows * h * beta)
        ops += _flat_a2a(stage, kind, n, g, 2 * forward + again, rows * beta)
        if et == 1 and not moe.get("pad_to_capacity"):
            counts = ep * moe["experts"] * 8
            ops.append(ExpectedOp(stage, "ep", "all_gather", None, ep, forward + again, counts))
    if et > 1:
        gathered = et * rows
        ops.append(
            ExpectedOp(
                stage, "etp", "all_gather", None, et, 2 * forward + again, gathered * h * beta
            )
        )
        ops.append(
            ExpectedOp(
                stage, "etp", "reduce_scatter", None, et, 2 * forward + again, gathered * h * beta
            )
        )
        ops.append(
            ExpectedOp(stage, "etp", "all_gather", None, et, forward + again, gathered * beta)
        )
        ops.append(ExpectedOp(stage, "etp", "reduce_scatter", None, et, forward, gathered * beta))
    return ops


def _bf16_layers(plan: PlanData, first: int, last: int) -> list[int]:
    """The layers of [first, last) that run in BF16 under an FP8/FP4 recipe: the first and last
    `bf16_layers` of the model (Megatron --first-last-layers-bf16), listed one by one."""
    q = plan.training.get("quantized")
    n = 0 if q is None else int(q["bf16_layers"])
    layers = plan.model["layers"]
    return [i for i in range(first, last) if i < n or i >= layers - n]


def stage_quantized_parameters(plan: PlanData, stage: int) -> tuple[int, int]:
    """(dense, expert) GEMM weights a rank of `stage` keeps quantized under an FP8/FP4 recipe,
    counted layer by layer: in each FP8 layer the attention projections, and the dense MLP's
    matrices or a MoE layer's shared-expert matrices and its E/EP routed experts (no norms,
    biases, router, embedding or head); under an FP8 recipe also the multi-token prediction
    modules' layers and eh_proj 2h·⌈h/t⌉."""
    m: Mapping[str, Any] = plan.model
    t = plan.degrees["tp"]
    h, matrices = m["hidden"], 3 if gated(m["mlp"]) else 2
    attention, mlp = _attention_matrices(m, t), _mlp(h, cdiv(m["ffn_hidden"], t), matrices)
    moe = m.get("moe")
    q = plan.training.get("quantized")
    modules, modules_routed = _mtp(plan, stage) if q is not None and q["data_bits"] == 8 else (0, 0)
    dense = modules * 2 * h * cdiv(h, t)
    experts = 0
    # (FP8 layers, of them with experts): the modules' (none kept in BF16), then each chunk's
    counts = [(modules, modules_routed)]
    for a, b in plan.stage_layers[stage]:
        kept = _bf16_layers(plan, a, b)
        routed = 0 if moe is None else _moe_layers(moe, a, b)
        routed_kept = 0 if moe is None else sum(_moe_layers(moe, i, i + 1) for i in kept)
        counts.append((b - a - len(kept), routed - routed_kept))
    for fp8_layers, fp8_routed in counts:
        dense += fp8_layers * attention + (fp8_layers - fp8_routed) * mlp
        if moe is not None and fp8_routed:
            inner = cdiv(moe["shared_experts"] * moe["shared_expert_ffn_hidden"], t)
            shared = _mlp(h, inner, matrices) if moe["shared_experts"] else 0
            ep, et = plan.expert_degrees["ep"], plan.expert_degrees["tp"]
            local = moe["experts"] // ep * _mlp(h, cdiv(moe["expert_ffn_hidden"], et), matrices)
            dense += fp8_routed * shared
            experts += fp8_routed * local
    return int(dense), int(experts)


def _gathered(plan: PlanData, elements: int, psi: int, psi_q: int) -> int:
    """Bytes of one parameter all-gather of `elements` of a buffer of Ψ parameters: 16-bit, or
    with the plan's FP8 parameter gather its quantized share ⌊elements·Ψ_q/Ψ⌋ at data_bits/8
    bytes plus one scale per weight_scale_block elements."""
    q = plan.training.get("quantized")
    w = int(plan.training["activation_bytes"])
    if q is None or not q["param_gather"] or psi <= 0 or psi_q <= 0:
        return elements * w
    share = elements * psi_q // psi
    block = int(q["weight_scale_block"])
    scales = cdiv(share, block) * int(q["scale_bytes"]) if block else 0
    return (elements - share) * w + cdiv(share * int(q["data_bits"]), 8) + scales


def _bucket(plan: PlanData) -> int:
    """DeepSpeed's default reduce_bucket_size; Megatron DDP's default bucket otherwise."""
    if plan.framework == "deepspeed":
        return 500_000_000
    return max(40_000_000, 1_000_000 * plan.degrees["dp"])


def _edp(plan: PlanData, stage: int, m: int) -> list[ExpectedOp]:
    """The routed experts' gradients over the expert data-parallel group, in buckets of their
    own (Megatron DDP's expert buffers, the same bucket size)."""
    n = plan.expert_degrees.get("dp", 1) if plan.expert_order else 1
    psi = stage_expert_parameters(plan, stage)
    if n == 1 or psi == 0:
        return []
    tr = plan.training
    zero = 3 if plan.framework == "fsdp2" else plan.zero
    full, rest = divmod(psi, _bucket(plan))
    ops: list[ExpectedOp] = []
    for calls, elements in ((full, _bucket(plan)), (1, rest)):
        if not (calls and elements):
            continue
        grads = elements * tr["gradient_bytes"]
        params = _gathered(plan, elements, psi, stage_quantized_parameters(plan, stage)[1])
        if zero == 0 or _layer_wise(plan):
            ops.append(ExpectedOp(stage, "edp", "all_reduce", None, n, calls, grads))
            if zero == 1:
                ops.append(ExpectedOp(stage, "edp", "all_gather", None, n, calls, params))
            continue
        ops.append(
            ExpectedOp(
                stage, "edp", "reduce_scatter", None, n, calls * (m if zero >= 2 else 1), grads
            )
        )
        ops.append(
            ExpectedOp(
                stage, "edp", "all_gather", None, n, calls * (2 * m if zero == 3 else 1), params
            )
        )
    return ops


def _layer_wise(plan: PlanData) -> bool:
    """Muon's layer-wise distributed optimizer as Megatron-Core before 0.18 runs it
    (training.optimizer.gradients_all_reduced): gradients all-reduced whole, the updated
    parameters all-gathered once a step."""
    optimizer = plan.training.get("optimizer")
    return isinstance(optimizer, dict) and bool(optimizer.get("gradients_all_reduced"))


def _dp(plan: PlanData, stage: int, m: int) -> list[ExpectedOp]:
    """Gradient reduction and parameter gathering over the shard group, buckets of Megatron
    DDP's default size over Ψ_r. FSDP2 always shards the parameters (ZeRO-3 traffic). With HSDP
    (data_shard < d·c) the shard group is dp_shard, and each reduce-scatter's shard is then
    all-reduced over the dp_replicate group of the d·c/data_shard replicas."""
    group = plan.degrees["dp"] * plan.degrees["cp"]
    if group == 1:
        return []
    tr = plan.training
    zero = 3 if plan.framework == "fsdp2" else plan.zero
    replicas = group // plan.data_shard
    hsdp = zero > 0 and replicas > 1
    n, kind = (plan.data_shard, "dp_shard") if hsdp else (group, "dp_cp")
    # The dense part: the experts' gradients go over edp.
    psi = stage_parameters(plan, stage) - stage_expert_parameters(plan, stage)
    bucket = _bucket(plan)
    full, rest = divmod(psi, bucket)
    ops: list[ExpectedOp] = []
    for calls, elements in ((full, bucket), (1, rest)):
        if not (calls and elements):
            continue
        grads = elements * tr["gradient_bytes"]
        params = _gathered(plan, elements, psi, stage_quantized_parameters(plan, stage)[0])
        per_step = m if zero >= 2 else 1
        if hsdp:
            shard = cdiv(elements, plan.data_shard) * tr["gradient_bytes"]
            ops.append(
                ExpectedOp(
                    stage, "dp_replicate", "all_reduce", None, replicas, calls * per_step, shard
                )
            )
            if n == 1:
                continue
        if zero == 0 or _layer_wise(plan):
            ops.append(ExpectedOp(stage, kind, "all_reduce", None, n, calls, grads))
            if zero == 1:
                ops.append(ExpectedOp(stage, kind, "all_gather", None, n, calls, params))
            continue
        ops.append(ExpectedOp(stage, kind, "reduce_scatter", None, n, calls * per_step, grads))
        ops.append(
            ExpectedOp(
                stage, kind, "all_gather", None, n, calls * (2 * m if zero == 3 else 1), params
            )
        )
    return ops


def _embedding_copy(plan: PlanData) -> bool:
    """Whether the last stage keeps a synced copy of the word embedding: tied embeddings or
    multi-token prediction modules, the last stage not the first."""
    m = plan.model
    copied = m["tied_embeddings"] or m.get("mtp_layers", 0) > 0
    return bool(copied) and plan.degrees["pp"] > 1 and not _v_shaped(plan)


def _embedding(plan: PlanData, stage: int) -> list[ExpectedOp]:
    p = plan.degrees["pp"]
    if not _embedding_copy(plan) or stage not in (0, p - 1):
        return []
    size = (
        plan.model["vocab_padded"]
        // plan.degrees["tp"]
        * plan.model["hidden"]
        * plan.training["gradient_bytes"]
    )
    return [ExpectedOp(stage, "embedding", "all_reduce", None, 2, 1, size)]


def expected_ops(plan: PlanData) -> list[ExpectedOp]:
    m = plan.training["micro_batches"]
    ops: list[ExpectedOp] = []
    boundaries = boundary_tiers(plan)
    for stage, chunks in enumerate(plan.stage_layers):
        # the multi-token prediction modules' layers exchange what any layer does
        layers = sum(b - a for a, b in chunks) + _mtp(plan, stage)[0]
        ops += _tp(plan, stage, layers, m) + _ends(plan, stage, m)
        ops += _cp(plan, stage, layers, m) + _pp(plan, stage, m, boundaries)
        ops += _experts(plan, stage, m)
        ops += _dp(plan, stage, m) + _edp(plan, stage, m) + _embedding(plan, stage)
    return ops


def bytes_sent(op: str, n: int, buffer_bytes: int, itemsize: int) -> int:
    """Bytes one rank sends per call: the mean over the ring of what the simulated ring sends
    (rounded up; for an all-to-all, of what the simulated exchange sends), or the whole message
    for a point-to-point send."""
    if op == "send_recv":
        return buffer_bytes
    elements = buffer_bytes // itemsize
    if op == "all_to_all":
        return -(-int(all_to_all_bytes(n, elements, itemsize).sum()) // n) if n > 1 else 0
    formula = {
        "all_reduce": ring_allreduce_bytes,
        "reduce_scatter": ring_reduce_scatter_bytes,
        "all_gather": ring_all_gather_bytes,
    }[op]
    return -(-int(formula(n, elements, itemsize).sum()) // n) if n > 1 else 0


# The group kinds a MoE layer's dispatcher exchanges over.
EXPERT_EXCHANGES = ("ep", "tp_ep", "ep_domain", "ep_peers")


def itemsize_of(plan: PlanData, group: str, op: str) -> int:
    """Bytes per element of an op's buffer: gradients' or activations'; a parameter all-gather
    that mixes FP8 and 16-bit weights (the plan's FP8 parameter gather) is counted in bytes."""
    if op == "all_to_all" and group in EXPERT_EXCHANGES:
        # The expert exchanges' buffers are counted in bytes (a flex dispatcher's rows carry
        # their routing records; a flat exchange's NVLink share is ⌈B/N⌉).
        return 1
    reduced = ("dp_cp", "dp_shard", "dp_replicate", "embedding", "edp")
    gradients = group in reduced and op != "all_gather"
    quantized = plan.training.get("quantized")
    if group == "tp" and op == "all_gather" and quantized is not None and quantized.get("tp_gather"):
        return 1
    if (
        group in reduced
        and op == "all_gather"
        and quantized is not None
        and quantized["param_gather"]
    ):
        return 1
    return int(plan.training["gradient_bytes" if gradients else "activation_bytes"])


_KEY = ("stage", "group", "op", "direction", "group_size", "buffer_bytes")


def _key(op: Mapping[str, Any] | ExpectedOp) -> tuple[Any, ...]:
    if isinstance(op, ExpectedOp):
        return tuple(getattr(op, name) for name in _KEY)
    return tuple(op.get(name) for name in _KEY)


def ops(plan: PlanData) -> Found:
    """The plan's ops, summed by shape, equal those recomputed from tensor shapes."""
    want: Counter[tuple[Any, ...]] = Counter()
    for mine in expected_ops(plan):
        want[_key(mine)] += mine.calls
    got: Counter[tuple[Any, ...]] = Counter()
    for listed in plan.ops:
        got[_key(listed)] += int(listed.get("calls", 0))
    for key in sorted(set(want) | set(got), key=repr):
        if want[key] != got[key]:
            stage, group, kind, direction, n, size = key
            name = f"stage {stage} {group} {kind}{' ' + direction if direction else ''} (n = {n}, {size:,} bytes per call)"
            yield f"{name}: the plan has {got[key]:,} calls per step, tensor shapes give {want[key]:,}"
    stages = len(plan.stage_layers)
    for stage in range(stages):
        psi = stage_parameters(plan, stage)
        listed = plan.model.get("stage_parameters", [])
        if stage < len(listed) and listed[stage] != psi:
            yield f"model.stage_parameters[{stage}] = {listed[stage]:,}, but the model's shape gives {psi:,}"
        experts = stage_expert_parameters(plan, stage)
        listed = plan.model.get("stage_expert_parameters", [0] * stages)
        if stage < len(listed) and listed[stage] != experts:
            yield f"model.stage_expert_parameters[{stage}] = {listed[stage]:,}, but the model's shape gives {experts:,}"
    for op in plan.ops:
        n, size = int(op["group_size"]), int(op["buffer_bytes"])
        sent = bytes_sent(op["op"], n, size, itemsize_of(plan, op["group"], op["op"]))
        if op.get("bytes_sent_per_call") != sent:
            yield f"stage {op['stage']} {op['group']} {op['op']}: bytes_sent_per_call {op.get('bytes_sent_per_call'):,}, the ring sends {sent:,}"


def group_tiers(plan: PlanData) -> dict[str, str]:
    """Each group kind's tier (`_tier_of` its member lists). The embedding groups join the first
    and last stages; a plan that lists none prices them on the pipeline groups' tier."""
    out = {kind: _tier_of(plan, found) for kind, found in plan.groups.items()}
    out.setdefault("embedding", out.get("pp", plan.tiers[0][0]))
    return out


def _tier_of(plan: PlanData, found: Ints) -> str:
    """The first tier of cluster.fabric, innermost first, such that every group of `found`
    (groups × members) has all its members in one block of the tier (rank // span) and, on a
    tier of rails only, is rail-aligned; the outermost tier when none holds them."""
    rails = plan.rails_only or (False,) * len(plan.tiers)
    aligned = _rail_aligned(found, plan.gpus_per_node)
    for (name, span), rails_only in zip(plan.tiers, rails, strict=True):
        blocks = found // max(span, 1)
        if (blocks == blocks[:, :1]).all() and (aligned or not rails_only):
            return name
    return plan.tiers[-1][0]


def boundary_tiers(plan: PlanData) -> list[str]:
    """The tier of each pipeline boundary i, stage i ↔ stage (i + 1) mod p (`planc.sends`),
    found on the plan's pipeline groups: each group's members ordered by their pp coordinate,
    member i paired with member i + 1 (`_tier_of` the pairs). Where the groups do not hold one
    member per stage (a corrupted plan, which `grid` reports), every boundary takes the groups'
    own tier."""
    p = plan.degrees["pp"]
    found = plan.groups.get("pp")
    if p == 1:
        return []
    if found is None:
        return [plan.tiers[-1][0]] * p
    whole = _tier_of(plan, found)
    if found.ndim != 2 or found.shape[1] != p:
        return [whole] * p
    if (found < 0).any() or (found >= len(plan.coords["pp"])).any():
        return [whole] * p
    stage = plan.coords["pp"][found]
    if not (np.sort(stage, axis=1) == np.arange(p)).all():
        return [whole] * p
    ordered = np.take_along_axis(found, np.argsort(stage, axis=1), axis=1)
    return [_tier_of(plan, ordered[:, [i, (i + 1) % p]]) for i in range(p)]


def _rail_aligned(found: Ints, per_node: int) -> bool:
    """Every group's members on different nodes share their local GPU index (rank mod G): each
    group lies in one node or has one local index."""
    if found.size == 0:
        return True
    node, local = found // max(per_node, 1), found % max(per_node, 1)
    one_node = (node == node[:, :1]).all(axis=1)
    one_rail = (local == local[:, :1]).all(axis=1)
    return bool((one_node | one_rail).all())


def links(plan: PlanData) -> Found:
    """Each op's link is the tier its groups' members give; a pipeline send's, the tier of the
    boundary it crosses (`boundary_tiers`): the plan's sends per stage, direction and link equal
    those the pipeline groups give."""
    tiers = group_tiers(plan)
    for op in plan.ops:
        want = tiers.get(op["group"])
        if op["group"] != "pp" and want is not None and op.get("link") != want:
            yield f"stage {op['stage']} {op['group']} {op['op']}: link {op.get('link')}, but its groups are on {want}"
    want_sends: Counter[tuple[Any, ...]] = Counter()
    for mine in expected_ops(plan):
        if mine.group == "pp":
            want_sends[(mine.stage, mine.direction, mine.link)] += mine.calls
    got_sends: Counter[tuple[Any, ...]] = Counter()
    for listed in plan.ops:
        if listed["group"] == "pp":
            key = (listed["stage"], listed.get("direction"), listed.get("link"))
            got_sends[key] += int(listed.get("calls", 0))
    for key in sorted(set(want_sends) | set(got_sends), key=repr):
        if want_sends[key] != got_sends[key]:
            stage, direction, link = key
            yield (
                f"stage {stage} pp send_recv {direction} on {link}: the plan has "
                f"{got_sends[key]:,} calls per step, the pipeline groups' boundaries give {want_sends[key]:,}"
            )


def wire(plan: PlanData) -> Found:
    """Every rank's bytes sent and received on each tier: ring ops receive what they send; a
    pipeline rank receives what its neighbours send it (activations from the previous stage,
    gradients from the next)."""
    p = plan.degrees["pp"]
    tiers = group_tiers(plan)
    names = [name for name, _ in plan.tiers]
    sent, received = WIRE_FIELDS.index("sent"), WIRE_FIELDS.index("received")
    per_stage = np.zeros((p, len(names), len(WIRE_FIELDS)), dtype=np.int64)
    for op in expected_ops(plan):
        tier = names.index(op.link or tiers.get(op.group, names[0]))
        total = op.calls * bytes_sent(
            op.op, op.group_size, op.buffer_bytes, itemsize_of(plan, op.group, op.op)
        )
        per_stage[op.stage, tier, sent] += total
        if op.direction is None or _v_shaped(plan):  # V: from both neighbours, as many
            per_stage[op.stage, tier, received] += total
        else:
            to = (op.stage + 1) % p if op.direction == "fwd" else (op.stage - 1) % p
            per_stage[to, tier, received] += total
    want: Ints = per_stage[plan.coords["pp"]]
    bad = (plan.wire != want).any(axis=(1, 2))
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        tier, field = (int(i) for i in np.argwhere(plan.wire[r] != want[r])[0])
        name = f"{names[tier]} {WIRE_FIELDS[field]}"
        yield f"rank {r}: wire {name} {plan.wire[r, tier, field]:,} bytes, the ops give {want[r, tier, field]:,}"


# The collectives NCCL runs as rings over every member, whose cross-domain hops spread over the
# members' NICs (planc.comm.tiers.railed_ring_gbs); an all-to-all or a send does not.
RING_OPS = ("all_reduce", "reduce_scatter", "all_gather")


def members_per_domain(plan: PlanData, group: str) -> int:
    """g: the most members one group of `group` keeps in one NVLink domain (the innermost
    tier's span of ranks), the rails a ring over the group spreads its cross-domain bytes over;
    1 for a kind the plan lists no groups of."""
    found = plan.groups.get(group)
    if found is None or found.size == 0:
        return 1
    domain = np.sort(found // max(plan.tiers[0][1], 1), axis=1)
    # Each row's longest run of one domain, from the positions where the domain changes.
    starts = np.ones(domain.shape, dtype=bool)
    starts[:, 1:] = domain[:, 1:] != domain[:, :-1]
    index = np.where(starts, np.arange(domain.shape[1]), 0)
    run_start = np.maximum.accumulate(index, axis=1)
    return int((np.arange(domain.shape[1]) - run_start).max()) + 1


# time_s is written rounded to 9 decimals (planc.comm's op record).
TIME_ROUNDING_S = 5e-10


def _per_call(op: Mapping[str, Any]) -> tuple[float, float]:
    """An op's seconds per call and how far rounding can move them."""
    calls = int(op["calls"])
    return float(op["time_s"]) / calls, TIME_ROUNDING_S / calls


def times(plan: PlanData) -> Found:
    """Each op's time_s against the α-β model as verify can recompute it without the efficiency
    tables the plan names: one call on a fabric tier takes steps(op, n)·α + wire(op, n, B)/(β·e),
    α and e those of the tier's efficiency entry for the collective, so ops of one collective,
    group size and tier (and flex kernel, each with its own measured throughput; and, for a ring
    beyond the NVLink domain, members per domain, whose NICs it spreads over) take the same
    time per call at the same buffer size B, and no less at a larger one (Hockney's α-β model;
    planc.perf.inputs.comm_time_s is the model's planc side).
    An op of no calls takes no time."""
    by_call: dict[tuple[Any, ...], list[tuple[int, float, float, Mapping[str, Any]]]] = {}
    rails: dict[str, int] = {}
    for op in plan.ops:
        if int(op["calls"]) == 0:
            if float(op["time_s"]) != 0:
                yield f"stage {op['stage']} {op['group']} {op['op']}: time_s {op['time_s']} for no calls"
            continue
        seconds, slack = _per_call(op)
        group = str(op["group"])
        if group not in rails:
            rails[group] = members_per_domain(plan, group)
        railed = rails[group] if op["op"] in RING_OPS and op["link"] != plan.tiers[0][0] else 1
        # A flex dispatcher's kernels each have their own measured throughput.
        key = (op["op"], int(op["group_size"]), op["link"], op.get("kernel", ""), railed)
        by_call.setdefault(key, []).append((int(op["buffer_bytes"]), seconds, slack, op))
    for (kind, n, link, _, _), found in sorted(by_call.items(), key=repr):
        found.sort(key=lambda item: (item[0], item[1]))
        for (size_a, time_a, slack_a, _), (size_b, time_b, slack_b, op) in pairwise(found):
            tolerance = slack_a + slack_b + 1e-9 * max(abs(time_a), abs(time_b))
            same = size_a == size_b and abs(time_b - time_a) > tolerance
            if same or time_b < time_a - tolerance:
                what = "the same" if same else "a smaller"
                yield (
                    f"stage {op['stage']} {op['group']} {kind} on {link} (n = {n}): "
                    f"{time_b:.9g} s per call for {size_b:,} bytes, but another op of {what} "
                    f"buffer ({size_a:,} bytes) takes {time_a:.9g} s"
                )
                break
