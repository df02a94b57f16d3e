"""Interruptions, the optimal checkpoint interval, and goodput.

Failures are a Poisson process: independent, at a constant rate per GPU, so the job's mean time
between interruptions is the GPU's over the GPU count. Symbols (Daly 2006): M the job's MTBF,
δ the checkpoint cost that blocks training, τ the compute time between checkpoints, R the
restart time (every second from an interruption to training again: detection, rescheduling,
rendezvous, loading the checkpoint). All times in seconds.
"""

from __future__ import annotations

import math

HOUR = 3600.0


def job_mtbf_s(gpu_mtbf_hours: float, gpus: int) -> float:
    """M = M_GPU/N seconds: N GPUs failing independently at rate 1/M_GPU each fail at N/M_GPU
    (Llama 3 405B: 16,384 GPUs, 419 interruptions in 54 days, M = 3.09 h; Dubey et al. 2024,
    §3.3.4)."""
    return gpu_mtbf_hours * HOUR / gpus


def young_interval_s(delta_s: float, mtbf_s: float) -> float:
    """τ = √(2δM): Young's first-order optimum (Young 1974, "A first order approximation to the
    optimum checkpoint interval", CACM 17(9))."""
    return math.sqrt(2.0 * delta_s * mtbf_s)


def daly_interval_s(delta_s: float, mtbf_s: float) -> float:
    """τ = √(2δM)·[1 + ⅓·√(δ/2M) + (1/9)·(δ/2M)] − δ for δ < 2M, else M: Daly's higher-order
    optimum (Daly 2006, "A higher order estimate of the optimum checkpoint interval for restart
    dumps", FGCS 22(3), eq. 37). At δ = 0 there is nothing to save and the interval is 0."""
    if delta_s >= 2.0 * mtbf_s:
        return mtbf_s
    ratio = delta_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * delta_s * mtbf_s) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - delta_s


def expected_wall_s(tau_s: float, delta_s: float, restart_s: float, mtbf_s: float) -> float:
    """E[T] = M·e^{R/M}·(e^{(τ+δ)/M} − 1) seconds: the expected wall time of one segment of τ
    compute and its checkpoint δ under exponential failures, restarts (R) and failures during
    restarts and checkpoints included (Daly 2006, eq. 11, the "complete" model whose first order
    is τ + δ + (τ/2 + R)·τ/M)."""
    return mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1((tau_s + delta_s) / mtbf_s)


def goodput(tau_s: float, delta_s: float, restart_s: float, mtbf_s: float) -> float:
    """G = τ/E[T]: the fraction of wall time that advances training (Daly 2006's T_s/T_w). In
    (0, 1] for τ > 0; computed in logarithms so that long segments underflow gracefully."""
    if tau_s <= 0:
        return 0.0
    exponent = (tau_s + delta_s) / mtbf_s
    log_expm1 = (
        exponent + math.log1p(-math.exp(-exponent))
        if exponent > 1
        else math.log(math.expm1(exponent))
    )
    log_wall = math.log(mtbf_s) + restart_s / mtbf_s + log_expm1
    return min(1.0, math.exp(math.log(tau_s) - log_wall))


def first_order_waste(tau_s: float, delta_s: float, restart_s: float, mtbf_s: float) -> float:
    """W ≈ δ/τ + (τ/2 + R)/M: the checkpoint cost, the work lost (half a segment on average)
    and the restart, per unit of time (Young 1974; landscape 2026-12-01 §5.4); 1 − W is the
    first-order goodput, the expansion of `goodput` for τ, δ, R ≪ M."""
    return delta_s / tau_s + (tau_s / 2 + restart_s) / mtbf_s
