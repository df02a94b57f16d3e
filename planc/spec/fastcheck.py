"""The fast path: accept a valid spec without importing pydantic.

`planc check` runs in pre-commit hooks, where start-up time decides whether the hook stays
installed, and importing pydantic and building the spec models costs more than everything else
`check` does. Almost every spec a hook sees is valid, so this module validates the plain YAML data
against the published JSON Schema (`schema.json`, generated from the pydantic models in
`planc/spec/models.py`) and fills in its defaults.

It may only ever say "valid" where pydantic says valid, and it must then produce exactly
`Spec.model_validate(data).model_dump()`; anything it is unsure of returns None and the caller
validates with pydantic, which also writes the findings. A property test holds both promises.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
from functools import cache
from typing import Any

Schema = dict[str, Any]


class _Invalid(Exception):
    """Not valid here: let pydantic decide and explain."""


@cache
def published_schema() -> Schema:
    """The spec's JSON Schema as shipped inside the package."""
    with open(
        os.path.join(os.path.dirname(__file__), "schema.json"), encoding="utf-8"
    ) as handle:
        text = handle.read()
    schema: Schema = json.loads(text)
    return schema


def _resolve(node: Schema, root: Schema) -> Schema:
    ref = node.get("$ref")
    if ref is None:
        return node
    target: Schema = root["$defs"][ref.rsplit("/", 1)[-1]]
    return target


@cache
def _pattern(source: str) -> re.Pattern[str]:
    """A JSON Schema `pattern` compiled for `re.search`, with JSON Schema's meaning of `$`.

    JSON Schema patterns are ECMA-262 regular expressions, where `$` matches only at the end of
    the string (as in pydantic's Rust engine); Python's `$` also matches before a final newline,
    so `^PLC[0-9]{3}$` would take "PLC006\\n". Every `$` outside a character class becomes `\\Z`.
    """
    out: list[str] = []
    escaped = in_class = False
    for char in source:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "$":
            out.append(r"\Z")
            continue
        out.append(char)
    return re.compile("".join(out))


def _number(value: Any, node: Schema) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Invalid
    if isinstance(value, float) and not math.isfinite(value):
        raise _Invalid
    low, high = node.get("minimum"), node.get("maximum")
    low_x, high_x = node.get("exclusiveMinimum"), node.get("exclusiveMaximum")
    if (low is not None and value < low) or (high is not None and value > high):
        raise _Invalid
    if (low_x is not None and value <= low_x) or (high_x is not None and value >= high_x):
        raise _Invalid
    return value


def _scalar(value: Any, kind: str, node: Schema) -> Any:
    if kind == "integer":
        if not isinstance(value, int):
            raise _Invalid
        return _number(value, node)
    if kind == "number":
        return float(_number(value, node))  # pydantic stores a float field's int input as float
    if kind == "boolean":
        if not isinstance(value, bool):
            raise _Invalid
        return value
    if kind == "null":
        if value is not None:
            raise _Invalid
        return None
    if kind == "string":
        if not isinstance(value, str):
            raise _Invalid
        too_short = len(value) < node.get("minLength", 0)
        too_long = "maxLength" in node and len(value) > node["maxLength"]
        if (
            too_short
            or too_long
            or ("pattern" in node and not _pattern(node["pattern"]).search(value))
        ):
            raise _Invalid
        return value
    raise _Invalid


def _object(value: Any, node: Schema, root: Schema) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise _Invalid
    properties: dict[str, Schema] = node.get("properties", {})
    extra = node.get("additionalProperties", True)
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key in properties:
            out[key] = _validate(item, properties[key], root)
        elif isinstance(extra, dict):
            names = node.get("propertyNames", {})
            if "pattern" in names and not _pattern(names["pattern"]).search(key):
                raise _Invalid
            out[key] = _validate(item, extra, root)
        else:
            raise _Invalid  # unknown key (extra="forbid")
    for key, prop in properties.items():
        if key in out:
            continue
        if key in node.get("required", ()) or "default" not in prop:
            raise _Invalid
        out[key] = copy.deepcopy(prop["default"])
    # model_dump lists fields in declaration order, extra dict keys in input order.
    ordered = {key: out[key] for key in properties if key in out}
    ordered.update({key: out[key] for key in out if key not in properties})
    return ordered


def _array(value: Any, node: Schema, root: Schema) -> list[Any]:
    if not isinstance(value, list):
        raise _Invalid
    if len(value) < node.get("minItems", 0) or (
        "maxItems" in node and len(value) > node["maxItems"]
    ):
        raise _Invalid
    items = node.get("items", {})
    return [_validate(item, items, root) for item in value]


def _validate(value: Any, node: Schema, root: Schema) -> Any:
    node = _resolve(node, root)
    if "anyOf" in node and "type" not in node:  # a union; on an object, anyOf constrains it
        for branch in node["anyOf"]:
            try:
                return _validate(value, branch, root)
            except _Invalid:
                continue
        raise _Invalid
    if "const" in node:
        if type(value) is not type(node["const"]) or value != node["const"]:
            raise _Invalid
        return value
    if "enum" in node:
        # Exact types: True must not pass for 1, nor 1 for "1".
        if not any(type(value) is type(choice) and value == choice for choice in node["enum"]):
            raise _Invalid
        return value
    kind = node.get("type")
    if kind == "object":
        out = _object(value, node, root)
        if "anyOf" in node and not any(_holds(value, b, root) for b in node["anyOf"]):
            raise _Invalid
        return out
    if kind == "array":
        return _array(value, node, root)
    if kind is None:
        raise _Invalid
    return _scalar(value, kind, node)


def _holds(value: dict[str, Any], branch: Schema, root: Schema) -> bool:
    """Whether an object meets one `anyOf` branch that only adds constraints (the model's
    "a preset, or layers + hidden + heads + vocab"): its required keys are there and its
    property schemas hold. A branch of any other shape is not understood here (`errorMessage`
    is an editor's message, not a constraint)."""
    if not set(branch) <= {"title", "description", "required", "properties", "errorMessage"}:
        raise _Invalid
    if any(key not in value for key in branch.get("required", ())):
        return False
    try:
        for key, prop in branch.get("properties", {}).items():
            if key in value:
                _validate(value[key], prop, root)
    except _Invalid:
        return False
    return True


def fast_validate(data: Any) -> dict[str, Any] | None:
    """`data` with every default filled in, as `Spec.model_dump()` would give; None if unsure."""
    schema = published_schema()
    try:
        result = _validate(data, schema, schema)
    except (_Invalid, RecursionError):
        return None
    return result if isinstance(result, dict) else None
