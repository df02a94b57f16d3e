"""Rules on the whole run: a checkpoint that cannot finish inside its interval, an interval
far from the optimum, and goodput under a threshold (`planc.run`).

They run only for a spec with a checkpoint section (and hardware.storage), and price the step
with `estimate_step` (the interval is counted in steps): the one place `planc check` estimates
a step, and only for the specs that ask for a run.
"""

from __future__ import annotations

from collections.abc import Iterator

from planc.analysis import Analysis, estimate_step
from planc.findings import Severity
from planc.rules.base import Context, Needs, Option, Violation, rule
from planc.run import CheckpointCost
from planc.run.estimate import checkpoint_cost

MAX_GOODPUT_LOSS = Option(
    "max_goodput_loss",
    0.01,
    "Goodput the checkpoint interval may lose against Daly's optimal interval, as a fraction",
    ge=0.0,
    lt=1.0,
)
MIN_GOODPUT = Option(
    "min_goodput",
    0.80,
    "Least goodput (training time over wall time, with checkpoints, lost work and restarts)",
    ge=0.0,
    le=1.0,
)


def _cost(analysis: Analysis | None) -> tuple[CheckpointCost, float] | None:
    """The checkpoint's cost and the step time, or None without a checkpoint section."""
    if analysis is None or analysis.plan.run.checkpoint is None:
        return None
    step_s = estimate_step(analysis).step_time_s
    cost = checkpoint_cost(analysis, step_s, 0)
    return None if cost is None else (cost, step_s)


def _save_s(cost: CheckpointCost) -> float:
    """What must fit in the interval: the background write of an asynchronous save, the whole
    save of a synchronous one."""
    return cost.background_s if cost.background_s else cost.save_s


def _fitting(analysis: Analysis | None) -> tuple[CheckpointCost, float] | None:
    """`_cost` when the save fits its interval (else PLC045 says so, and the goodput it
    leaves is beside the point)."""
    found = _cost(analysis)
    return found if found is not None and _save_s(found[0]) <= found[0].interval_s else None


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:,.1f} min"


def _steps(n: int) -> str:
    return "step" if n == 1 else f"{n:,} steps"


@rule("PLC045", needs=Needs.ANALYSIS)
def checkpoint_fits_interval(ctx: Context) -> Iterator[Violation]:
    """Checkpoint: one save finishes inside the interval between saves.

    planc sizes a checkpoint from the memory budget (weights and optimizer state per rank, as
    the framework's saver writes them) and times it against `hardware.storage`: the aggregate
    write bandwidth and each node's, whichever is slower. A synchronous save that takes longer
    than the training between two saves spends more time saving than training; an asynchronous
    save's background write must finish before the next save starts, or saves queue up. The
    interval is `checkpoint.interval` steps times planc's step estimate.

    Passes:
        hardware: {storage: {write_gbs: 100, node_write_gbs: 10}}
        checkpoint: {interval: 100}

    Fails:
        hardware: {storage: {write_gbs: 100, node_write_gbs: 0.1}}
        checkpoint: {interval: 100}
    """
    found = _cost(ctx.analysis)
    if found is None:
        return
    cost, step_s = found
    save = _save_s(cost)
    if save <= cost.interval_s:
        return
    steps = -(-save // step_s)
    what = "background write" if cost.background_s else "synchronous save"
    yield Violation(
        "checkpoint.interval",
        f"a {what} of {cost.size.total_bytes / 1e9:,.1f} GB ({cost.size.node_bytes / 1e9:,.1f} "
        f"GB per node) takes {_minutes(save)}, longer than the {_steps(cost.interval_steps)} "
        f"({_minutes(cost.interval_s)} at {step_s:.2f} s a step) between saves",
        f"checkpoint every {_steps(int(steps))} or more (interval: optimal picks Daly's), or "
        "give the storage more bandwidth (hardware.storage.node_write_gbs, write_gbs)",
        ("hardware.storage",),
    )


@rule("PLC046", Severity.WARNING, Needs.ANALYSIS, options=(MAX_GOODPUT_LOSS,))
def interval_near_optimum(ctx: Context) -> Iterator[Violation]:
    """Checkpoint interval: within rules.max_goodput_loss of the goodput of the optimal one.

    Too frequent a checkpoint spends the run saving; too rare a one loses more work at every
    interruption. Daly's interval (Daly 2006, "A higher order estimate of the optimum
    checkpoint interval for restart dumps") balances the two for the save that blocks training
    and the job's mean time between interruptions (the GPU count over `reliability`'s per-GPU
    rate; default Llama 3's). A save that does not fit its interval at all is PLC045's. The
    rule compares the goodput at `checkpoint.interval` with the
    goodput at Daly's interval, both in Daly's complete model of failures and restarts.

    Passes:
        hardware: {storage: {write_gbs: 100, node_write_gbs: 10}}
        checkpoint: {interval: optimal}

    Fails:
        hardware: {storage: {write_gbs: 1000, node_write_gbs: 100}}
        checkpoint: {interval: 1}
    """
    found = _fitting(ctx.analysis)
    if found is None:
        return
    cost, step_s = found
    loss = cost.optimal_goodput - cost.goodput
    if loss <= ctx.option(MAX_GOODPUT_LOSS):
        return
    best = max(1, round(cost.optimal_s / step_s))
    yield Violation(
        "checkpoint.interval",
        f"checkpointing every {_steps(cost.interval_steps)} ({_minutes(cost.interval_s)}) gives "
        f"{cost.goodput:.1%} goodput, {loss:.1%} below the {cost.optimal_goodput:.1%} of Daly's "
        f"interval, {_minutes(cost.optimal_s)} (a {cost.blocking_s:.1f} s save, a job MTBF of "
        f"{cost.mtbf_s / 3600:,.2f} h)",
        f"write interval: optimal, or about {best:,} steps",
        ("checkpoint",),
    )


@rule("PLC047", Severity.WARNING, Needs.ANALYSIS, options=(MIN_GOODPUT,))
def goodput_above_threshold(ctx: Context) -> Iterator[Violation]:
    """Goodput: training time over wall time stays above rules.min_goodput.

    Goodput is the share of the wall clock that advances training, after the checkpoints' own
    time, the work lost since the last save at each interruption and the restarts (Daly 2006's
    complete model: E[T] = M·e^{R/M}·(e^{(τ+δ)/M} − 1) per interval τ, δ the blocking save,
    R the restart with the checkpoint's load, M the job's MTBF). Llama 3 405B kept more than
    90 % on 16,384 GPUs with about one interruption every three hours.

    Passes:
        hardware: {storage: {write_gbs: 100, node_write_gbs: 10}}
        checkpoint: {}

    Fails:
        hardware: {storage: {write_gbs: 100, node_write_gbs: 10}}
        checkpoint: {}
        reliability: {gpu_mtbf_hours: 10, restart_minutes: 60}
    """
    found = _fitting(ctx.analysis)
    if found is None:
        return
    cost, _ = found
    least = ctx.option(MIN_GOODPUT)
    if cost.goodput >= least:
        return
    yield Violation(
        "reliability",
        f"goodput {cost.goodput:.1%} is below {least:.0%}: a job MTBF of "
        f"{cost.mtbf_s / 3600:,.2f} h, a restart of {_minutes(cost.restart_s)} and a "
        f"{cost.blocking_s:.1f} s save every {_minutes(cost.interval_s)}",
        "shorten the restart (reliability.restart_minutes: faster detection, warm spares), "
        "save asynchronously (checkpoint.async_save) or on faster storage, or use fewer, more "
        "reliable GPUs",
        ("checkpoint",),
    )
