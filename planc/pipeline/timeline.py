"""Discrete-event simulation of a pipeline schedule: timings, bubble, deadlock detection.

Model: each stage runs its ops strictly in schedule order, one at a time. An op starts when
its stage is free and its inputs are there:

* a forward needs the forward output of the previous virtual stage (same micro-batch),
  which arrives ``t_p2p`` after that op ends; the first virtual stage reads local data;
* a backward needs its own forward (the saved activations) and the backward output of the
  next virtual stage, again ``t_p2p`` after it ends; the last virtual stage starts from
  its loss;
* a weight-gradient op (``W``, in schedules that split the backward) needs its own
  backward-input op (``B``) on the same stage, and sends nothing.

Sends are asynchronous with unbounded buffering: a sender never waits for its receiver.
Arithmetic is exact (:class:`fractions.Fraction`; floats convert exactly), so the bubble
formulas can be checked with ``==``.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, NamedTuple, TypeAlias

from planc.pipeline.schedule import (
    Link,
    Op,
    OpKey,
    Schedule,
    op_key,
    producer_key,
    validate_schedule,
)
from planc.record import record

Number: TypeAlias = int | float | Fraction
#: A time per micro-batch per chunk: one value, or one per stage (``p`` values) or per
#: virtual stage (``p·v`` values, index ``chunk·p + stage``) for uneven stages.
Times: TypeAlias = Number | Sequence[Number]


class DeadlockError(ValueError):
    """No stage can start its next op: the schedule's order makes it wait forever.

    ``blocked`` lists, per stuck stage, the op it is at and the op it waits for as
    ``(stage, op, (kind, micro-batch, stage, chunk) of the awaited op)``.
    """

    def __init__(self, blocked: tuple[tuple[int, Op, OpKey], ...]) -> None:
        self.blocked = blocked
        parts = [
            f"stage {stage} at {op.label} waits for {kind}{mb}c{chunk} on stage {peer}"
            for stage, op, (kind, mb, peer, chunk) in blocked
        ]
        super().__init__("pipeline schedule deadlocks: " + "; ".join(parts))


class Span(NamedTuple):
    """One op's execution interval on its stage."""

    op: Op
    start: Fraction
    end: Fraction


class Message(NamedTuple):
    """One matched send/receive: sent when the producer ends, arrives ``t_p2p`` later."""

    link: Link
    sent: Fraction
    arrived: Fraction
    consumed: Fraction


@record
class Timeline:
    """Result of :func:`simulate`: when every op ran, and how much of the time was bubble."""

    schedule: Schedule
    stages: tuple[tuple[Span, ...], ...]
    messages: tuple[Message, ...]
    makespan: Fraction
    busy: tuple[Fraction, ...]
    bubble_fraction: Fraction

    def to_json(self) -> dict[str, Any]:
        """Plain data for the plan: ops as ``[kind, micro-batch, chunk, start, end]``."""
        sched = self.schedule
        return {
            "p": sched.p,
            "m": sched.m,
            "v": sched.v,
            "makespan": float(self.makespan),
            "bubble_fraction": float(self.bubble_fraction),
            "busy": [float(b) for b in self.busy],
            "p2p_messages": len(self.messages),
            "stages": [
                [
                    [s.op.kind, s.op.microbatch, s.op.chunk, float(s.start), float(s.end)]
                    for s in spans
                ]
                for spans in self.stages
            ],
        }


# --------------------------------------------------------------------------- inputs


def _exact(value: Number, name: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return Fraction(value)


def _per_vstage(times: Times, name: str, p: int, v: int) -> tuple[Fraction, ...]:
    """Expand scalar / per-stage / per-virtual-stage times to one value per virtual stage."""
    if isinstance(times, Sequence):
        values = [_exact(t, name) for t in times]
        if len(values) == p:
            # Per stage: every chunk on a stage costs the same.
            values = [values[vs % p] for vs in range(p * v)]
        elif len(values) != p * v:
            raise ValueError(
                f"{name} needs one value, {p} (per stage) or {p * v} (per virtual stage), "
                f"got {len(values)}"
            )
    else:
        values = [_exact(times, name)] * (p * v)
    # Zero compute time would make an empty step (makespan 0, bubble undefined).
    bad = [t for t in values if t <= 0]
    if bad:
        raise ValueError(f"{name} must be positive, got {float(bad[0])}")
    return tuple(values)


# --------------------------------------------------------------------------- simulation


class _Ticks:
    """All times of one run as integers in a common unit, so the event loop adds ints.

    Every input is an exact rational; scaling by the least common multiple of their
    denominators keeps the arithmetic exact and much faster than adding Fractions.
    """

    def __init__(
        self,
        t_f: tuple[Fraction, ...],
        t_b: tuple[Fraction, ...],
        hop: Fraction,
        t_w: tuple[Fraction, ...] = (),
    ):
        self.unit = math.lcm(*(t.denominator for t in (*t_f, *t_b, *t_w, hop)))
        self.t_f = tuple(self.count(t) for t in t_f)
        self.t_b = tuple(self.count(t) for t in t_b)
        self.t_w = tuple(self.count(t) for t in t_w)
        self.hop = self.count(hop)
        self.by_kind = {"F": self.t_f, "B": self.t_b, "W": self.t_w}

    def count(self, time: Fraction) -> int:
        return time.numerator * (self.unit // time.denominator)

    def time(self, ticks: int) -> Fraction:
        return Fraction(ticks, self.unit)


class _Run:
    """Mutable state of one simulation; lives only inside :func:`simulate`."""

    def __init__(self, schedule: Schedule, ticks: _Ticks) -> None:
        self.schedule = schedule
        self.ticks = ticks
        self.next_op = [0] * schedule.p
        self.free_at = [0] * schedule.p
        self.ended: dict[OpKey, int] = {}
        self.spans: list[list[tuple[Op, int, int]]] = [[] for _ in range(schedule.p)]
        self.waiting: defaultdict[OpKey, list[int]] = defaultdict(list)
        self.blocked_on: dict[int, OpKey] = {}

    def needs(self, stage: int, op: Op) -> list[tuple[OpKey, int]]:
        """The ops this one waits for, each with the delay between its end and our start."""
        deps: list[tuple[OpKey, int]] = []
        if op.kind == "B":
            # Backward consumes the activations its own forward saved.
            deps.append((("F", op.microbatch, stage, op.chunk), 0))
        elif op.kind == "W":
            # The weight gradient needs the output gradient its backward-input op received.
            deps.append((("B", op.microbatch, stage, op.chunk), 0))
        if op.recv is not None:
            # A message between two chunks of one stage (the V placement's turn) is local.
            local = op.recv.src_stage == op.recv.dst_stage
            deps.append((producer_key(op.recv), 0 if local else self.ticks.hop))
        return deps

    def advance(self, stage: int) -> list[int]:
        """Run ``stage`` as far as its inputs allow; return the stages this unblocks."""
        ops = self.schedule.stages[stage]
        woken: list[int] = []
        while self.next_op[stage] < len(ops):
            op = ops[self.next_op[stage]]
            ready = self.free_at[stage]
            # A paired op starts with the next one: it waits for the inputs of both (the
            # second's own forward, on this stage, is never the first op).
            group = (op, ops[self.next_op[stage] + 1]) if op.paired else (op,)
            for member in group:
                for key, delay in self.needs(stage, member):
                    if key not in self.ended:
                        if member is not op and key == op_key(stage, op):
                            continue  # the pair's second needs its first: that runs first
                        self.waiting[key].append(stage)
                        self.blocked_on[stage] = key
                        return woken
                    ready = max(ready, self.ended[key] + delay)
            self.blocked_on.pop(stage, None)
            for member in group:
                woken.extend(self.finish(stage, member, ready))
                ready = self.free_at[stage]
        return woken

    def finish(self, stage: int, op: Op, start: int) -> list[int]:
        vstage = op.chunk * self.schedule.p + stage
        end = start + self.ticks.by_kind[op.kind][vstage]
        if op.whole:  # the weight gradient in the same op
            end += self.ticks.t_w[vstage]
        key = op_key(stage, op)
        self.ended[key] = end
        self.spans[stage].append((op, start, end))
        self.free_at[stage] = end
        self.next_op[stage] += 1
        return self.waiting.pop(key, [])

    def deadlock(self) -> DeadlockError | None:
        stuck = [
            (stage, self.schedule.stages[stage][self.next_op[stage]], self.blocked_on[stage])
            for stage in range(self.schedule.p)
            if self.next_op[stage] < len(self.schedule.stages[stage])
        ]
        return DeadlockError(tuple(stuck)) if stuck else None


def simulate(
    schedule: Schedule,
    t_f: Times,
    t_b: Times | None = None,
    t_p2p: Number = 0,
    t_w: Times | None = None,
) -> Timeline:
    """Run ``schedule`` with per-chunk forward/backward times and a per-message p2p time.

    ``t_f``/``t_b`` are the compute times of one micro-batch on one chunk (scalar, per stage,
    or per virtual stage); ``t_b`` defaults to ``2·t_f``. ``t_w`` is the weight-gradient op's
    time, read only when the schedule emits W ops (then ``t_b`` is the input-gradient part);
    it defaults to ``t_f`` (the zero-bubble paper's F = B = W). Raises ``ValueError`` if the
    schedule's messages do not pair up and :class:`DeadlockError` if its order deadlocks.
    """
    links = validate_schedule(schedule)
    return _timeline(_ran(schedule, t_f, t_b, t_p2p, t_w), links)


def _ran(
    schedule: Schedule, t_f: Times, t_b: Times | None, t_p2p: Number, t_w: Times | None = None
) -> _Run:
    """The event loop run to the end on exact times (ticks); raises on bad times or deadlock."""
    p, v = schedule.p, schedule.v
    fwd = _per_vstage(t_f, "t_f", p, v)
    bwd = tuple(2 * t for t in fwd) if t_b is None else _per_vstage(t_b, "t_b", p, v)
    wgt: tuple[Fraction, ...] = ()
    if schedule.splits_backward:
        wgt = fwd if t_w is None else _per_vstage(t_w, "t_w", p, v)
    hop = _exact(t_p2p, "t_p2p")
    if hop < 0:
        raise ValueError(f"t_p2p must be non-negative, got {float(hop)}")
    run = _Run(schedule, _Ticks(fwd, bwd, hop, wgt))
    _event_loop(run)
    return run


def stage_ends(
    schedule: Schedule,
    t_f: Times,
    t_b: Times | None = None,
    t_p2p: Number = 0,
    t_w: Times | None = None,
) -> tuple[Fraction, ...]:
    """When each stage finishes its last op: `simulate`'s answer without the timeline.

    The same event loop and exact arithmetic, but no span, message or pairing report is built,
    so a step estimate pays only for the run itself. The schedule is not re-validated: give it
    one a registered builder made (`simulate` checks any schedule); a deadlock still raises.
    """
    run = _ran(schedule, t_f, t_b, t_p2p, t_w)
    return tuple(run.ticks.time(spans[-1][2]) if spans else Fraction(0) for spans in run.spans)


def _event_loop(run: _Run) -> None:
    """Advance stages until all ops ran, waking a stage only when what it waits for ends."""
    queue = deque(range(run.schedule.p))
    while queue:
        queue.extend(run.advance(queue.popleft()))
    error = run.deadlock()
    if error is not None:
        raise error


def _timeline(run: _Run, links: tuple[Link, ...]) -> Timeline:
    schedule, time = run.schedule, run.ticks.time
    makespan = max(spans[-1][2] for spans in run.spans if spans)
    busy = [sum(end - start for _, start, end in spans) for spans in run.spans]
    return Timeline(
        schedule=schedule,
        stages=tuple(
            tuple(Span(op, time(start), time(end)) for op, start, end in spans)
            for spans in run.spans
        ),
        messages=_messages(run, links),
        makespan=time(makespan),
        busy=tuple(time(b) for b in busy),
        bubble_fraction=1 - Fraction(sum(busy), schedule.p * makespan),
    )


def _messages(run: _Run, links: tuple[Link, ...]) -> tuple[Message, ...]:
    """Pair every link's send time with the start of the op that consumed it."""
    starts = {op.recv: start for spans in run.spans for op, start, _ in spans if op.recv}
    time, hop = run.ticks.time, run.ticks.hop
    out = []
    for link in links:
        sent = run.ended[producer_key(link)]
        out.append(Message(link, time(sent), time(sent + hop), time(starts[link])))
    return tuple(out)


# --------------------------------------------------------------------------- rendering


def render(timeline: Timeline, width: int = 100) -> str:
    """ASCII picture: one row per stage, time left to right, ``.`` = idle.

    ``F``/``B``/``W`` mark forward/backward/weight-gradient ops on even chunks, ``f``/``b``/``w``
    on odd chunks, so the interleaved schedule's alternation between chunks is visible.
    """
    if width < 1:
        raise ValueError(f"render width must be positive, got {width}")
    label = max(len(f"stage {timeline.schedule.p - 1}"), 5)
    rows = [_render_row(spans, timeline.makespan, width) for spans in timeline.stages]
    lines = [f"{f'stage {r}':<{label}} |{row}|" for r, row in enumerate(rows)]
    lines.append(
        f"{'':<{label}}  makespan {float(timeline.makespan):.6g}, "
        f"bubble {float(timeline.bubble_fraction):.1%}"
    )
    return "\n".join(lines)


def _render_row(spans: Sequence[Span], makespan: Fraction, width: int) -> str:
    cells = ["."] * width
    if makespan <= 0:
        return "".join(cells)
    for span in spans:
        first = round(span.start * width / makespan)
        # Every op gets at least one cell so that short ops stay visible.
        last = max(first + 1, round(span.end * width / makespan))
        char = span.op.kind if span.op.chunk % 2 == 0 else span.op.kind.lower()
        for col in range(first, min(last, width)):
            cells[col] = char
    return "".join(cells)
