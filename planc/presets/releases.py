"""The time a software release's MoE layer spends per local expert beyond its GPU work
(`training.framework_release`, issue 24).

`planc/presets/releases.json` holds, per release and FP8 recipe, τ_e: seconds per local expert
per MoE layer and micro-batch, forward and backward together. Each value is fitted
(`planc.fitting.refit_expert_host`) to the one run of `validation/runs.json` that declares
`fits: expert_host` for that release and recipe, and to no other run; `scripts/refit.py
--check` tests that the file is that fit. A release or recipe the file does not list costs
nothing per expert.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from functools import cache
from types import MappingProxyType
from typing import Any, get_args

from planc.record import record
from planc.vocab import Fp8Recipe, FrameworkRelease

RELEASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "releases.json")
# The key of a run without an FP8/FP4 recipe (its expert GEMMs in BF16).
SIXTEEN_BIT = "bf16"
# The releases and recipes a τ_e may be given for (here or in a calibration's expert_host).
RELEASE_NAMES: tuple[str, ...] = get_args(FrameworkRelease)
RECIPE_NAMES: tuple[str, ...] = (SIXTEEN_BIT, *(recipe.value for recipe in Fp8Recipe))


@record
class ExpertHost:
    """τ_e of one release and recipe, and the run it was fitted to."""

    seconds: float  # per local expert, per MoE layer and micro-batch, forward and backward
    fit_run: str  # the id of the run of validation/runs.json it was fitted to


@cache
def _table() -> Mapping[str, Any]:
    with open(RELEASES, encoding="utf-8") as handle:
        data: Mapping[str, Any] = json.load(handle)
    return MappingProxyType(data)


@cache
def fitted() -> Mapping[tuple[str, str], ExpertHost]:
    """Every (release, recipe) the file fits, with its τ_e."""
    out = {}
    for release, entry in _table().items():
        if release.startswith("_"):
            continue
        for recipe, value in entry["expert_host_s"].items():
            out[(release, recipe)] = ExpertHost(float(value["seconds"]), str(value["fit_run"]))
    return MappingProxyType(out)


@cache
def table() -> Mapping[tuple[str, str], float]:
    """τ_e of every (release, recipe) the file fits: what `Efficiency.expert_host` holds."""
    return MappingProxyType({key: value.seconds for key, value in fitted().items()})


def recipe_key(recipe: str | None) -> str:
    """The key of a job's expert GEMMs in the file: its FP8/FP4 recipe's name, or
    `SIXTEEN_BIT` without one."""
    return SIXTEEN_BIT if recipe is None else recipe
