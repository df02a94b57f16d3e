"""Presets (GPUs, models, fabrics) as data with their sources, loaded on demand.

The names are in the generated module `planc.presets.names`, so that the spec models can offer
them as an enum (editor completion, JSON Schema) without reading the data files at import. A new
preset is one edit of `gpus.json` or `models.json`, then `python scripts/regenerate.py`, which
rewrites the names module and both published schemas; tests fail, naming that command, when any
of them is stale.
"""

from __future__ import annotations

import json
import os
from functools import cache
from typing import Any

from planc.presets.names import FABRIC_NAMES, GPU_NAMES, MODEL_NAMES


@cache
def _load(name: str) -> dict[str, dict[str, Any]]:
    # A plain path beside this module: importlib.resources costs an import of zipfile at start-up.
    with open(os.path.join(os.path.dirname(__file__), name), encoding="utf-8") as handle:
        text = handle.read()
    data: dict[str, dict[str, Any]] = json.loads(text)
    return {key: value for key, value in data.items() if not key.startswith("_")}


def gpu_preset(name: str) -> dict[str, Any]:
    """The GPU preset `name` as a plain mapping (a copy), with its `source`."""
    return dict(_load("gpus.json")[name])


def model_preset(name: str) -> dict[str, Any]:
    """The model preset `name` as a plain mapping (a copy), with its `source`."""
    return dict(_load("models.json")[name])


def fabric_preset(name: str) -> dict[str, Any]:
    """The fabric preset `name` (the network tiers above the NVLink domain) as a plain mapping
    (a copy), with its `source`."""
    return dict(_load("fabrics.json")[name])


def all_gpu_presets() -> dict[str, dict[str, Any]]:
    return {name: gpu_preset(name) for name in GPU_NAMES}


def all_model_presets() -> dict[str, dict[str, Any]]:
    return {name: model_preset(name) for name in MODEL_NAMES}


__all__ = [
    "FABRIC_NAMES",
    "GPU_NAMES",
    "MODEL_NAMES",
    "all_gpu_presets",
    "all_model_presets",
    "fabric_preset",
    "gpu_preset",
    "model_preset",
]
