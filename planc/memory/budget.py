"""The per-rank memory budget: every term of every pipeline stage's heaviest rank.

`rank_memory(job, r, i)` budgets one rank: pipeline rank r, index i in its ZeRO shard group.
`budget(job)` budgets the heaviest rank of every stage (tensor, context and data coordinates 0:
the low ranks hold the ⌈⌉ shares) and names the peak.
"""

from __future__ import annotations

from dataclasses import dataclass

from planc.memory.activations import stage_activation_terms
from planc.memory.params import (
    SOURCE_PARAMS,
    RankParameters,
    layer_formula,
    padded_vocab,
    parameter_count,
    rank_parameters,
)
from planc.memory.static import Group, StateBytes, state_bytes, static_terms
from planc.memory.terms import COMPONENTS, Term
from planc.plannable import Plannable
from planc.vocab import Axis

# ZeRO-3 keeps the unit being computed and the one being prefetched gathered: two units.
ZERO3_GATHERED_UNITS = 2

RESERVE_SOURCE = "spec hardware.reserve_gib: CUDA context, NCCL buffers, allocator fragmentation"


@dataclass(frozen=True)
class RankMemory:
    """One rank's bytes by component; `terms` are the lines they add up from."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    buffers: int
    reserve: int
    total: int
    terms: tuple[Term, ...]

    @classmethod
    def of(cls, terms: tuple[Term, ...]) -> RankMemory:
        sums = {name: sum(t.bytes for t in terms if t.component == name) for name in COMPONENTS}
        return cls(**sums, total=sum(sums.values()), terms=terms)


@dataclass(frozen=True)
class StageBudget:
    """A pipeline stage's heaviest rank: its stage, global rank and memory."""

    stage: int
    rank: int
    memory: RankMemory


@dataclass(frozen=True)
class MemoryBudget:
    parameters: int
    parameters_padded: int
    stages: tuple[StageBudget, ...]
    peak: StageBudget


def stage_rank(job: Plannable, pp_rank: int) -> int:
    """The global rank with coordinates tp = cp = dp = 0 on pipeline rank `pp_rank`:
    pp_rank × the pp stride (Megatron RankGenerator)."""
    return pp_rank * job.layout.strides[Axis.PP]


def _weight_parts(job: Plannable, share: RankParameters) -> tuple[tuple[str, int, str], ...]:
    model = job.model
    tied_copy = model.tied and job.layout.p > 1
    return (
        ("layer weights", share.layer_total, f"L_r·[{layer_formula(model)}]"),
        ("word embedding weights", share.embedding, "V'·h/t"),
        ("position embedding weights", share.position, "max_seq_len·h"),
        ("final norm weights", share.final_norm, "ν·h"),
        (
            "tied word embedding copy" if tied_copy else "LM head weights",
            share.lm_head,
            "V'·h/t",
        ),
    )


def _parameter_terms(
    job: Plannable, share: RankParameters, state: StateBytes, group: Group
) -> tuple[Term, ...]:
    terms = static_terms(share.total, state, group, _weight_parts(job, share))
    return tuple(
        Term(t.name, t.component, t.bytes, t.formula, f"{t.source}; counts: {SOURCE_PARAMS}")
        if t.component == "weights"
        else t
        for t in terms
    )


def zero3_gather_bytes(job: Plannable, share: RankParameters, state: StateBytes) -> int:
    """w × 2 × the largest unit gathered at once under ZeRO-3: a layer on this TP rank, or the
    embedding / LM head on the end stages (the unit in use and the one prefetched)."""
    first_unit = share.embedding + share.position
    last_unit = share.lm_head + share.final_norm
    largest = max(share.per_layer if share.layers else 0, first_unit, last_unit)
    return ZERO3_GATHERED_UNITS * state.weights * largest


def buffer_terms(
    job: Plannable, share: RankParameters, state: StateBytes, group: Group
) -> tuple[Term, ...]:
    """Transient buffers of the static state.

    Up to ZeRO-1 the gradient buckets are views of the full gradient buffer (Megatron's
    param_and_grad_buffer: main_grad is a view, reduced in place), so they cost nothing extra.
    From ZeRO-2 the gradient buffer is a shard, and each bucket's full gradients exist before its
    reduce-scatter: one bucket, capped at Ψ_r.
    """
    terms: list[Term] = []
    if group.zero >= 2:
        elements = min(job.layout.bucket_elements, share.total)
        terms.append(
            Term(
                f"gradient reduce-scatter bucket ({state.grad_label})",
                "buffers",
                state.gradients * elements,
                f"{state.gradients}·min(max(4·10⁷, 10⁶·d), Ψ_r)",
                "Megatron-LM distributed_data_parallel.py default bucket_size",
            )
        )
    if group.zero >= 3:
        terms.append(
            Term(
                f"ZeRO-3 gathered weights ({state.label})",
                "buffers",
                zero3_gather_bytes(job, share, state),
                f"{state.weights}·2·max(Ψ_ℓ, embedding, head)",
                "seed lesson §7 (ZeRO-3 materialises one layer, double-buffered prefetch)",
            )
        )
    return tuple(terms)


def rank_memory(job: Plannable, pp_rank: int, shard_index: int = 0) -> RankMemory:
    """The budget of one rank: pipeline rank `pp_rank`, index `shard_index` in its ZeRO shard
    group of N = d·c ranks (low indices hold ⌈Ψ_r/N⌉ elements, high ones ⌊Ψ_r/N⌋).

    Every TP rank of a stage is charged as TP rank 0, the heaviest when a split is uneven.
    """
    tr = job.training
    state = state_bytes(tr.precision, tr.optimizer, tr.grad_accum_fp32)
    group = Group(job.layout.zero, job.layout.shard_group, shard_index)
    share = rank_parameters(job, pp_rank)
    activations, transient = stage_activation_terms(job, pp_rank)
    reserve = Term(
        "reserve",
        "reserve",
        job.cluster.reserve_bytes,
        "reserve_gib·2³⁰",
        RESERVE_SOURCE,
    )
    terms = (
        *_parameter_terms(job, share, state, group),
        *activations,
        *buffer_terms(job, share, state, group),
        *transient,
        reserve,
    )
    return RankMemory.of(terms)


def budget(job: Plannable) -> MemoryBudget:
    """Every pipeline stage's heaviest rank, and the peak (the largest total; ties: lowest stage)."""
    stages = tuple(
        StageBudget(stage, stage_rank(job, stage), rank_memory(job, stage))
        for stage in range(job.layout.p)
    )
    peak = max(stages, key=lambda s: (s.memory.total, -s.stage))
    return MemoryBudget(
        parameters=parameter_count(job.model).total,
        parameters_padded=parameter_count(job.model, padded_vocab(job.model.V, job.layout.t)).total,
        stages=stages,
        peak=peak,
    )
