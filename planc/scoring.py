"""planc's step model on the published-runs corpus (`validation/runs.json`, issue 24).

Each run's spec is read through planc's own loader (`spec.load.load_path`), planned
(`plannable`) and priced by the one path to a step time (`analyse` → `estimate_step`); the
arithmetic (signed errors, aggregates, leave-one-source-out) is `planc.perf.validation`'s.
"""

from __future__ import annotations

import os
from collections.abc import Hashable

from planc.analysis import Analysis, analyse, estimate_step
from planc.check import check_loaded
from planc.findings import Severity
from planc.fitting import fold_predictor
from planc.perf.unpriced import unpriced_of
from planc.perf.validation import (
    Aggregate,
    Comparison,
    CorpusError,
    Run,
    Scored,
    aggregates,
    comparisons,
    held_out_errors,
    read_index,
    repeats,
    score,
)
from planc.plannable import plannable
from planc.record import record
from planc.spec.job import Job
from planc.spec.load import load_path


@record
class Priced:
    """One run's spec as planc plans it: the layout in words and the estimated step."""

    layout: str
    step_s: float
    mfu: float


@record
class Corpus:
    """The whole corpus scored: every run, the aggregates and the held-out-source errors."""

    scored: tuple[Scored, ...]
    layouts: tuple[str, ...]  # layout_words of each scored run, in the same order
    aggregates: tuple[Aggregate, ...]
    held_out: tuple[Aggregate, ...]
    # pairs of validation runs a search could have chosen between (`comparable`)
    comparisons: tuple[Comparison, ...]
    # pairs of runs that are one configuration measured twice (`one_configuration`)
    repeats: tuple[Comparison, ...]


def layout_words(job: Job) -> str:
    """The layout as the table prints it: t, p, v, d, c, ep and etp, b, B, s, recompute, SP,
    TP overlap, ZeRO stage or FSDP2."""
    lay, tr = job.layout, job.training
    parts = [f"t{lay.t}", f"p{lay.p}"]
    parts += [f"v{lay.v}"] if lay.v > 1 else []
    parts += [f"d{lay.d}", f"c{lay.c}"]
    parts += [f"ep{lay.ep}", f"etp{lay.et}"] if lay.ep > 1 else []
    parts += [f"b{tr.b}", f"B{tr.B}", f"s{tr.s}", f"rc-{tr.recompute}"]
    parts += ["sp"] if lay.sp else []
    parts += ["tp-overlap"] if tr.overlap_tp else []
    parts += [f"z{lay.zero}" if tr.framework != "fsdp2" else "fsdp2"]
    return " ".join(parts)


def job_of(spec_path: str) -> Job:
    """The Job of a corpus spec; CorpusError with the first finding when it does not load."""
    loaded = load_path(spec_path)
    if loaded.job is None:
        first = loaded.findings[0] if loaded.findings else None
        reason = f"{first.rule}: {first.message}" if first else "it does not load"
        raise CorpusError(f"{spec_path}: {reason}")
    return loaded.job


def check_rules(spec_path: str) -> tuple[str, ...]:
    """The rules `planc check` reports on a corpus spec at warning or error, sorted, each once."""
    found = check_loaded(load_path(spec_path)).findings
    serious = (Severity.WARNING, Severity.ERROR, Severity.FATAL)
    return tuple(sorted({f.rule for f in found if f.severity in serious}))


def analysed(spec_path: str) -> tuple[Job, Analysis]:
    """The spec's Job and analysis; CorpusError when planc refuses it."""
    job = job_of(spec_path)
    plan = plannable(job)
    if isinstance(plan, tuple):
        first = plan[0]
        raise CorpusError(f"{spec_path}: refused by {first.rule}: {first.violation.message}")
    return job, analyse(plan)


def price(spec_path: str) -> Priced:
    """The spec's layout in words and planc's estimated step; CorpusError when planc refuses it."""
    return _priced(*analysed(spec_path))


def _priced(job: Job, analysis: Analysis) -> Priced:
    step = estimate_step(analysis)
    return Priced(layout=layout_words(job), step_s=step.step_time_s, mfu=step.mfu)


def comparable(run: Run, job: Job) -> tuple[object, ...]:
    """What two runs share when their throughputs compare as a choice of layout: the
    publication (one software stack), the model, the GPU and the number format (precision and
    FP8/FP4 recipe)."""
    tr = job.training
    return (run.source_group, job.model, run.gpu, tr.precision, tr.fp8_recipe)


def one_configuration(job: Job) -> Hashable | None:
    """What two runs share when they are one configuration measured twice: the whole spec but
    its name (model, cluster, layout, training) on one stated software release; None under
    `latest`, where the corpus does not name the software (two publications of it may run
    different stacks)."""
    if job.training.framework_release == "latest":
        return None
    return (job.model, job.cluster, job.layout, job.training)


def tokens_per_gpu(job: Job) -> float:
    """Tokens one optimizer step trains, per GPU: B·s over the world size."""
    return job.training.B * job.training.s / job.cluster.world


def spec_path(index_path: str, run: Run) -> str:
    """Where a run's spec is: its `spec` relative to the index's directory."""
    return os.path.join(os.path.dirname(index_path) or ".", *run.spec.split("/"))


def score_corpus(index_path: str) -> Corpus:
    """Every run of the index priced, with the aggregates and the leave-one-source-out errors
    (each source's runs priced with the curves refitted to the other sources' fit runs,
    `planc.fitting.fold_predictor`)."""
    runs = read_index(index_path)
    analyses = {run.id: analysed(spec_path(index_path, run)) for run in runs}
    priced = {run.id: _priced(*analyses[run.id]) for run in runs}

    def predict(run: Run) -> float:
        return priced[run.id].step_s

    def analysis_of(run: Run) -> Analysis:
        return analyses[run.id][1]

    def model_of(run: Run) -> str | None:
        return analyses[run.id][0].model.preset

    def unpriced(run: Run) -> tuple[str, ...]:
        return tuple(str(mechanism) for mechanism in unpriced_of(analyses[run.id][1].plan))

    scored = score(runs, predict)
    return Corpus(
        scored=scored,
        layouts=tuple(priced[run.id].layout for run in runs),
        aggregates=aggregates(scored, model_of, unpriced),
        held_out=held_out_errors(runs, lambda fit_set: fold_predictor(fit_set, analysis_of)),
        comparisons=comparisons(
            scored,
            lambda run: comparable(run, analyses[run.id][0]),
            lambda run: tokens_per_gpu(analyses[run.id][0]),
        ),
        repeats=repeats(scored, lambda run: one_configuration(analyses[run.id][0])),
    )
