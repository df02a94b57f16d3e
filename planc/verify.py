"""Verify: run the plan's collectives through the embedded numpy ring simulator.

For every group kind and op the communication schedule names, simulate the ring collective on
seeded integer-valued buffers and check (1) every rank holds the reduced result (exactly: the
values are integers) and (2) the bytes each rank sent equal the ring formula. Buffers are scaled
down to at most `CAP` elements per rank; the byte formula is then checked at the real size
analytically: the plan's per-call figure must equal the mean over ranks of the simulator's
formula, ⌈Σ_i sent_i / n⌉, which for even chunks is the NCCL bus factor times the buffer.

Pipeline sends and receives are matched by building the stage op lists and running the
discrete-event simulation, which pairs every send with one receive and refuses a deadlock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from planc.comm.schedule import CommOp, activation_bytes, grad_bytes
from planc.plannable import Plannable
from planc.sim import (
    chunk_sizes,
    ring_all_gather,
    ring_all_gather_bytes,
    ring_allreduce,
    ring_allreduce_bytes,
    ring_reduce_scatter,
    ring_reduce_scatter_bytes,
)
from planc.vocab import Collective, GroupKind

CAP = 1 << 20  # elements per rank in the simulated buffers

Sim = Callable[[npt.NDArray[np.int64]], tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]
Formula = Callable[[int, int, int], npt.NDArray[np.int64]]
_RING: Mapping[str, tuple[Sim, Formula]] = MappingProxyType(
    {
        "all_reduce": (ring_allreduce, ring_allreduce_bytes),
        "reduce_scatter": (ring_reduce_scatter, ring_reduce_scatter_bytes),
        "all_gather": (ring_all_gather, ring_all_gather_bytes),
    }
)


@dataclass(frozen=True)
class Check:
    """One verified (group kind, op, group size, buffer) shape and what it stands for."""

    group: str
    op: str
    group_size: int
    buffer_bytes: int
    simulated_elements: int
    scaled: bool
    stands_for: int  # how many process groups of the plan share this shape
    result_ok: bool
    bytes_ok: bool
    plan_bytes: int
    ring_bytes: int
    detail: str

    @property
    def ok(self) -> bool:
        return self.result_ok and self.bytes_ok


def _result_ok(op: str, buffers: npt.NDArray[np.int64], out: npt.NDArray[np.int64]) -> bool:
    """Every rank holds what the collective promises, computed here without the ring."""
    n, m = buffers.shape
    if op == "all_reduce":
        return bool(np.array_equal(out, np.broadcast_to(buffers.sum(axis=0), buffers.shape)))
    bounds = np.concatenate(([0], np.cumsum(chunk_sizes(n, m))))
    chunks = [slice(bounds[r], bounds[r + 1]) for r in range(n)]
    if op == "reduce_scatter":
        total = buffers.sum(axis=0)
        return all(np.array_equal(out[r, chunk], total[chunk]) for r, chunk in enumerate(chunks))
    own = np.concatenate([buffers[r, chunk] for r, chunk in enumerate(chunks)])
    return bool(np.array_equal(out, np.broadcast_to(own, buffers.shape)))


def check_collective(op: CommOp, itemsize: int, stands_for: int, seed: int = 0) -> Check:
    """Simulate one collective shape and compare results and bytes with the plan."""
    simulate, formula = _RING[op.op]
    n = op.group_size
    elements = op.buffer_bytes // itemsize
    simulated = min(elements, CAP)
    rng = np.random.default_rng(seed)
    buffers = rng.integers(-1000, 1000, size=(n, simulated), dtype=np.int64)
    out, sent = simulate(buffers)
    result_ok = _result_ok(op.op, buffers, out)
    sim_formula = formula(n, simulated, 8)
    bytes_sim_ok = bool(np.array_equal(sent, sim_formula))
    real = formula(n, elements, itemsize)
    ring_mean = -(-int(real.sum()) // n)
    bytes_ok = bytes_sim_ok and ring_mean == op.bytes_sent
    detail = (
        ""
        if bytes_ok
        else (
            f"simulator sent {sent.tolist()[:4]}... vs formula {sim_formula.tolist()[:4]}..."
            if not bytes_sim_ok
            else f"plan says {op.bytes_sent} bytes per call, the ring sends {ring_mean} on average"
        )
    )
    return Check(
        op.group,
        op.op,
        n,
        op.buffer_bytes,
        simulated,
        simulated < elements,
        stands_for,
        result_ok,
        bytes_ok,
        op.bytes_sent,
        ring_mean,
        detail,
    )


def _groups_per_stage(job: Plannable, op: CommOp) -> int:
    """How many groups of this kind one pipeline stage has: (world/p)/n, or world/p embedding
    pairs (each pairs a first-stage rank with a last-stage rank)."""
    ranks = job.world // job.layout.p
    return ranks if op.group is GroupKind.EMBEDDING else ranks // op.group_size


def verify_collectives(job: Plannable, ops: tuple[CommOp, ...]) -> tuple[Check, ...]:
    """One check per distinct (group, op, size, buffer) shape, with how many groups it stands for."""
    shapes: dict[tuple[str, str, int, int], list[CommOp]] = {}
    for op in ops:
        if op.op in _RING and op.group_size > 1:
            shapes.setdefault((op.group, op.op, op.group_size, op.buffer_bytes), []).append(op)
    checks = []
    for key in sorted(shapes):
        same = shapes[key]
        first = same[0]
        # Gradients travel as grad_bytes elements; activations and gathered weights as β_a.
        gradients = (
            first.group in (GroupKind.DP_CP, GroupKind.EMBEDDING)
            and first.op is not Collective.ALL_GATHER
        )
        itemsize = grad_bytes(job) if gradients else activation_bytes(job)
        groups = sum(_groups_per_stage(job, op) for op in same)
        if first.group is GroupKind.EMBEDDING:
            groups //= 2  # listed once for the first and once for the last stage
        checks.append(check_collective(first, itemsize, groups))
    return tuple(checks)


@dataclass(frozen=True)
class PipelineCheck:
    messages: int
    expected: int
    bubble_fraction: float
    ok: bool
    detail: str


def verify_pipeline(job: Plannable, ops: tuple[CommOp, ...]) -> PipelineCheck | None:
    """Every send meets its receive, no deadlock, and the p2p count equals the plan's."""
    from planc.pipeline import DeadlockError, build_schedule, simulate

    lay, m = job.layout, job.m
    if lay.p == 1:
        return None
    expected = sum(op.calls for op in ops if op.group is GroupKind.PP)
    try:
        timeline = simulate(build_schedule(lay.p, m, lay.v), 1, 2, 0)
    except (DeadlockError, ValueError) as error:
        return PipelineCheck(0, expected, 0.0, False, str(error))
    count = len(timeline.messages)
    ok = count == expected
    return PipelineCheck(
        count,
        expected,
        float(timeline.bubble_fraction),
        ok,
        "" if ok else f"the schedule sends {count} messages, the plan budgets {expected}",
    )


def render(checks: tuple[Check, ...], pipe: PipelineCheck | None) -> str:
    lines = [
        f"{'group':<10}{'op':<15}{'n':>5}{'buffer MiB':>12}{'simulated':>11}{'groups':>7}  "
        f"{'result':<7}{'bytes/call':>14}  status"
    ]
    for c in checks:
        lines.append(
            f"{c.group:<10}{c.op:<15}{c.group_size:>5}{c.buffer_bytes / 2**20:>12.2f}"
            f"{c.simulated_elements:>11}{c.stands_for:>7}  {'exact' if c.result_ok else 'WRONG':<7}"
            f"{c.plan_bytes:>14}  {'ok' if c.ok else 'MISMATCH ' + c.detail}"
        )
    if any(c.scaled for c in checks):
        lines.append(
            f"buffers above {CAP:,} elements per rank were simulated at {CAP:,}; their bytes "
            "are checked at the real size with the simulator's exact ring formula"
        )
    if pipe is not None:
        status = "ok" if pipe.ok else "MISMATCH " + pipe.detail
        lines.append(
            f"pipeline: {pipe.messages} p2p messages matched send-to-receive, no deadlock, "
            f"bubble {pipe.bubble_fraction:.2%} (t_b = 2·t_f); plan budgets {pipe.expected}: {status}"
        )
    ok = all(c.ok for c in checks) and (pipe is None or pipe.ok)
    lines.append(
        "verified: the plan's groups reduce correctly and move the bytes it budgets"
        if ok
        else "verification FAILED"
    )
    return "\n".join(lines) + "\n"
