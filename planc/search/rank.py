"""Ranking: feasible candidates by estimated step time (or, with `--objective time-to-train` or
`cost`, the step over its goodput), then peak memory, then layout order.

The layout order is the candidate's index in the space (`Space.candidates`), so the ranking is
total and the same however the work was split.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import field
from types import MappingProxyType

from planc.record import record
from planc.search.evaluate import Metrics, Verdict
from planc.search.space import Space, Value


@record
class Ranked:
    """One feasible candidate with its estimated step."""

    verdict: Verdict
    metrics: Metrics

    @property
    def key(self) -> tuple[float, int, int]:
        return (self.metrics.rank_s, self.verdict.peak_memory_bytes, self.verdict.index)


@record
class SearchResult:
    """The outcome of a search: counts, rejections per rule and the best candidates, best
    first. `estimated` counts the feasible candidates whose step was estimated; the others
    could not reach the top (their lower bound was above the last place)."""

    space: Space
    evaluated: int
    feasible: int
    estimated: int
    rejected_by_rule: Mapping[str, int]
    results: tuple[Ranked, ...]
    # Per rejecting rule, the rejected candidate (its index) with the fewest axis values other
    # than the best layout's, the first in layout order among equals (`nearest_rejected`).
    nearest: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def values(self, ranked: Ranked) -> dict[str, Value]:
        return self.space.named(self.space.candidate(ranked.verdict.index))


def rejections(verdicts: Iterable[Verdict]) -> Mapping[str, int]:
    """Candidates rejected per rule id, in id order; a candidate rejected by several rules
    counts once under each."""
    counts: dict[str, int] = {}
    for verdict in verdicts:
        for rule in verdict.rejected:
            counts[rule] = counts.get(rule, 0) + 1
    return MappingProxyType(dict(sorted(counts.items())))


def best(ranked: Iterable[Ranked], top: int) -> tuple[Ranked, ...]:
    """The `top` best, best first."""
    return tuple(sorted(ranked, key=lambda r: r.key)[:top])


def last_place(ranked: tuple[Ranked, ...], top: int) -> float:
    """What a candidate must beat to enter the top `top` (infinite until it is full): the
    ranked quantity (`Metrics.rank_s`, the step time unless the objective is the run's), never
    below a step time, so a step's lower bound above it rules a candidate out."""
    return ranked[top - 1].metrics.rank_s if len(ranked) >= top else float("inf")


def nearest_rejected(
    space: Space, verdicts: Iterable[Verdict], winner: int
) -> Mapping[str, int]:
    """Per rule that rejects a candidate, the rejected candidate nearest the winner: the fewest
    axes whose value differs from the winner's, the first in layout order among equals. One
    pass over the candidates in order (`verdicts` in index order)."""
    best = space.candidate(winner)
    found: dict[str, tuple[int, int]] = {}
    for values, verdict in zip(space.candidates(), verdicts, strict=True):
        if not verdict.rejected:
            continue
        distance = sum(1 for a, b in zip(values, best, strict=True) if a != b)
        for rule in verdict.rejected:
            if rule not in found or distance < found[rule][0]:
                found[rule] = (distance, verdict.index)
    return MappingProxyType({rule: found[rule][1] for rule in sorted(found)})
