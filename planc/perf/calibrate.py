"""Fit a few efficiency parameters to measured step times (least squares, numpy only).

The fitted parameters (by default): the GEMM curve's `peak_fraction` and `half_dim`, and the
bus-bandwidth efficiency of the NVLink and network links (one number per link, shared by all
collectives); and where the runs include Megatron-LM MoE layers, τ_e of each (release, recipe of
the expert GEMMs) they run (`planc.perf.expert_host`: the time per local expert beyond the GPU's
work), from releases.json's value or, where it has none, from `HOST_PRIOR_S`. Residuals are relative, r_i = ln(predicted_i / measured_i), so a 2 % miss weighs
the same on a 1 s and a 100 s step. A weak ridge term, `RIDGE`·ln(θ/θ₀) per parameter, keeps a
parameter the data cannot see (the network in single-node runs) at its prior instead of
letting it wander. The minimiser is Levenberg–Marquardt (Marquardt 1963) with a
forward-difference Jacobian on ln θ, which keeps every parameter positive; efficiencies are
capped at 1.

:func:`leave_one_out` refits without each case in turn and predicts it: the honest error of a
calibration on data it did not see.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from types import MappingProxyType

import numpy as np

from planc.bounded import InputError, read_text
from planc.perf.expert_host import release_key
from planc.plannable import Plannable
from planc.presets.efficiency import COLLECTIVES, Efficiency, for_gpu, from_json, to_json
from planc.record import record

Predict = Callable[[Efficiency], float]

PARAMETERS = ("gemm.peak_fraction", "gemm.half_dim", "nvlink.efficiency", "network.efficiency")
RIDGE = 0.02
CAPPED = frozenset({"gemm.peak_fraction", "nvlink.efficiency", "network.efficiency"})


# A release's time per local expert is the parameter `expert_host:<release>:<recipe>`.
HOST = "expert_host"


def host_parameter(key: tuple[str, str]) -> str:
    """The name of τ_e of (release, recipe) as `fit` takes it."""
    return ":".join((HOST, *key))


def _host_key(name: str) -> tuple[str, str]:
    _, release, recipe = name.split(":")
    return release, recipe


def get(eff: Efficiency, name: str) -> float:
    """The value of parameter `name` (a link's efficiency is its all-reduce efficiency)."""
    if name.startswith(HOST):
        return eff.expert_host.get(_host_key(name), 0.0)
    section, field = name.split(".")
    if section == "gemm":
        value: float = getattr(eff.gemm, field)
        return value
    return eff.link(section).all_reduce


def put(eff: Efficiency, name: str, value: float) -> Efficiency:
    """`eff` with parameter `name` set (a link's efficiency sets every collective of it)."""
    if name.startswith(HOST):
        host = MappingProxyType({**eff.expert_host, _host_key(name): value})
        return replace(eff, expert_host=host)
    section, field = name.split(".")
    if name in CAPPED:
        value = min(value, 1.0)
    if name == "gemm.peak_fraction":
        return eff.with_peak_fraction(value)
    if section == "gemm":
        return eff.with_gemm(**{field: value})
    return eff.with_link(section, **dict.fromkeys(COLLECTIVES, value))


def with_values(eff: Efficiency, names: Sequence[str], values: Sequence[float]) -> Efficiency:
    for name, value in zip(names, values, strict=True):
        eff = put(eff, name, value)
    return eff


@record
class Fit:
    efficiency: Efficiency
    names: tuple[str, ...]
    values: tuple[float, ...]
    residuals: tuple[float, ...]  # relative errors (predicted − measured)/measured per case
    iterations: int


def levenberg_marquardt(
    residuals: Callable[[np.ndarray], np.ndarray],
    theta: np.ndarray,
    iterations: int = 100,
    tolerance: float = 1e-6,
) -> tuple[np.ndarray, int]:
    """θ minimising |residuals(θ)|² from `theta`, and the iterations taken: Levenberg-Marquardt
    with a forward-difference Jacobian (steps of 1e-4 in each coordinate), stopped when no
    coordinate moves `tolerance` or the damping passes 1e8."""
    damping = 1e-3
    r = residuals(theta)
    done = 0
    for done in range(1, iterations + 1):  # noqa: B007 - the count is reported
        jac = np.empty((len(r), len(theta)))
        for j in range(len(theta)):
            step = np.zeros_like(theta)
            step[j] = 1e-4
            jac[:, j] = (residuals(theta + step) - r) / 1e-4
        normal = jac.T @ jac
        gradient = jac.T @ r
        while True:
            delta = np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-12), -gradient)
            trial = theta + delta
            r_trial = residuals(trial)
            if r_trial @ r_trial < r @ r:
                theta, r, damping = trial, r_trial, damping / 3
                break
            damping *= 4
            if damping > 1e8:
                break
        if damping > 1e8 or float(np.max(np.abs(delta))) < tolerance:
            break
    return theta, done


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
    theta, done = levenberg_marquardt(
        partial(_residuals, cases, start, names, prior=prior, ridge=ridge), prior, iterations
    )
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


# --------------------------------------------------------------------------- measured runs

# What `planc calibrate` fits: the GEMM curve and each link's efficiency. The ridge keeps what
# the runs cannot see (the network on one node, half_dim without skinny GEMMs) at its prior.
CALIBRATED = (
    "gemm.peak_fraction",
    "gemm.half_dim",
    "nvlink.efficiency",
    "network.efficiency",
)


@record
class Run:
    """One measured run: a label (the spec path), the plannable job, its measured seconds per
    step, and its step time as a function of the efficiency tables (`planc.analysis.predictor`:
    the analysis `planc explain` runs, computed once, re-priced with each candidate)."""

    label: str
    job: Plannable
    measured_s: float
    predict: Predict


@record
class Calibration:
    fit: Fit
    runs: tuple[Run, ...]
    before: tuple[float, ...]  # relative error of each run with the starting tables
    leave_one_out: tuple[float, ...]  # relative error of each run from a fit without it


# What a measurements CSV may hold: a few KB of rows, each a path and a step time a real run
# can take (a tenth of a millisecond to a day), a path of at most a few thousand characters.
MEASUREMENTS_MAX_BYTES = 1024 * 1024
MAX_RUNS = 256
MIN_SECONDS = 1e-4
MAX_SECONDS = 86_400.0
MAX_FIELD = 4096
_SPEC_SUFFIXES = (".yaml", ".yml", ".json")


def _looks_like_header(cells: Sequence[str]) -> bool:
    """A header names its columns: no spec file in the first cell, no digit in the second."""
    return not cells[0].lower().endswith(_SPEC_SUFFIXES) and not any(c.isdigit() for c in cells[1])


def _seconds(cell: str, where: str) -> float:
    """A measured step time in seconds, in the range a real run can take, else ValueError."""
    try:
        seconds = float(cell)
    except ValueError:
        raise ValueError(f"{where}: {cell[:40]!r} is not a number of seconds") from None
    if not MIN_SECONDS <= seconds <= MAX_SECONDS:  # NaN fails this too
        raise ValueError(
            f"{where}: {cell[:40]} s per step is outside {MIN_SECONDS:g} to {MAX_SECONDS:g} s "
            "(a step takes milliseconds to hours; are these seconds?)"
        )
    return seconds


def read_measurements(path: str | Path) -> list[tuple[Path, float]]:
    """Rows `spec path, seconds per step` of a CSV file; paths relative to the file.

    The file is read bounded (`planc.bounded`, a regular file of at most
    `MEASUREMENTS_MAX_BYTES`). The first row that is not blank or a `#` comment is a header
    when its second cell is not a number and it looks like one (`_looks_like_header`); every
    other row is a measurement, its seconds between `MIN_SECONDS` and `MAX_SECONDS`. ValueError
    names the first bad row.
    """
    source = Path(path)
    try:
        text = read_text(str(source), MEASUREMENTS_MAX_BYTES)
    except InputError as error:
        raise ValueError(f"{source}: {error}") from None
    rows: list[tuple[Path, float]] = []
    first = True
    reader = csv.reader(io.StringIO(text, newline=""))
    while True:
        try:
            row = next(reader, None)
        except csv.Error as error:
            raise ValueError(f"{source}:{reader.line_num}: not a CSV row: {error}") from None
        if row is None:
            break
        where = f"{source}:{reader.line_num}"
        cells = [cell.strip() for cell in row]
        if not any(cells) or cells[0].startswith("#"):
            continue
        if len(cells) < 2 or any(len(cell) > MAX_FIELD for cell in cells):
            raise ValueError(
                f"{where}: expected `spec path, seconds per step` "
                f"(two cells of at most {MAX_FIELD:,} characters)"
            )
        header, first = first, False
        if header and _looks_like_header(cells):
            try:
                float(cells[1])
            except ValueError:
                continue
        rows.append((source.parent / cells[0], _seconds(cells[1], where)))
        if len(rows) > MAX_RUNS:
            raise ValueError(f"{where}: more than {MAX_RUNS} measurements; calibrate fewer runs")
    if not rows:
        raise ValueError(f"{source}: no measurements")
    return rows


def calibrate_runs(
    runs: Sequence[Run],
    start: Efficiency | None = None,
    names: Sequence[str] = CALIBRATED,
    ridge: float = RIDGE,
) -> Calibration:
    """Fit `names` to the runs (all on one GPU type) and the leave-one-out errors."""
    gpus = {run.job.cluster.gpu.name for run in runs}
    if len(gpus) != 1:
        raise ValueError(f"calibrate runs of one GPU type at a time, got {sorted(gpus)}")
    gpu = runs[0].job.cluster.gpu
    first = start or for_gpu(gpu.name, gpu.memory_bandwidth_gbs)
    keys = sorted({key for run in runs if (key := release_key(run.job)) is not None})
    names = (*names, *(host_parameter(key) for key in keys))
    first = with_host_priors(first, keys)
    cases = [(run.predict, run.measured_s) for run in runs]
    _fittable(runs, [predict(first) for predict, _ in cases])
    result = fit(cases, first, names, ridge=ridge)
    _written_back(result.efficiency)
    before = tuple(predict(first) / measured - 1 for predict, measured in cases)
    loo = leave_one_out(cases, first, names, ridge) if len(cases) > 1 else ()
    return Calibration(result, tuple(runs), before, loo)


# τ_e's prior where releases.json has none (the software planc targets, BF16 of NeMo 25.11):
# a microsecond per expert, nothing a step can see. The fit works on ln τ_e, which a zero
# prior would put at −∞; the ridge pulls an unseen τ_e back to this, not to a real cost.
HOST_PRIOR_S = 1e-6


def with_host_priors(eff: Efficiency, keys: Sequence[tuple[str, str]]) -> Efficiency:
    """`eff` with τ_e of each of `keys` at least `HOST_PRIOR_S` (the fit's starting point)."""
    for key in keys:
        if eff.expert_host.get(key, 0.0) < HOST_PRIOR_S:
            eff = put(eff, host_parameter(key), HOST_PRIOR_S)
    return eff


# How far a measured step may be from the model with the starting tables, either way, and how
# far apart the runs' ratios may be. Efficiency tables move a step by the efficiency of what
# bounds it: a run 20 times slower than the model would need every kernel at 5 % of the
# preset's efficiency, and one faster than the model needs efficiencies above 1. Beyond that
# the rows are in other units or name the wrong specs, and a fit to them means nothing.
MAX_RATIO = 20.0


def _fittable(runs: Sequence[Run], predicted: Sequence[float]) -> None:
    """Refuse runs no efficiency tables can explain (ValueError names the run and the ratio)."""
    ratios = [run.measured_s / p for run, p in zip(runs, predicted, strict=True)]
    for run, p, ratio in zip(runs, predicted, ratios, strict=True):
        if not 1 / MAX_RATIO <= ratio <= MAX_RATIO:
            raise ValueError(
                f"{run.label}: measured {run.measured_s:.4g} s per step, {ratio:.3g} times the "
                f"model's {p:.4g} s; a fit moves a step by at most {MAX_RATIO:g} times either "
                "way (are the seconds in seconds, and is this the spec that ran?)"
            )
    spread = max(ratios) / min(ratios)
    if spread > MAX_RATIO:
        raise ValueError(
            f"the runs are {min(ratios):.3g} to {max(ratios):.3g} times the model's step times, "
            f"a spread of {spread:.3g} (at most {MAX_RATIO:g}): one set of efficiency tables "
            "cannot fit them (are all rows in the same units, on the same cluster?)"
        )


def _written_back(eff: Efficiency) -> None:
    """Refuse fitted tables that `hardware.calibration` would refuse to read back."""
    try:
        from_json(to_json(eff), "the fitted tables")
    except ValueError as error:
        raise ValueError(f"the fit left planc's bounds: {error}") from None


# The widest run label the table prints whole; a longer one keeps its end (the file name).
LABEL_WIDTH = 60


def _label(label: str, width: int) -> str:
    """`label` in at most `width` characters: whole, or '…' and its last width − 1."""
    return label if len(label) <= width else "…" + label[-(width - 1) :]


def render(cal: Calibration) -> str:
    """The table `planc calibrate` prints: each run before, after and left out, then the means.
    The run column is as wide as the longest label, up to `LABEL_WIDTH`."""
    width = min(LABEL_WIDTH, max([len("run"), *(len(run.label) for run in cal.runs)]))
    lines = [f"{'run':<{width}}  measured   fitted  before   after  left-out"]
    for i, run in enumerate(cal.runs):
        after = cal.fit.residuals[i]
        predicted = run.measured_s * (1 + after)
        loo = f"{cal.leave_one_out[i]:+7.1%}" if cal.leave_one_out else "      -"
        lines.append(
            f"{_label(run.label, width):<{width}} {run.measured_s:9.3f} {predicted:8.3f} "
            f"{cal.before[i]:+7.1%} {after:+7.1%}  {loo}"
        )

    def mean(values: Sequence[float]) -> str:
        return f"{sum(abs(v) for v in values) / len(values):.1%}" if values else "-"

    lines.append(
        f"mean absolute error: before {mean(cal.before)}, after {mean(cal.fit.residuals)}, "
        f"leave-one-out {mean(cal.leave_one_out)}"
    )
    lines += [
        f"  {name} = {value:.6g}" for name, value in zip(cal.fit.names, cal.fit.values, strict=True)
    ]
    note = underdetermined(cal)
    return "\n".join([*lines, *([note] if note else [])]) + "\n"


def underdetermined(cal: Calibration) -> str:
    """A warning when fewer runs than parameters were fitted: the runs cannot decide every
    parameter, and the ridge holds the undecided ones near the starting tables ('' when the
    fit is determined)."""
    n, k = len(cal.runs), len(cal.fit.names)
    if n >= k:
        return ""
    return (
        f"warning: {k} parameters fitted to {n} run{'s' if n != 1 else ''}: the fit is "
        f"underdetermined (at least {k - n} parameter{'s' if k - n != 1 else ''} rest on the "
        f"starting tables, held there by the ridge); measure at least {k} runs that differ in "
        "layout and size"
    )


def calibration_json(cal: Calibration, measurements: str) -> str:
    """The calibration file: one GPU's entry of efficiency.json, with where it came from."""
    names = ", ".join(cal.fit.names)
    source = (
        f"planc calibrate: {names} fitted by least squares to {len(cal.runs)} measured step "
        f"times in {measurements}; mean leave-one-out error "
        + (
            f"{sum(abs(v) for v in cal.leave_one_out) / len(cal.leave_one_out):.1%}"
            if cal.leave_one_out
            else "n/a (one run)"
        )
    )
    data = to_json(cal.fit.efficiency, source)
    if cal.leave_one_out:
        # What planc explain, the report and search quote beside a step time priced with it.
        worst = max(cal.leave_one_out, key=abs)
        data["accuracy"] = {
            "runs": len(cal.leave_one_out),
            "mean_abs_error": round(
                sum(abs(v) for v in cal.leave_one_out) / len(cal.leave_one_out), 4
            ),
            "worst_error": round(worst, 4),
        }
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
