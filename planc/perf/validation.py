"""The published-runs corpus and the arithmetic that scores the step model against it (issue 24).

`validation/runs.json` lists published training runs, one object each: the planc spec that states
the run's layout, the GPU, its generation, what dominates the layout (`category`), the framework,
the measured seconds per step, the source, a label per publication (`source_group`) and the
run's `role`, and the rules `planc check` reports on the spec (`check_rules`, a visible diff
when a rule starts or stops firing on a published layout). A `fit` run may inform a parameter of the step model; a `validation` run must not.
This module reads that index strictly (an unknown key, a missing field or a bad value is an
error naming the run), gives each run its signed error

    e = T_predicted / T_measured − 1

and aggregates mean |e|, mean e and the worst e by role, by GPU generation, by category, by
source, by model preset and by each cost planc does not price, and leave-one-source-out: for
each source group g, the model fitted on the fit runs outside g, scored on g's runs.

Pure functions over plain data: step times come from a `predict` callable
(`planc.scoring` loads each spec through planc's loader and prices it with
`analyse` → `estimate_step`), so this module imports nothing above `perf`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from enum import Enum
from pathlib import PurePosixPath
from typing import Any, TypeVar

from planc.bounded import InputError, read_text, strict_json
from planc.record import record
from planc.vocab import (
    NONE_UNPRICED,
    FitTarget,
    Generation,
    RunCategory,
    RunFramework,
    RunRole,
)

INDEX_LIMIT = 4 * 1024 * 1024  # bytes: the index is a few tens of kilobytes
INDEX_DEPTH = 4  # a list of flat objects
TEXT_FIELDS = ("id", "spec", "gpu", "measured_note", "source", "source_group")
ENUM_FIELDS: Mapping[str, type[Enum]] = {
    "generation": Generation,
    "category": RunCategory,
    "framework": RunFramework,
    "role": RunRole,
}
FIELDS = frozenset((*TEXT_FIELDS, *ENUM_FIELDS, "measured_s", "check_rules"))
# Keys a run may leave out: `fits`, the parameter a fit run informs (default its GPU's GEMM curve).
OPTIONAL = frozenset({"fits"})
RULE_ID = re.compile(r"PLC[0-9]{3}")
E = TypeVar("E", bound=Enum)


class CorpusError(ValueError):
    """The index or a run in it cannot be used; the message names the run."""


@record
class Run:
    """One published run, as the index states it."""

    id: str
    spec: str  # the spec's path, relative to the index's directory
    gpu: str  # a planc GPU preset name
    generation: Generation
    category: RunCategory
    framework: RunFramework
    measured_s: float  # seconds per optimizer step, as measured (or converted: measured_note)
    measured_note: str  # what the source states and how it became seconds per step
    source: str  # publication, table, row, URL
    source_group: str  # one label per publication
    role: RunRole
    # The rules `planc check` reports on the spec as written (warning or error), sorted.
    check_rules: tuple[str, ...]
    fits: FitTarget = FitTarget.GEMM  # what a fit run informs (a validation run: nothing)


@record
class Scored:
    """A run with planc's predicted step time and its signed error."""

    run: Run
    predicted_s: float
    error: float  # predicted/measured − 1: positive when planc is too slow


@record
class Aggregate:
    """Mean |error| and the worst error over one group of scored runs."""

    axis: str  # what the runs are grouped by: role, generation, category, source, held-out source
    group: str
    runs: int
    mean_abs_error: float
    worst_error: float  # the signed error of largest magnitude
    worst_id: str
    # The mean signed error: its sign says whether planc is too fast (−) or too slow (+) on the
    # group as a whole, which mean |e| cannot.
    mean_error: float


@record
class Split:
    """One fold of leave-one-source-out: fit on `fit`, score on `test` (the held-out group)."""

    held_out: str
    fit: tuple[Run, ...]
    test: tuple[Run, ...]


@record
class Comparison:
    """Two validation runs a layout search could have chosen between: the same model on the
    same GPU in the same number format, measured in one publication. Each ratio is the first
    run's tokens per second per GPU over the second's, as measured and as planc predicts it."""

    first: str
    second: str
    measured_ratio: float
    predicted_ratio: float

    @property
    def concordant(self) -> bool:
        """planc orders the two runs as they measured."""
        return (self.measured_ratio > 1) == (self.predicted_ratio > 1)


# Measured throughputs this close (|ratio − 1| below it) are a tie: the publications round
# tokens/s to three or four figures, so such a pair has no order for planc to get right. One
# configuration measured twice varies more (the corpus's `repeats`: 2 to 6 %); the validation
# page counts the pairs beyond its widest repeat apart.
TIE = 0.02


def comparisons(
    scored: Sequence[Scored],
    key_of: Callable[[Run], Hashable],
    tokens_per_gpu_of: Callable[[Run], float],
) -> tuple[Comparison, ...]:
    """Every pair of validation runs with the same `key_of` (publication, model, GPU, number
    format) whose measured throughputs differ by more than `TIE`, in the index's order.
    Throughput per GPU is tokens per step / (seconds per step · GPUs): `tokens_per_gpu_of(run)`
    gives tokens per step per GPU, so a run on more GPUs compares by what each GPU does."""
    held = [s for s in scored if s.run.role is RunRole.VALIDATION]
    keys = [key_of(s.run) for s in held]
    out = []
    for i, a in enumerate(held):
        for j in range(i + 1, len(held)):
            if keys[i] != keys[j]:
                continue
            b = held[j]
            pair = _compared(a, b, tokens_per_gpu_of(a.run) / tokens_per_gpu_of(b.run))
            if abs(pair.measured_ratio - 1) > TIE:
                out.append(pair)
    return tuple(out)


def _compared(a: Scored, b: Scored, work: float) -> Comparison:
    """a's throughput per GPU over b's, measured and predicted: (tokens_a / T_a) / (tokens_b /
    T_b), `work` being tokens_a / tokens_b (tokens per step per GPU)."""
    measured = work * b.run.measured_s / a.run.measured_s
    return Comparison(a.run.id, b.run.id, measured, work * b.predicted_s / a.predicted_s)


def repeats(
    scored: Sequence[Scored], spec_of: Callable[[Run], Hashable | None]
) -> tuple[Comparison, ...]:
    """Every pair of runs (any role) that are one configuration measured twice: the same
    `spec_of` (the spec apart from its name, on one stated software release; None for a run
    whose software the corpus cannot tell apart). Their measured ratio is how far two
    publications of one configuration differ, the noise under any pair's order; planc prices
    both alike."""
    keys = [spec_of(s.run) for s in scored]
    return tuple(
        _compared(scored[i], scored[j], 1.0)
        for i in range(len(scored))
        if keys[i] is not None
        for j in range(i + 1, len(scored))
        if keys[j] == keys[i]
    )


def category_of(moe: bool, sharded: bool, pipeline: int, context: int) -> RunCategory:
    """What dominates a layout, the corpus's categories in their order of precedence: mixture
    of experts, then fully sharded parameters (FSDP2 or ZeRO-3), then a pipeline (p > 1), then
    context parallelism (c > 1), else dense. runs.json declares each run's category by this
    rule (a test holds them equal), so a spec's category names the runs like it."""
    if moe:
        return RunCategory.MOE
    if sharded:
        return RunCategory.FSDP
    if pipeline > 1:
        return RunCategory.PIPELINE
    return RunCategory.CONTEXT if context > 1 else RunCategory.DENSE


def signed_error(predicted_s: float, measured_s: float) -> float:
    """e = T_pred/T_meas − 1 (dimensionless; both in seconds per step)."""
    return predicted_s / measured_s - 1


def read_index(path: str) -> tuple[Run, ...]:
    """The runs of the index file `path`; CorpusError when it cannot be used."""
    try:
        text = read_text(path, INDEX_LIMIT)
    except InputError as error:
        raise CorpusError(f"{path} {error}") from None
    return parse_index(text)


def parse_index(text: str) -> tuple[Run, ...]:
    """The runs of an index's JSON text, in its order; CorpusError naming the run at fault."""
    try:
        data = strict_json(text, INDEX_DEPTH)
    except InputError as error:
        raise CorpusError(f"the index {error}") from None
    if not isinstance(data, list):
        raise CorpusError("the index must be a JSON list of runs")
    runs = tuple(_run(item, position) for position, item in enumerate(data))
    seen: set[str] = set()
    for run in runs:
        if run.id in seen:
            raise CorpusError(f"run {run.id}: the id is used twice")
        seen.add(run.id)
    return runs


def _run(item: Any, position: int) -> Run:
    if not isinstance(item, dict):
        raise CorpusError(f"entry {position} of the index is not an object")
    given = item.get("id")
    name = given if isinstance(given, str) else f"at entry {position}"
    unknown = sorted(set(item) - FIELDS - OPTIONAL)
    if unknown:
        raise CorpusError(f"run {name}: unknown key(s) {', '.join(unknown)}")
    missing = sorted(FIELDS - set(item))
    if missing:
        raise CorpusError(f"run {name}: missing field(s) {', '.join(missing)}")
    for key in TEXT_FIELDS:
        if not isinstance(item[key], str) or not item[key].strip():
            raise CorpusError(f"run {name}: {key} must be a non-empty string")
    return Run(
        id=item["id"],
        spec=_spec_path(name, item["spec"]),
        gpu=item["gpu"],
        generation=_member(name, "generation", item["generation"], Generation),
        category=_member(name, "category", item["category"], RunCategory),
        framework=_member(name, "framework", item["framework"], RunFramework),
        measured_s=_seconds(name, item["measured_s"]),
        measured_note=item["measured_note"],
        source=item["source"],
        source_group=item["source_group"],
        role=_member(name, "role", item["role"], RunRole),
        check_rules=_rule_ids(name, item["check_rules"]),
        fits=_fits(name, item),
    )


def _fits(name: str, item: dict[str, Any]) -> FitTarget:
    """The parameter a fit run informs; a validation run informs none, so names none."""
    if "fits" not in item:
        return FitTarget.GEMM
    if item["role"] != RunRole.FIT.value:
        raise CorpusError(f"run {name}: fits names a parameter, which only a fit run informs")
    return _member(name, "fits", item["fits"], FitTarget)


def _member(name: str, key: str, value: Any, kind: type[E]) -> E:
    for member in kind:
        if value == member.value:
            return member
    choices = ", ".join(str(member.value) for member in kind)
    raise CorpusError(f"run {name}: {key} {value!r} is not one of {choices}")


def _seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CorpusError(f"run {name}: measured_s must be a number of seconds")
    if not math.isfinite(value) or value <= 0:
        raise CorpusError(f"run {name}: measured_s must be positive, not {value}")
    return float(value)


def _rule_ids(name: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(
        isinstance(rule, str) and RULE_ID.fullmatch(rule) for rule in value
    ):
        raise CorpusError(f"run {name}: check_rules must be a list of rule ids such as PLC006")
    return tuple(value)


def _spec_path(name: str, value: str) -> str:
    path = PurePosixPath(value)
    if path.is_absolute() or ".." in path.parts or path.suffix != ".yaml":
        raise CorpusError(f"run {name}: spec {value!r} must be a relative path to a .yaml file")
    return value


def score(runs: Iterable[Run], predict: Callable[[Run], float]) -> tuple[Scored, ...]:
    """Each run with `predict(run)` seconds per step and its signed error."""
    out = []
    for run in runs:
        predicted = predict(run)
        out.append(Scored(run, predicted, signed_error(predicted, run.measured_s)))
    return tuple(out)


def summarise(axis: str, group: str, scored: Sequence[Scored]) -> Aggregate:
    """Mean |e|, mean e and the worst e of `scored` (at least one run)."""
    if not scored:
        raise CorpusError(f"{axis} {group}: no runs to summarise")
    worst = max(scored, key=lambda s: (abs(s.error), s.run.id))
    return Aggregate(
        axis=axis,
        group=group,
        runs=len(scored),
        mean_abs_error=sum(abs(s.error) for s in scored) / len(scored),
        worst_error=worst.error,
        worst_id=worst.run.id,
        mean_error=sum(s.error for s in scored) / len(scored),
    )


def grouped(
    axis: str, scored: Sequence[Scored], key: Callable[[Run], str]
) -> tuple[Aggregate, ...]:
    """One aggregate per value of `key`, in sorted order."""
    return memberships(axis, scored, lambda run: (key(run),))


def aggregates(
    scored: Sequence[Scored],
    model_of: Callable[[Run], str | None] = lambda run: None,
    unpriced_of: Callable[[Run], Sequence[str]] = lambda run: (),
) -> tuple[Aggregate, ...]:
    """By role over every run; by GPU generation, by category, by the two together ("hopper
    moe"), by source, by model preset (`model_of`: the preset a run's spec names, None for a
    model stated field by field) and by each cost planc does not price (`unpriced_of`: the
    mechanisms of `planc.perf.unpriced` a run has; a run counts in each of its groups, a run with
    none in `NONE_UNPRICED`'s) over the validation runs only (the errors on runs nothing was
    fitted to)."""
    held = [s for s in scored if s.run.role is RunRole.VALIDATION]
    presets = [s for s in held if model_of(s.run) is not None]
    return (
        grouped("role", scored, lambda run: str(run.role))
        + grouped("generation", held, lambda run: str(run.generation))
        + grouped("category", held, lambda run: str(run.category))
        + grouped(CELL, held, lambda run: cell_name(str(run.generation), str(run.category)))
        + grouped("source", held, lambda run: run.source_group)
        + grouped(MODEL, presets, lambda run: str(model_of(run)))
        + memberships(UNPRICED, held, lambda run: tuple(unpriced_of(run)) or (NONE_UNPRICED,))
    )


def memberships(
    axis: str, scored: Sequence[Scored], groups_of: Callable[[Run], Sequence[str]]
) -> tuple[Aggregate, ...]:
    """One aggregate per group any run is in (`groups_of`: each run's groups, none or several),
    in sorted order."""
    groups: dict[str, list[Scored]] = {}
    for item in scored:
        for name in groups_of(item.run):
            groups.setdefault(name, []).append(item)
    return tuple(summarise(axis, name, groups[name]) for name in sorted(groups))


MODEL = "model"
UNPRICED = "unpriced"


CELL = "generation and category"


def cell_name(generation: str, category: str) -> str:
    """The group of runs of one GPU generation and one category, e.g. 'hopper moe'."""
    return f"{generation} {category}"


def leave_one_source_out(runs: Sequence[Run]) -> tuple[Split, ...]:
    """For each source group, in sorted order: the fit runs of every other group, and every run
    of the group (its fit runs included: held out, they are not fitted)."""
    groups = sorted({run.source_group for run in runs})
    return tuple(
        Split(
            held_out=group,
            fit=tuple(r for r in runs if r.role is RunRole.FIT and r.source_group != group),
            test=tuple(r for r in runs if r.source_group == group),
        )
        for group in groups
    )


def held_out_errors(
    runs: Sequence[Run], fitted: Callable[[tuple[Run, ...]], Callable[[Run], float]]
) -> tuple[Aggregate, ...]:
    """Leave-one-source-out: for each source group g, `fitted(fit runs outside g)` is the
    predictor a fit on them gives, scored on g's runs. A model with nothing fitted per fold
    passes `lambda fit: predict` and gets each group's plain errors."""
    return tuple(
        summarise("held-out source", split.held_out, score(split.test, fitted(split.fit)))
        for split in leave_one_source_out(runs)
    )
