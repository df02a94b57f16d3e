"""The pipeline stages of a plannable job, grouped by what a stage's own terms read of it.

Every per-stage quantity planc computes reads the stage only through its model chunks and its
place at the ends of the pipeline: a rank's parameters (`planc.memory.params.rank_parameters`),
its quantized GEMM weights (`planc.memory.fp8.quantized_share`), its static memory terms, its
communication ops (`planc.comm.schedule.stage_ops`), its compute times
(`planc.perf.inputs.stage_times`) and its step inputs (`planc.perf.inputs.build_inputs`) read
the layers of each chunk, how many of them are MoE layers (`MoE.moe_layers_between`) and how
many an FP8/FP4 recipe keeps in BF16 (`planc.dims.bf16_ranges`) and how many attend through a
sliding window (`Plannable.chunk_window_layers`), and whether the stage is the
first (the embedding, no backward send), the last rank p − 1 (no forward send) or the one that
holds the last virtual stage (the LM head and loss), and the tiers its pipeline sends cross
(`planc.sends`: a group on the network can have most of its boundaries inside one NVLink
domain). Stages alike in all of these (the interior
stages of an even split: p − 2 of p) have the same parameters, ops, static terms and times, so
each is computed once per class, on the class's first stage, and the analysis stays as cheap at
4,096 stages as at 4. What does differ between the stages of a class, the micro-batches each
holds in flight (its activations), its global rank and the stage index its ops carry, is kept
per stage. `tests/test_stages.py` holds every class-wise result equal to the stage-by-stage one.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

from planc.dims import bf16_ranges
from planc.plannable import Plannable
from planc.record import record
from planc.sends import boundary_names

T = TypeVar("T")


@record
class StageClasses:
    """The stage classes of a pipeline of p stages: `of[r]` the class of stage r, `first[k]` the
    first stage of class k (classes are numbered in the order of their first stage, so stage 0
    is in class 0)."""

    of: tuple[int, ...]
    first: tuple[int, ...]

    def expand(self, per_class: Sequence[T]) -> tuple[T, ...]:
        """A per-class sequence as one entry per stage (each stage its class's)."""
        return tuple(per_class[k] for k in self.of)

    def members(self, k: int) -> int:
        """How many stages class k holds."""
        return self.of.count(k)


def stage_key(job: Plannable, stage: int) -> Hashable:
    """What the per-stage terms read of pipeline rank `stage` (this module's docstring): each
    chunk's layers, MoE layers, (dense, MoE) layers kept in BF16 and (dense, MoE) layers
    attending through a sliding window, whether it is the first stage, the last rank and
    the rank holding the LM head, and the tiers of its boundaries to the next and from the
    previous rank."""
    lay, moe = job.layout, job.model.moe
    q = job.numerics.quantized
    kept = 0 if q is None else q.bf16_layers
    chunks = []
    for a, b in lay.chunks[stage]:
        routed = 0 if moe is None else moe.moe_layers_between(a, b)
        bf16 = tuple(
            (hi - lo, 0 if moe is None else moe.moe_layers_between(lo, hi))
            for lo, hi in bf16_ranges(a, b, kept, job.model.L)
        )
        chunks.append((b - a, routed, bf16))
    windowed = job.chunk_window_layers(stage)  # (dense, MoE) sliding-window layers per chunk
    # The tiers its pipeline sends cross: the boundaries to the next rank and from the one before.
    names = boundary_names(job)
    sends = (names[stage], names[stage - 1]) if names else ()
    return (tuple(chunks), stage == 0, stage == lay.p - 1, stage == lay.last_stage, windowed, sends)


def stage_classes(job: Plannable, known: StageClasses | None = None) -> StageClasses:
    """The stage classes of `job` (`stage_key`). Kept on the job instance, as `PlanLayout` keeps
    its degrees: a pure function of the frozen job that the analysis, the memory budget and the
    step inputs each ask for. `known`: the classes a caller has for a job that agrees with
    this one in everything `stage_key` reads (a search's memo), kept instead of computing
    them."""
    cached: StageClasses | None = job.__dict__.get("_stage_classes")
    if cached is None:
        cached = classes_of(job) if known is None else known
        job.__dict__["_stage_classes"] = cached
    return cached


def classes_of(job: Plannable) -> StageClasses:
    """The stage classes of `job`, computed (`stage_classes` keeps them)."""
    found: dict[Hashable, int] = {}
    of: list[int] = []
    first: list[int] = []
    for stage in range(job.layout.p):
        key = stage_key(job, stage)
        k = found.get(key)
        if k is None:
            k = found[key] = len(first)
            first.append(stage)
        of.append(k)
    return StageClasses(tuple(of), tuple(first))
