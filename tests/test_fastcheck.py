"""The fast path accepts only what pydantic accepts, and then gives exactly model_dump()."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from planc.spec.fastcheck import fast_validate
from planc.spec.models import Spec

ROOT = Path(__file__).resolve().parent.parent
VALID = sorted((ROOT / "examples").glob("*.yaml"))


def pydantic_dump(data: Any) -> dict[str, Any] | None:
    try:
        return Spec.model_validate(data).model_dump()
    except ValidationError:
        return None


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_examples_take_the_fast_path(path: Path) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    fast = fast_validate(data)
    assert fast is not None
    assert fast == pydantic_dump(data)


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=10**7),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        ["", "8", "tp-cp-dp-pp", "h100-sxm", "llama3-8b", "bf16", "flash", "PLC006", "x" * 300]
    ),
    # Issue 19: a final newline must not pass a `$`-anchored pattern, control characters and
    # YAML 1.1 line breaks must not pass the one-line name, nor other scripts' digits a rule id.
    st.sampled_from(
        ["PLC006\n", "gpu-a\n", "a\nb", "x\ty", "x\u2028y", "\x85", "PLC\u0660\u0660\u0666"]
    ),
    # Issue 19: numbers at and past the physical bounds of the float fields.
    st.sampled_from([5e-324, 1e-12, 0.001, 0.01, 1e6, 1e7, 1e9, 1e300]),
    st.text(max_size=8),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=3)
    ),
    max_leaves=8,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _paths(value, (*prefix, index))
    return out


def _set(data: Any, path: tuple[Any, ...], value: Any, delete: bool) -> None:
    for segment in path[:-1]:
        data = data[segment]
    if delete and isinstance(data, dict):
        del data[path[-1]]
    else:
        data[path[-1]] = value


# Issue 19: values the fast path and pydantic once disagreed on, or both took wrongly. Each is
# (section, key, value) set on a shipped example; both paths must refuse it.
HARDENING = [
    ("rules", "ignore", ["PLC006\n"]),
    ("rules", "ignore", ["PLC\u0660\u0660\u0666"]),
    ("rules", "severity", {"PLC006\n": "warning"}),
    (None, "name", "x\n## injected"),
    (None, "name", "x\u2028y"),
    (None, "name", "x\x85y"),
    (None, "version", True),
    (None, "version", 1.0),
    ("parallelism", "zero_stage", True),
    ("parallelism", "zero_stage", 1.0),
    ("hardware", "reserve_gib", 1e300),
    ("hardware", "inter_node", {"bandwidth_gbs": 5e-324}),
    ("hardware", "intra_node", {"latency_us": 1e300}),
    ("hardware", "gpu", {"memory_gib": 1e300, "bf16_tflops": 989}),
    ("hardware", "gpu", {"memory_gib": 1e-12, "bf16_tflops": 989}),
    ("hardware", "gpu", {"memory_gb": 80, "bf16_tflops": 5e-324}),
    ("hardware", "gpu", {"memory_gb": 80, "bf16_tflops": 989, "name": "a\nb"}),
    ("training", "efficiency", 5e-324),
]


@pytest.mark.parametrize(("section", "key", "value"), HARDENING, ids=repr)
def test_fast_path_and_pydantic_both_refuse_the_hardening_cases(
    section: str | None, key: str, value: Any
) -> None:
    data = yaml.safe_load(VALID[0].read_text(encoding="utf-8"))
    (data if section is None else data.setdefault(section, {}))[key] = value
    assert fast_validate(data) is None
    assert pydantic_dump(data) is None


# Known field names, so mutations also add keys the schema knows (in the wrong place or not).
KNOWN = [
    "tensor",
    "data",
    "gpu",
    "hosts",
    "severity",
    "ignore",
    "memory_gb",
    "bf16_tflops",
    "stage_layers",
    "preset",
    "reserve_gib",
    "efficiency",
    "zero_stage",
    "name",
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.sampled_from(VALID),
    choice=st.data(),
    value=VALUES,
    delete=st.booleans(),
    extra=st.one_of(st.none(), st.sampled_from(KNOWN)),
)
def test_fast_path_never_disagrees_with_pydantic(
    base: Path, choice: st.DataObject, value: Any, delete: bool, extra: str | None
) -> None:
    data = yaml.safe_load(base.read_text(encoding="utf-8"))
    mutated = copy.deepcopy(data)
    path = choice.draw(st.sampled_from(_paths(mutated)))
    if extra is not None and isinstance(value, dict):
        value[extra] = choice.draw(SCALARS)
    _set(mutated, path, value, delete)
    fast = fast_validate(mutated)
    slow = pydantic_dump(mutated)
    if fast is not None:
        assert slow is not None, "the fast path accepted what pydantic rejects"
        assert fast == slow


@settings(max_examples=200, deadline=None)
@given(
    gpu=st.fixed_dictionaries(
        {"bf16_tflops": st.one_of(st.integers(1, 5000), st.floats(0.5, 5000))},
        optional={
            "memory_gb": st.one_of(st.integers(1, 500), st.floats(0.1, 500)),
            "name": st.text(max_size=70),
            "nvlink_domain": st.integers(0, 100),
            "intra_node": st.fixed_dictionaries(
                {},
                optional={"bandwidth_gbs": st.floats(-1, 1000), "latency_us": st.integers(-1, 10)},
            ),
        },
    ),
    hosts=st.one_of(st.text(max_size=12), st.lists(st.text(max_size=5), max_size=3)),
)
def test_custom_gpu_and_hosts_unions_agree(gpu: dict[str, Any], hosts: Any) -> None:
    data = yaml.safe_load(VALID[0].read_text(encoding="utf-8"))
    data["hardware"]["gpu"] = gpu
    data["hardware"]["hosts"] = hosts
    fast = fast_validate(data)
    slow = pydantic_dump(data)
    if fast is not None:
        assert fast == slow
    if slow is not None and fast is None:
        pytest.fail(f"the fast path refused a valid spec: {gpu} {hosts!r}")
