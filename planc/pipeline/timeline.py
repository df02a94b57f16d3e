"""Simulation of a pipeline schedule: timings, bubble, deadlock detection.

Model: each stage runs its ops strictly in schedule order, one at a time. An op starts when
its stage is free and its inputs are there:

* a forward needs the forward output of the previous virtual stage (same micro-batch),
  which arrives ``t_p2p`` after that op ends; the first virtual stage reads local data;
* a backward needs its own forward (the saved activations) and the backward output of the
  next virtual stage, again ``t_p2p`` after it ends; the last virtual stage starts from
  its loss;
* a weight-gradient op (``W``, in schedules that split the backward) needs its own
  backward-input op (``B``) on the same stage, and sends nothing;
* a message between two chunks of one stage (the V placement's turn) takes no ``t_p2p``;
* a ``paired`` op starts together with the next op of its stage, once the inputs of both are
  there (DualPipe's overlapped forward and backward, combined 1F1B's steady steps). In a
  schedule that pairs, a forward or backward outside a pair runs *alone*: nothing of another
  micro-batch beside it to hide its expert exchanges behind, so it may take its own time
  (``alone``: `planc.perf.step` gives it the whole exchange).

Sends are asynchronous with unbounded buffering: a sender never waits for its receiver.
Arithmetic is exact (:class:`fractions.Fraction`; floats convert exactly), so the bubble
formulas can be checked with ``==``.

Which op waits for which does not depend on the times, so the simulation is two steps:
:func:`compile_schedule` orders the ops once, so that every op comes after those it waits for,
and finds a deadlock (it is one whatever the times); `_run` then times the program for given
times in one loop over integers, ``start = max(free[stage], end[w] + t_p2p for w in waits)``:
the max-plus system whose steady state `planc.pipeline.bounded` extrapolates. A step estimate
there compiles a schedule once and times it many times (`stage_ends`); `simulate` does both and
builds the timeline.
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


# --------------------------------------------------------------------------- compilation


@record
class Program:
    """A schedule compiled once, to be timed under any times (`compile_schedule`, `stage_ends`).

    The ops in one topological order of the schedule's dependency graph: the order in which a
    work queue of stages, each taking its ops until the next one waits for an op not yet taken,
    takes them. Which op waits for which does not depend on the times (every stage's order is
    fixed, and so is every op's input), so the order holds for every run.

    Per op ``i``: it runs on ``stage[i]`` (a stage's k-th entry is its k-th op: the program
    keeps no op, so that a cache of programs stays small); ``slot[i]`` is where its duration is
    in the table `_Ticks.durations` makes (kind·p·v + chunk·p + stage, kind 0 to 2 for F, B and
    W, 3 to 5 for the same op run ``whole``, with its weight gradient, and in a program that
    `pairs`, 6 to 8 for a forward, a backward and a whole backward run alone); ``waits[i]`` are the ops
    of *other* stages whose messages it waits for, each arriving ``hop`` after that op ends. A
    wait on an earlier op of its own stage (its own forward or backward, a message between two
    chunks of the stage) is left out: the stage's order already starts it after that op's end.
    A paired op carries the waits of both members; the pair's second starts when the first
    ends, and waits for nothing else.
    """

    p: int
    v: int
    stage: tuple[int, ...]
    slot: tuple[int, ...]
    waits: tuple[tuple[int, ...], ...]
    splits_backward: bool
    # The schedule pairs ops: its forwards and backwards outside a pair take the kinds of
    # `ALONE_KINDS` (their own durations, `_Ticks.durations`).
    pairs: bool = False


#: The op kinds in `Program.slot`'s order; the same kinds run ``whole`` follow them.
_SLOT_KINDS = ("F", "B", "W")
#: In a program that pairs ops, a forward, a backward and a whole backward run alone take the
#: kinds after those: 6, 7 and 8.
ALONE_KINDS = (6, 7, 8)


def alone_counts(program: Program) -> tuple[tuple[int, int], ...]:
    """Per virtual stage (chunk·p + stage): how many forwards and backwards run alone."""
    width = program.p * program.v
    forwards, backwards = [0] * width, [0] * width
    if program.pairs:
        for slot in program.slot:
            kind, at = divmod(slot, width)
            if kind == ALONE_KINDS[0]:
                forwards[at] += 1
            elif kind in ALONE_KINDS[1:]:
                backwards[at] += 1
    return tuple(zip(forwards, backwards, strict=True))


def _needs(stage: int, op: Op) -> list[OpKey]:
    """The ops ``op`` waits for on ``stage``, in the order a blocked stage reports the first."""
    deps: list[OpKey] = []
    if op.kind == "B":
        # Backward consumes the activations its own forward saved.
        deps.append(("F", op.microbatch, stage, op.chunk))
    elif op.kind == "W":
        # The weight gradient needs the output gradient its backward-input op received.
        deps.append(("B", op.microbatch, stage, op.chunk))
    if op.recv is not None:
        # A message is then local (no hop) exactly when its producer is on this stage, which
        # is how `_Compiler.group_waits` tells the waits to keep.
        if op.recv.dst_stage != stage:
            raise ValueError(f"stage {stage} op {op.label} receives {op.recv}, sent elsewhere")
        deps.append(producer_key(op.recv))
    return deps


class _Compiler:
    """Mutable state of one compilation; lives only inside :func:`compile_schedule`."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.next_op = [0] * schedule.p
        self.index: dict[OpKey, int] = {}  # taken op → its place in the program
        self.waiting: defaultdict[OpKey, list[int]] = defaultdict(list)
        self.blocked_on: dict[int, OpKey] = {}
        self.splits_backward = False
        self.pairs = any(op.paired for ops in schedule.stages for op in ops)
        self.stage: list[int] = []
        self.slot: list[int] = []
        self.waits: list[tuple[int, ...]] = []

    def advance(self, stage: int) -> list[int]:
        """Take ``stage``'s ops while what they wait for is taken; return the stages unblocked."""
        ops = self.schedule.stages[stage]
        woken: list[int] = []
        while self.next_op[stage] < len(ops):
            op = ops[self.next_op[stage]]
            # A paired op starts with the next one: it waits for the inputs of both.
            group = (op, ops[self.next_op[stage] + 1]) if op.paired else (op,)
            waits = self.group_waits(stage, group)
            if waits is None:
                return woken
            self.blocked_on.pop(stage, None)
            alone = self.pairs and len(group) == 1
            for member in group:
                woken.extend(self.take(stage, member, waits, alone))
                waits = ()  # the pair's second starts when its first ends
        return woken

    def group_waits(self, stage: int, group: tuple[Op, ...]) -> tuple[int, ...] | None:
        """The other stages' ops ``group`` waits for, or None, with ``stage`` queued on the first
        op not yet taken, when one is missing."""
        first = group[0]
        found: list[int] = []
        for member in group:
            for key in _needs(stage, member):
                taken = self.index.get(key)
                if taken is None:
                    if member is not first and key == op_key(stage, first):
                        continue  # the pair's second needs its first: that runs first
                    self.waiting[key].append(stage)
                    self.blocked_on[stage] = key
                    return None
                if key[2] != stage and taken not in found:
                    found.append(taken)
        return tuple(found)

    def take(self, stage: int, op: Op, waits: tuple[int, ...], alone: bool = False) -> list[int]:
        """Append ``op`` to the program (`alone`: outside a pair, in a schedule that pairs);
        return the stages that were waiting for it."""
        p = self.schedule.p
        kind = _SLOT_KINDS.index(op.kind) + (len(_SLOT_KINDS) if op.whole else 0)
        if alone and op.kind != "W":
            kind = ALONE_KINDS[0] if op.kind == "F" else ALONE_KINDS[2 if op.whole else 1]
        key = op_key(stage, op)
        self.index[key] = len(self.stage)
        self.splits_backward |= op.kind == "W"
        self.stage.append(stage)
        self.slot.append(kind * p * self.schedule.v + op.chunk * p + stage)
        self.waits.append(waits)
        self.next_op[stage] += 1
        return self.waiting.pop(key, [])

    def deadlock(self) -> DeadlockError | None:
        stuck = [
            (stage, self.schedule.stages[stage][self.next_op[stage]], self.blocked_on[stage])
            for stage in range(self.schedule.p)
            if self.next_op[stage] < len(self.schedule.stages[stage])
        ]
        return DeadlockError(tuple(stuck)) if stuck else None

    def program(self) -> Program:
        return Program(
            p=self.schedule.p,
            v=self.schedule.v,
            stage=tuple(self.stage),
            slot=tuple(self.slot),
            waits=tuple(self.waits),
            splits_backward=self.splits_backward,
            pairs=self.pairs,
        )


def compile_schedule(schedule: Schedule) -> Program:
    """``schedule``'s ops in an order that respects every wait, for `stage_ends` to time.

    A work queue of stages: each takes its ops until the next one waits for an op not yet
    taken, and that op's turn wakes it. If the queue empties while a stage still has ops, the
    order deadlocks whatever the times: raises :class:`DeadlockError`. The schedule's links are
    not validated here (`simulate` does, `validate_schedule`).
    """
    compiler = _Compiler(schedule)
    queue = deque(range(schedule.p))
    while queue:
        queue.extend(compiler.advance(queue.popleft()))
    error = compiler.deadlock()
    if error is not None:
        raise error
    return compiler.program()


# --------------------------------------------------------------------------- evaluation


class _Ticks:
    """All times of one run as integers in a common unit, so the evaluation adds ints.

    Every input is an exact rational; scaling by the least common multiple of their
    denominators keeps the arithmetic exact and much faster than adding Fractions.
    """

    def __init__(
        self,
        t_f: tuple[Fraction, ...],
        t_b: tuple[Fraction, ...],
        hop: Fraction,
        t_w: tuple[Fraction, ...] = (),
        alone: tuple[tuple[Fraction, ...], tuple[Fraction, ...]] = ((), ()),
    ):
        f_alone, b_alone = alone
        every = (*t_f, *t_b, *t_w, *f_alone, *b_alone, hop)
        self.unit = math.lcm(*(t.denominator for t in every))
        self.t_f = tuple(self.count(t) for t in t_f)
        self.t_b = tuple(self.count(t) for t in t_b)
        self.t_w = tuple(self.count(t) for t in t_w)
        # A pass run alone takes its own time where given, else the paired one's.
        self.f_alone = tuple(self.count(t) for t in f_alone) or self.t_f
        self.b_alone = tuple(self.count(t) for t in b_alone) or self.t_b
        self.hop = self.count(hop)

    def count(self, time: Fraction) -> int:
        return time.numerator * (self.unit // time.denominator)

    def time(self, ticks: int) -> Fraction:
        return Fraction(ticks, self.unit)

    def durations(self, pairs: bool = False) -> list[int]:
        """The duration of each `Program.slot`: F, B, W, then each with W added (a ``whole``
        op), p·v values each; only F and B when the schedule has no W ops. A schedule that
        `pairs` has all nine kinds (W zero without W ops): those six, then F, B and B with W
        run alone (`ALONE_KINDS`)."""
        if not pairs and not self.t_w:
            return [*self.t_f, *self.t_b]
        t_w = self.t_w or (0,) * len(self.t_f)
        kinds = (self.t_f, self.t_b, t_w)
        whole = [t + w for times in kinds for t, w in zip(times, t_w, strict=True)]
        if not pairs:
            return [*self.t_f, *self.t_b, *t_w, *whole]
        alone_whole = [b + w for b, w in zip(self.b_alone, t_w, strict=True)]
        return [*self.t_f, *self.t_b, *t_w, *whole, *self.f_alone, *self.b_alone, *alone_whole]


def _ticks(
    p: int,
    v: int,
    splits_backward: bool,
    t_f: Times,
    t_b: Times | None,
    t_p2p: Number,
    t_w: Times | None,
    alone: tuple[Times, Times] | None = None,
) -> _Ticks:
    """The run's times, checked and in ticks; raises ``ValueError`` on a bad one. ``t_w`` is
    read only when the schedule splits the backward; ``alone`` (forward, backward) are the
    times of passes run alone in a schedule that pairs (default: the paired ones)."""
    fwd = _per_vstage(t_f, "t_f", p, v)
    bwd = tuple(2 * t for t in fwd) if t_b is None else _per_vstage(t_b, "t_b", p, v)
    wgt: tuple[Fraction, ...] = ()
    if splits_backward:
        wgt = fwd if t_w is None else _per_vstage(t_w, "t_w", p, v)
    hop = _exact(t_p2p, "t_p2p")
    if hop < 0:
        raise ValueError(f"t_p2p must be non-negative, got {float(hop)}")
    if alone is None:
        return _Ticks(fwd, bwd, hop, wgt)
    f_alone = _per_vstage(alone[0], "t_f alone", p, v)
    b_alone = _per_vstage(alone[1], "t_b alone", p, v)
    return _Ticks(fwd, bwd, hop, wgt, (f_alone, b_alone))


def _run(program: Program, durations: list[int], hop: int) -> tuple[list[int], list[int]]:
    """Every op's end and every stage's last end, in ticks.

    An op starts when its stage is free and the messages it waits for are there:
    ``start = max(free[stage], end[w] + hop for w in waits)``, ``end = start + duration``. The
    program's order computes every ``end[w]`` first. This loop is the simulation's whole cost.
    """
    free = [0] * program.p
    end: list[int] = []
    for stage, slot, waits in zip(program.stage, program.slot, program.waits, strict=True):
        start = free[stage]
        for producer in waits:
            arrival = end[producer] + hop
            if arrival > start:
                start = arrival
        free[stage] = finish = start + durations[slot]
        end.append(finish)
    return end, free


def simulate(
    schedule: Schedule,
    t_f: Times,
    t_b: Times | None = None,
    t_p2p: Number = 0,
    t_w: Times | None = None,
    alone: tuple[Times, Times] | None = None,
) -> Timeline:
    """Run ``schedule`` with per-chunk forward/backward times and a per-message p2p time.

    ``t_f``/``t_b`` are the compute times of one micro-batch on one chunk (scalar, per stage,
    or per virtual stage); ``t_b`` defaults to ``2·t_f``. ``t_w`` is the weight-gradient op's
    time, read only when the schedule emits W ops (then ``t_b`` is the input-gradient part);
    it defaults to ``t_f`` (the zero-bubble paper's F = B = W). ``alone``: the forward and
    backward times of passes run alone in a schedule that pairs (default the same). Raises
    ``ValueError`` if the schedule's messages do not pair up and :class:`DeadlockError` if its
    order deadlocks.
    """
    links = validate_schedule(schedule)
    # The times are checked before the order, as they always were: a bad time and a deadlock
    # report the bad time.
    ticks = _ticks(schedule.p, schedule.v, schedule.splits_backward, t_f, t_b, t_p2p, t_w, alone)
    return _timeline(schedule, compile_schedule(schedule), ticks, links)


def stage_ends(
    program: Program,
    t_f: Times,
    t_b: Times | None = None,
    t_p2p: Number = 0,
    t_w: Times | None = None,
    alone: tuple[Times, Times] | None = None,
) -> tuple[Fraction, ...]:
    """When each stage finishes its last op: `simulate`'s answer without the timeline.

    The same evaluation and exact arithmetic on a compiled program (`compile_schedule`, of a
    schedule a registered builder made: `simulate` validates any schedule), but no span or
    message is built, so a step estimate pays only for the run itself.
    """
    ticks = _ticks(program.p, program.v, program.splits_backward, t_f, t_b, t_p2p, t_w, alone)
    _, free = _run(program, ticks.durations(program.pairs), ticks.hop)
    return tuple(ticks.time(end) for end in free)


def _timeline(
    schedule: Schedule, program: Program, ticks: _Ticks, links: tuple[Link, ...]
) -> Timeline:
    time, durations = ticks.time, ticks.durations(program.pairs)
    ends, _ = _run(program, durations, ticks.hop)
    spans: list[list[tuple[Op, int, int]]] = [[] for _ in range(schedule.p)]
    for stage, slot, end in zip(program.stage, program.slot, ends, strict=True):
        taken = spans[stage]  # the program takes each stage's ops in the stage's order
        taken.append((schedule.stages[stage][len(taken)], end - durations[slot], end))
    makespan = max(stage_spans[-1][2] for stage_spans in spans if stage_spans)
    busy = [sum(end - start for _, start, end in stage_spans) for stage_spans in spans]
    return Timeline(
        schedule=schedule,
        stages=tuple(
            tuple(Span(op, time(start), time(end)) for op, start, end in stage_spans)
            for stage_spans in spans
        ),
        messages=_messages(spans, ticks, links),
        makespan=time(makespan),
        busy=tuple(time(b) for b in busy),
        bubble_fraction=1 - Fraction(sum(busy), schedule.p * makespan),
    )


def _messages(
    spans: list[list[tuple[Op, int, int]]], ticks: _Ticks, links: tuple[Link, ...]
) -> tuple[Message, ...]:
    """Pair every link's send time with the start of the op that consumed it."""
    ended = {op_key(r, op): end for r, ops in enumerate(spans) for op, _, end in ops}
    starts = {op.recv: start for ops in spans for op, start, _ in ops if op.recv}
    time, hop = ticks.time, ticks.hop
    out = []
    for link in links:
        sent = ended[producer_key(link)]
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
