"""How many micro-batches of each model chunk a pipeline rank holds at its activation peak.

Closed-form counting over Megatron's schedule order (no op lists are built, so the cost does not
grow with m): the warm-up count is `planc.pipeline.counts.num_warmup`, the one definition; the
steady state is searched only at the steps where the in-flight mix can change slope.
`tests/test_memory_activations.py` holds these counts equal to walking the built schedule
(`planc.pipeline.schedule.held_at_peak`).
"""

from __future__ import annotations

from planc.pipeline.counts import num_warmup


def forwards_of_chunk(K: int, chunk: int, p: int, v: int, m: int) -> int:
    """How many of the first K forward passes of a rank are for model chunk `chunk`.

    Megatron's interleaved order (get_schedule_table): micro-batches in groups of N = p; each
    group runs chunk 0 for its N micro-batches, then chunk 1, ... The last group may be short.
    """
    N = p
    full = m // N
    period = N * v
    if full * period >= K:
        groups, rest = divmod(K, period)
        return groups * N + min(max(rest - chunk * N, 0), N)
    tail = m - full * N
    return full * N + min(max(K - full * period - chunk * tail, 0), tail)


def backwards_of_chunk(J: int, chunk: int, p: int, v: int, m: int) -> int:
    """How many of the first J backward passes are for `chunk`: the forward order with the
    chunks reversed (last chunk first)."""
    return forwards_of_chunk(J, v - 1 - chunk, p, v, m)


def forwards_by_chunk(K: int, p: int, v: int, m: int) -> tuple[int, ...]:
    """`forwards_of_chunk(K, c, p, v, m)` for every chunk c, in chunk order (one pass)."""
    N = p
    full = m // N
    period = N * v
    if full * period >= K:
        groups, rest = divmod(K, period)
        return tuple(groups * N + min(max(rest - c * N, 0), N) for c in range(v))
    tail = m - full * N
    extra = K - full * period
    return tuple(full * N + min(max(extra - c * tail, 0), tail) for c in range(v))


def in_flight_at(j: int, W: int, p: int, v: int, m: int) -> tuple[int, ...]:
    """Micro-batches of each chunk held after forward W + j and before backward j: chunk c's
    forwards minus its backwards, which are the forward order's with the chunks reversed."""
    forwards = forwards_by_chunk(W + 1 + j, p, v, m)
    backwards = forwards_by_chunk(j, p, v, m)
    return tuple(forwards[c] - backwards[v - 1 - c] for c in range(v))


def _candidates(W: int, p: int, v: int, m: int) -> set[int]:
    """Steady-state steps j where the in-flight mix can change slope.

    Each chunk's forward count changes slope when the forward counter W + 1 + j crosses a
    multiple of N = p (a chunk boundary in a full group) or a boundary in the short last group;
    its backward count when j does. A weighted sum of the counts is piecewise linear in j, so its
    maximum lies at one of these points or one step before. While both counters are in full
    groups the mix repeats every N·v steps, so one period at the start and the stretch from one
    period before the last full group to the end cover every case.
    """
    N, steps = p, m * v - W
    period = N * v
    full_end = (m // N) * period
    tail = m - (m // N) * N
    points = {0, steps - 1}
    shift = (-W - 1) % N  # j ≡ shift (mod N): the forward counter is on a multiple of N
    for low, high in ((0, period), (max(0, full_end - W - 1 - period), steps)):
        first = low - low % N
        for j in range(first, min(high, steps) + N, N):
            points |= {j, j + shift}
    for c in range(v + 1):
        short = full_end + c * tail  # a chunk boundary inside the short last group
        points |= {short - W - 1, short}
    points |= {point - 1 for point in points}
    return {point for point in points if 0 <= point < steps}


def gpipe_in_flight(p: int, v: int, m: int, r: int, weights: tuple[int, ...]) -> tuple[int, ...]:
    """GPipe holds every micro-batch of every chunk when its forwards end: m of each, on every
    stage (Huang et al. 2019 §2.2: activation memory O(m) per stage without re-materialisation).
    No pipeline: 1, as for 1F1B (with one stage no framework runs a pipeline schedule; the
    micro-batches are plain gradient accumulation)."""
    if len(weights) != v:
        raise ValueError("one weight per chunk")
    return tuple(1 if p == 1 else m for _ in range(v))


def zb_h1_in_flight(p: int, v: int, m: int, r: int, weights: tuple[int, ...]) -> tuple[int, ...]:
    """ZB-H1 holds min(p, m) micro-batches on every stage: 1F1B's p − r, and r more whose W it
    has deferred (Qi et al. 2024 §2.1: peak memory no higher than 1F1B's stage 0). No pipeline:
    1."""
    if len(weights) != v:
        raise ValueError("one weight per chunk")
    return (1,) if p == 1 else (min(p, m),)


def dualpipe_v_in_flight(
    p: int, v: int, m: int, r: int, weights: tuple[int, ...]
) -> tuple[int, ...]:
    """DualPipeV's rank r peaks at 2p − r micro-batches of chunk 0 and r + 1 of chunk 1 at once
    (2p + 1 in all: the DualPipe README's PP + 1 with PP = 2p stages), for any weights: no
    moment holds more of either chunk (tests walk the op lists). No pipeline: 1 of each."""
    if len(weights) != v:
        raise ValueError("one weight per chunk")
    return (1, 1) if p == 1 else (2 * p - r, r + 1)


def zb_v_in_flight(p: int, v: int, m: int, r: int, weights: tuple[int, ...]) -> tuple[int, ...]:
    """ZB-V's rank r peaks at one of two moments of its warm-up: 2p − 1 − r micro-batches of
    chunk 0 with r + 1 of chunk 1 (first), or min(2p − r, m) of chunk 0 with r of chunk 1; the
    heavier by `weights`, ties to the first (tests walk the op lists). No pipeline: 1 of each."""
    if len(weights) != v:
        raise ValueError("one weight per chunk")
    if p == 1:
        return (1, 1)
    first, later = (2 * p - 1 - r, r + 1), (min(2 * p - r, m), r)
    heavier = sum(w * n for w, n in zip(weights, later, strict=True)) > sum(
        w * n for w, n in zip(weights, first, strict=True)
    )
    return later if heavier else first


def combined_in_flight(
    p: int, v: int, m: int, r: int, weights: tuple[int, ...]
) -> tuple[int, ...]:
    """Megatron's combined 1F1B: interleaved 1F1B's order with one more warm-up forward
    (`planc.pipeline.counts.combined_warmup`), so one more chunk-micro-batch at the peak."""
    return in_flight(p, v, m, r, weights, extra=1)


def in_flight(
    p: int, v: int, m: int, r: int, weights: tuple[int, ...], extra: int = 0
) -> tuple[int, ...]:
    """Micro-batches of each of rank r's v chunks held at its activation peak.

    The peak is the moment, after a forward and before the next backward, when Σ weights[c] ×
    held[c] is largest (weights: bytes one micro-batch of chunk c keeps). 1F1B: p − r held,
    capped at m (Korthikanti §4.2; Narayanan et al. 2021). Interleaved: warm-up + 1 chunk-micro-
    batches (Megatron-LM schedules.py, forward_backward_pipelining_with_interleaving's
    num_warmup_microbatches), in Megatron's chunk order; `extra` more warm-up forwards with
    v > 1 (combined 1F1B). No pipeline: 1.
    """
    if len(weights) != v:
        raise ValueError("one weight per chunk")
    if p == 1:
        return tuple(1 for _ in range(v))
    W = min(num_warmup(p, m, v, r) + (extra if v > 1 else 0), m * v)
    if m * v <= W:
        return tuple(m for _ in range(v))
    if v == 1:
        return (W + 1,)  # min(p − r, m)
    # The heaviest candidate step, the earliest of equals.
    best, most = -1, 0
    for j in sorted(_candidates(W, p, v, m)):
        weighed = _weighed(j, W, p, v, m, weights)
        if best < 0 or weighed > most:
            best, most = j, weighed
    return in_flight_at(best, W, p, v, m)


def _counter(K: int, p: int, v: int, m: int) -> tuple[int, int, int]:
    """`forwards_of_chunk(K, c, p, v, m)` as base + clamp(offset − c·width, 0, width):
    (base, offset, width), the same for every chunk c."""
    full = m // p
    period = p * v
    if full * period >= K:
        groups, rest = divmod(K, period)
        return groups * p, rest, p
    tail = m - full * p
    return full * p, K - full * period, tail


def _weighed(j: int, W: int, p: int, v: int, m: int, weights: tuple[int, ...]) -> int:
    """Σ_c weights[c] × `in_flight_at(j, W, p, v, m)`[c], without building the counts (the
    inner loop of `in_flight`)."""
    f_base, f_at, f_width = _counter(W + 1 + j, p, v, m)
    b_base, b_at, b_width = _counter(j, p, v, m)
    total = 0
    for c in range(v):
        ahead = f_at - c * f_width
        ahead = 0 if ahead < 0 else f_width if ahead > f_width else ahead
        behind = b_at - (v - 1 - c) * b_width
        behind = 0 if behind < 0 else b_width if behind > b_width else behind
        total += weights[c] * (f_base + ahead - b_base - behind)
    return total
