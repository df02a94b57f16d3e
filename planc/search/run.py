"""The search loop: judge every candidate, then estimate the feasible ones best bound first.

1. Judge: every candidate goes through the rules (`planc.search.evaluate.judge`), in chunks of
   consecutive indices, on `jobs` processes.
2. Estimate: the feasible candidates are sorted by a lower bound on their step time (m × the
   busiest stage's compute per micro-batch, which the pipeline must at least run) and estimated
   in that order, a round of `ROUND` at a time. Once the next bound is above the step time of
   the K-th best found, no remaining candidate can enter the top K and the loop stops. Within a
   round, a candidate whose tighter bound (the pipeline's own inputs, exposed communication
   included, `planc.perf.step.step_lower_bound_s`) is above the K-th best is not simulated:
   at a large global batch the pipeline runs thousands of micro-batches and the bubble is a
   fraction of a percent, so that bound is within it of the estimate and few are simulated.

The results depend on neither `jobs` nor the chunk sizes: the top K is exact, ties are broken by
peak memory and then by the candidate's place in the space, and the rounds (so the number of
estimates too) are the same for any `jobs`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from contextlib import AbstractContextManager, contextmanager
from types import MappingProxyType
from typing import Any, TypeVar

from planc.search import workers
from planc.search.evaluate import (
    Setup,
    Verdict,
    hosts_refusal,
    judge,
    judge_range,
    make_judge,
    price_all_below,
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
# Rounding: an estimate this close under its bound still counts as above it.
BOUND_SLACK = 1 - 1e-9


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
    with _pool(jobs) as pool:
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
    """The top `top` of `feasible` (sorted by bound), estimating as few as the bound allows.

    Rounds have a fixed size, so the candidates estimated do not depend on the process count
    (`jobs` only cuts each round into tasks, `_groups`).
    In a round, a candidate whose step's tighter lower bound (`price_below`: the pipeline's own
    inputs, exposed communication included) is above the last place at the round's start is
    not estimated: it cannot enter the top. Should an estimate ever come out below either bound
    (a step model that no longer runs every micro-batch of the busiest stage, or an
    extrapolated pipeline's error), the bounds are not trusted and every candidate is estimated.
    """
    ranked: tuple[Ranked, ...] = ()
    done, estimated, trusted = 0, 0, True
    skipped: list[Verdict] = []  # cut by the tighter bound; estimated after all if it fails
    while done < len(feasible):
        cutoff = last_place(ranked, top) if trusted else float("inf")
        if feasible[done].step_bound_s > cutoff:
            break
        # The first round fills the top (no cutoff yet); the later ones are cut by it.
        batch = feasible[done : done + (min(top, ROUND) if not ranked else ROUND)]
        groups = _groups(batch, jobs)
        tasks = [(setup, tuple(v.index for v in group), cutoff) for group in groups]
        parts = _map(pool, price_all_below, tasks, [len(group) for group in groups], tick)
        priced = [(v, p) for v, p in zip(batch, (p for c in parts for p in c), strict=True)]
        fresh = [Ranked(v, p.metrics) for v, p in priced if p.metrics is not None]
        trusted = trusted and all(
            p.metrics.step_time_s >= max(v.step_bound_s, p.bound_s) * BOUND_SLACK
            for v, p in priced
            if p.metrics is not None
        )
        ranked = best([*ranked, *fresh], top)
        done += len(batch)
        estimated += len(fresh)
        skipped += [v for v, p in priced if p.metrics is None]
    if not trusted and skipped:
        groups = _groups(skipped, jobs)
        tasks = [(setup, tuple(v.index for v in group), float("inf")) for group in groups]
        parts = _map(pool, price_all_below, tasks, [0] * len(groups), tick)
        again = zip(skipped, (p for c in parts for p in c), strict=True)
        late = [Ranked(v, p.metrics) for v, p in again if p.metrics is not None]
        ranked = best([*ranked, *late], top)
        estimated += len(late)
    return ranked, estimated
