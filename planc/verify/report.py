"""Run every check on a plan.json text and render what each found."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from planc.record import record
from planc.verify import grid, pipeline, traffic
from planc.verify.plandata import PlanData, PlanFormatError, read_plan
from planc.verify.rings import RingRun, rings

MAX_SHOWN = 5  # problems shown per check; the count says how many more


@record
class Problem:
    check: str
    message: str


@record
class CheckResult:
    name: str
    scope: str  # what was looked at, for the reader
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


@record
class Verification:
    checks: tuple[CheckResult, ...]
    rings: tuple[RingRun, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks) and all(not r.problems for r in self.rings)

    @property
    def problems(self) -> tuple[Problem, ...]:
        found = [Problem(c.name, p) for c in self.checks for p in c.problems]
        found += [Problem(f"{r.op} on {r.group}", p) for r in self.rings for p in r.problems]
        return tuple(found)


def _run(
    name: str, scope: str, check: Callable[[PlanData], Iterable[str]], plan: PlanData
) -> CheckResult:
    try:
        return CheckResult(name, scope, tuple(check(plan)))
    except OverflowError:
        return CheckResult(name, scope, ("its numbers do not fit in 64 bits",))


def verify_plan(plan: PlanData) -> Verification:
    world = len(plan.rank)
    kinds = ", ".join(
        f"{k} {v.shape[0]}×{v.shape[1]}" for k, v in plan.groups.items() if v.ndim == 2
    )
    pipe_scope = (
        "pattern, Megatron's order, simulated send/receive pairs"
        if pipeline.simulated(plan)
        else "pattern and send counts (too long to simulate)"
    )
    first = _run("world and degrees", f"{world:,} ranks", grid.world, plan)
    if not first.ok:
        # Every other check indexes ranks by the degrees; they mean nothing until these agree.
        return Verification((first,), ())
    checks = (
        first,
        _run(
            "rank placement",
            "coordinates, node, local rank, rail, NVLink domain",
            grid.placement,
            plan,
        ),
        _run("stage layers", f"{len(plan.stage_layers)} stages", grid.stages, plan),
        _run("process groups", kinds, grid.groups, plan),
        _run("optimizer shards", "position in the dp_cp group", grid.optimizer_shards, plan),
        _run("memory records", "totals and the summary's peak", grid.memory, plan),
        _run("ops from tensor shapes", f"{len(plan.ops)} ops", traffic.ops, plan),
        _run(
            "op times",
            "time per call alike for alike calls, growing with bytes",
            traffic.times,
            plan,
        ),
        _run(
            "link tiers",
            "the smallest fabric tier holding each group, and each pipeline send's pair",
            traffic.links,
            plan,
        ),
        _run("wire bytes per rank", "sent and received per fabric tier", traffic.wire, plan),
        _run("pipeline", pipe_scope, pipeline.pipeline, plan),
        _run("pipeline bubble", "summary.bubble_fraction from p, m and v", pipeline.bubble, plan),
    )
    # Rings need groups whose members are ranks of this plan; a broken grid is reported above.
    ring_runs = tuple(rings(plan)) if checks[0].ok and checks[1].ok else ()
    return Verification(checks, ring_runs)


def verify_text(text: str) -> Verification:
    """Verify plan.json text. Raises PlanFormatError when it is not a readable plan."""
    return verify_plan(read_plan(text))


def render(result: Verification) -> str:
    lines = [f"{'check':<24}{'status':<8}scope"]
    for check in result.checks:
        lines.append(f"{check.name:<24}{'ok' if check.ok else 'FAILED':<8}{check.scope}")
        lines += [f"    {p}" for p in check.problems[:MAX_SHOWN]]
        if len(check.problems) > MAX_SHOWN:
            lines.append(f"    ... and {len(check.problems) - MAX_SHOWN} more")
    for run in result.rings:
        status = "ok" if not run.problems else "FAILED"
        what = run.note or (
            f"{run.simulated} of {run.groups:,} groups of {run.group_size} simulated at "
            f"{run.elements:,} int64 elements per rank"
        )
        lines.append(
            f"{('exchange ' if run.op == 'all_to_all' else 'ring ') + run.op:<24}{status if not run.note else 'skipped':<8}groups.{run.group}: {what}"
        )
        lines += [f"    {p}" for p in run.problems[:MAX_SHOWN]]
    lines.append(
        "verified: the plan's groups, placement, bytes and pipeline are what its shape gives"
        if result.ok
        else f"verification FAILED: {len(result.problems)} problem(s)"
    )
    return "\n".join(lines) + "\n"


__all__ = ["PlanFormatError"]
