"""How far planc's step time is from published runs it was not fitted on, as data.

`planc/presets/accuracy.json` is written by `python scripts/validation_table.py -o
docs/validation.md` from the validation runs of `validation/runs.json` (role `validation`
only: the runs no parameter read), one entry per GPU generation, one per category (dense,
pipeline, context, moe, fsdp: what dominates the layout, `planc.perf.validation.category_of`),
one per generation and category together, one per model preset the specs name and one per
cost planc does not price (`planc.perf.unpriced`): how many
runs, the mean of |predicted/measured − 1|, the worst signed error and the mean signed error
(a preset's runs share a bias the others need not: its sign says which way). `planc explain`,
the report and search show it beside the step time, so a user reads the estimate with the
error the model has on runs like theirs; `planc calibrate` on their own runs is how to tighten
it. Its `ranking` says how planc orders published pairs of layouts (`ordering`): search names
the layouts that lie within that error of its best.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from functools import cache
from typing import Any

from planc.record import record
from planc.vocab import NONE_UNPRICED

CALIBRATED = "calibrated"
ACCURACY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "accuracy.json")

# Each GPU preset's generation, as the corpus groups its runs (NVIDIA's architecture names); a
# GPU with none (MI300X, a custom GPU) has no validated runs to quote.
GENERATION_OF: Mapping[str, str] = {
    "a100-40gb": "ampere",
    "a100-80gb": "ampere",
    "h100-sxm": "hopper",
    "h100-sxm-hbm2e": "hopper",
    "h800": "hopper",
    "h200": "hopper",
    "b200": "blackwell",
    "b300": "blackwell",
    "gb200-nvl72": "blackwell",
    "gb300-nvl72": "blackwell",
}


@record
class ErrorBar:
    """The model's error on the validation runs of one GPU generation, category or model."""

    group: str  # the generation, category or preset; "calibrated": the user's runs
    runs: int
    mean_abs_error: float  # mean of |predicted/measured − 1|
    worst_error: float  # the signed error of largest magnitude
    mean_error: float | None = None  # mean of predicted/measured − 1 (None: not recorded)

    def words(self) -> str:
        """E.g. '±6.2 % mean, worst +15.1 %, on 18 validated hopper runs'."""
        where = (
            f"on {self.runs} of your runs, each left out of the fit (planc calibrate)"
            if self.group == CALIBRATED
            else f"on {self.runs} validated {self.group} runs"
        )
        return f"±{self.mean_abs_error * 100:.1f} % mean, worst {self.worst_error * 100:+.1f} %, {where}"


@cache
def _table() -> Mapping[str, Any]:
    with open(ACCURACY, encoding="utf-8") as handle:
        data: dict[str, Any] = json.loads(handle.read())
    return data


# The fewest validated runs of one generation and category whose error is quoted for that cell;
# with fewer, the category's error over every generation is.
MIN_CELL_RUNS = 3


def _cell_generation(category: str, gpu: str | None) -> str | None:
    """`gpu`'s generation where at least MIN_CELL_RUNS of its runs of `category` are
    validated, else None."""
    generation = GENERATION_OF.get(gpu or "")
    cell = _table().get("cells", {}).get(generation, {}).get(category) if generation else None
    return generation if cell and cell["runs"] >= MIN_CELL_RUNS else None


def category_bar(category: str, gpu: str | None = None) -> ErrorBar | None:
    """The error bar of the validation runs of `category` on `gpu`'s generation where at least
    MIN_CELL_RUNS of them are validated, else of `category` on every generation (None: none
    validated)."""
    generation = _cell_generation(category, gpu)
    if generation is not None:
        cell = _table()["cells"][generation][category]
        group = f"{generation} {category}"
        return ErrorBar(group, cell["runs"], cell["mean_abs_error"], cell["worst_error"])
    entry = _table().get("categories", {}).get(category)
    if not entry:
        return None
    return ErrorBar(category, entry["runs"], entry["mean_abs_error"], entry["worst_error"])


# A preset's errors are called a bias where the signed mean is at least this share of the mean
# |error|: nearly every run errs the same way, so the estimate is likely off that way too.
BIAS_SHARE = 0.9


def model_bar(preset: str | None) -> ErrorBar | None:
    """The error bar of the validation runs whose spec names model preset `preset`, where at
    least MIN_CELL_RUNS of them are validated (None otherwise, or for a model stated field by
    field): the runs most like a spec of that model, whatever their GPU and layout."""
    entry = _table().get("models", {}).get(preset or "")
    if not entry or entry["runs"] < MIN_CELL_RUNS:
        return None
    return ErrorBar(
        str(preset),
        entry["runs"],
        entry["mean_abs_error"],
        entry["worst_error"],
        entry["mean_error"],
    )


def model_words(preset: str | None, calibration: Calibration) -> str:
    """'model error on gpt-oss-120b runs: …, signed mean −25.0 % (a bias: planc too fast), …',
    or '' where `model_bar` has none or with a calibration (the user's own error bar replaces
    the corpus's)."""
    bar = None if calibration is not None else model_bar(preset)
    if bar is None or bar.mean_error is None:
        return ""
    return (
        f"model error on {bar.group} runs: ±{bar.mean_abs_error * 100:.1f} % mean, "
        f"worst {bar.worst_error * 100:+.1f} %, signed mean {bar.mean_error * 100:+.1f} %"
        f"{_lean(bar)}, on {bar.runs} validated runs of this preset"
    )


def unpriced_bar(mechanism: str) -> ErrorBar | None:
    """The error bar of the validation runs that have unpriced `mechanism`, where at least
    MIN_CELL_RUNS of them are validated (None otherwise)."""
    entry = _table().get("unpriced", {}).get(mechanism)
    if not entry or entry["runs"] < MIN_CELL_RUNS:
        return None
    return ErrorBar(
        mechanism, entry["runs"], entry["mean_abs_error"], entry["worst_error"], entry["mean_error"]
    )


def unpriced_words(mechanism: str) -> str:
    """'planc's error on the 4 validated runs that have it: ±25.3 % mean, worst −29.6 %, signed
    mean −25.3 % (a bias: planc too fast)', or '' where `unpriced_bar` has none."""
    bar = unpriced_bar(mechanism)
    if bar is None or bar.mean_error is None:
        return ""
    return (
        f"planc's error on the {bar.runs} validated runs that have it: "
        f"±{bar.mean_abs_error * 100:.1f} % mean, worst {bar.worst_error * 100:+.1f} %, "
        f"signed mean {bar.mean_error * 100:+.1f} %{_lean(bar)}"
    )


def priced_bar(calibration: Calibration) -> ErrorBar | None:
    """The error bar of the validation runs with none of the costs planc knows it leaves out
    (the corpus's `NONE_UNPRICED` group); None with a calibration (the user's own replaces it)
    or too few runs."""
    return None if calibration is not None else unpriced_bar(NONE_UNPRICED)


def priced_words(calibration: Calibration) -> str:
    """'model error on the 125 validated runs with no cost planc knows it leaves out: ±5.6 %
    mean, worst −22.4 %': the error where planc prices all a run is known to spend, for a
    spec that has none of those costs; '' where `priced_bar` has none."""
    bar = priced_bar(calibration)
    if bar is None:
        return ""
    return (
        f"model error on the {bar.runs} validated runs with no cost planc knows it leaves out: "
        f"±{bar.mean_abs_error * 100:.1f} % mean, worst {bar.worst_error * 100:+.1f} %"
    )


def priced_json(calibration: Calibration) -> dict[str, Any] | None:
    """`priced_bar` as data (None where it has none)."""
    return _bar_data("unpriced", priced_bar(calibration))


def _lean(bar: ErrorBar) -> str:
    """' (a bias: planc too fast)' or '… too slow' where nearly every run errs one way."""
    if bar.mean_error is None or abs(bar.mean_error) < BIAS_SHARE * bar.mean_abs_error:
        return ""
    return " (a bias: planc too fast)" if bar.mean_error < 0 else " (a bias: planc too slow)"


def model_json(preset: str | None, calibration: Calibration) -> dict[str, Any] | None:
    """The preset's error bar as data (None where `model_words` says nothing)."""
    bar = None if calibration is not None else model_bar(preset)
    data = _bar_data("preset", bar)
    if data is not None and bar is not None:
        data["mean_error"] = bar.mean_error
    return data


def category_words(category: str, calibration: Calibration, gpu: str | None = None) -> str:
    """'model error on hopper moe runs: …' (or on every generation's: 'on moe runs'), or ''
    without validated runs of the category or with a calibration (the user's own error bar
    replaces the corpus's)."""
    bar = None if calibration is not None else category_bar(category, gpu)
    return "" if bar is None else f"model error on {bar.group} runs: {bar.words()}"


def _bar_data(key: str, bar: ErrorBar | None) -> dict[str, Any] | None:
    """An error bar as JSON data, its group under `key` (None without a bar)."""
    if bar is None:
        return None
    return {
        key: bar.group,
        "validated_runs": bar.runs,
        "mean_abs_error": bar.mean_abs_error,
        "worst_error": bar.worst_error,
    }


def category_json(
    category: str, calibration: Calibration, gpu: str | None = None
) -> dict[str, Any] | None:
    """The category's error bar as data (None where `category_words` says nothing), with the
    generation where the bar is that generation's runs of the category."""
    bar = None if calibration is not None else category_bar(category, gpu)
    data = _bar_data("category", bar)
    generation = _cell_generation(category, gpu)
    if data is not None and generation is not None:
        data["category"], data["generation"] = category, generation
    return data


def error_bar(gpu: str) -> ErrorBar | None:
    """The error bar of GPU preset `gpu`'s generation (None: no validated runs)."""
    generation = GENERATION_OF.get(gpu)
    entry = _table().get("generations", {}).get(generation) if generation else None
    if not entry:
        return None
    return ErrorBar(generation or "", entry["runs"], entry["mean_abs_error"], entry["worst_error"])


Calibration = Mapping[str, Any] | None  # hardware.calibration's data, as read


def bar_for(gpu: str, calibration: Calibration) -> ErrorBar | None:
    """The error bar to print beside a step time on `gpu`: with a calibration, its own
    leave-one-out error on the user's runs (the file's `accuracy`, written by `planc
    calibrate`; none in a file without one); else the GPU generation's validation error."""
    if calibration is not None:
        own = calibration.get("accuracy")
        if not isinstance(own, Mapping):
            return None
        return ErrorBar(CALIBRATED, own["runs"], own["mean_abs_error"], own["worst_error"])
    return error_bar(gpu)


def bar_words(gpu: str, calibration: Calibration) -> str:
    """'model error on runs it was not fitted to: …', or '' without a bar."""
    bar = bar_for(gpu, calibration)
    if bar is None:
        return ""
    return f"model error on runs it was not fitted to: {bar.words()}"


def bar_json(gpu: str, calibration: Calibration) -> dict[str, Any] | None:
    """The error bar as data (None where there is none)."""
    return _bar_data("generation", bar_for(gpu, calibration))


@record
class Ordering:
    """How planc orders published layouts (docs/validation.md, "Ranking"): of `pairs` pairs of
    validation runs a search could have chosen between, `right` in the order measured; its
    ratio of their throughputs off the measured one by `mean_ratio_error` on average (of
    |predicted ratio / measured ratio − 1|), `worst_ratio_error` at most."""

    pairs: int
    right: int
    mean_ratio_error: float
    worst_ratio_error: float
    # the categories of the paired runs (`planc.perf.validation.category_of`), sorted
    categories: tuple[str, ...]


def ordering() -> Ordering | None:
    """accuracy.json's ranking (None where it records no pair)."""
    entry = _table().get("ranking")
    if not entry or not entry["pairs"]:
        return None
    return Ordering(
        entry["pairs"],
        entry["right"],
        entry["mean_ratio_error"],
        entry["worst_ratio_error"],
        tuple(entry["categories"]),
    )


@record
class Group:
    """One group's validation errors as accuracy.json records them."""

    runs: int
    mean_abs_error: float
    worst_error: float
    mean_error: float


Groups = Mapping[str, Group]


# Digits kept: explain prints these at 0.1 % as docs/validation.md prints the unrounded errors;
# at 4 digits a value rounds twice (−0.194548 → −0.1945 → "−19.4 %" against the table's −19.5 %).
ERROR_DIGITS = 6


def _entries(groups: Groups) -> dict[str, dict[str, Any]]:
    return {
        name: {
            "runs": g.runs,
            "mean_abs_error": round(g.mean_abs_error, ERROR_DIGITS),
            "worst_error": round(g.worst_error, ERROR_DIGITS),
            "mean_error": round(g.mean_error, ERROR_DIGITS),
        }
        for name, g in sorted(groups.items())
    }


def accuracy_json(
    by_generation: Groups,
    by_category: Groups,
    by_cell: Mapping[tuple[str, str], Group],
    by_model: Groups,
    by_unpriced: Groups,
    ranking: Ordering,
) -> str:
    """The text of accuracy.json: each group's runs, mean |error|, worst and mean signed error
    per generation, per category, per (generation, category), per model preset and per cost
    planc does not price (`planc.perf.unpriced`); and how planc orders published pairs of
    layouts (`ranking`)."""
    generations = sorted({generation for generation, _ in by_cell})
    data = {
        "_about": "Written by scripts/validation_table.py from validation/runs.json (validation "
        "runs only): planc's step-time error per GPU generation, per category, per the two "
        "together (cells: generation, then category), per model preset the specs name and per "
        "cost planc does not price that runs have (unpriced: planc.perf.unpriced; a run counts "
        "under each it has); and the ranking: of the pairs of validation runs a layout search "
        "could have chosen between, how many planc orders as measured and how far its ratio of "
        "their throughputs is from the measured one; read by planc.presets.accuracy.",
        "generations": _entries(by_generation),
        "categories": _entries(by_category),
        "cells": {
            g: _entries({c: row for (gen, c), row in by_cell.items() if gen == g})
            for g in generations
        },
        "models": _entries(by_model),
        "unpriced": _entries(by_unpriced),
        "ranking": {
            "pairs": ranking.pairs,
            "right": ranking.right,
            "mean_ratio_error": round(ranking.mean_ratio_error, ERROR_DIGITS),
            "worst_ratio_error": round(ranking.worst_ratio_error, ERROR_DIGITS),
            "categories": list(ranking.categories),
        },
    }
    return json.dumps(data, indent=2) + "\n"
