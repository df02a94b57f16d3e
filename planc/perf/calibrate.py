"""Fit a few efficiency parameters to measured step times (least squares, numpy only).

The fitted parameters (by default): the GEMM curve's `peak_fraction` and `half_dim`, and the
bus-bandwidth efficiency of the NVLink and network links (one number per link, shared by all
collectives). Residuals are relative, r_i = ln(predicted_i / measured_i), so a 2 % miss weighs
the same on a 1 s and a 100 s step. A weak ridge term, `RIDGE`·ln(θ/θ₀) per parameter, keeps a
parameter the data cannot see (the network in single-node runs) at its prior instead of
letting it wander. The minimiser is Levenberg–Marquardt (Marquardt 1963) with a
forward-difference Jacobian on ln θ, which keeps every parameter positive; efficiencies are
capped at 1.

:func:`leave_one_out` refits without each case in turn and predicts it: the honest error of a
calibration on data it did not see.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from planc.perf.efficiency import COLLECTIVES, Efficiency

Predict = Callable[[Efficiency], float]

PARAMETERS = ("gemm.peak_fraction", "gemm.half_dim", "nvlink.efficiency", "network.efficiency")
RIDGE = 0.02
CAPPED = frozenset({"gemm.peak_fraction", "nvlink.efficiency", "network.efficiency"})


def get(eff: Efficiency, name: str) -> float:
    """The value of parameter `name` (a link's efficiency is its all-reduce efficiency)."""
    section, field = name.split(".")
    if section == "gemm":
        value: float = getattr(eff.gemm, field)
        return value
    return eff.link(section).all_reduce


def put(eff: Efficiency, name: str, value: float) -> Efficiency:
    """`eff` with parameter `name` set (a link's efficiency sets every collective of it)."""
    section, field = name.split(".")
    if name in CAPPED:
        value = min(value, 1.0)
    if section == "gemm":
        return eff.with_gemm(**{field: value})
    return eff.with_link(section, **dict.fromkeys(COLLECTIVES, value))


def with_values(eff: Efficiency, names: Sequence[str], values: Sequence[float]) -> Efficiency:
    for name, value in zip(names, values, strict=True):
        eff = put(eff, name, value)
    return eff


@dataclass(frozen=True)
class Fit:
    efficiency: Efficiency
    names: tuple[str, ...]
    values: tuple[float, ...]
    residuals: tuple[float, ...]  # relative errors (predicted − measured)/measured per case
    iterations: int


def _residuals(
    cases: Sequence[tuple[Predict, float]],
    eff: Efficiency,
    names: Sequence[str],
    log_theta: np.ndarray,
    prior: np.ndarray,
    ridge: float,
) -> np.ndarray:
    trial = with_values(eff, names, [math.exp(x) for x in log_theta])
    data = [math.log(predict(trial) / measured) for predict, measured in cases]
    pull = [ridge * (x - x0) for x, x0 in zip(log_theta, prior, strict=True)]
    return np.array(data + pull)


def fit(
    cases: Sequence[tuple[Predict, float]],
    start: Efficiency,
    names: Sequence[str] = PARAMETERS,
    iterations: int = 100,
    ridge: float = RIDGE,
) -> Fit:
    """Least-squares fit of `names` so that each `predict(eff)` meets its measured seconds."""
    if not cases:
        raise ValueError("calibration needs at least one measurement")
    prior = np.array([math.log(get(start, n)) for n in names])
    theta = prior.copy()
    damping = 1e-3
    r = _residuals(cases, start, names, theta, prior, ridge)
    done = 0
    for done in range(1, iterations + 1):  # noqa: B007 - the count is reported
        jac = np.empty((len(r), len(names)))
        for j in range(len(names)):
            step = np.zeros_like(theta)
            step[j] = 1e-4
            jac[:, j] = (_residuals(cases, start, names, theta + step, prior, ridge) - r) / 1e-4
        normal = jac.T @ jac
        gradient = jac.T @ r
        while True:
            delta = np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-12), -gradient)
            trial = theta + delta
            r_trial = _residuals(cases, start, names, trial, prior, ridge)
            if r_trial @ r_trial < r @ r:
                theta, r, damping = trial, r_trial, damping / 3
                break
            damping *= 4
            if damping > 1e8:
                break
        if damping > 1e8 or float(np.max(np.abs(delta))) < 1e-6:
            break
    values = tuple(
        min(math.exp(x), 1.0) if n in CAPPED else math.exp(x)
        for n, x in zip(names, theta, strict=True)
    )
    final = with_values(start, names, values)
    errors = tuple(predict(final) / measured - 1 for predict, measured in cases)
    return Fit(final, tuple(names), values, errors, done)


def leave_one_out(
    cases: Sequence[tuple[Predict, float]],
    start: Efficiency,
    names: Sequence[str] = PARAMETERS,
    ridge: float = RIDGE,
) -> tuple[float, ...]:
    """Relative error on each case of a fit made without it."""
    out = []
    for i, (predict, measured) in enumerate(cases):
        rest = [case for j, case in enumerate(cases) if j != i]
        if not rest:
            out.append(predict(start) / measured - 1)
            continue
        fitted = fit(rest, start, names, ridge=ridge).efficiency
        out.append(predict(fitted) / measured - 1)
    return tuple(out)
