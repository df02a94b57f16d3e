"""Rules on mixture-of-experts layouts: the expert split, the expert grid, routing, capacity and
its padding, the orders Megatron-Core accepts, sequence parallelism with tensor parallelism. The
first three and the last are preconditions of a plan (`planc.plannable.PRECONDITIONS`); these
rules report what those found."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from types import MappingProxyType

from planc.rules.base import Context, Violation, rule
from planc.rules.layout import sequence_splits
from planc.spec.job import dispatcher_of


@rule("PLC023")
def experts_over_expert_parallel(ctx: Context) -> Iterator[Violation]:
    """Experts: parallelism.expert divides the routed experts, and needs a model with experts.

    Expert parallelism gives each of EP ranks E/EP whole experts of every MoE layer. A dense
    model has no experts to split, so expert must stay 1 without model.moe. Megatron-LM's
    validate_args asserts both: expert_model_parallel_size > 1 needs num_experts, and
    num_experts a multiple of it (megatron/training/arguments.py, 0.19).

    Base: mixtral-8x7b-64xh100.yaml

    Passes:
        parallelism: {expert: 4, data: 16}

    Fails:
        parallelism: {expert: 16}
    """
    yield from ctx.refused("PLC023")


@rule("PLC024")
def expert_grid(ctx: Context) -> Iterator[Violation]:
    """Experts: the world divides into expert_tensor × expert × pipeline.

    The expert layers use their own grid over the same ranks: ETP (expert_tensor, default
    tensor) × EP × EDP × PP, with the expert data-parallel degree EDP = W/(ETP·EP·PP)
    (Megatron-Core initialize_model_parallel raises when the world does not divide). Expert
    weights, gradients and optimizer state are replicated, or sharded, over EDP.

    Base: mixtral-8x7b-64xh100.yaml

    Passes:
        parallelism: {expert: 8, expert_tensor: 2}

    Fails:
        parallelism: {expert: 8, expert_tensor: 3}
    """
    yield from ctx.refused("PLC024")


@rule("PLC025")
def top_k_within_experts(ctx: Context) -> Iterator[Violation]:
    """Experts: model.moe.top_k is at most model.moe.experts.

    Each token is routed to top_k distinct experts of the E in its layer; more than E cannot be
    chosen (Megatron's TopKRouter takes torch.topk over E scores).

    Base: mixtral-8x7b-64xh100.yaml

    Passes:
        model: {moe: {top_k: 8}}
        training: {recompute: full}

    Fails:
        model: {moe: {top_k: 9}}
    """
    yield from ctx.refused("PLC025")


@rule("PLC026")
def capacity_factor_at_least_one(ctx: Context) -> Iterator[Violation]:
    """Experts: model.moe.capacity_factor is at least 1 (or null, dropless).

    With a capacity factor CF each expert takes at most ⌈T·k/E·CF⌉ of a micro-batch's T tokens
    (Megatron-Core moe_utils.get_capacity) and drops the rest. Below 1 the experts together hold
    fewer slots than the T·k assignments, so tokens are dropped even when the router balances
    perfectly. Leave it out (null) for dropless training.

    Base: mixtral-8x7b-64xh100.yaml

    Passes:
        model: {moe: {capacity_factor: 1.25}}

    Fails:
        model: {moe: {capacity_factor: 0.5}}
    """
    moe = ctx.job.model.moe
    if moe is None or moe.capacity_factor is None or moe.capacity_factor >= 1:
        return
    cf = moe.capacity_factor
    yield Violation(
        "model.moe.capacity_factor",
        f"capacity_factor = {cf:g} gives the experts {cf:.0%} of the T·k slots the tokens need, "
        "so tokens are dropped even under perfect balance",
        "use a capacity factor of at least 1 (1.0 to 1.25 is common), or leave it out for "
        "dropless routing",
    )


@rule("PLC031")
def padding_has_capacity_and_alltoall(ctx: Context) -> Iterator[Violation]:
    """Experts: model.moe.pad_to_capacity has a capacity to pad to, on the alltoall dispatcher.

    Drop and pad (Megatron --moe-pad-expert-input-to-capacity) fills every expert up to its
    capacity C = ⌈T·k/E·CF⌉ rows from each rank with zero-weight tokens, so the dispatcher
    knows its shapes on the host. It needs:

    - a capacity factor: Megatron-Core's TransformerConfig raises 'moe_expert_capacity_factor
      must be set to use moe_pad_expert_input_to_capacity' (transformer_config.py:1311-1315 at
      2edffadb, 0.17.1; 802-806 at core_v0.14.0);
    - k·CF ≤ E, so that C ≤ T: the router picks each expert's C tokens with torch.topk over T
      (moe_utils.py apply_router_token_dropping, 631-686 at core_v0.14.0, which fails), or at
      0.17.1 keeps all T while the dispatcher views C (moe_utils.py:916-918);
    - the alltoall dispatcher, the only one planc prices padded. Megatron-Core refuses DeepEP
      ('Flex token dispatcher with deepep backend does not support
      moe_pad_expert_input_to_capacity', transformer_config.py:1254-1261 at 2edffadb). It
      runs the other two, and planc refuses them too, as an error rather than a note that
      they are not priced: the allgather dispatcher reads no drop_and_pad, gathers every
      rank's tokens and still copies the padded map's counts to the host
      (token_dispatcher.py:295 at 2edffadb), and HybridEP pads inside its own buffers
      (token_dispatcher.py:986-989, 1012-1025); planc models neither, so a plan would carry
      exchange and expert prices derived for another run, and a rule has one severity, which
      DeepEP's case, Megatron's own refusal, sets.

    Base: mixtral-8x7b-64xh100.yaml

    Passes:
        model: {moe: {capacity_factor: 1.0, pad_to_capacity: true}}

    Fails:
        model: {moe: {pad_to_capacity: true}}
    """
    moe = ctx.job.model.moe
    if moe is None or not moe.pad_to_capacity:
        return
    if moe.capacity_factor is None:
        yield _padding_without_capacity(moe.E, moe.k)
        return
    if moe.k * moe.capacity_factor > moe.E:
        yield _capacity_above_tokens(moe.E, moe.k, moe.capacity_factor)
    dispatcher = dispatcher_of(ctx.job)
    if dispatcher != "alltoall":
        yield _padding_off_alltoall(dispatcher)


def _padding_without_capacity(E: int, k: int) -> Violation:
    return Violation(
        "model.moe.pad_to_capacity",
        "pad_to_capacity pads each expert up to its capacity ⌈T·k/E·CF⌉, but capacity_factor "
        "is null (dropless): there is no capacity to pad to (Megatron-Core: "
        "'moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity')",
        f"add model.moe.capacity_factor: 1.0 (each of the {E} experts then takes exactly "
        f"⌈T·{k}/{E}⌉ rows from each rank, the balanced T·{k} in all), or leave "
        "pad_to_capacity out",
        ("model.moe.capacity_factor",),
    )


def _capacity_above_tokens(E: int, k: int, cf: float) -> Violation:
    return Violation(
        "model.moe.capacity_factor",
        f"capacity_factor {cf:g} with top_k {k} of {E} experts: each expert's capacity "
        f"⌈T·{k}/{E}·{cf:g}⌉ = ⌈{k * cf / E:g}·T⌉ exceeds the T tokens a rank routes, so "
        "there are not C tokens to pad it with (Megatron-Core's router takes the top C of "
        "the T)",
        f"use a capacity factor of at most E/k = {E / k:g}, or leave pad_to_capacity out",
        ("model.moe.pad_to_capacity", "model.moe.top_k"),
    )


# Why each dispatcher but alltoall is refused with padding (PLC031's docstring gives the sources).
OFF_ALLTOALL: Mapping[str, str] = MappingProxyType(
    {
        "deepep": "Megatron-Core refuses it ('Flex token dispatcher with deepep backend does not "
        "support moe_pad_expert_input_to_capacity')",
        "allgather": "Megatron-Core's allgather dispatcher does not read the flag (it still "
        "copies the padded routing map's counts to the host)",
        "hybridep": "HybridEP pads inside its own buffers, with its own layout",
    }
)


def _padding_off_alltoall(dispatcher: str) -> Violation:
    return Violation(
        "model.moe.pad_to_capacity",
        f"pad_to_capacity with the {dispatcher} dispatcher: {OFF_ALLTOALL[dispatcher]}; planc "
        "prices padding on the alltoall dispatcher only",
        "set parallelism.expert_dispatcher: alltoall, or leave pad_to_capacity out",
        ("parallelism.expert_dispatcher",),
    )


@rule("PLC027")
def expert_order_accepted(ctx: Context) -> Iterator[Violation]:
    """Experts: an expert layout Megatron-Core accepts in its rank order.

    Megatron-Core builds the dense groups with one RankGenerator (ep = 1) and the expert groups
    with another over the same order (tp = expert_tensor, ep = expert, dp = EDP, cp = 1). It
    refuses an order that leaves out ep when expert > 1; with pipeline > 1 and an order that
    does not end in pp, an EDP different from data; and pipeline groups that differ between
    the two grids (parallel_state.py initialize_model_parallel).

    Base: mixtral-8x7b-64xh100.yaml

    Passes:
        parallelism: {order: tp-ep-cp-dp-pp}

    Fails:
        parallelism: {order: tp-cp-dp-pp}
    """
    yield from ctx.refused("PLC027")


@rule("PLC029")
def moe_tensor_parallel_needs_sequence_parallel(ctx: Context) -> Iterator[Violation]:
    """Experts: a MoE model with tensor parallelism runs sequence parallelism.

    Megatron-Core's MoELayer refuses to train with tensor parallelism but without sequence
    parallelism (moe_layer.py, MoELayer.forward: "performance may degrade if MoE and tensor
    parallelism are enabled without also enabling sequence parallelism", a ValueError): the
    router and token dispatcher expect each TP rank to hold its own s/t of the tokens, and
    without SP every TP rank would route and exchange the same tokens t times over.

    Base: mixtral-8x7b-64xh100.yaml

    Passes:
        parallelism: {tensor: 2, data: 8, sequence_parallel: true}

    Fails:
        parallelism: {tensor: 2, data: 8, sequence_parallel: false}
    """
    lay = ctx.job.layout
    if ctx.job.model.moe is None or lay.t == 1 or lay.sp:
        return
    fix = "set parallelism.sequence_parallel: true"
    if not sequence_splits(replace(ctx.job, layout=replace(lay, sp=True))):
        fix += f" (and a seq_len whose share of each context-parallel rank divides by {lay.t})"
    yield Violation(
        "parallelism.sequence_parallel",
        f"tensor = {lay.t} on a mixture-of-experts model without sequence parallelism: "
        "Megatron-Core's MoE layer refuses to train so (every TP rank would route the same "
        f"tokens, {lay.t}× the expert work and all-to-all)",
        fix,
    )
