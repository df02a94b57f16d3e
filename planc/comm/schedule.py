"""The communication schedule of one optimizer step: every collective and p2p op, per pipeline stage.

Sizes in the papers' symbols: s sequence, b micro-batch, h hidden, t/p/d/c degrees, m
micro-batches per step, L_r layers on the rank, Ψ_r parameters on the rank, β_a bytes per
activation element (2 for bf16/fp16, 4 for fp32).

Sources: Megatron-LM tensor parallelism (Shoeybi et al. 2019, §3: two all-reduces in forward and
two in backward per layer); sequence parallelism (Korthikanti et al. 2022, §4.2.2: each
all-reduce becomes an all-gather plus a reduce-scatter); pipeline p2p of [s/c (/t with SP), b, h]
(Narayanan et al. 2021; Megatron `schedules.py`); ZeRO traffic (Rajbhandari et al. 2020, §7:
2Ψ for stages 0–2, 3Ψ for stage 3); ring attention K/V exchange for context parallelism (Liu et
al. 2023, Ring Attention).

Mixture of experts (Megatron-Core's MoEAlltoAllTokenDispatcher, `--moe-token-dispatcher-type
alltoall`, the dispatcher planc compiles): per MoE layer per micro-batch, the T tokens a rank
holds (T = b·s/c/t with sequence parallelism) are routed to k experts each and sent as T·k
rows of h to the expert-parallel ranks that hold those experts (all-to-all over `ep`), with
their routing probabilities (a second all-to-all), and the experts' outputs come back the same
way (combine); backward runs each exchange once more in the other direction. With ETP > 1
the dispatched rows are all-gathered over the expert tensor-parallel group and the outputs
reduce-scattered. Expert gradients are reduced over the expert data-parallel group `edp` in
their own buckets (Megatron DDP's expert_parallel_buffers), the dense ones over dp_cp.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from fractions import Fraction
from types import MappingProxyType
from typing import NamedTuple

from planc.comm import context
from planc.comm.cost import all_to_all_rounds, ring_steps, wire_bytes
from planc.comm.dispatch import (
    Routing,
    blocks_reached,
    deepep_combine_row_bytes,
    deepep_dispatch_row_bytes,
    hybridep_combine_row_bytes,
    hybridep_dispatch_row_bytes,
)
from planc.comm.ends import end_collectives
from planc.comm.sizes import (
    AMAX_BYTES,
    activation_bytes,
    activation_message_bytes,
    latent_message_bytes,
    sp_amax_reduced,
    sp_gather_bytes,
    sp_gather_recomputed,
    sp_input_regathered,
    torch_checkpoint,
    tp_gather_bytes,
)
from planc.dims import AttentionQuant, bf16_ranges
from planc.pipeline.registry import definition
from planc.plannable import PlanLayout, Plannable, axis_strides
from planc.record import record
from planc.sends import boundary_tiers, stage_sends, tier_holds
from planc.spec.fabric import Tier
from planc.stages import StageClasses
from planc.vocab import Axis, ChunkPlacement, Collective, Direction, GroupKind


@record(kw_only=True)
class CommOp:
    """One kind of communication a rank of stage `stage` performs, `calls` times per step.

    `direction` is set for pipeline sends only: forward (activations to the next stage) or
    backward (activation gradients to the previous one).
    """

    stage: int
    group: GroupKind
    op: Collective
    phase: str  # what it is for, for people: e.g. "TP forward all-reduce (attention, MLP)"
    group_size: int
    calls: int  # per optimizer step
    buffer_bytes: int  # per call: the full (gathered) buffer
    link: str  # the name of the fabric tier its groups use (the smallest holding them)
    formula: str
    direction: Direction | None = None
    # Latency-bound rounds when they are not the group's own: the cross-domain part of a flat
    # NCCL all-to-all (`exchange_ops`) pays the rounds of all the whole group's n − 1 peers.
    rounds: int | None = None
    # The flex dispatcher's kernel that runs it (deepep_dispatch, ..., `flex_parts`), whose
    # measured throughput the link's efficiency entry may cap (LinkEfficiency.kernels).
    kernel: str | None = None

    @property
    def bytes_sent(self) -> int:
        """Bytes this rank sends per call (NCCL bus factor × buffer; the whole message for p2p)."""
        return wire_bytes(self.op, self.group_size, self.buffer_bytes)

    @property
    def step_bytes(self) -> int:
        """Bytes this rank sends per step: calls × `bytes_sent` (kept on the instance, as
        `PlanLayout` keeps its degrees: a search's candidates share their ops)."""
        cached: int | None = self.__dict__.get("_step_bytes")
        if cached is None:
            cached = self.__dict__["_step_bytes"] = self.calls * self.bytes_sent
        return cached

    @property
    def steps(self) -> int:
        return ring_steps(self.op, self.group_size) if self.rounds is None else self.rounds


def op_maker(
    stage: int, group: GroupKind, group_size: int, link: str
) -> Callable[[Collective, str, int, int, str], CommOp]:
    """CommOps of one stage's `group` of `group_size` ranks on `link`, from the collective, what
    it is for, calls per step, bytes per call and the formula."""

    def op(collective: Collective, phase: str, calls: int, size: int, formula: str) -> CommOp:
        return CommOp(
            stage=stage,
            group=group,
            op=collective,
            phase=phase,
            group_size=group_size,
            calls=calls,
            buffer_bytes=size,
            link=link,
            formula=formula,
        )

    return op


def param_bytes(job: Plannable) -> int:
    """Bytes per parameter element on the wire: the working weights ZeRO and FSDP gather
    (`Numerics.weight`)."""
    return job.numerics.weight


def gathered_parameter_bytes(job: Plannable, elements: int, psi: int, psi_q: int) -> int:
    """Bytes of one parameter all-gather of `elements` of a buffer of Ψ parameters, Ψ_q of them
    quantized GEMM weights: w·elements, or with FP8 parameters gathered in FP8
    (`Quantized.gather_fp8`: Megatron --fp8-param-gather over the distributed optimizer,
    torchtitan enable_fsdp_float8_all_gather) the bucket's quantized share
    e_q = ⌊elements·Ψ_q/Ψ⌋ at bits/8 bytes plus its block scales and the rest at w
    (Megatron-LM docs low_precision_training.md: 'perform the param all-gather in fp8'; torchtitan
    docs/float8.md). Rowwise and torchtitan's MXFP8 gather in high precision (gather_fp8 off)."""
    w = param_bytes(job)
    q = job.numerics.quantized
    if q is None or not q.gather_fp8 or psi <= 0 or psi_q <= 0:
        return elements * w
    e_q = elements * psi_q // psi
    scales = -(-e_q // q.weight_scale_block) * q.scale_bytes if q.weight_scale_block else 0
    return (elements - e_q) * w + -(-e_q * q.data_bits // 8) + scales


def _gather_words(job: Plannable) -> str:
    """What a parameter all-gather moves, for its formula."""
    q = job.numerics.quantized
    if q is None or not q.gather_fp8:
        return "16-bit parameters"
    return f"parameters ({q.label} for the quantized GEMM weights Ψ_q, 16-bit for the rest)"


def grad_bytes(job: Plannable) -> int:
    """Bytes per gradient element on the wire (`Numerics.reduce`: fp32 when gradients
    accumulate in fp32; under FSDP2 its reduce_dtype's)."""
    return job.numerics.reduce


def group_tier(job: Plannable, axes: tuple[Axis, ...]) -> Tier:
    """The smallest tier of the fabric that holds every group over `axes` of the dense grid."""
    # Asked for every op of every stage (about 44 times per analysis in a search), and a pure
    # function of the frozen job: kept per job instance as PlanLayout keeps its degrees (a plain
    # dict in the instance's __dict__, not a field: equality, hashing and `replace` ignore it).
    memo: dict[tuple[Axis, ...], Tier] | None = job.__dict__.get("_group_tiers")
    if memo is None:
        memo = {}
        job.__dict__["_group_tiers"] = memo
    tier = memo.get(axes)
    if tier is None:
        tier = memo[axes] = _cluster_grid_tier(job, axes)
    return tier


def _cluster_grid_tier(job: Plannable, axes: tuple[Axis, ...]) -> Tier:
    """`_grid_tier` of the dense grid over `axes`: a function of the cluster (its world, nodes
    and fabric), the degrees and the rank order, so kept on the cluster instance as
    `group_tier` keeps it on the job (a search's candidates share one cluster and ask for the
    same few grids thousands of times)."""
    lay = job.layout
    memo: dict[tuple[object, ...], Tier] | None = job.cluster.__dict__.get("_grid_tiers")
    if memo is None:
        memo = {}
        job.cluster.__dict__["_grid_tiers"] = memo
    at = (lay.t, lay.c, lay.d, lay.p, lay.order, axes)
    tier = memo.get(at)
    if tier is None:
        tier = memo[at] = _grid_tier(job, lay.degrees, lay.strides, axes)
    return tier


def within_span(
    world: int, span: int, sizes: Mapping[Axis, int], stride: Mapping[Axis, int], axes: tuple[Axis, ...]
) -> bool:
    """Every group over `axes` of a grid of `world` ranks stays inside one block of `span`
    consecutive ranks (an NVLink domain, a leaf switch's nodes, ...).

    The groups over `axes` tile "super-blocks" of σ·n ranks, σ and n the stride and size of the
    slowest axis among them; each super-block holds whole groups. A block boundary strictly
    inside a super-block splits at least one group (one with members on both sides), so the
    groups stay inside iff the world fits one block or the span is a multiple of σ·n.
    """
    present = [a for a in axes if sizes[a] > 1]
    if not present:
        return True
    slowest = max(present, key=lambda a: stride[a])
    block = stride[slowest] * sizes[slowest]
    return world <= span or span % block == 0


def rail_aligned(
    world: int, per_node: int, sizes: Mapping[Axis, int], stride: Mapping[Axis, int], axes: tuple[Axis, ...]
) -> bool:
    """Every group over `axes` is rail-aligned: its members on different nodes share their
    local GPU index (rank mod G, the NIC's rail; landscape §3.2).

    Moving along an axis of stride σ changes the local index unless G divides σ; a group with
    such an axis and members on two nodes has a pair on different nodes with different indices
    (combine the step with a move to another node). So the groups are rail-aligned iff G
    divides the stride of every axis they span, or each lies inside one node."""
    present = [a for a in axes if sizes[a] > 1]
    if all(stride[a] % per_node == 0 for a in present):
        return True
    return within_span(world, per_node, sizes, stride, axes)


def _grid_tier(
    job: Plannable, sizes: Mapping[Axis, int], stride: Mapping[Axis, int], axes: tuple[Axis, ...]
) -> Tier:
    """The first tier, innermost first, whose span holds every group over `axes` of a grid (and,
    when the tier is rail-aligned, whose rails carry them: `rail_aligned`); the outermost
    (which holds the world) when none does."""
    fabric = job.cluster.fabric
    aligned = rail_aligned(job.world, job.cluster.gpus_per_node, sizes, stride, axes)
    for tier in fabric:
        inside = within_span(job.world, tier.span, sizes, stride, axes)
        if tier_holds(job.cluster.fabric, tier, inside, aligned):
            return tier
    return fabric.outermost


def members_per_block(
    span: int, sizes: Mapping[Axis, int], stride: Mapping[Axis, int], axes: tuple[Axis, ...]
) -> int:
    """g = Π_a min(n_a, ⌊span/σ_a⌋) over the group's axes of stride σ_a below the span: the
    members of one group over `axes` inside one block of `span` consecutive ranks (an axis of
    stride σ ≥ span leaves the block at every step). Blocks tile planc's grids regularly (the
    degrees and spans divide one another), so every block of a group holds as many."""
    g = 1
    for a in axes:
        if sizes[a] > 1 and stride[a] < span:
            g *= min(sizes[a], max(1, span // stride[a]))
    return g


# The groups whose ring collectives a rank's NICs run in parallel across domains
# (`ring_rails`): the dense grid's axes of each (dp_shard and dp_replicate are slices of dp_cp,
# below), and the expert grid's.
_DENSE_RING_AXES: dict[GroupKind, tuple[Axis, ...]] = {
    GroupKind.DP_CP: (Axis.DP, Axis.CP),
    GroupKind.DP: (Axis.DP,),
    GroupKind.TP: (Axis.TP,),
    GroupKind.CP: (Axis.CP,),
}
_EXPERT_RING_AXES: dict[GroupKind, tuple[Axis, ...]] = {
    GroupKind.EDP: (Axis.DP,),
    GroupKind.EP: (Axis.EP,),
    GroupKind.TP_EP: (Axis.TP, Axis.EP),
    GroupKind.ETP: (Axis.TP,),
}


def ring_rails(job: Plannable, group: GroupKind) -> int:
    """g: the members of one `group` in one NVLink domain, the NICs its cross-domain ring hops
    share (`planc.comm.tiers.railed_ring_gbs`), for every group a ring collective runs over;
    1 for the others (a pipeline send, the embedding pair, the flex dispatchers' per-domain
    groups).

    dp_cp: `members_per_block` over (dp, cp); its listing runs the faster axis first, so the
    domain's g members are contiguous in it, and a shard slice of N contiguous members holds
    min(N, g) of them per domain, a replica group (members N apart) max(1, g/N). tp, cp, dp:
    their own axis. edp, ep, tp_ep, etp: the expert grid's dp, ep, tp × ep and tp axes (the
    allgather dispatcher's rings, HybridEP's routing maps and the token counts ride the same
    per-NIC rings; an all-to-all does not aggregate NICs, `planc.perf.inputs.comm_time_s`).
    `planc verify` counts g from the plan's groups for every ring op alike."""
    lay = job.layout
    span = job.cluster.fabric.innermost.span
    if group in _DENSE_RING_AXES:
        return members_per_block(span, lay.degrees, lay.strides, _DENSE_RING_AXES[group])
    dense = members_per_block(span, lay.degrees, lay.strides, (Axis.DP, Axis.CP))
    if group == GroupKind.DP_SHARD:
        return min(lay.shard_group, dense)
    if group == GroupKind.DP_REPLICATE:
        return max(1, dense // lay.shard_group)
    if group in _EXPERT_RING_AXES:
        order = tuple(Axis(name) for name in lay.expert_order)
        sizes = {Axis(name): size for name, size in lay.expert_degrees.items()}
        strides = axis_strides(order, sizes)
        return members_per_block(span, sizes, strides, _EXPERT_RING_AXES[group])
    return 1


def within_domain(job: Plannable, axes: tuple[Axis, ...]) -> bool:
    """Every group over `axes` of the dense grid stays on the fabric's innermost tier (the
    NVLink domain)."""
    return group_tier(job, axes) == job.cluster.fabric.innermost


def expert_tier(job: Plannable, axis: Axis) -> Tier:
    """The tier of the expert grid's groups over `axis` (ep, tp = ETP or dp = EDP): the same
    super-block test on the expert grid (Megatron-Core's expert RankGenerator: the plan's order
    with ep placed, sizes tp = ETP, cp = 1, ep = EP, dp = EDP, pp = p)."""
    lay = job.layout
    order = tuple(Axis(name) for name in lay.expert_order)
    sizes = {Axis(name): size for name, size in lay.expert_degrees.items()}
    return _grid_tier(job, sizes, axis_strides(order, sizes), (axis,))


def expert_link(job: Plannable, axis: Axis) -> str:
    """The name of `expert_tier`: what the expert ops over `axis` carry as their link."""
    return expert_tier(job, axis).name


def link_class(job: Plannable, axes: tuple[Axis, ...]) -> str:
    """The name of `group_tier`: what the ops over `axes` carry as their link."""
    return group_tier(job, axes).name


def gathered_format(job: Plannable, bf16: bool = False) -> str:
    """The SP all-gathers' label suffix: ', in fp8' (', in fp4') where they move the recipe's
    quantized data (`sp_gather_bytes`), ', layers kept in BF16' for those layers' gathers,
    else nothing."""
    q = job.numerics.quantized
    if q is None or not q.tp_gather_fp8:
        return ""
    return ", layers kept in BF16" if bf16 else f", in fp{q.data_bits}"


def amax_op(make: Callable[..., CommOp], calls: int, what: str) -> CommOp:
    """The TP all-reduces of one fp32 amax before `calls` quantized SP all-gathers of `what`
    (`sp_amax_reduced`)."""
    return make(
        Collective.ALL_REDUCE,
        f"TP amax all-reduce before each quantized SP all-gather of {what}",
        calls,
        AMAX_BYTES,
        "1 per quantized gather of a per-tensor-scaled input or output gradient, one fp32",
    )


class LayerShare(NamedTuple):
    """Some of a rank's transformer layers: how many, and how many of them have experts."""

    layers: int
    routed: int


def stage_share(job: Plannable, stage: int) -> LayerShare:
    """All of pipeline rank `stage`'s layers, its multi-token prediction modules' included
    (`Plannable.run_layers`)."""
    return LayerShare(*job.run_layers(stage))


def bf16_share(job: Plannable, a: int, b: int) -> LayerShare:
    """The layers of [a, b) that the recipe keeps in BF16 (`Quantized.bf16_layers`, the model's
    first and last; Megatron's --first-last-layers-bf16), and the MoE layers among them."""
    q = job.numerics.quantized
    moe, layers, routed = job.model.moe, 0, 0
    for lo, hi in bf16_ranges(a, b, 0 if q is None else q.bf16_layers, job.model.L):
        layers += hi - lo
        routed += 0 if moe is None else moe.moe_layers_between(lo, hi)
    return LayerShare(layers, routed)


def kept_in(job: Plannable, a: int, b: int) -> LayerShare:
    """The layers of [a, b) kept in BF16 (`bf16_share`) where the SP all-gathers of the others
    move quantized data: their gathers stay 16-bit (`sp_gather_bytes`). None otherwise."""
    q = job.numerics.quantized
    if q is None or not q.tp_gather_fp8:
        return LayerShare(0, 0)
    return bf16_share(job, a, b)


def kept_share(job: Plannable, stage: int) -> LayerShare:
    """`kept_in` over rank `stage`'s chunks."""
    shares = [kept_in(job, a, b) for a, b in job.layout.chunks[stage]]
    return LayerShare(sum(k.layers for k in shares), sum(k.routed for k in shares))


def tp_blocks(job: Plannable, share: LayerShare, attention: bool = True) -> int:
    """Blocks of `share`'s layers that run TP collectives: attention in every layer (counted
    with `attention`), the MLP in dense layers and the shared experts in MoE layers
    (SharedExpertMLP is a TP-split MLP with the same all-gather and reduce-scatter under SP). A
    MoE layer without shared experts has no TP collective around its MLP: its routed experts
    take the SP-split tokens directly (Megatron-Core MoELayer), and their traffic is the expert
    ops below."""
    moe = job.model.moe
    bare = share.routed if moe is not None and moe.E_s == 0 else 0
    return (2 if attention else 1) * share.layers - bare


def unread_outputs(job: Plannable, share: LayerShare) -> int:
    """MLP blocks of `share`'s layers (a dense layer's MLP, a MoE layer's shared experts) whose
    output collective full recompute does not run again: under torch's non-reentrant
    checkpoint nothing in backward reads the reduction of the block's output, the last op
    before the residual add (`torch_checkpoint`, `planc.perf.sac.unread_tail`); 0 otherwise."""
    if job.training.recompute != "full" or not torch_checkpoint(job):
        return 0
    return tp_blocks(job, share, attention=False)


def mlp_block_redone(job: Plannable, moe_layer: bool) -> bool:
    """Whether selective recompute runs a layer's TP-split MLP block again, its collectives
    inside: a dense layer's MLP under mlp, a MoE layer's shared experts under shared_experts or
    moe (Megatron-Core transformer_layer.py, moe_layer.py). `Training.recompute_modules` is
    empty unless recompute is selective."""
    own = {"shared_experts", "moe"} if moe_layer else {"mlp"}
    return not own.isdisjoint(job.training.recompute_modules)


def latents_regathered(job: Plannable) -> bool:
    """Whether recomputing latent attention's up projections (mla_up_proj) gathers the query and
    key/value latents again under SP: the up projections' column-parallel linears gather them
    (not the RoPE key, gathered before them: multi_latent_attention.py
    qkv_up_proj_and_rope_apply)."""
    return job.layout.sp and "mla_up_proj" in job.training.recompute_modules


def redone_blocks(job: Plannable, share: LayerShare, attention: bool = True) -> int:
    """TP blocks of `share`'s layers (`tp_blocks`) whose forward runs again inside backward, per
    micro-batch: every block under full recompute (`attention`: counting the attention blocks);
    under selective recompute the dense layers' MLPs (mlp) and the MoE layers' shared experts
    (shared_experts, or moe: the whole MoE block), each a module checkpointed with its
    collectives inside (Megatron-Core transformer_layer.py, moe_layer.py)."""
    if job.training.recompute == "full":
        return tp_blocks(job, share, attention)
    moe = job.model.moe
    routed = share.routed if moe is not None else 0
    shared = routed if moe is not None and moe.E_s else 0
    dense = share.layers - routed if mlp_block_redone(job, moe_layer=False) else 0
    return dense + (shared if mlp_block_redone(job, moe_layer=True) else 0)


def latent_parts(job: Plannable) -> tuple[tuple[str, str, int], ...]:
    """(name, symbol, per-token width) of what latent attention's TP collectives move at its
    input, instead of the hidden state h: with sequence parallelism the query latent d_c' (h
    without one), the key/value latent d_c and the key's RoPE part d_h^R are all-gathered
    (forward) and their gradients reduce-scattered (backward); without it the query and
    key/value latents' gradients are all-reduced (backward). The down projections are
    duplicated on every TP rank and run on the rank's own tokens; the up projections are
    column-parallel over the latents (Megatron-Core MLASelfAttention, multi_latent_attention.py:
    TELinear parallel_mode 'duplicated', k_pos_emb gathered with
    gather_from_sequence_parallel_region). Empty without latent attention."""
    mla = job.model.mla
    if mla is None:
        return ()
    query = (
        ("query input", "h", job.model.h)
        if mla.q_lora is None
        else ("query latent", "d_c'", mla.q_lora)
    )
    parts = (query, ("key/value latent", "d_c", mla.kv_lora))
    return (*parts, ("key RoPE part", "d_h^R", mla.qk_rope)) if job.layout.sp else parts


def _mla_tp_ops(job: Plannable, stage: int) -> list[CommOp]:
    """Latent attention's TP collectives on `stage`: per layer and micro-batch, the latents
    (`latent_parts`) at the block's input and the hidden state h after its output projection
    (a reduce-scatter with SP, an all-reduce without), mirrored in backward; full recompute runs
    the forward's again."""
    lay, m = job.layout, job.m
    layers, _ = job.run_layers(stage)
    full = job.training.recompute == "full"
    again = layers * m if full else 0
    link = link_class(job, (Axis.TP,))

    op = op_maker(stage, GroupKind.TP, lay.t, link)

    hidden = activation_message_bytes(job)
    ops: list[CommOp] = []
    if lay.sp:
        # (bf16, layers): the layers whose up projections gather quantized latents, and those
        # the recipe keeps in BF16, whose gathers stay 16-bit
        kept = kept_share(job, stage).layers
        shares = [(bf16, n) for bf16, n in ((False, layers - kept), (True, kept)) if n]
        for name, symbol, width in latent_parts(job):
            size = latent_message_bytes(job, width)
            if symbol == "d_h^R":  # gathered by Megatron before the up projections, 16-bit
                ops.append(
                    op(
                        Collective.ALL_GATHER,
                        f"SP all-gather of the {name} before the up projection (forward)",
                        layers * m + again,
                        size,
                        f"1 per layer per micro-batch (+1 under full recompute), "
                        f"b·(s/c)·{symbol}·β_a",
                    )
                )
            for bf16, n in [] if symbol == "d_h^R" else shares:
                suffix, gathered = gathered_format(job, bf16), sp_gather_bytes(job, width, bf16)
                beta = "β_g" if suffix and not bf16 else "β_a"
                redo = n * m if full or latents_regathered(job) else 0
                ops.append(
                    op(
                        Collective.ALL_GATHER,
                        f"SP all-gather of the {name} before the up projection (forward)" + suffix,
                        n * m + redo,
                        gathered,
                        "1 per layer per micro-batch (+1 under full recompute or mla_up_proj), "
                        f"b·(s/c)·{symbol}·{beta}",
                    )
                )
                if sp_input_regathered(job):
                    ops.append(
                        op(
                            Collective.ALL_GATHER,
                            f"SP all-gather of the {name} again for the up projection's weight "
                            "gradient (backward)" + suffix,
                            n * m,
                            gathered,
                            f"1 per layer per micro-batch, b·(s/c)·{symbol}·{beta}",
                        )
                    )
            ops.append(
                op(
                    Collective.REDUCE_SCATTER,
                    f"SP reduce-scatter of the {name}'s gradient (backward)",
                    layers * m,
                    size,
                    f"1 per layer per micro-batch, b·(s/c)·{symbol}·β_a",
                )
            )
        ops.append(
            op(
                Collective.REDUCE_SCATTER,
                "SP reduce-scatter after the latent attention's output projection (forward)",
                layers * m + again,
                hidden,
                "1 per layer per micro-batch (+1 under full recompute), b·(s/c)·h·β_a",
            )
        )
        for bf16, n in shares:
            suffix = gathered_format(job, bf16)
            ops.append(
                op(
                    Collective.ALL_GATHER,
                    "SP all-gather of the output projection's gradient (backward)" + suffix,
                    n * m,
                    tp_gather_bytes(job, bf16),
                    f"1 per layer per micro-batch, b·(s/c)·h·{'β_g' if suffix and not bf16 else 'β_a'}",
                )
            )
        quantized = layers - kept
        if sp_amax_reduced(job) and quantized:
            # the two latents' gathers (again where recomputed) and the output's gradient's
            redo = quantized * m if full or latents_regathered(job) else 0
            calls = 3 * quantized * m + 2 * redo
            ops.append(amax_op(op, calls, "a latent or the output projection's gradient"))
        return ops
    ops.append(
        op(
            Collective.ALL_REDUCE,
            "TP all-reduce after the latent attention's output projection (forward)",
            layers * m + again,
            hidden,
            "1 per layer per micro-batch (+1 under full recompute), b·(s/c)·h·β_a",
        )
    )
    for name, symbol, width in latent_parts(job):
        size = latent_message_bytes(job, width)
        ops.append(
            op(
                Collective.ALL_REDUCE,
                f"TP all-reduce of the {name}'s gradient (backward)",
                layers * m,
                size,
                f"1 per layer per micro-batch, b·(s/c)·{symbol}·β_a",
            )
        )
    return ops


def _tp_ops(job: Plannable, stage: int) -> list[CommOp]:
    if job.layout.t == 1:
        return []
    if job.model.mla is None:
        return _dense_tp_ops(job, stage, attention=True) + _ends_ops(job, stage)
    # Latent attention's blocks move latents at their input; the MLPs move h as before.
    layers = _mla_tp_ops(job, stage) + _dense_tp_ops(job, stage, attention=False)
    return layers + _ends_ops(job, stage)


def _ends_ops(job: Plannable, stage: int) -> list[CommOp]:
    """The TP collectives at the model's ends on `stage` (`planc.comm.ends.end_collectives`):
    m calls per pass and micro-batch, those of the same collective, purpose and size merged."""
    counted: dict[tuple[Collective, str, int, str], int] = {}
    for one, passes in end_collectives(job, stage).every:
        key = (one.op, one.phase, one.size, one.formula)
        counted[key] = counted.get(key, 0) + passes * job.m
    if not counted:
        return []
    op = op_maker(stage, GroupKind.TP, job.layout.t, link_class(job, (Axis.TP,)))
    return [op(kind, phase, calls, size, formula) for (kind, phase, size, formula), calls in counted.items()]


def _dense_tp_ops(job: Plannable, stage: int, attention: bool) -> list[CommOp]:
    """The TP collectives of the rank's blocks (attention with `attention`, MLP or shared
    experts) that move the hidden state h at both ends."""
    lay, m = job.layout, job.m
    share, kept = stage_share(job, stage), kept_share(job, stage)
    blocks = tp_blocks(job, share, attention)
    if blocks == 0:
        return []
    size = activation_message_bytes(job)
    link = link_class(job, (Axis.TP,))
    recompute = redone_blocks(job, share, attention) * m
    # the MLP blocks' output collectives full recompute leaves out (torch's checkpoint)
    unread = unread_outputs(job, share) * m

    op = op_maker(stage, GroupKind.TP, lay.t, link)

    if not lay.sp:
        return [
            op(
                Collective.ALL_REDUCE,
                "TP forward all-reduce (attention and MLP outputs)",
                blocks * m,
                size,
                "1 per block (attention, MLP or shared experts) per micro-batch, b·(s/c)·h·β_a",
            ),
            op(
                Collective.ALL_REDUCE,
                "TP backward all-reduce (attention and MLP input grads)",
                blocks * m + recompute - unread,
                size,
                "1 per block per micro-batch (+1 forward again under full recompute or a recomputed "
                "mlp, shared_experts or moe"
                + ("; not the MLP's output under torch's checkpoint" if unread else "")
                + "), b·(s/c)·h·β_a",
            ),
        ]
    # The gathers of the layers kept in BF16 stay 16-bit where the others move quantized data.
    kept_blocks = tp_blocks(job, kept, attention)
    kept_recompute = redone_blocks(job, kept, attention) * m
    gathers, regathers = [], []
    for bf16, n, redo in (
        (False, blocks - kept_blocks, recompute - kept_recompute),
        (True, kept_blocks, kept_recompute),
    ):
        if n == 0:
            continue
        suffix, gathered = gathered_format(job, bf16), tp_gather_bytes(job, bf16)
        beta = "β_g" if suffix and not bf16 else "β_a"
        gathers.append(
            op(
                Collective.ALL_GATHER,
                "SP all-gather before attention and MLP (forward; again in backward)" + suffix,
                2 * n * m + redo,
                gathered,
                "1 forward + 1 backward per block (attention, MLP or shared experts) per "
                f"micro-batch, gathered b·(s/c)·h·{beta}",
            )
        )
        regathers.append(
            op(
                Collective.ALL_GATHER,
                "SP all-gather of the column-parallel input again for its weight gradient "
                "(backward)" + suffix,
                n * m,
                gathered,
                f"1 per block per micro-batch, b·(s/c)·h·{beta}, beside the dgrad GEMM",
            )
        )
        if sp_gather_recomputed(job):
            gathers.append(
                op(
                    Collective.ALL_GATHER,
                    "SP all-gather before attention and MLP again in backward (recomputed by "
                    "torchtitan's per-op activation checkpointing)" + suffix,
                    n * m,
                    gathered,
                    f"1 per block per micro-batch, b·(s/c)·h·{beta}",
                )
            )
    scatter = op(
        Collective.REDUCE_SCATTER,
        "SP reduce-scatter after attention and MLP (forward; again in backward)",
        2 * blocks * m + recompute - unread,
        size,
        "1 forward + 1 backward per block per micro-batch"
        + (" (+1 forward again but the MLP's, under torch's checkpoint)" if unread else "")
        + ", b·(s/c)·h·β_a before scattering",
    )
    amax = []
    if sp_amax_reduced(job) and blocks > kept_blocks:
        regathered = 3 if sp_gather_recomputed(job) else 2  # the recomputed gather's amax too
        fp8_calls = regathered * (blocks - kept_blocks) * m + recompute - kept_recompute
        amax.append(amax_op(op, fp8_calls, "a block's input or output gradient"))
    return [*gathers, scatter, *(regathers if sp_input_regathered(job) else []), *amax]


def pipeline_message_bytes(job: Plannable) -> int:
    """[s/c (/t with SP), b, h]·β_a: one pipeline send (Megatron's p2p tensor shape)."""
    return job.dims.replicated_tokens * job.model.h * activation_bytes(job)


def _sends_formula(lay: PlanLayout, end: str) -> str:
    if definition(lay.schedule).placement is ChunkPlacement.V:
        return "m·(2 − [first stage] − [last stage])"
    return f"m·(v − [{end} stage])"


def _pp_ops(job: Plannable, stage: int) -> list[CommOp]:
    """The stage's pipeline sends, one op per direction and tier: each send crosses its own
    pair of ranks' tier (`planc.sends`), so a group that needs the network as a whole sends
    over NVLink across the boundaries inside one domain."""
    lay = job.layout
    if lay.p == 1:
        return []
    size = pipeline_message_bytes(job)
    shape = "[s/c" + ("/t" if lay.sp else "") + ", b, h]·β_a"
    ops = []
    for direction, what, end in (
        (Direction.FORWARD, "the activation to the next stage", "last"),
        (Direction.BACKWARD, "the activation gradient to the previous stage", "first"),
    ):
        sends = stage_sends(job, stage, direction)
        whole = _sends_formula(lay, end)
        for tier, calls in sends:
            part = "" if len(sends) == 1 else f", {calls} of them across boundaries on {tier.name}"
            ops.append(
                CommOp(
                    stage=stage,
                    group=GroupKind.PP,
                    op=Collective.SEND_RECV,
                    phase=f"PP send of {what}",
                    group_size=2,
                    calls=calls,
                    buffer_bytes=size,
                    link=tier.name,
                    formula=f"{whole} sends of {shape}{part}",
                    direction=direction,
                )
            )
    return ops


def _buckets(params: int, bucket: int) -> list[tuple[int, int]]:
    """(calls, elements) pairs: Ψ_r // bucket full buckets and one remainder bucket, exactly."""
    full, rest = divmod(params, bucket)
    return [(calls, size) for calls, size in ((full, bucket), (1, rest)) if calls and size]


def sharding_stage(job: Plannable) -> int:
    """The ZeRO stage whose traffic the engine runs: FSDP2's fully_shard always shards the
    parameters (stage 3 traffic); the others follow parallelism.zero_stage."""
    return 3 if job.training.framework == "fsdp2" else job.layout.zero


def layer_wise(job: Plannable) -> bool:
    """Whether Muon's layer-wise distributed optimizer runs (optimizer muon, zero_stage 1;
    Megatron-Core layer_wise_optimizer.py LayerWiseDistributedOptimizer): each data-parallel
    rank updates the whole tensors assigned to it, and the updated parameters are all-gathered
    after the step."""
    return job.training.optimizer == "muon" and sharding_stage(job) == 1


def layer_wise_all_reduce(job: Plannable) -> bool:
    """Whether the layer-wise optimizer's gradients are all-reduced whole: Megatron DDP without
    the distributed optimizer's buffers, as Megatron-Core 0.16 and 0.17 (training.framework_release
    nemo-25.11, nemo-26.02, nemo-26.04) run it. From 0.18 its default parameter layout
    (--use-layer-wise-param-layout; training.py get_model sets ddp_config.use_distributed_optimizer)
    reduce-scatters them in shard-aligned buckets, the ZeRO-1 traffic."""
    return layer_wise(job) and job.training.framework_release != "latest"


def shard_link(job: Plannable) -> str:
    """The tier (its name) of the dp_shard groups: data_shard contiguous members of a dp_cp
    group.

    The dp_cp listing runs its faster axis (of cp and dp, in rank order) first. A slice of S
    members lies inside an aligned block of stride·S ranks on that axis when S divides its
    degree, or of slow stride·S/n_fast on the slower axis when n_fast divides S; the slices then
    stay inside one block of a tier iff its span is a multiple of that block (`within_span`);
    the first such tier, innermost first, holds them. Any other cut is taken as crossing the
    outermost tier.
    """
    lay = job.layout
    if lay.replicas == 1:
        return link_class(job, (Axis.DP, Axis.CP))
    sizes, strides_ = lay.degrees, lay.strides
    fast, slow = sorted((Axis.CP, Axis.DP), key=lambda a: strides_[a])
    shard = lay.shard_group
    per_node = job.cluster.gpus_per_node
    if sizes[fast] % shard == 0:
        block = strides_[fast] * shard
        spanned = [strides_[fast]]
    elif shard % sizes[fast] == 0:
        block = strides_[slow] * (shard // sizes[fast])
        spanned = [strides_[a] for a in (fast, slow) if sizes[a] > 1]
    else:
        block, spanned = 0, []
    # Rail-aligned as `rail_aligned` decides it: G divides every stride the slices span, or
    # each slice lies inside one node.
    aligned = block > 0 and (
        all(s % per_node == 0 for s in spanned) or job.world <= per_node or per_node % block == 0
    )
    fabric = job.cluster.fabric
    for tier in fabric:
        inside = job.world <= tier.span or (block > 0 and tier.span % block == 0)
        if tier_holds(job.cluster.fabric, tier, inside, aligned):
            return tier.name
    return fabric.outermost.name


def _replicate_op(job: Plannable, stage: int, calls: int, elements: int) -> CommOp:
    """The all-reduce of the sharded gradients across the replicas of a shard (HSDP: FSDP2
    all-reduces over the replicate mesh dimension after its reduce-scatter; Megatron's partial
    distributed optimizer over inter_distributed_optimizer_instance_group)."""
    lay = job.layout
    shard = -(-elements // lay.shard_group)
    return CommOp(
        stage=stage,
        group=GroupKind.DP_REPLICATE,
        op=Collective.ALL_REDUCE,
        phase="HSDP all-reduce of the gradient shards across replicas",
        group_size=lay.replicas,
        calls=calls,
        buffer_bytes=shard * grad_bytes(job),
        # The replicas of a shard lie inside their dp_cp group: its tier holds them.
        link=link_class(job, (Axis.DP, Axis.CP)),
        formula="Ψ_r/N gradients per reduce-scatter, over R = d·c/N replicas",
    )


def _dp_ops(job: Plannable, stage: int, params: int, quantized: int = 0) -> list[CommOp]:
    lay, m = job.layout, job.m
    zero = sharding_stage(job)
    hsdp = zero > 0 and lay.replicas > 1
    n = lay.shard_group if hsdp else lay.d * lay.c
    if lay.d * lay.c == 1:
        return []
    g = grad_bytes(job)
    link = shard_link(job)
    kind = GroupKind.DP_SHARD if hsdp else GroupKind.DP_CP

    op = op_maker(stage, kind, n, link)

    ops: list[CommOp] = []
    for calls, elements in _buckets(params, job.gradient_bucket_elements):
        if hsdp:
            sharded = zero >= 2
            ops.append(_replicate_op(job, stage, calls * (m if sharded else 1), elements))
            if n == 1:
                continue
        if zero == 0 or layer_wise_all_reduce(job):
            ops.append(
                op(
                    Collective.ALL_REDUCE,
                    "DP gradient all-reduce (bucketed, overlapped with backward)",
                    calls,
                    elements * g,
                    "Ψ_r gradients once per step: 2Ψ on the wire",
                )
            )
            if zero == 1:
                ops.append(
                    op(
                        Collective.ALL_GATHER,
                        "Muon layer-wise parameter all-gather after the optimizer step",
                        calls,
                        gathered_parameter_bytes(job, elements, params, quantized),
                        f"Ψ_r updated {_gather_words(job)} once per step (whole tensors per rank)",
                    )
                )
            continue
        sharded = zero >= 2
        ops.append(
            op(
                Collective.REDUCE_SCATTER,
                "ZeRO gradient reduce-scatter",
                calls * (m if sharded else 1),
                elements * g,
                "Ψ_r gradients "
                + ("per micro-batch (ZeRO-2/3 shard gradients)" if sharded else "once per step"),
            )
        )
        if zero == 3:
            ops.append(
                op(
                    Collective.ALL_GATHER,
                    "ZeRO-3 parameter all-gather, forward and backward",
                    2 * m * calls,
                    gathered_parameter_bytes(job, elements, params, quantized),
                    f"Ψ_r {_gather_words(job)} gathered before forward and again before backward, "
                    "per micro-batch",
                )
            )
        else:
            ops.append(
                op(
                    Collective.ALL_GATHER,
                    "ZeRO parameter all-gather after the optimizer step",
                    calls,
                    gathered_parameter_bytes(job, elements, params, quantized),
                    f"Ψ_r updated {_gather_words(job)} once per step",
                )
            )
    return ops


# --- mixture of experts -------------------------------------------------------------------
# Bytes of one token count in the dispatcher's metadata (torch.long).
TOKEN_COUNT_BYTES = 8


def moe_tokens(job: Plannable) -> int:
    """T: the tokens one rank routes per micro-batch, b·s/c/t with sequence parallelism (the
    MoE layer's input is the SP-split hidden state; Megatron-Core refuses MoE with TP > 1 and
    no SP in training), b·s/c without."""
    return job.dims.replicated_tokens


def dispatch_rows(job: Plannable) -> int:
    """T·k, or E·C padded: the token rows a rank sends per dispatch all-to-all (`ExpertDims.
    routed`, `planc.dims.routed_rows`).

    Dropless routing, balanced expectation: every rank sends T·k/EP rows to each EP rank and
    receives as many, so it also holds T·k rows for its own E/EP experts after the exchange.
    The exchange is priced at that expectation; `training.expert_imbalance` bounds the rows the
    memory budget holds (`ExpertDims.received`). A capacity factor CF caps each expert at
    C = ⌈T·k/E·CF⌉ rows from a rank (Megatron `get_capacity`) and drops the rest, which leaves
    the balanced T·k/E ≤ C unchanged (CF ≥ 1, PLC026). Padded to capacity
    (`model.moe.pad_to_capacity`, --moe-pad-expert-input-to-capacity) every expert takes exactly
    C rows from every rank, zero-weight tokens filling the short ones: E·C rows in even splits.
    """
    experts = job.dims.experts
    return 0 if experts is None else experts.routed


def dispatch_bytes(job: Plannable) -> int:
    """T·k·h·β_a (E·C·h·β_a padded): one dispatch (or combine) all-to-all's send buffer on a
    rank."""
    return dispatch_rows(job) * job.model.h * activation_bytes(job)


def probs_bytes(job: Plannable) -> int:
    """T·k·β_a (E·C·β_a padded): the routing probabilities of the dispatched rows (the router's
    output dtype, the activations' without --moe-router-dtype)."""
    return dispatch_rows(job) * activation_bytes(job)


def token_count_bytes(job: Plannable) -> int:
    """ETP·EP·E·8: the gathered per-expert token counts of the tp_ep group (the dispatcher's
    metadata all-gather of E longs per rank, `preprocess`; none padded, `counts_gathered`)."""
    moe, lay = job.model.moe, job.layout
    return 0 if moe is None else lay.et * lay.ep * moe.E * TOKEN_COUNT_BYTES


def counts_gathered(job: Plannable) -> bool:
    """Whether the alltoall dispatcher's `preprocess` all-gathers the token counts over ep: with
    ETP = 1 (over tp_ep otherwise, a small latency-bound call planc does not list) and not
    padded to capacity, where the counts are C for every expert, known on the host, and
    preprocess returns before the gather (token_dispatcher.py:487-510 at 2edffadb, 444-467 at
    core_v0.14.0, 348-371 at core_v0.12.1)."""
    moe = job.model.moe
    return moe is not None and job.layout.et == 1 and not moe.padded


def rows_symbol(job: Plannable) -> str:
    """The dispatched rows in a formula's words: E·C padded to capacity, else T·k."""
    moe = job.model.moe
    return "E·C" if moe is not None and moe.padded else "T·k"


def moe_passes(job: Plannable, stage: int) -> tuple[int, int]:
    """(forward, backward) runs of the MoE layers of `stage` per step (its multi-token
    prediction modules' included, `Plannable.run_layers`): L_moe·m each, and the
    forward again inside backward under full recompute and under selective recompute of the
    whole MoE block (moe; its other modules repeat no exchange)."""
    forward = job.run_layers(stage)[1] * job.m
    return forward, forward + (forward if moe_block_redone(job) else 0)


def moe_block_redone(job: Plannable) -> bool:
    """Whether a MoE layer's forward, its exchanges included, runs again inside backward: under
    full recompute, or selective recompute of the moe module."""
    return job.training.recompute == "full" or "moe" in job.training.recompute_modules


# --- the dispatcher's group and where it lies ----------------------------------------------
# DeepEP's legacy kernels treat every 8 consecutive ranks of the group as one NVLink domain
# (csrc/kernels/legacy/internode.cu: rdma_rank = rank / NUM_MAX_NVL_PEERS, NUM_MAX_NVL_PEERS 8;
# deepseek-ai/DeepEP dd758ca, v2.1.0).
DEEPEP_DOMAIN_RANKS = 8


@record
class DispatchGroup:
    """The group a MoE layer's dispatcher exchanges tokens over, and how it lies in NVLink
    domains: n members, g in each domain, N = n/g domains.

    The alltoall dispatcher runs over the expert grid's ep groups (Megatron-Core
    MoEAlltoAllTokenDispatcher: ep_group; its ETP gathers are separate ops). The allgather and
    flex dispatchers run over tp_ep, the expert grid's tp × ep groups (MoEAllGatherTokenDispatcher
    and MoEFlexTokenDispatcher: tp_ep_group), which is ep when ETP = 1. g is the group's members
    per block of the fabric's innermost span (`members_per_block`), except under DeepEP, whose
    kernels take 8 consecutive members of a group beyond 8 ranks as a domain (and the whole
    group up to 8); PLC048 refuses a layout where they are not in one domain.
    """

    kind: GroupKind  # EP or TP_EP
    size: int  # n
    per_domain: int  # g
    link: str  # the tier of the whole group
    peers_link: str  # the tier of its ep_peers groups (one member per domain)
    # the tier of its ep_domain groups (g consecutive members): the innermost unless a layout
    # PLC048 refuses (DeepEP's 8 beyond one domain) puts them further out
    domain_link: str = ""

    @property
    def domains(self) -> int:
        """N = n/g: the NVLink domains the group spans."""
        return self.size // self.per_domain

    @property
    def split(self) -> bool:
        """1 < g < n: the group spans several domains with several members in each, so its
        exchange has a network part (over ep_peers) and an NVLink part (over ep_domain)."""
        return 1 < self.per_domain < self.size


def dispatch_axes(job: Plannable) -> tuple[Axis, ...]:
    """The expert grid's axes of the dispatcher's group: (tp, ep) for the allgather and flex
    dispatchers with ETP > 1 (tp_ep_group), (ep,) otherwise."""
    lay = job.layout
    return (Axis.TP, Axis.EP) if lay.dispatcher != "alltoall" and lay.et > 1 else (Axis.EP,)


def domain_members(job: Plannable) -> int:
    """g_real: the dispatcher's group members in one block of the fabric's innermost span."""
    lay = job.layout
    order = tuple(Axis(name) for name in lay.expert_order)
    sizes = {Axis(name): size for name, size in lay.expert_degrees.items()}
    span = job.cluster.fabric.innermost.span
    return members_per_block(span, sizes, axis_strides(order, sizes), dispatch_axes(job))


def dispatch_group(job: Plannable) -> DispatchGroup:
    """The dispatcher's group and its place in the fabric (`DispatchGroup`). The ep_peers
    groups are every g-th member: an axis of N members at stride g·σ, σ the group's own stride
    (its members form one arithmetic progression: a single axis, or tp and ep adjacent in the
    order; otherwise the peers take the group's tier)."""
    # Asked by every expert op and price (about 70 times per analysis) and a pure function of
    # the frozen job: kept on the instance as `group_tier` keeps its tiers.
    found: DispatchGroup | None = job.__dict__.get("_dispatch_group")
    if found is None:
        found = job.__dict__["_dispatch_group"] = _dispatch_group(job)
    return found


def _dispatch_group(job: Plannable) -> DispatchGroup:
    lay = job.layout
    axes = dispatch_axes(job)
    order = tuple(Axis(name) for name in lay.expert_order)
    sizes = {Axis(name): size for name, size in lay.expert_degrees.items()}
    strides = axis_strides(order, sizes)
    n = lay.ep * (lay.et if Axis.TP in axes else 1)
    g = domain_members(job)
    if lay.dispatcher == "deepep":
        g = n if n <= DEEPEP_DOMAIN_RANKS else DEEPEP_DOMAIN_RANKS
    g = max(1, min(g, n))
    link = _grid_tier(job, sizes, strides, axes).name
    step = strides[axes[0]]
    progression = len(axes) == 1 or strides[Axis.EP] == lay.et * strides[Axis.TP]
    peers_link = link
    if progression and 1 < g < n:
        peer = {Axis.EP: n // g}
        peers_link = _grid_tier(job, peer, {Axis.EP: g * step}, (Axis.EP,)).name
    kind = GroupKind.TP_EP if Axis.TP in axes else GroupKind.EP
    domain_link = _domain_tier(job, axes, strides, g, n, link)
    return DispatchGroup(
        kind=kind, size=n, per_domain=g, link=link, peers_link=peers_link, domain_link=domain_link
    )


def _domain_tier(
    job: Plannable, axes: tuple[Axis, ...], strides: Mapping[Axis, int], g: int, n: int, link: str
) -> str:
    """The tier of the ep_domain groups, the dispatcher's group cut into slices of g members in
    rank order (`planc.compile.groups.dispatch_groups`: a group's members vary fastest on its
    axis of the smaller stride): all of that axis's members × g/n_f of the other's, or g of
    that axis's, on the strides of the expert grid; the whole group's tier where a slice is
    neither."""
    if not 1 < g < n:
        return link
    if axes == (Axis.EP,):
        return _grid_tier(job, {Axis.EP: g}, strides, axes).name
    sizes = {Axis.TP: job.layout.et, Axis.EP: job.layout.ep}
    fast, slow = sorted(axes, key=lambda axis: strides[axis])
    if g % sizes[fast] == 0:
        grid = {fast: sizes[fast], slow: g // sizes[fast]}
        return _grid_tier(job, grid, strides, (fast, slow)).name
    if sizes[fast] % g == 0:
        return _grid_tier(job, {fast: g}, strides, (fast,)).name
    return link


def exchange_ops(
    job: Plannable,
    stage: int,
    group: DispatchGroup,
    phase: str,
    calls: int,
    size: int,
    formula: str,
) -> list[CommOp]:
    """A flat NCCL all-to-all of `size` bytes per rank over the dispatcher's group, as the bytes
    cross the fabric. Within one domain, or with one member per domain, it is one op on the
    group's tier. Otherwise each rank keeps 1/n of its buffer, sends (g − 1)/n to the other
    members of its domain over NVLink and (n − g)/n to the members in other domains over the
    network: an all-to-all of the whole buffer over the N = n/g ep_peers ((N − 1)/N = (n − g)/n
    of it crosses) and one of its 1/N share for the own domain over the g ep_domain members
    ((g − 1)/g of it moves). NCCL sends the cross-domain chunks through the NVLink peer on the
    destination's rail (PXN), which is what an exchange among the peers moves; the network
    part keeps the latency of the flat call, ⌈(n − 1)/8⌉ rounds (`all_to_all_rounds`)."""
    n, g = group.size, group.per_domain
    if not group.split:
        return [op_maker(stage, group.kind, n, group.link)(
            Collective.ALL_TO_ALL, phase, calls, size, formula)]
    domains = group.domains
    return [
        CommOp(
            stage=stage, group=GroupKind.EP_PEERS, op=Collective.ALL_TO_ALL,
            phase=phase + ", the (n − g)/n to other NVLink domains", group_size=domains,
            calls=calls, buffer_bytes=size, link=group.peers_link,
            formula=formula + f"; (N − 1)/N of it to the N = {domains} domains' peers",
            rounds=all_to_all_rounds(n),
        ),
        CommOp(
            stage=stage, group=GroupKind.EP_DOMAIN, op=Collective.ALL_TO_ALL,
            phase=phase + ", the (g − 1)/n within the NVLink domain", group_size=g,
            calls=calls, buffer_bytes=-(-size // domains),
            link=group.domain_link,
            formula=formula + f"; its 1/N for the own domain over its g = {g} members",
        ),
    ]


def _ep_ops(job: Plannable, stage: int) -> list[CommOp]:
    """The expert exchanges of `stage` as `parallelism.expert_dispatcher` runs them."""
    forward, backward = moe_passes(job, stage)
    lay = job.layout
    if forward == 0 or lay.ep * lay.et == 1:
        return []
    if lay.dispatcher == "alltoall":
        return _alltoall_ops(job, stage, forward, backward) + _etp_ops(job, stage)
    if lay.dispatcher == "allgather":
        return _allgather_ops(job, stage, forward, backward)
    return _flex_ops(job, stage, forward, backward)


def _alltoall_ops(job: Plannable, stage: int, forward: int, backward: int) -> list[CommOp]:
    """Megatron-Core's MoEAlltoAllTokenDispatcher: tokens and probabilities out
    (token_dispatch), outputs back (token_combine); each one's gradient takes the opposite
    exchange in backward. And the token counts gathered over tp_ep before them, unless padded
    to capacity (`counts_gathered`)."""
    lay = job.layout
    if lay.ep == 1:
        return []
    group = dispatch_group(job)
    redo = backward - forward  # forward runs again inside backward
    rows = rows_symbol(job)
    ops = exchange_ops(
        job, stage, group,
        "EP all-to-all dispatch of the routed tokens (forward; its gradient in backward)",
        forward + backward, dispatch_bytes(job),
        f"1 per MoE layer per micro-batch each way, {rows} rows of h·β_a (T = b·s/c/t)",
    )
    ops += exchange_ops(
        job, stage, group,
        "EP all-to-all combine of the expert outputs (forward; its gradient in backward)",
        forward + backward, dispatch_bytes(job),
        f"1 per MoE layer per micro-batch each way, {rows} rows of h·β_a",
    )
    ops += exchange_ops(
        job, stage, group,
        "EP all-to-all of the routing probabilities (forward; their gradient in backward)",
        forward + backward, probs_bytes(job),
        f"1 per MoE layer per micro-batch each way, {rows} probabilities of β_a",
    )
    if counts_gathered(job):
        ops.append(
            op_maker(stage, GroupKind.EP, lay.ep, group.link)(
                Collective.ALL_GATHER,
                "EP all-gather of the tokens per expert (dispatch metadata, forward)",
                forward + redo,
                token_count_bytes(job),
                "1 per MoE layer per forward, EP·E token counts of 8 bytes gathered",
            )
        )
    return ops


def _allgather_ops(job: Plannable, stage: int, forward: int, backward: int) -> list[CommOp]:
    """Megatron-Core's MoEAllGatherTokenDispatcher (token_dispatcher.py, megatron-core 0.19.2):
    token_dispatch gathers every rank's routing map ([T, E] booleans), probabilities ([T, E],
    the router's dtype) and hidden states ([T, h]) over tp_ep (n = ETP·EP ranks), each rank
    computes its local experts on the tokens routed to them, and token_combine reduce-scatters
    the [n·T, h] outputs (in the probabilities' dtype) back. In backward the hidden states'
    gather becomes a reduce-scatter of their gradient and the outputs' reduce-scatter a gather;
    the probabilities' gather a reduce-scatter. The routing map carries no gradient."""
    group = dispatch_group(job)
    n, redo = group.size, backward - forward
    moe = job.model.moe
    assert moe is not None
    rows, probs = allgather_rows_bytes(job), allgather_probs_bytes(job)
    op = op_maker(stage, group.kind, n, group.link)
    return [
        op(Collective.ALL_GATHER,
           "allgather dispatcher: all-gather of the tokens over tp_ep (forward; the combine's "
           "gradient in backward)", forward + backward, rows,
           "1 per MoE layer per micro-batch each way, gathered n·T rows of h·β_a (n = ETP·EP)"),
        op(Collective.REDUCE_SCATTER,
           "allgather dispatcher: reduce-scatter of the expert outputs (forward; the dispatch's "
           "gradient in backward)", forward + backward, rows,
           "1 per MoE layer per micro-batch each way, n·T rows of h·β_a before scattering"),
        op(Collective.ALL_GATHER,
           "allgather dispatcher: all-gather of the routing probabilities (forward)",
           forward + redo, probs,
           "1 per MoE layer per forward, gathered n·T rows of E probabilities of β_a"),
        op(Collective.REDUCE_SCATTER,
           "allgather dispatcher: reduce-scatter of the probabilities' gradient (backward)",
           forward, probs,
           "1 per MoE layer per micro-batch, n·T rows of E probabilities before scattering"),
        op(Collective.ALL_GATHER,
           "allgather dispatcher: all-gather of the routing map (forward)",
           forward + redo, n * moe_tokens(job) * moe.E * ROUTING_MAP_BYTES,
           "1 per MoE layer per forward, gathered n·T rows of E booleans"),
    ]


# Bytes of one entry of a routing map (torch.bool).
ROUTING_MAP_BYTES = 1


def allgather_rows_bytes(job: Plannable) -> int:
    """n·T·h·β_a: the allgather dispatcher's gathered hidden states (and scattered outputs) on a
    rank, n = ETP·EP the tp_ep group."""
    return dispatch_group(job).size * moe_tokens(job) * job.model.h * activation_bytes(job)


def allgather_probs_bytes(job: Plannable) -> int:
    """n·T·E·β_a: the allgather dispatcher's gathered routing probabilities ([T, E] per rank,
    the router's dtype: the activations' without --moe-router-dtype)."""
    moe = job.model.moe
    E = 0 if moe is None else moe.E
    return dispatch_group(job).size * moe_tokens(job) * E * activation_bytes(job)


def routing_of(job: Plannable) -> Routing:
    """The router's choice as `planc.comm.dispatch` models it: k of E experts, from k_G of G
    groups under group-limited routing, or round robin (training.expert_routing)."""
    moe = job.model.moe
    assert moe is not None
    if job.training.expert_routing == "round_robin":
        return Routing(moe.E, moe.k, round_robin=True)
    if moe.groups is None or moe.group_k is None:
        return Routing(moe.E, moe.k)
    return Routing(moe.E, moe.k, moe.groups, moe.group_k)


def ranks_reached(job: Plannable) -> Fraction:
    """E[distinct ranks of the dispatcher's group a token reaches]: the EP ranks holding its
    experts (blocks of E/EP, `blocks_reached`), each ETP times over tp_ep."""
    lay = job.layout
    routing = routing_of(job)
    return blocks_reached(routing, routing.experts // lay.ep) * (
        lay.et if dispatch_group(job).kind == GroupKind.TP_EP else 1
    )


def domains_reached(job: Plannable) -> Fraction:
    """E[distinct NVLink domains of the dispatcher's group a token reaches]. The group lists its
    members with the faster of tp and ep first (Megatron's tp_ep_group), so a domain of g
    members holds a block of consecutive EP ranks, P of them, and each block sits in C domains:
    tp faster, P = g/ETP and C = 1 (an expert's ETP ranks side by side), or, when an expert's
    ETP ranks span several domains (g < ETP), C = ETP/g domains per EP rank; ep faster,
    P = min(g, EP) and C = N·P/EP (the ETP copies of a block in different domains). A token
    reaches E[blocks of P·E/EP experts] blocks (`blocks_reached`), each in C domains."""
    group = dispatch_group(job)
    lay, routing = job.layout, routing_of(job)
    g = group.per_domain
    per_rank = routing.experts // lay.ep
    if group.kind != GroupKind.TP_EP:
        return blocks_reached(routing, g * per_rank)
    et = lay.et
    if lay.expert_order.index("ep") < lay.expert_order.index("tp"):  # ep faster
        held = min(g, lay.ep)
        return blocks_reached(routing, held * per_rank) * Fraction(group.domains * held, lay.ep)
    if g >= et:
        return blocks_reached(routing, g // et * per_rank)
    return blocks_reached(routing, per_rank) * Fraction(et, g)


def rows_bytes(tokens: int, reached: Fraction, row: int) -> int:
    """⌈T·E[reached]·row⌉: the bytes of T tokens sent once to each block they reach."""
    return -(-(tokens * reached.numerator * row) // reached.denominator)


def flex_rows(job: Plannable) -> tuple[int, int]:
    """(dispatch, combine) bytes of one token row under the flex dispatcher's backend:
    DeepEP's records with the token's k indices and weights (k = ETP·top_k over tp_ep, as
    MoEFlexTokenDispatcher passes them), or HybridEP's with the destination domain's float32
    probabilities; the hidden state h·β_a in BF16 either way (megatron-core 0.19.2 hands both
    backends the BF16 hidden states; HybridEP's FP8 dispatch is refused in
    fused_a2a.init_hybrid_ep_buffer)."""
    lay, moe = job.layout, job.model.moe
    assert moe is not None
    group = dispatch_group(job)
    et = lay.et if group.kind == GroupKind.TP_EP else 1
    hidden = job.model.h * activation_bytes(job)
    if lay.dispatcher == "deepep":
        k = et * moe.k
        return deepep_dispatch_row_bytes(hidden, k), deepep_combine_row_bytes(hidden, k)
    domain_experts = et * moe.E // group.domains
    return hybridep_dispatch_row_bytes(hidden, domain_experts), hybridep_combine_row_bytes(hidden)


def flex_parts(
    job: Plannable, stage: int, phase: str, calls: int, row: int, kernel: str
) -> list[CommOp]:
    """One flex exchange (a dispatch or a combine) of rows of `row` bytes as it crosses the
    fabric: across NVLink domains, T·E[domains reached] rows over the ep_peers
    (`domains_reached`), and inside them T·E[ranks reached] rows over the ep_domain members
    (`ranks_reached`); a group inside one domain, or with one member per domain, sends
    T·E[ranks reached] rows over itself. The kernels run both parts at once (HybridEP guide §8:
    the RDMA warp group and the NVLink warp groups pipeline; DeepEP's forwarders likewise), so
    an exchange takes the longer of them. `kernel` names the kernel (DeepEP's or HybridEP's
    dispatch or combine) whose measured throughput may bound each part on its link."""
    group = dispatch_group(job)
    T = moe_tokens(job)
    if not group.split:
        ops = [op_maker(stage, group.kind, group.size, group.link)(
            Collective.ALL_TO_ALL, phase, calls, rows_bytes(T, ranks_reached(job), row),
            f"1 per MoE layer per micro-batch each way, T·E[ranks reached] rows of {row} "
            "bytes, one per destination rank")]
    else:
        domains, g = group.domains, group.per_domain
        ops = [
            op_maker(stage, GroupKind.EP_PEERS, domains, group.peers_link)(
                Collective.ALL_TO_ALL, phase + ", across NVLink domains", calls,
                rows_bytes(T, domains_reached(job), row),
                f"1 per MoE layer per micro-batch each way, T·E[domains reached] rows of {row} "
                f"bytes, one per destination domain, over the N = {domains} domains' peers"),
            op_maker(stage, GroupKind.EP_DOMAIN, g, group.domain_link)(
                Collective.ALL_TO_ALL, phase + ", forwarded within the NVLink domain", calls,
                rows_bytes(T, ranks_reached(job), row),
                f"1 per MoE layer per micro-batch each way, T·E[ranks reached] rows of {row} "
                f"bytes, one per destination rank, over the domain's g = {g} members"),
        ]
    return [replace(op, kernel=kernel) for op in ops]


def routing_map_gather(job: Plannable, stage: int, calls: int) -> list[CommOp]:
    """HybridEP's metadata: before each dispatch across NVLink domains it all-gathers the
    group's routing maps, n·T rows of ETP·E booleans, over NCCL (executor.cu
    allgather_routing_map: 'At inter-node case, we will use NCCL allgather'). None for DeepEP
    (its notify_dispatch exchanges per-rank and per-expert counts only, not counted) or within
    one domain (HybridEP's own intra-node gather)."""
    group = dispatch_group(job)
    moe = job.model.moe
    if job.layout.dispatcher != "hybridep" or group.domains == 1 or moe is None:
        return []
    et = job.layout.et if group.kind == GroupKind.TP_EP else 1
    return [op_maker(stage, group.kind, group.size, group.link)(
        Collective.ALL_GATHER, "HybridEP all-gather of the routing maps (forward)", calls,
        group.size * moe_tokens(job) * et * moe.E * ROUTING_MAP_BYTES,
        "1 per MoE layer per forward, gathered n·T rows of ETP·E booleans")]


def _flex_ops(job: Plannable, stage: int, forward: int, backward: int) -> list[CommOp]:
    """Megatron-Core's MoEFlexTokenDispatcher with the DeepEP or HybridEP backend
    (token_dispatcher.py _DeepepManager, _HybridEPManager; fused_a2a.py, megatron-core 0.19.2):
    per MoE layer per micro-batch a token goes once to each NVLink domain and once to each rank
    holding one of its experts (`flex_parts`, with planc.comm.dispatch's routing model); the
    combine returns the same rows, reduced in the domain before they cross (HybridEP guide
    §8.2; DeepEP's combine mirrors its dispatch). In backward each runs the other way
    (fused_a2a FusedDispatch.backward is a combine, FusedCombine.backward a dispatch). HybridEP
    gathers the routing maps first (`routing_map_gather`)."""
    dispatch_row, combine_row = flex_rows(job)
    backend = job.layout.dispatcher
    name = "DeepEP" if backend == "deepep" else "HybridEP"
    calls = forward + backward
    ops = flex_parts(job, stage, f"EP {name} dispatch of the routed tokens (forward; the "
                     "combine's gradient in backward)", calls, dispatch_row, f"{backend}_dispatch")
    ops += flex_parts(job, stage, f"EP {name} combine of the expert outputs (forward; the "
                      "dispatch's gradient in backward)", calls, combine_row, f"{backend}_combine")
    redo = backward - forward  # forward runs again inside backward
    return ops + routing_map_gather(job, stage, forward + redo)


def _etp_ops(job: Plannable, stage: int) -> list[CommOp]:
    """Expert tensor parallelism: the dispatched rows all-gathered over the ETP group before the
    experts and their outputs reduce-scattered after (dispatch_postprocess, combine_preprocess),
    probabilities gathered too; backward swaps each for the other."""
    lay = job.layout
    forward, backward = moe_passes(job, stage)
    if lay.et == 1 or forward == 0:
        return []
    link = expert_link(job, Axis.TP)
    redo = backward - forward
    rows, h, beta = lay.et * dispatch_rows(job), job.model.h, activation_bytes(job)
    words = "ETP·" + rows_symbol(job)

    op = op_maker(stage, GroupKind.ETP, lay.et, link)

    return [
        op(
            Collective.ALL_GATHER,
            "ETP all-gather of the dispatched tokens (forward; the combine's gradient in backward)",
            forward + backward,
            rows * h * beta,
            f"1 per MoE layer per micro-batch each way, gathered {words} rows of h·β_a",
        ),
        op(
            Collective.REDUCE_SCATTER,
            "ETP reduce-scatter of the expert outputs (forward; the dispatch's gradient in backward)",
            forward + backward,
            rows * h * beta,
            f"1 per MoE layer per micro-batch each way, {words} rows of h·β_a before scattering",
        ),
        op(
            Collective.ALL_GATHER,
            "ETP all-gather of the routing probabilities (forward)",
            forward + redo,
            rows * beta,
            f"1 per MoE layer per forward, gathered {words} probabilities of β_a",
        ),
        op(
            Collective.REDUCE_SCATTER,
            "ETP reduce-scatter of the probabilities' gradient (backward)",
            forward,
            rows * beta,
            f"1 per MoE layer per micro-batch, {words} probabilities of β_a before scattering",
        ),
    ]


def _edp_ops(job: Plannable, stage: int, params: int, quantized: int = 0) -> list[CommOp]:
    """The routed experts' gradients, reduced over the expert data-parallel group in their own
    buckets (Megatron DDP `expert_parallel_buffers` over intra_expt_dp_group, the same bucket
    size as the dense buffers), and with the distributed optimizer the updated expert
    parameters all-gathered over it, as the dense part over dp_cp."""
    lay, m = job.layout, job.m
    if lay.edp == 1 or params == 0:
        return []
    zero = sharding_stage(job)
    g = grad_bytes(job)
    link = expert_link(job, Axis.DP)

    op = op_maker(stage, GroupKind.EDP, lay.edp, link)

    ops: list[CommOp] = []
    for calls, elements in _buckets(params, job.gradient_bucket_elements):
        if zero == 0 or layer_wise_all_reduce(job):
            ops.append(
                op(
                    Collective.ALL_REDUCE,
                    "EDP expert gradient all-reduce (bucketed, overlapped with backward)",
                    calls,
                    elements * g,
                    "Ψ_expert gradients once per step",
                )
            )
            if zero == 1:
                ops.append(
                    op(
                        Collective.ALL_GATHER,
                        "EDP Muon layer-wise expert parameter all-gather after the optimizer step",
                        calls,
                        gathered_parameter_bytes(job, elements, params, quantized),
                        f"Ψ_expert {_gather_words(job)} once per step (whole tensors per rank)",
                    )
                )
            continue
        per_step = m if zero >= 2 else 1
        ops.append(
            op(
                Collective.REDUCE_SCATTER,
                "EDP expert gradient reduce-scatter",
                calls * per_step,
                elements * g,
                "Ψ_expert gradients " + ("per micro-batch" if zero >= 2 else "once per step"),
            )
        )
        ops.append(
            op(
                Collective.ALL_GATHER,
                "EDP expert parameter all-gather"
                + (", forward and backward" if zero == 3 else " after the optimizer step"),
                calls * (2 * m if zero == 3 else 1),
                gathered_parameter_bytes(job, elements, params, quantized),
                f"Ψ_expert {_gather_words(job)} "
                + ("twice per micro-batch" if zero == 3 else "once per step"),
            )
        )
    return ops


def cp_core_redone(job: Plannable) -> bool:
    """Whether the context-parallel exchange of the attention's forward runs again inside
    backward: it lives inside the attention core (Transformer Engine's
    `attn_forward_func_with_cp`, under Megatron's core-attention checkpoint; torch's ring
    attention inside SDPA), so whatever recomputes the core repeats it: full recompute, or
    selective recompute of core_attn under Megatron's layers (megatron, deepspeed). torchtitan's
    selective policies save the attention's outputs and run it once."""
    tr = job.training
    if tr.recompute == "full":
        return True
    return tr.framework != "fsdp2" and "core_attn" in tr.recompute_modules


def _cp_ops(job: Plannable, stage: int, layers: int) -> list[CommOp]:
    """The context-parallel exchange of `stage` by parallelism.cp_comm_type (planc.comm.context
    has each type's terms and sources); a recomputed attention core exchanges its forward's
    again (`cp_core_redone`)."""
    lay, m = job.layout, job.m
    if lay.c == 1:
        return []
    dims, beta = job.dims, activation_bytes(job)
    link = link_class(job, (Axis.CP,))
    kind = lay.cp_comm
    redo = cp_core_redone(job)
    again = " (+1 forward again where the attention core is recomputed)" if redo else ""
    forwards = (2 if redo else 1) * layers * m  # the forward's exchanges per step
    if job.training.framework == "fsdp2":
        return _torch_ring_ops(job, stage, layers, forwards, again)
    if kind == "p2p":
        return _ring_ops(job, stage, layers, lay.c, link)
    if kind == "allgather":
        gathered = context.gathered_kv_bytes(dims, beta, lay.c)
        make = op_maker(stage, GroupKind.CP, lay.c, link)
        what = "c·b·(s/c)·(g/t)·(k + k_v): every rank's K and V"
        return [
            make(
                Collective.ALL_GATHER,
                "CP K/V all-gather (forward, and again in backward)",
                forwards + layers * m,
                gathered,
                what + ", twice per layer per micro-batch" + again,
            ),
            make(
                Collective.REDUCE_SCATTER,
                "CP dK/dV reduce-scatter (backward)",
                layers * m,
                gathered,
                what + "' gradients, once per layer per micro-batch",
            ),
        ]
    inner = lay.c if kind == "a2a" else cp_a2a_size(job)
    make = op_maker(stage, GroupKind.CP, inner, link if kind == "a2a" else _a2a_link(job, inner))
    ops = [
        make(
            Collective.ALL_TO_ALL,
            "CP Ulysses q/k/v all-to-all (forward, dq/dk/dv backward)",
            forwards + layers * m,
            context.qkv_a2a_bytes(dims, beta),
            "b·(s/c)·(n/t·k + g/t·(k + k_v)) per layer, forward and backward" + again,
        ),
        make(
            Collective.ALL_TO_ALL,
            "CP Ulysses output all-to-all (forward, its gradient backward)",
            forwards + layers * m,
            context.output_a2a_bytes(dims, beta),
            "b·(s/c)·(n/t)·k_v per layer, forward and backward" + again,
        ),
    ]
    if kind == "a2a+p2p":
        ops += _ring_ops(job, stage, layers, lay.c // inner, link)
    return ops


def _torch_ring_ops(
    job: Plannable, stage: int, layers: int, forwards: int, again: str
) -> list[CommOp]:
    """torch's ring attention under torchtitan (planc.comm.context): K/V all-gathered
    (allgather) or permuted c − 1 times (p2p) each forward and again in backward, and the fp32
    dK/dV permuted c times in backward."""
    lay, m = job.layout, job.m
    dims, c = job.dims, lay.c
    make = op_maker(stage, GroupKind.CP, c, link_class(job, (Axis.CP,)))
    block = context.kv_block_bytes(dims, activation_bytes(job))
    if lay.cp_comm == "allgather":
        kv = make(
            Collective.ALL_GATHER,
            "CP K/V all-gather, torch's ring attention (forward, and again in backward)",
            forwards + layers * m,
            c * block,
            "c·b·(s/c)·(g/t)·(k + k_v)·β_a, once per layer per micro-batch and pass" + again,
        )
    else:
        kv = make(
            Collective.SEND_RECV,
            "CP K/V permute to the next rank, torch's ring attention (forward, and again in "
            "backward)",
            (c - 1) * (forwards + layers * m),
            block,
            "c − 1 per layer per micro-batch and pass, b·(s/c)·(g/t)·(k + k_v)·β_a" + again,
        )
    dkv = make(
        Collective.SEND_RECV,
        "CP dK/dV permute to the next rank in fp32, torch's ring attention (backward)",
        c * layers * m,
        context.fp32_kv_block_bytes(dims),
        "c per layer per micro-batch, b·(s/c)·(g/t)·(k + k_v)·4 (fp32 accumulators)",
    )
    return [kv, dkv]


def cp_a2a_size(job: Plannable) -> int:
    """a2a+p2p's inner all-to-all size (`planc.comm.context.a2a_sub_group`)."""
    dims = job.dims
    span = job.cluster.fabric.innermost.span
    return context.a2a_sub_group(job.layout.c, job.layout.t, span, dims.n, dims.g)


def _a2a_link(job: Plannable, inner: int) -> str:
    """The tier of a2a+p2p's inner groups: the NVLink domain when the order places cp right
    after tp and a·t ranks fit it, else the CP group's."""
    order = job.layout.order
    fabric = job.cluster.fabric
    if order[:2] == ("tp", "cp") and inner * job.layout.t <= fabric.innermost.span:
        return fabric.innermost.name
    return link_class(job, (Axis.CP,))


def fp8_ring_attention(job: Plannable) -> AttentionQuant | None:
    """The FP8 attention formats Megatron's ring runs under (TE's AttnFuncWithCPAndKVP2P with
    fp8: K/V in the recipe's bytes, dK/dV in one all-to-all; planc.comm.context); None where
    the attention is 16-bit or the framework is not Megatron's."""
    q = job.numerics.quantized
    if q is None or job.training.framework != "megatron":
        return None
    return q.attention


def fp8_ring(job: Plannable) -> bool:
    """Whether Megatron's ring runs under FP8 attention (`fp8_ring_attention`)."""
    return fp8_ring_attention(job) is not None


def _ring_ops(job: Plannable, stage: int, layers: int, ring: int, link: str) -> list[CommOp]:
    """Megatron's ring attention over `ring` ranks: the K/V exchange, and under FP8 attention
    its dK/dV all-to-all (`fp8_ring_attention`)."""
    a = fp8_ring_attention(job)
    if a is None:
        return [_ring_op(job, stage, layers, ring, link)]
    kv_bytes = context.fp8_kv_bytes(a.scale_block > 0, activation_bytes(job))
    passes = context.ring_passes(cp_core_redone(job), fp8=True)
    make = op_maker(stage, GroupKind.CP, ring, link)
    kv = make(
        Collective.SEND_RECV,
        "CP ring-attention K/V exchange under FP8 attention (forward, and K/V backward)",
        passes * context.ring_steps_per_layer(ring) * layers * job.m,
        context.kv_block_bytes(job.dims, kv_bytes),
        f"(c−1) ring steps per layer per micro-batch forward (again where the attention core is "
        f"recomputed) and backward; K and V of b·(s/c)·(g/t)·k each at {kv_bytes} byte(s) per "
        "element (FP8 data, or 16 bits under MXFP8)",
    )
    dkv = make(
        Collective.ALL_TO_ALL,
        "CP dK/dV all-to-all in FP8 after the backward's last ring step",
        layers * job.m,
        context.fp8_dkv_a2a_bytes(job.dims, ring),
        "one per layer per micro-batch, c·b·(s/c)·(g/t)·(k + k_v) bytes (FP8)",
    )
    return [kv, dkv]


def _ring_op(job: Plannable, stage: int, layers: int, ring: int, link: str) -> CommOp:
    dims = job.dims
    # K of k channels and V of k, or under latent attention the up-projected K of d_h + d_h^R
    # and V of v_head_dim channels for each of the n heads (Megatron-Core MLA runs the ring
    # over the expanded heads).
    size = context.kv_block_bytes(dims, activation_bytes(job))
    passes = context.ring_passes(cp_core_redone(job))
    return CommOp(
        stage=stage,
        group=GroupKind.CP,
        op=Collective.SEND_RECV,
        phase="CP ring-attention K/V exchange (forward, and K/V + dK/dV backward)",
        group_size=ring,
        calls=passes * context.ring_steps_per_layer(ring) * layers * job.m,
        buffer_bytes=size,
        link=link,
        formula="(c−1) ring steps per layer per micro-batch forward (again where the attention "
        "core is recomputed), 2× backward; K and V of b·(s/c)·(g/t)·k each (k + v_head_dim "
        "under latent attention)",
    )


def _embedding_ops(job: Plannable, stage: int) -> list[CommOp]:
    lay = job.layout
    if not job.embedding_copy or stage not in (0, lay.p - 1):
        return []
    what = "tied embedding" if job.model.tied else "word embedding (the MTP modules' copy)"
    size = job.dims.vocab * job.model.h * grad_bytes(job)
    return [
        CommOp(
            stage=stage,
            group=GroupKind.EMBEDDING,
            op=Collective.ALL_REDUCE,
            phase=f"{what} gradient all-reduce (first and last stage)",
            group_size=2,
            calls=1,
            buffer_bytes=size,
            # the pair of the first and last stages: the pipeline's wrap boundary
            link=boundary_tiers(job)[-1].name,
            formula="V'/t·h gradients once per step",
        )
    ]


def schedule(
    job: Plannable,
    params_by_stage: Sequence[int],
    experts_by_stage: Sequence[int] = (),
    quantized_by_stage: Sequence[tuple[int, int]] = (),
) -> tuple[CommOp, ...]:
    """Every communication op of one step, for a rank of each pipeline stage.

    `params_by_stage[r]` is Ψ_dense of one rank of stage r (after TP sharding), what the
    data-parallel group reduces; `experts_by_stage[r]` its Ψ_expert, what the expert
    data-parallel group reduces (`planc.memory.params.RankParameters`; empty: no experts);
    `quantized_by_stage[r]` the quantized GEMM weights of each, (Ψ_q,dense, Ψ_q,expert), under
    an FP8/FP4 recipe (`planc.memory.fp8.quantized_share`; empty: none).
    """
    ops: list[CommOp] = []
    for stage in range(job.layout.p):
        ops += stage_ops(
            job,
            stage,
            params_by_stage[stage],
            experts_by_stage[stage] if experts_by_stage else 0,
            quantized_by_stage[stage] if quantized_by_stage else (0, 0),
        )
    return tuple(ops)


def stage_ops(
    job: Plannable, stage: int, params: int, experts: int = 0, quantized: tuple[int, int] = (0, 0)
) -> list[CommOp]:
    """Every communication op of one step of a rank of pipeline stage `stage`, in schedule
    order: `params` its Ψ_dense, `experts` its Ψ_expert and `quantized` its (Ψ_q,dense,
    Ψ_q,expert) (`schedule`), each kind of `OP_KINDS` in turn. Reads the stage only as
    `planc.stages.stage_key` says."""
    return [op for _, kind in OP_KINDS for op in kind(job, stage, params, experts, quantized)]


#: One kind of op of a stage (`OP_KINDS`): (job, stage, Ψ_dense, Ψ_expert, (Ψ_q,dense,
#: Ψ_q,expert)) → its ops.
OpKind = Callable[[Plannable, int, int, int, tuple[int, int]], list[CommOp]]


def _tp_kind(
    job: Plannable, stage: int, params: int, experts: int, q: tuple[int, int]
) -> list[CommOp]:
    return _tp_ops(job, stage)


def _cp_kind(
    job: Plannable, stage: int, params: int, experts: int, q: tuple[int, int]
) -> list[CommOp]:
    return _cp_ops(job, stage, job.run_layers(stage)[0])


def _ep_kind(
    job: Plannable, stage: int, params: int, experts: int, q: tuple[int, int]
) -> list[CommOp]:
    return _ep_ops(job, stage)


def _pp_kind(
    job: Plannable, stage: int, params: int, experts: int, q: tuple[int, int]
) -> list[CommOp]:
    return _pp_ops(job, stage)


def _dp_kind(
    job: Plannable, stage: int, params: int, experts: int, q: tuple[int, int]
) -> list[CommOp]:
    return _dp_ops(job, stage, params, q[0])


def _edp_kind(
    job: Plannable, stage: int, params: int, experts: int, q: tuple[int, int]
) -> list[CommOp]:
    return _edp_ops(job, stage, experts, q[1])


def _embedding_kind(
    job: Plannable, stage: int, params: int, experts: int, q: tuple[int, int]
) -> list[CommOp]:
    return _embedding_ops(job, stage)


#: The kinds of op a stage runs, in schedule order: tensor, context and expert parallel (with
#: the expert-tensor collectives its dispatcher runs, `_ep_ops`), pipeline sends, data and
#: expert-data parallel, the tied embedding's. A search shares each kind's ops between
#: candidates by the axes that kind reads.
OP_KINDS: tuple[tuple[str, OpKind], ...] = (
    ("tp", _tp_kind),
    ("cp", _cp_kind),
    ("ep", _ep_kind),
    ("pp", _pp_kind),
    ("dp", _dp_kind),
    ("edp", _edp_kind),
    ("embedding", _embedding_kind),
)


#: (job, stage, Ψ_dense, Ψ_expert, (Ψ_q,dense, Ψ_q,expert)) → the stage's ops (`stage_ops`; a
#: search passes one that reuses them across candidates).
StageOps = Callable[[Plannable, int, int, int, tuple[int, int]], Sequence[CommOp]]


@record
class StagedSchedule:
    """The communication schedule of one step by stage class (`planc.stages`): `by_class[k]`
    the ops of class k's first stage (`stage_ops`). Every stage of a class runs its class's ops;
    they differ only in the stage they carry."""

    classes: StageClasses
    by_class: tuple[tuple[CommOp, ...], ...]

    @property
    def first_ops(self) -> tuple[CommOp, ...]:
        """The ops of each class's first stage, in stage order: what a question about every op
        that is not a count (is there one of a kind, which comes first, which is largest) needs
        of the whole schedule."""
        return tuple(op for ops in self.by_class for op in ops)

    def stage_ops(self, stage: int) -> tuple[CommOp, ...]:
        """The ops of pipeline rank `stage`: its class's, carrying `stage`."""
        k = self.classes.of[stage]
        ops = self.by_class[k]
        if self.classes.first[k] == stage:
            return ops
        return tuple(replace(op, stage=stage) for op in ops)

    @property
    def ops(self) -> tuple[CommOp, ...]:
        """Every op of every stage, in stage order (`schedule`'s tuple); built on first use."""
        cached: tuple[CommOp, ...] | None = self.__dict__.get("_ops")
        if cached is None:
            p = len(self.classes.of)
            cached = tuple(op for stage in range(p) for op in self.stage_ops(stage))
            self.__dict__["_ops"] = cached
        return cached


def staged_schedule(
    job: Plannable,
    classes: StageClasses,
    params_by_class: Sequence[int],
    experts_by_class: Sequence[int] = (),
    quantized_by_class: Sequence[tuple[int, int]] = (),
    ops_of: StageOps = stage_ops,
) -> StagedSchedule:
    """`schedule` by stage class: each class's ops computed once, on its first stage, from the
    class's Ψ_dense, Ψ_expert and quantized weights (`params_by_class[k]`, ...)."""
    return StagedSchedule(
        classes,
        tuple(
            tuple(
                ops_of(
                    job,
                    stage,
                    params_by_class[k],
                    experts_by_class[k] if experts_by_class else 0,
                    quantized_by_class[k] if quantized_by_class else (0, 0),
                )
            )
            for k, stage in enumerate(classes.first)
        ),
    )


def op_record(op: CommOp, seconds: float) -> dict[str, object]:
    """One op as plain data (plan.json and `planc explain --format json`); `seconds` is its
    time per step from the analysis (`planc.analysis.Analysis.op_seconds`)."""
    record: dict[str, object] = {
        "stage": op.stage,
        "group": op.group.value,
        "op": op.op.value,
        "phase": op.phase,
        "group_size": op.group_size,
        "calls": op.calls,
        "buffer_bytes": op.buffer_bytes,
        "bytes_sent_per_call": op.bytes_sent,
        "link": op.link,
        # Rounded so the plan's bytes do not depend on the last bits of a float division.
        "time_s": round(seconds, 9),
    }
    if op.direction is not None:
        record["direction"] = op.direction.value
    if op.kernel is not None:
        record["kernel"] = op.kernel
    return record


@record
class Wire:
    """Bytes one rank sends and receives per step on one tier."""

    sent: int
    received: int


@record
class WireBudget:
    """Bytes one rank of a stage sends and receives per step on each tier of the fabric:
    `tiers` maps every tier's name, innermost first, to its `Wire` (zero when unused)."""

    stage: int
    tiers: Mapping[str, Wire]

    def on(self, tier: str) -> Wire:
        """The bytes on tier `tier` (zero on a tier the budget does not list)."""
        return self.tiers.get(tier, Wire(0, 0))


def wire_budget(job: Plannable, ops: Sequence[CommOp]) -> tuple[WireBudget, ...]:
    """Per-stage wire bytes. Ring collectives receive what they send; p2p receives mirror the
    neighbour's sends (forward activations from the previous stage, gradients from the next;
    in the V placement from both neighbours, as many as the rank sends)."""
    p, names = job.layout.p, job.cluster.fabric.names
    # In the V placement rank r sends each direction to both neighbours (chunk 0 on, chunk 1
    # back) and receives from both as many: what it receives equals what it sends.
    mirrored = definition(job.layout.schedule).placement is ChunkPlacement.V
    sent = [dict.fromkeys(names, 0) for _ in range(p)]
    received = [dict.fromkeys(names, 0) for _ in range(p)]
    for op in ops:
        total = op.step_bytes
        sent[op.stage][op.link] += total
        to = (
            op.stage
            if op.direction is None or mirrored
            else _receiver_of(op.stage, op.direction, p)
        )
        received[to][op.link] += total
    return tuple(
        WireBudget(
            stage,
            MappingProxyType(
                {name: Wire(sent[stage][name], received[stage][name]) for name in names}
            ),
        )
        for stage in range(p)
    )


Tally = dict[str, int]  # bytes per step by tier name


def _class_tallies(
    job: Plannable, staged: StagedSchedule
) -> tuple[list[Tally], list[Tally], list[Tally], list[Tally]]:
    """Per stage class and tier: the bytes its ops send, those its own ops receive, those it
    sends forward and those it sends backward (`wire_budget`'s sums)."""
    names = job.cluster.fabric.names
    mirrored = definition(job.layout.schedule).placement is ChunkPlacement.V
    sent: list[Tally] = []
    own: list[Tally] = []
    forward: list[Tally] = []
    backward: list[Tally] = []
    for ops in staged.by_class:
        for tally in (sent, own, forward, backward):
            tally.append(dict.fromkeys(names, 0))
        for op in ops:
            total = op.step_bytes
            sent[-1][op.link] += total
            if op.direction is None or mirrored:
                own[-1][op.link] += total
            elif op.direction is Direction.FORWARD:
                forward[-1][op.link] += total
            else:
                backward[-1][op.link] += total
    return sent, own, forward, backward


def _neighbours(staged: StagedSchedule) -> list[tuple[int, int, int]]:
    """Each stage's (class, the class of the stage before it, of the stage after it): what its
    wire bytes are a function of (`staged_wires`)."""
    of = staged.classes.of
    p = len(of)
    return [(of[stage], of[(stage - 1) % p], of[(stage + 1) % p]) for stage in range(p)]


def staged_wires(job: Plannable, staged: StagedSchedule) -> tuple[WireBudget, ...]:
    """`wire_budget` of the staged schedule without listing every stage's ops: a stage sends
    its class's bytes, and receives what its class's own ops receive plus the forward sends of
    the stage before it and the backward sends of the stage after it (`_receiver_of`), so
    stages whose class and neighbours' classes agree share one budget."""
    names = job.cluster.fabric.names
    sent, own, forward, backward = _class_tallies(job, staged)
    shared: dict[tuple[int, int, int], Mapping[str, Wire]] = {}
    out = []
    for stage, key in enumerate(_neighbours(staged)):
        tiers = shared.get(key)
        if tiers is None:
            k, before, after = key
            tiers = shared[key] = MappingProxyType(
                {
                    name: Wire(
                        sent[k][name],
                        own[k][name] + forward[before][name] + backward[after][name],
                    )
                    for name in names
                }
            )
        out.append(WireBudget(stage, tiers))
    return tuple(out)


def most_wire_bytes(job: Plannable, staged: StagedSchedule) -> int:
    """The most bytes any stage's rank sends or receives per step on one tier: the largest
    `Wire.sent` or `Wire.received` of `staged_wires`, without listing every stage's."""
    sent, own, forward, backward = _class_tallies(job, staged)
    most = 0
    for k, before, after in set(_neighbours(staged)):
        for name, bytes_sent in sent[k].items():
            received = own[k][name] + forward[before][name] + backward[after][name]
            most = max(most, bytes_sent, received)
    return most


def class_sent_bytes(staged: StagedSchedule) -> tuple[int, ...]:
    """The bytes each stage class's rank sends per step over all tiers (Σ `CommOp.step_bytes`
    of its ops)."""
    return tuple(sum(op.step_bytes for op in ops) for ops in staged.by_class)


#: a staged schedule → `class_sent_bytes` of it (a search passes one that sums each kind of op
#: once for the candidates that share it).
SentBytes = Callable[[StagedSchedule], Sequence[int]]


def wire_bytes_bound(staged: StagedSchedule, sent_of: SentBytes = class_sent_bytes) -> int:
    """An upper bound on `most_wire_bytes` without the tiers: 3 × the most bytes any stage class
    sends per step over all tiers (`class_sent_bytes`, or `sent_of` that gives the same). A
    stage sends at most its class's total on one tier, and receives at most its own class's,
    the forward sends of the stage before it and the backward sends of the stage after it
    (`staged_wires`), each at most the largest class total."""
    return 3 * max(sent_of(staged), default=0)


def _receiver_of(stage: int, direction: Direction, p: int) -> int:
    """The stage a send of `stage` in `direction` arrives at (interleaved chunks wrap around)."""
    return (stage + 1) % p if direction is Direction.FORWARD else (stage - 1) % p
