"""The step model's fitted parameters, refitted from the corpus's declared fit runs (issue 24).

Four GEMM curves of `planc/presets/efficiency.json` are fitted to step times, each to the runs
`validation/runs.json` declares `fit` on its GPU and to no other run:

* `a100-80gb`: e_max and d½, to Korthikanti et al. 2022 Table 5's four full-recompute runs;
* `h100-sxm`: e_max alone, to the three DGX Cloud Benchmarking 24.11 runs declared fit;
* `gb200-nvl72`: e_max alone, to the DGX Cloud Benchmarking 25.05 run declared fit (Llama 3.1
  405B on 128 GB200, the smallest point of the one dense model added with the GB200 corpus);
* `gb300-nvl72`: e_max alone, to the Megatron-Bridge 26.06 run declared fit (Llama 3.1 405B in
  FP8 current scaling on 256 GB300, the one dense model of the GB300 corpus in the recipe with
  the fewest kernels of its own), its FP8 and FP4 curves moving with it
  (`Efficiency.with_peak_fraction`).

One GPU has a clock fitted instead: `h100-sxm-hbm2e`, torchtitan's H100s at their 500 W limit,
is the H100 fit's die at a sustained clock ratio r fitted to the one run of that hardware
declared `fits: clock` (`CLOCKED`), the datasheets' ratio where that run is held out.

The H100 curve's shape term d½ (and that of every GPU derived from it) is not a step-time fit:
whole steps cannot resolve it (every corpus run's GEMMs have smallest dimensions in the
thousands). :func:`fit_gemm_table` measures it on a published per-shape GEMM table of the same
GPU generation (`validation/gemm_tables.json`, priced by `planc.perf.gemm_table`), and
:func:`shape_half_dim` gives the value efficiency.json holds.

Every other GPU's e_max is one of these times its measured matmul ceiling over the fitted GPU's
(`efficiency.json`'s sources), so a refit moves it by the same factor; the 500 W H100 above
takes every tensor-core rate of it (GEMMs, attention kernels, vector peak) as the H100's times
its clock (:func:`at_clock`, :func:`fit_clock`). :func:`refit` does the fit from a set of runs
(least squares on ln(predicted/measured), `planc.perf.calibrate.fit`, no ridge),
:func:`fold_predictor` prices any run with the curves a fit on other runs gives: the
leave-one-source-out errors of docs/validation.md. A GPU whose fit set is empty in a fold
falls back to its prior, the matmul ceiling measured on it (Bekman's MAMF table), which is
what planc would say with no step time of that generation at all.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from types import MappingProxyType

import numpy as np

from planc.analysis import Analysis, predictor
from planc.perf.calibrate import Fit, fit, levenberg_marquardt, with_values
from planc.perf.cast_table import PHASES, CastTable, measured_cast_s, predicted_cast_s
from planc.perf.expert_host import release_key
from planc.perf.gemm_table import GemmTable, row_seconds
from planc.perf.validation import Run
from planc.presets.efficiency import Efficiency, for_gpu
from planc.record import record
from planc.vocab import FitTarget, Fp8Recipe, RunRole


@record
class FittedCurve:
    """One fitted GEMM curve: the GPU, the parameters fitted, and the prior e_max a fit starts
    from when it has no run (the GPU's measured matmul ceiling, a fraction of its peak)."""

    gpu: str
    parameters: tuple[str, ...]
    prior_peak_fraction: float
    derived: tuple[str, ...]  # GPU presets whose e_max is this curve's times a fixed ratio
    # The GEMM table (validation/gemm_tables.json) whose fit gives d½ of this curve, of its FP8
    # curve and of every derived GPU's; empty: d½ is a step-time fit or held.
    shape_table: str = ""


@record
class ClockedPart:
    """A GPU that is a fitted GPU's die at a sustained clock of its own: every tensor-core rate
    (the GEMM curves of each data type, the attention kernels, the vector peak) is the die's
    times the clock ratio r; its HBM and links are its own. r is fitted to the GPU's runs
    declared `fits: clock` (least squares on ln(predicted/measured), :func:`fit_clock`), and
    without one in a fold it is `prior_clock`, the ratio its datasheets give."""

    gpu: str
    die: str  # the fitted GPU (a `FittedCurve.gpu`) whose tables it scales
    prior_clock: float


# The H100 at torchtitan's 500 W limit as its datasheets place it: its BF16 peak interpolated
# linearly in the power limit between H100 NVL (835 TFLOPS at 400 W) and H100 SXM5 (989 at
# 700 W), over the SXM5's: 886.3/989 = 0.8962 (the prior of its fitted clock).
H100_500W_CLOCK = (835.0 + (989.0 - 835.0) * (500.0 - 400.0) / (700.0 - 400.0)) / 989.0

# The MAMF fractions (Bekman, ml-engineering compute/accelerator, BF16): A100 SXM 86.9 %,
# H100 SXM 80.3 %, GB200 72.9 %. Blackwell's B200 is derived from GB200's fit (the same die), not
# from Hopper's, and the B300 from the B200's at an equal ceiling (no MAMF of Blackwell Ultra is
# published); GB200's d½ is held at Hopper's measured value, which OpenXLA's B200 table confirms
# within 4 % (`fit_gemm_table_timed`; tests/test_gemm_table.py).
FITTED = (
    FittedCurve(
        "a100-80gb", ("gemm.peak_fraction", "gemm.half_dim"), 0.869, ("a100-40gb", "mi300x")
    ),
    FittedCurve(
        "h100-sxm",
        ("gemm.peak_fraction",),
        0.803,
        ("h800", "h200"),
        "deepgemm-h800-fp8",
    ),
    FittedCurve("gb200-nvl72", ("gemm.peak_fraction",), 0.729, ("b200", "b300")),
    # Blackwell Ultra in an NVL72 rack: no matmul ceiling of its own is published; its prior is
    # the GB200's.
    FittedCurve("gb300-nvl72", ("gemm.peak_fraction",), 0.729, ()),
)
# torchtitan's H100s at their 500 W limit: "the actual peak TFLOPs number is between SXM and
# NVL, and we don't know its exact value" (benchmarks/llama3_h100_202412_torchtitan.md).
CLOCKED = (ClockedPart("h100-sxm-hbm2e", "h100-sxm", H100_500W_CLOCK),)

SHAPE = ("gemm.peak_fraction", "gemm.half_dim")


def fit_gemm_table(table: GemmTable, start: Efficiency | None = None) -> Fit:
    """e_max and d½ of the GEMM curve that prices `table`'s rows as measured: least squares on
    ln(predicted/measured) of each row's seconds (`planc.perf.gemm_table.row_seconds`, the step
    model's own GEMM time), no ridge. The curve fitted is the table's data type's of its GPU
    (`start`, by default the preset), put in the `gemm` slot of a scratch copy without
    per-dtype curves so that `calibrate.fit`'s `gemm.*` parameters are that curve's. Only d½ is
    kept (:func:`shape_half_dim`): the e_max of a single-kernel benchmark is not a training
    step's (efficiency.json's sources compare them)."""
    tables = start if start is not None else for_gpu(table.gpu)
    scratch = replace(
        tables, gemm=tables.gemm_for(table.dtype), gemm_by_dtype=MappingProxyType({})
    )
    cases = [(partial(row_seconds, table, row), row.measured_s) for row in table.rows]
    return fit(cases, scratch, SHAPE, ridge=0.0)


def shape_half_dim(table: GemmTable) -> float:
    """d½ measured on `table`, rounded to 0.1 as efficiency.json holds it."""
    return round(fit_gemm_table(table).values[1], 1)


@record
class TimedShape:
    """A table's GEMM curve fitted with a fixed time per kernel (:func:`fit_gemm_table_timed`)."""

    peak_fraction: float  # e_max of the single-kernel benchmark
    half_dim: float  # d½
    fixed_s: float  # t₀, seconds every kernel of the table takes whatever its size
    rms: float  # root mean square of ln(predicted/measured) over the rows


def fit_gemm_table_timed(table: GemmTable) -> TimedShape:
    """e_max, d½ and a fixed time t₀ per kernel that price `table`'s rows as measured: a row
    takes t₀ plus the step model's GEMM time (`row_seconds`); least squares on
    ln(predicted/measured), Levenberg-Marquardt on the logarithms of the three.

    For a benchmark whose rows reach down to a few microseconds (XLA's 256³ GEMM takes 5 µs),
    where a fit without t₀ reads the kernels' fixed time as a loss of data reuse and d½ comes
    out as large as the smallest rows make it. The step model keeps no t₀ on its matmuls: a
    training GEMM takes hundreds of microseconds, and every op already pays the HBM curve's
    fixed time."""
    tables = for_gpu(table.gpu)
    scratch = replace(
        tables, gemm=tables.gemm_for(table.dtype), gemm_by_dtype=MappingProxyType({})
    )
    measured = np.array([row.measured_s for row in table.rows])

    def residuals(theta: np.ndarray) -> np.ndarray:
        e, d, t0 = (math.exp(x) for x in theta)
        eff = scratch.with_gemm(peak_fraction=e, half_dim=d)
        seconds = np.array([t0 + row_seconds(table, row, eff) for row in table.rows])
        return np.asarray(np.log(seconds / measured))

    # From the preset's curve and a microsecond per kernel.
    start = (scratch.gemm.peak_fraction, scratch.gemm.half_dim, 1e-6)
    theta, _ = levenberg_marquardt(residuals, np.log(np.array(start)), 200, 1e-8)
    e, d, t0 = (math.exp(x) for x in theta)
    r = residuals(theta)
    return TimedShape(e, d, t0, float(np.sqrt(np.mean(r * r))))


@record
class CastFit:
    """Transformer Engine's casts fitted on a cast benchmark (:func:`fit_te_casts`)."""

    efficiency: float  # η: the fraction of the HBM peak the casts reach (efficiency.json te_casts)
    # (recipe, phase, ln(predicted/measured)) at η: of the rows the fit read, and of those held out
    fitted: tuple[tuple[str, str, float], ...]
    held_out: tuple[tuple[str, str, float], ...]


def fit_te_casts(table: CastTable) -> CastFit:
    """η at which planc's cast kernels (`planc.perf.cast_table.predicted_cast_s`, the step
    model's own) price the casts of `table`'s fit recipes as measured (`measured_cast_s`):
    least squares on ln(predicted/measured) over each fit recipe's three phases, no ridge,
    on the GPU's preset tables with only η changed. The held-out recipes are priced at the η
    found and read by nothing else."""
    tables = for_gpu(table.gpu)

    def errors(eta: float, recipes: Sequence[Fp8Recipe]) -> tuple[tuple[str, str, float], ...]:
        at = replace(tables, te_cast_efficiency=eta)
        return tuple(
            (r.value, phase, math.log(predicted_cast_s(table, r, phase, at) / measured))
            for r in recipes
            for phase in PHASES
            for measured in (measured_cast_s(table, r, phase),)
        )

    def residuals(theta: np.ndarray) -> np.ndarray:
        return np.array([e for *_, e in errors(math.exp(theta[0]), table.fit)])

    start = tables.te_cast_hbm.efficiency
    theta, _ = levenberg_marquardt(residuals, np.array([math.log(start)]), 100, 1e-12)
    eta = math.exp(float(theta[0]))
    return CastFit(eta, errors(eta, table.fit), errors(eta, table.held_out))


def te_cast_efficiency(table: CastTable) -> float:
    """η measured on `table`, rounded to 1e-4 as efficiency.json holds it."""
    return round(fit_te_casts(table).efficiency, 4)


def fit_runs(runs: Sequence[Run], gpu: str) -> tuple[Run, ...]:
    """The runs a fit of `gpu`'s curve reads: role fit of the GEMM curve, on that GPU."""
    return tuple(
        run
        for run in runs
        if run.role is RunRole.FIT and run.fits is FitTarget.GEMM and run.gpu == gpu
    )


def clock_runs(runs: Sequence[Run], gpu: str) -> tuple[Run, ...]:
    """The runs a fit of `gpu`'s clock reads: role fit, `fits: clock`, on that GPU."""
    return tuple(
        run
        for run in runs
        if run.role is RunRole.FIT and run.fits is FitTarget.CLOCK and run.gpu == gpu
    )


def expert_host_runs(runs: Sequence[Run]) -> tuple[Run, ...]:
    """The runs a fit of the releases' τ_e reads: role fit, `fits: expert_host`."""
    return tuple(
        run for run in runs if run.role is RunRole.FIT and run.fits is FitTarget.EXPERT_HOST
    )


Analyse = Callable[[Run], Analysis]


def refit(runs: Sequence[Run], analysed: Analyse) -> Mapping[str, Efficiency]:
    """Each fitted GPU's tables refitted to its fit runs among `runs` (the preset's parameters
    as the starting point), or at its prior e_max when it has none."""
    out: dict[str, Efficiency] = {}
    for curve in FITTED:
        start = for_gpu(curve.gpu)
        chosen = fit_runs(runs, curve.gpu)
        if not chosen:
            out[curve.gpu] = start.with_peak_fraction(curve.prior_peak_fraction)
            continue
        cases = [(predictor(analysed(run)), run.measured_s) for run in chosen]
        found = fit(cases, start, curve.parameters, ridge=0.0)
        out[curve.gpu] = with_values(start, curve.parameters, found.values)
    for part in CLOCKED:
        own, die = for_gpu(part.gpu), out[part.die]
        timed = [(predictor(analysed(run)), run.measured_s) for run in clock_runs(runs, part.gpu)]
        ratio = fit_clock(timed, own, die, part.prior_clock) if timed else part.prior_clock
        out[part.gpu] = at_clock(own, die, ratio)
    return MappingProxyType(out)


def at_clock(own: Efficiency, die: Efficiency, ratio: float) -> Efficiency:
    """`own` with every tensor-core rate `die`'s times `ratio` (each fraction at most 1): the
    16-bit GEMM e_max and each of its data types' curves, the attention kernels' fractions and
    the vector peak; HBM, links and shapes stay its own."""

    def scaled(value: float) -> float:
        return min(1.0, value * ratio)

    curves = {
        dtype: replace(curve, peak_fraction=scaled(die.gemm_by_dtype[dtype].peak_fraction))
        for dtype, curve in own.gemm_by_dtype.items()
    }
    moved = replace(
        own,
        gemm_by_dtype=MappingProxyType(curves),
        vector_tflops=die.vector_tflops * ratio,
        flash_forward=scaled(die.flash_forward),
        flash_backward=scaled(die.flash_backward),
        sdpa_forward=scaled(die.sdpa_forward),
        sdpa_backward=scaled(die.sdpa_backward),
        cudnn_forward=scaled(die.cudnn_forward),
        cudnn_backward=scaled(die.cudnn_backward),
        cudnn_by_seq=tuple((s, scaled(f), scaled(b)) for s, f, b in die.cudnn_by_seq),
    )
    return moved.with_gemm(peak_fraction=scaled(die.gemm.peak_fraction))


def fit_clock(
    cases: Sequence[tuple[Callable[[Efficiency], float], float]],
    own: Efficiency,
    die: Efficiency,
    start: float,
) -> float:
    """The clock ratio r whose tables (`at_clock`) price `cases` (predict, measured seconds)
    best: Gauss-Newton on x = ln r minimising Σ ln(predicted/measured)², from `start`."""

    def residuals(x: float) -> list[float]:
        tables = at_clock(own, die, math.exp(x))
        return [math.log(predict(tables) / measured) for predict, measured in cases]

    x = math.log(start)
    for _ in range(CLOCK_ITERATIONS):
        r = residuals(x)
        slope = [(b - a) / CLOCK_STEP for a, b in zip(r, residuals(x + CLOCK_STEP), strict=True)]
        dx = -sum(a * j for a, j in zip(r, slope, strict=True)) / sum(j * j for j in slope)
        x += dx
        if abs(dx) < CLOCK_TOLERANCE:
            break
    return math.exp(x)


# Gauss-Newton on ln r: a numerical slope over 1e-4, at most 50 steps, done below 1e-10.
CLOCK_STEP, CLOCK_ITERATIONS, CLOCK_TOLERANCE = 1e-4, 50, 1e-10


def tables_for(gpu: str, fitted: Mapping[str, Efficiency]) -> Efficiency | None:
    """The tables of `gpu` under `fitted`: a fitted GPU's own (a clocked part's at its fitted
    clock), a derived GPU's preset with its e_max scaled as its fitted GPU's moved; None for a
    GPU no fit reaches."""
    if gpu in fitted:
        return fitted[gpu]  # a fitted GPU, or one at its fitted clock (CLOCKED)
    for curve in FITTED:
        if gpu in curve.derived:
            ratio = fitted[curve.gpu].gemm.peak_fraction / for_gpu(curve.gpu).gemm.peak_fraction
            own = for_gpu(gpu)
            return own.with_peak_fraction(min(1.0, own.gemm.peak_fraction * ratio))
    return None


def fold_predictor(fit_set: Sequence[Run], analysed: Analyse) -> Callable[[Run], float]:
    """A run's predicted seconds per step with the curves and the releases' τ_e fitted to
    `fit_set` only (τ_e 0 for a release and recipe whose fit run is not in it)."""
    fitted = refit(fit_set, analysed)
    host = refit_expert_host(fit_set, analysed, fitted)

    def predict(run: Run) -> float:
        analysis = analysed(run)
        return predictor(analysis)(fold_tables(run, analysis, fitted, host))

    return predict


def fold_tables(
    run: Run,
    analysis: Analysis,
    fitted: Mapping[str, Efficiency],
    host: Mapping[tuple[str, str], float],
) -> Efficiency:
    """The tables that price `run` under a fit: its GPU's curves as `fitted` gives them (the
    analysis's own for a GPU no fit reaches) and τ_e of its release and recipe as `host` does."""
    tables = tables_for(run.gpu, fitted) or analysis.efficiency
    return replace(tables, expert_host=MappingProxyType(dict(host)))


# τ_e is solved to this relative tolerance (`solve_expert_host`).
HOST_TOLERANCE = 1e-6


def refit_expert_host(
    runs: Sequence[Run], analysed: Analyse, fitted: Mapping[str, Efficiency]
) -> Mapping[tuple[str, str], float]:
    """τ_e of each (release, recipe) of the expert-host fit runs among `runs`
    (`expert_host_runs`): the value at which planc's step time is the run's measured one, on
    the GEMM curves `fitted` gives (one run, one parameter: least squares is that root).
    ValueError for two fit runs of one release and recipe, or one whose MoE layers no
    release prices (a dense model, another framework)."""
    out: dict[tuple[str, str], float] = {}
    for run in expert_host_runs(runs):
        analysis = analysed(run)
        key = release_key(analysis.plan)
        if key is None or key in out:
            raise ValueError(f"{run.id}: not the one expert-host fit run of a release and recipe")
        tables = fold_tables(run, analysis, fitted, {})
        out[key] = solve_expert_host(
            partial(price_at_expert_host, analysis, tables, key), run.measured_s
        )
    return MappingProxyType(out)


def price_at_expert_host(
    analysis: Analysis, tables: Efficiency, key: tuple[str, str], tau: float
) -> float:
    """The analysed run's step under `tables` with τ_e of (release, recipe) `key` at `tau`."""
    host = MappingProxyType({**tables.expert_host, key: tau})
    return predictor(analysis)(replace(tables, expert_host=host))


def solve_expert_host(predict: Callable[[float], float], measured_s: float) -> float:
    """The τ_e ≥ 0 at which `predict(τ_e)` (increasing in it) is `measured_s`: bisection, to
    `HOST_TOLERANCE` of τ_e; 0 where the step is already no faster than measured."""
    if predict(0.0) >= measured_s:
        return 0.0
    low, high = 0.0, 1e-4
    while predict(high) < measured_s:
        low, high = high, 2 * high
        if high > 1.0:  # a second per expert and layer: nothing a release spends
            raise ValueError(f"no τ_e up to 1 s per expert meets {measured_s} s")
    while high - low > HOST_TOLERANCE * high:
        middle = (low + high) / 2
        low, high = (middle, high) if predict(middle) < measured_s else (low, middle)
    return (low + high) / 2
