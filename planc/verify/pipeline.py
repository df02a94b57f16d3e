"""The pipeline: the plan's schedule, by name, against verify's own warm-up formula for that
name; expanded by the plan's documented order into op lists, compared with the op lists the
planner's builder of that name makes, and run through the discrete-event simulation, which pairs
every send with one receive and refuses a deadlock. The simulated micro-batch count is bounded;
the send counts are linear in m and are scaled to the plan's m exactly.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

from planc.pipeline.registry import build
from planc.pipeline.timeline import DeadlockError, simulate
from planc.verify.plandata import PlanData
from planc.vocab import ScheduleKind

Found = Iterator[str]


def _megatron_1f1b(p: int, m: int, v: int, r: int) -> int:
    """p − r − 1, at most m (Megatron-LM schedules.py, forward_backward_pipelining_without_
    interleaving)."""
    return min(p - r - 1, m * v)


def _megatron_interleaved(p: int, m: int, v: int, r: int) -> int:
    """2(p − r − 1) + (v − 1)·p, at most m·v (forward_backward_pipelining_with_interleaving)."""
    return min(2 * (p - r - 1) + (v - 1) * p, m * v)


def _gpipe(p: int, m: int, v: int, r: int) -> int:
    """Every forward first (PyTorch ScheduleGPipe): m·v, no steady state."""
    return m * v


def _combined(p: int, m: int, v: int, r: int) -> int:
    """The interleaved warm-up plus one, at most m·v (Megatron's get_pp_rank_microbatches with
    overlap_moe_expert_parallel_comm)."""
    return min(2 * (p - r - 1) + (v - 1) * p + 1, m * v)


def _dualpipe_v(p: int, m: int, v: int, r: int) -> int:
    """2(p − r − 1) forwards of chunk 0, then r + 1 of each chunk (dualpipev.py steps 1, 2)."""
    return 2 * (p - r - 1) + 2 * (r + 1)


# Verify's own warm-up count of each schedule it can expand, and the chunk counts it runs on.
WARMUPS: dict[str, tuple[Callable[[int, int, int, int], int], Callable[[int], bool]]] = {
    "1f1b": (_megatron_1f1b, lambda v: v == 1),
    "interleaved-1f1b": (_megatron_interleaved, lambda v: v > 1),
    "gpipe": (_gpipe, lambda v: v == 1),
    "zb-h1": (_megatron_1f1b, lambda v: v == 1),
    "dualpipev": (_dualpipe_v, lambda v: v == 2),
    "combined-1f1b": (_combined, lambda v: v > 1),
    "zbv": (lambda p, m, v, r: 2 * p, lambda v: v == 2),
}


def stage_pattern(p: int, m: int, v: int, r: int, name: str) -> dict[str, int]:
    """The plan's pattern of stage r: warm-up, steady and cool-down counts. For the flush order
    (1F1B, interleaved, GPipe, combined, ZB-H1) warm-up forwards, steady pairs and cool-down
    backwards; for DualPipeV the forwards before the first backward, the main step's
    (F0 B1 F1 B0) count m − 2p + r + 1 and the backwards after the last forward, p + r + 2."""
    w = warmup(p, m, v, r, name)
    if name == "dualpipev":
        return {"warmup": w, "steady": m - 2 * p + r + 1, "cooldown": p + r + 2}
    if name == "zbv":  # the forwards before the first backward, the rounds, the backwards after
        return {"warmup": w, "steady": m - p, "cooldown": p + r + 1}
    return {"warmup": w, "steady": m * v - w, "cooldown": w}


def expand_zb_h1(p: int, m: int, r: int) -> list[tuple[str, int, int]]:
    """ZB-H1's order: 1F1B's (warm-up min(p − r − 1, m)), each backward followed by the weight
    gradient of the micro-batch r backwards before it, the last r weight gradients at the end."""
    out = []
    for kind, mb, chunk in expand(p, m, 1, r, min(p - r - 1, m)):
        out.append((kind, mb, chunk))
        if kind == "B" and mb >= r:
            out.append(("W", mb - r, 0))
    return out + [("W", mb, 0) for mb in range(max(m - r, 0), m)]


def expand_dualpipe_v(p: int, m: int, r: int) -> list[tuple[str, int, int]]:
    """DualPipeV's eight steps on rank r (deepseek-ai/DualPipe dualpipev.py DualPipeV.step), as
    (kind, micro-batch, chunk); a zero-bubble backward queues its W, the others carry it."""
    f, b = [0, 0], [0, 0]
    queue: list[tuple[str, int, int]] = []
    out: list[tuple[str, int, int]] = []

    def fwd(c: int) -> None:
        out.append(("F", f[c], c))
        f[c] += 1

    def bwd(c: int, zb: bool = False) -> None:
        out.append(("B", b[c], c))
        if zb:
            queue.append(("W", b[c], c))
        b[c] += 1

    def run(steps: str, times: int) -> None:
        """`times` rounds of `steps`: f0/f1 forwards, b0/b1 backwards (z: zero-bubble), w a
        queued weight gradient."""
        for _ in range(times):
            for step in steps.split():
                if step == "w":
                    out.append(queue.pop(0))
                elif step[0] == "f":
                    fwd(int(step[1]))
                else:
                    bwd(int(step[1]), zb=step.endswith("z"))

    run("f0", 2 * (p - r - 1))
    run("f0 f1", r + 1)
    run("b1z w f1", p - r - 1)
    run("f0 b1 f1 b0", m - 2 * p + r + 1)
    run("b1 f1 b0", p - r - 1)
    for i in range(r + 1):  # zero-bubble from the middle pair on: at B1 on odd ranks, else B0
        half = i >= (r + 1) // 2
        run("b1z" if i > (r + 1) // 2 or (half and r % 2 == 1) else "b1", 1)
        run("b0z" if half else "b0", 1)
    run("w b0z", p - r - 1)
    return out + queue


def expand_zb_v(p: int, m: int, r: int) -> list[tuple[str, int, int]]:
    """ZB-V's order on rank r (PyTorch ScheduleZBVZeroBubble._calculate_single_rank_operations),
    as (kind, micro-batch, chunk); each kind counts its micro-batches per chunk."""
    out: list[tuple[str, int, int]] = []
    seen: Counter[tuple[str, int]] = Counter()

    def ops(steps: str, times: int = 1) -> None:
        for _ in range(times):
            for step in steps.split():
                kind, chunk = step[0], int(step[1])
                out.append((kind, seen[(kind, chunk)], chunk))
                seen[(kind, chunk)] += 1

    ops("F0", 2 * (p - r) - 1)
    ops("F1 F0", r)
    ops("F1 B1 W1", p - r)
    while seen[("F", 1)] < seen[("F", 0)] or seen[("F", 0)] < m:
        ops("F0 B0 W0 F1 B1 W1" if seen[("F", 0)] < m else "B0 W0 F1 B1 W1")
    ops("B0 B1", r)
    ops("B0 W0", p - r)
    ops("W1", m - seen[("W", 1)])
    ops("W0", m - seen[("W", 0)])
    return out


def _expanded(p: int, m: int, v: int, r: int, name: str) -> list[tuple[str, int, int]]:
    if name == "zbv":
        return expand_zb_v(p, m, r)
    if name == "zb-h1":
        return expand_zb_h1(p, m, r)
    if name == "dualpipev":
        return expand_dualpipe_v(p, m, r)
    return expand(p, m, v, r, warmup(p, m, v, r, name))


def warmup(p: int, m: int, v: int, r: int, schedule: str | None = None) -> int:
    """Forwards before the first backward on stage r under `schedule` (default: 1F1B for v = 1,
    interleaved for v > 1), never more than the m·v forwards of the step."""
    name = schedule or ("1f1b" if v == 1 else "interleaved-1f1b")
    return WARMUPS[name][0](p, m, v, r)


def expand(p: int, m: int, v: int, r: int, w: int) -> list[tuple[str, int, int]]:
    """Stage r's ops as (kind, micro-batch, chunk), by the plan's order: w warm-up forwards,
    (forward, backward) pairs, then the remaining backwards; the k-th forward is of chunk
    (k // p) % v and micro-batch (k // (p·v))·p + k % p; backwards reverse the chunks."""

    def fwd(k: int) -> tuple[str, int, int]:
        return ("F", (k // (p * v)) * p + k % p, (k // p) % v)

    def bwd(k: int) -> tuple[str, int, int]:
        return ("B", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v)

    total = m * v
    out = [fwd(k) for k in range(w)]
    for k in range(total - w):
        out += [fwd(w + k), bwd(k)]
    out += [bwd(k) for k in range(total - w, total)]
    return out


def pipeline(plan: PlanData, limit: int = 20_000) -> Found:
    p, v = plan.degrees["pp"], plan.virtual_stages
    m = int(plan.training["micro_batches"])
    pattern = plan.pipeline
    if p == 1:
        if pattern is not None:
            yield "communication.pipeline is present for a plan without pipeline stages"
        return
    if pattern is None:
        yield "communication.pipeline is missing"
        return
    if (pattern.get("p"), pattern.get("m"), pattern.get("v")) != (p, m, v):
        yield f"communication.pipeline is for p, m, v = {pattern.get('p')}, {pattern.get('m')}, {pattern.get('v')}, the plan has {p}, {m}, {v}"
        return
    name = str(pattern.get("schedule"))
    if name not in WARMUPS or not WARMUPS[name][1](v):
        yield f"communication.pipeline.schedule {name!r} is not a schedule verify can expand for v = {v}"
        return
    stages = pattern.get("stages", [])
    for r in range(p):
        pattern_r = stage_pattern(p, m, v, r, name)
        if r >= len(stages) or stages[r] != pattern_r:
            yield f"pipeline stage {r}: {stages[r] if r < len(stages) else 'missing'}, the schedule has {pattern_r}"
            return
    # A bounded run: from 2p micro-batches on every warm-up is uncapped, so the order is the
    # same; sends grow linearly in m. Past the limit even that run is too long to simulate.
    small = m if 2 * p * m * v <= limit else 2 * p
    if 2 * p * small * v > limit:
        yield from _counts_only(plan, p, m, v)
        return
    schedule = build(ScheduleKind(name), p, small, v)
    for r, ops in enumerate(schedule.stages):
        mine = _expanded(p, small, v, r, name)
        theirs = [(op.kind, op.microbatch, op.chunk) for op in ops]
        if theirs != mine:
            yield f"pipeline stage {r}: the plan's order does not give the {name} schedule"
            return
    try:
        timeline = simulate(schedule, 1, 2, 0)
    except (DeadlockError, ValueError) as error:
        yield f"pipeline: {error}"
        return
    sent: Counter[tuple[int, str]] = Counter(
        (msg.link.src_stage, msg.link.direction)
        for msg in timeline.messages
        if msg.link.src_stage != msg.link.dst_stage  # the V turn stays on its rank
    )
    for (stage, direction), calls in sorted(_listed_sends(plan).items()):
        want = sent[(stage, direction)] * m // small
        if calls != want:
            yield f"stage {stage} pipeline sends {direction}: the plan has {calls:,}, the simulated schedule {want:,}"


def _listed_sends(plan: PlanData) -> Counter[tuple[int, str]]:
    """The plan's pipeline sends per stage and direction, over all the tiers they cross (a
    rank of the V placement sends each way to both neighbours, on their boundaries' tiers)."""
    listed: Counter[tuple[int, str]] = Counter()
    for op in plan.ops:
        if op.get("group") == "pp":
            listed[(int(op["stage"]), str(op.get("direction")))] += int(op["calls"])
    return listed


def _counts_only(plan: PlanData, p: int, m: int, v: int) -> Found:
    """Send counts by the order alone, when even two groups are too long to simulate."""
    for (stage, direction), calls in sorted(_listed_sends(plan).items()):
        end = p - 1 if direction == "fwd" else 0
        want = m * v - (m if stage == end else 0)
        if plan.pipeline is not None and plan.pipeline.get("schedule") in ("dualpipev", "zbv"):
            want = m * (2 - (stage == 0) - (stage == p - 1))  # ranks r and 2p − 1 − r
        if calls != want:
            yield f"stage {stage} pipeline sends {direction}: the plan has {calls:,}, the order gives {want:,}"


def simulated(plan: PlanData, limit: int = 20_000) -> bool:
    """Whether `pipeline` runs the discrete-event simulation for this plan (else counts only)."""
    p, v = plan.degrees["pp"], plan.virtual_stages
    m = int(plan.training["micro_batches"])
    small = m if 2 * p * m * v <= limit else 2 * p
    return p > 1 and 2 * p * small * v <= limit


def _flush_bubble(p: int, m: int, v: int) -> float:
    """(p − 1)/(v·m + p − 1): the idle fraction of a flush schedule (GPipe, 1F1B, interleaved
    1F1B) with equal stages (Narayanan et al. 2021, §2.2); 0 without pipeline stages."""
    return (p - 1) / (v * m + p - 1)


def bubble(plan: PlanData) -> Found:
    """summary.bubble_fraction is the schedule's bubble at the plan's p, m and v, rounded to the
    6 digits the plan writes; summary.micro_batches is training's m."""
    p, v = plan.degrees["pp"], plan.virtual_stages
    m = int(plan.training["micro_batches"])
    summary = plan.raw["summary"]
    if summary["micro_batches"] != m:
        yield f"summary.micro_batches {summary['micro_batches']:,} is not training.micro_batches {m:,}"
    schedule = plan.pipeline.get("schedule") if plan.pipeline is not None else None
    if p > 1 and schedule not in WARMUPS:
        return  # the pipeline check names a schedule verify cannot expand
    split = schedule in ("zb-h1", "dualpipev")
    # ZB-H1 and DualPipeV with F = B = W: (p − 1)(F + B − W) of idle against 3m units of work
    # (Qi et al. 2024 §2.1), and (p − 1)(F&B + B_full − 3W) against 6m (DualPipe README); ZB-V
    # the last rank's fill of p − 1 forwards against 6m.
    per = 3 if split else 6 if schedule == "zbv" else 0
    want = round((p - 1) / (per * m + p - 1) if per and p > 1 else _flush_bubble(p, m, v), 6)
    if abs(summary["bubble_fraction"] - want) > 5e-7:
        form = f"(p − 1)/({per}m + p − 1)" if per else "(p − 1)/(v·m + p − 1)"
        yield f"summary.bubble_fraction {summary['bubble_fraction']}, but {form} at p = {p}, m = {m}, v = {v} is {want}"
