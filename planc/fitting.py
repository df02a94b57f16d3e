"""The step model's fitted parameters, refitted from the corpus's declared fit runs (issue 24).

Two GEMM curves of `planc/presets/efficiency.json` are fitted to step times, each to the runs
`validation/runs.json` declares `fit` on its GPU and to no other run:

* `a100-80gb`: e_max and d½, to Korthikanti et al. 2022 Table 5's four full-recompute runs;
* `h100-sxm`: e_max alone, to the three DGX Cloud Benchmarking 24.11 runs declared fit.

Every other GPU's e_max is one of these times its measured matmul ceiling over the fitted GPU's
(`efficiency.json`'s sources), so a refit moves it by the same factor. :func:`refit` does the
fit from a set of runs (least squares on ln(predicted/measured), `planc.perf.calibrate.fit`,
no ridge), :func:`fold_predictor` prices any run with the curves a fit on other runs gives:
the leave-one-source-out errors of docs/validation.md. A GPU whose fit set is empty in a fold
falls back to its prior, the matmul ceiling measured on it (Bekman's MAMF table), which is
what planc would say with no step time of that generation at all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from planc.analysis import Analysis, predictor
from planc.perf.calibrate import fit, with_values
from planc.perf.validation import Run
from planc.presets.efficiency import Efficiency, for_gpu
from planc.record import record
from planc.vocab import RunRole


@record
class FittedCurve:
    """One fitted GEMM curve: the GPU, the parameters fitted, and the prior e_max a fit starts
    from when it has no run (the GPU's measured matmul ceiling, a fraction of its peak)."""

    gpu: str
    parameters: tuple[str, ...]
    prior_peak_fraction: float
    derived: tuple[str, ...]  # GPU presets whose e_max is this curve's times a fixed ratio


# The MAMF fractions (Bekman, ml-engineering compute/accelerator, BF16): A100 SXM 86.9 %,
# H100 SXM 80.3 %.
FITTED = (
    FittedCurve(
        "a100-80gb", ("gemm.peak_fraction", "gemm.half_dim"), 0.869, ("a100-40gb", "mi300x")
    ),
    FittedCurve(
        "h100-sxm",
        ("gemm.peak_fraction",),
        0.803,
        ("h100-sxm-hbm2e", "h800", "h200", "b200", "gb200-nvl72"),
    ),
)


def fit_runs(runs: Sequence[Run], gpu: str) -> tuple[Run, ...]:
    """The runs a fit of `gpu`'s curve reads: role fit, on that GPU."""
    return tuple(run for run in runs if run.role is RunRole.FIT and run.gpu == gpu)


Analyse = Callable[[Run], Analysis]


def refit(runs: Sequence[Run], analysed: Analyse) -> Mapping[str, Efficiency]:
    """Each fitted GPU's tables refitted to its fit runs among `runs` (the preset's parameters
    as the starting point), or at its prior e_max when it has none."""
    out: dict[str, Efficiency] = {}
    for curve in FITTED:
        start = for_gpu(curve.gpu)
        chosen = fit_runs(runs, curve.gpu)
        if not chosen:
            out[curve.gpu] = start.with_gemm(peak_fraction=curve.prior_peak_fraction)
            continue
        cases = [(predictor(analysed(run)), run.measured_s) for run in chosen]
        found = fit(cases, start, curve.parameters, ridge=0.0)
        out[curve.gpu] = with_values(start, curve.parameters, found.values)
    return MappingProxyType(out)


def tables_for(gpu: str, fitted: Mapping[str, Efficiency]) -> Efficiency | None:
    """The tables of `gpu` under `fitted`: a fitted GPU's own, a derived GPU's preset with its
    e_max scaled as its fitted GPU's moved; None for a GPU no fit reaches."""
    for curve in FITTED:
        if gpu == curve.gpu:
            return fitted[curve.gpu]
        if gpu in curve.derived:
            ratio = fitted[curve.gpu].gemm.peak_fraction / for_gpu(curve.gpu).gemm.peak_fraction
            own = for_gpu(gpu)
            return own.with_gemm(peak_fraction=min(1.0, own.gemm.peak_fraction * ratio))
    return None


def fold_predictor(fit_set: Sequence[Run], analysed: Analyse) -> Callable[[Run], float]:
    """A run's predicted seconds per step with the curves fitted to `fit_set` only."""
    fitted = refit(fit_set, analysed)

    def predict(run: Run) -> float:
        analysis = analysed(run)
        return predictor(analysis)(tables_for(run.gpu, fitted) or analysis.efficiency)

    return predict
