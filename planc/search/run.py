"""The search loop: judge every candidate, then estimate the feasible ones best bound first.

1. Judge: every candidate goes through the rules (`planc.search.evaluate.judge`), in chunks of
   consecutive indices, on `jobs` processes.
2. Estimate: the feasible candidates are sorted by the judge's lower bound on their step time
   (m × the busiest stage's compute per micro-batch, which the pipeline must at least run),
   and the first K estimated fill the top. Then those whose bound is not above the K-th best
   get a tighter bound, the pipeline's own inputs' (exposed communication and the optimizer
   included, `planc.perf.step.step_lower_bound_s`), a block at a time, and are estimated in
   the order of that bound until the next is above the K-th best: no remaining candidate can
   enter the top K. At a large global batch the pipeline runs thousands of micro-batches and
   the bubble is a fraction of a percent, so the tighter bound is within it of the estimate
   and few are simulated.

The results depend on neither `jobs` nor the chunk sizes: the top K is exact, ties are broken by
peak memory and then by the candidate's place in the space, and the rounds (so the number of
estimates too) are the same for any `jobs`.
"""

from __future__ import annotations

import dataclasses
import gc
import heapq
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from contextlib import AbstractContextManager, contextmanager
from types import MappingProxyType
from typing import Any, TypeVar

from planc.search import workers
from planc.search.evaluate import (
    Metrics,
    Setup,
    Verdict,
    bound_all,
    hosts_refusal,
    judge,
    judge_range,
    make_judge,
    price_all,
    spec_job,
)
from planc.search.rank import (
    Ranked,
    SearchResult,
    best,
    last_place,
    nearest_rejected,
    rejections,
)

T = TypeVar("T")
Tick = Callable[[int], None]

# Candidates per judging task: at least JUDGE_CHUNK, at most JUDGE_CHUNK_MAX, and enough tasks
# for TASKS_PER_JOB per process so that the processes finish together. A task's judge shares
# sub-results between its candidates (`planc.search.evaluate.shared_analysis`), so a longer task
# recomputes less: on the 70B large-batch space 4,096 candidates a task judge in 0.32 ms each
# where 512 take 0.46 ms; beyond that the memo's growth costs more than it saves.
JUDGE_CHUNK = 512
JUDGE_CHUNK_MAX = 4096
TASKS_PER_JOB = 8
# Feasible candidates per estimating round, and at least per estimating task: a round is cut
# into one task per process, each task's judge sharing sub-results between its candidates
# (tasks of 4 had each candidate's analysis built afresh).
ROUND = 32
PRICE_CHUNK = 4
# Candidates whose tighter bound is computed at a time, in one task per process.
BOUND_BLOCK = 1024
# Rounding: an estimate this close under its bound still counts as above it.
BOUND_SLACK = 1 - 1e-9
# Allocations between two young-generation collections while searching (Python's default: 700).
GC_YOUNG = 100_000


@contextmanager
def _fewer_collections() -> Iterator[None]:
    """Python's cyclic garbage collector run less often while searching, then as before.

    A search allocates millions of small objects that are not garbage (verdicts, the judges'
    shared sub-results) and keeps them to its end, so every young collection promotes them and
    the older generations are rescanned again and again as the heap grows: at the default
    threshold this was about a fifth of a large search's time in one process (the 70B
    large-batch space: 53 s, 43 s at GC_YOUNG, results identical). The workers are forked
    inside, so they inherit the setting."""
    young, *older = gc.get_threshold()
    gc.set_threshold(max(young, GC_YOUNG), *older)
    try:
        yield
    finally:
        gc.set_threshold(young, *older)


@contextmanager
def _pool(jobs: int) -> Iterator[Executor | None]:
    if jobs <= 1:
        yield None
        return
    with workers.pool(jobs) as pool:
        yield pool


def _map(
    pool: Executor | None,
    work: Callable[..., T],
    tasks: Sequence[tuple[Any, ...]],
    weights: Sequence[int],
    tick: Tick,
) -> list[T]:
    """`work(*task)` for every task, in this process or on the pool; results in task order."""
    if pool is None:
        out = []
        for task, weight in zip(tasks, weights, strict=True):
            out.append(work(*task))
            tick(weight)
        return out
    futures = [pool.submit(work, *task) for task in tasks]
    results = []
    for future, weight in zip(futures, weights, strict=True):
        results.append(future.result())
        tick(weight)
    return results


Progress = Callable[[str, int], AbstractContextManager[Tick]]


def _noop(n: int = 1) -> None:
    return None


@contextmanager
def silent(label: str, total: int) -> Iterator[Tick]:
    """No progress report (`planc.outputs.progress.progress` draws one on a terminal)."""
    yield _noop


def search(setup: Setup, top: int, jobs: int = 1, report: Progress = silent) -> SearchResult:
    """Search `setup.space` for the `top` fastest feasible layouts on `jobs` processes."""
    size = setup.space.size
    refused = hosts_refusal(spec_job(setup), setup.rejecting)
    if refused:  # the cluster itself fails: every candidate alike
        counts = MappingProxyType(dict.fromkeys(refused, size))
        return SearchResult(setup.space, size, 0, 0, counts, ())
    # The candidates carry planc's own host names (`base_job`): the spec's list or pattern,
    # checked above, is not sent to every task to be expanded again.
    setup = dataclasses.replace(setup, spec=without_hosts(setup.spec))
    # A space of one judging task gains nothing from workers but their start.
    jobs = min(jobs, -(-size // JUDGE_CHUNK))
    with _fewer_collections(), _pool(jobs) as pool:
        chunk = judge_chunk(size, jobs)
        starts = range(0, size, chunk)
        stops = [min(start + chunk, size) for start in starts]
        tasks = [(setup, start, stop) for start, stop in zip(starts, stops, strict=True)]
        weights = [stop - start for start, stop in zip(starts, stops, strict=True)]
        with report("judging candidates", size) as tick:
            judged = _map(pool, judge_range, tasks, weights, tick)
        verdicts = [v for chunk in judged for v in chunk]
        feasible = sorted(
            (v for v in verdicts if v.feasible), key=lambda v: (v.step_bound_s, v.index)
        )
        with report("estimating step times", len(feasible)) as tick:
            ranked, estimated = _estimate(pool, setup, feasible, top, tick, jobs)
    ranked = warned(setup, ranked)
    nearest = nearest_rejected(setup.space, verdicts, ranked[0].verdict.index) if ranked else None
    return SearchResult(
        space=setup.space,
        evaluated=size,
        feasible=len(feasible),
        estimated=estimated,
        rejected_by_rule=rejections(verdicts),
        results=ranked,
        nearest=nearest or MappingProxyType({}),
    )


def judge_chunk(size: int, jobs: int) -> int:
    """Candidates per judging task of a space of `size` on `jobs` processes. Verdicts are per
    candidate, so the chunk changes no result, only how much a task's judge can share."""
    even = -(-size // (TASKS_PER_JOB * max(jobs, 1)))
    return min(JUDGE_CHUNK_MAX, max(JUDGE_CHUNK, even))


def warned(setup: Setup, ranked: tuple[Ranked, ...]) -> tuple[Ranked, ...]:
    """The listed candidates with their warnings: judging ran only the rules that can reject
    (`judge_range`), so each listed one is judged again with every rule."""
    if not ranked:
        return ranked
    judged = make_judge(setup)
    return tuple(Ranked(judge(judged, r.verdict.index), r.metrics) for r in ranked)


def without_hosts(spec: Mapping[str, Any]) -> dict[str, Any]:
    """`spec` with `hardware.hosts` at its default (planc's node-0 … names)."""
    return {**spec, "hardware": {**spec["hardware"], "hosts": []}}


def _groups(verdicts: list[Verdict], jobs: int) -> list[list[Verdict]]:
    """`verdicts` cut into one task per process (of `jobs`), of PRICE_CHUNK candidates or more."""
    size = max(PRICE_CHUNK, -(-len(verdicts) // max(jobs, 1)))
    return [verdicts[i : i + size] for i in range(0, len(verdicts), size)]


def _estimate(
    pool: Executor | None,
    setup: Setup,
    feasible: list[Verdict],
    top: int,
    tick: Tick,
    jobs: int = 1,
) -> tuple[tuple[Ranked, ...], int]:
    """The top `top` of `feasible` (sorted by the judge's bound), estimating as few as the
    bounds allow, best bound first.

    Rounds of ROUND in the judge's bound order fill the top; its last place is then the cutoff.
    After that the candidates whose judge's bound is not above the cutoff get, BOUND_BLOCK at a
    time in that order, the tighter bound of the inputs their pipeline would run on
    (`bound_all`: the TP, CP and expert exposure of every micro-batch, the DP tail and the
    optimizer, which the judge's leaves out), and are estimated ROUND at a time in the order of
    the better of their two bounds, never one whose bound is above a candidate not yet bounded.
    It stops when no bound left is at or below the top's last place: none of those can enter.

    The work is the same for any `jobs` (which only cuts it into tasks, `_groups`). Should an
    estimate ever come out below either of its bounds (a step model that no longer runs every
    micro-batch of the busiest stage, or an extrapolated pipeline's error), the bounds are not
    trusted and every feasible candidate is estimated.
    """
    work = _Work(pool, setup, tick, jobs)
    ranked: tuple[Ranked, ...] = ()
    trusted, at = True, 0
    seen: set[int] = set()  # the candidates estimated
    bounded: list[tuple[float, int, Verdict]] = []  # a heap of (bound, index, candidate)
    while at < len(feasible) and len(ranked) < top:
        fill = feasible[at : at + min(ROUND, top - len(ranked))]
        batch = [(v, v.step_bound_s) for v in fill]
        ranked, trusted = _merged(ranked, work.priced(batch, counted=True), top, trusted)
        seen.update(v.index for v, _ in batch)
        at += len(batch)
    while trusted:
        cutoff = last_place(ranked, top)
        unseen = feasible[at].step_bound_s if at < len(feasible) else float("inf")
        below = min(cutoff, unseen)
        if bounded and bounded[0][0] <= below:
            batch = []
            while bounded and len(batch) < ROUND and bounded[0][0] <= below:
                bound, _, v = heapq.heappop(bounded)
                batch.append((v, bound))
            ranked, trusted = _merged(ranked, work.priced(batch, counted=False), top, trusted)
            seen.update(v.index for v, _ in batch)
        elif at < len(feasible) and unseen <= cutoff:
            block = [v for v in feasible[at : at + BOUND_BLOCK] if v.step_bound_s <= cutoff]
            at += len(block)
            for v, bound in zip(block, work.bounds(block), strict=True):
                heapq.heappush(bounded, (max(v.step_bound_s, bound), v.index, v))
        else:
            break
    if not trusted:
        rest = [(v, v.step_bound_s) for v in feasible if v.index not in seen]
        ranked = best([*ranked, *(Ranked(v, m) for v, m, _ in work.priced(rest, False))], top)
        seen.update(v.index for v, _ in rest)
    return ranked, len(seen)


# A candidate estimated: its verdict, its estimate and the best lower bound known for it.
Estimate = tuple[Verdict, Metrics, float]


def _merged(
    ranked: tuple[Ranked, ...], estimates: Sequence[Estimate], top: int, trusted: bool
) -> tuple[tuple[Ranked, ...], bool]:
    """The top `top` with `estimates` in, and whether the bounds are still trusted: every
    estimate at or above each of its bounds."""
    still = trusted and all(
        m.step_time_s >= max(v.step_bound_s, bound) * BOUND_SLACK for v, m, bound in estimates
    )
    return best([*ranked, *(Ranked(v, m) for v, m, _ in estimates)], top), still


@dataclasses.dataclass(frozen=True)
class _Work:
    """Where the estimating work runs: the pool (None: this process), the setup every task
    receives, the progress tick and the processes a batch is cut for."""

    pool: Executor | None
    setup: Setup
    tick: Tick
    jobs: int

    def priced(self, batch: Sequence[tuple[Verdict, float]], counted: bool) -> list[Estimate]:
        """Each candidate of `batch` (with its bound) estimated, in one task per process;
        `counted`: the progress counts them (a candidate bounded first was counted then)."""
        metrics = self._spread(price_all, [v for v, _ in batch], counted)
        return [(v, m, bound) for (v, bound), m in zip(batch, metrics, strict=True)]

    def bounds(self, block: list[Verdict]) -> list[float]:
        """`bound_all` of `block`, in one task per process."""
        return self._spread(bound_all, block, True)

    def _spread(
        self,
        work: Callable[[Setup, tuple[int, ...]], tuple[T, ...]],
        verdicts: list[Verdict],
        counted: bool,
    ) -> list[T]:
        """`work` on `verdicts` cut into one task per process (`_groups`), results in order."""
        groups = _groups(verdicts, self.jobs)
        tasks = [(self.setup, tuple(v.index for v in group)) for group in groups]
        weights = [len(group) if counted else 0 for group in groups]
        return [out for part in _map(self.pool, work, tasks, weights, self.tick) for out in part]
