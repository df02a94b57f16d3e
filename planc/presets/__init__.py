"""Presets (GPUs, models) as data with their sources, loaded on demand.

The names are listed here so that the spec models can offer them as an enum
(editor completion, JSON Schema) without reading the data files at import.
A test keeps these tuples equal to the keys of the JSON files.
"""

from __future__ import annotations

import json
import os
from functools import cache
from typing import Any

GPU_NAMES: tuple[str, ...] = (
    "a100-40gb",
    "a100-80gb",
    "h100-sxm",
    "h200",
    "b200",
    "gb200-nvl72",
    "mi300x",
)

MODEL_NAMES: tuple[str, ...] = (
    "llama3-8b",
    "llama3-70b",
    "llama3-405b",
    "llama3.2-1b",
    "tinyllama-1.1b",
    "gpt2-small",
    "gpt3-175b",
    "gpt-22b",
    "gpt-530b",
    "gpt-1t",
)


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


def all_gpu_presets() -> dict[str, dict[str, Any]]:
    return {name: gpu_preset(name) for name in GPU_NAMES}


def all_model_presets() -> dict[str, dict[str, Any]]:
    return {name: model_preset(name) for name in MODEL_NAMES}
