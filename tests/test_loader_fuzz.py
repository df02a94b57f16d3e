"""Hypothesis properties of the loader and `check`: any input gives findings (or a job), never an
exception; findings are located inside the file; results do not depend on the order of the
files or on how often the same input is checked.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planc.check import check_loaded, check_paths
from planc.findings import FileResult, Finding
from planc.rules import REGISTRY
from planc.spec.load import Loaded, decode, load_text

from conftest import EXAMPLES, example_data

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LINE_BREAKS = "\n\r\x85\u2028\u2029"
EXAMPLE_NAMES = sorted(p.name for p in EXAMPLES.glob("*.yaml"))


def assert_well_formed(result: FileResult, text: str | None) -> None:
    """Every finding names a known rule and a position that exists (1-based, within the file)."""
    lines = None
    if text is not None:
        lines = 1 + sum(text.count(c) for c in LINE_BREAKS)
    for finding in result.findings:
        assert finding.rule in REGISTRY, finding
        assert finding.message, finding
        assert finding.line >= 1 and finding.column >= 1, finding
        if lines is not None:
            assert finding.line <= lines, (finding, lines)


def check_str(text: str) -> tuple[Loaded, FileResult]:
    loaded = load_text("fuzz.yaml", text)
    return loaded, check_loaded(loaded)


def full(finding: Finding) -> tuple[object, ...]:
    """All of a finding, message and fix included (dataclass equality leaves those out)."""
    return (
        finding.line,
        finding.column,
        finding.rule,
        finding.severity,
        finding.message,
        finding.field,
        finding.fix,
    )


# --- arbitrary text and bytes -----------------------------------------------------------------

YAML_ALPHABET = st.sampled_from(
    [
        *"{}[]:,-?&*!|>'\"#%@`~ \t\n\r.0123456789eEoxabnyY_+",
        *("version: 1\n", "name: x\n", "model:\n  ", "  preset: ", "<<: ", "!!", "---\n", "..."),
    ]
)
yamlish_text = st.lists(YAML_ALPHABET, max_size=60).map("".join)


@FUZZ
@given(st.text(max_size=300))
def test_arbitrary_text_gives_findings_never_an_exception(text: str) -> None:
    loaded, result = check_str(text)
    assert loaded.job is not None or result.findings
    assert_well_formed(result, text)


@FUZZ
@given(yamlish_text)
def test_yaml_shaped_text_gives_findings_never_an_exception(text: str) -> None:
    loaded, result = check_str(text)
    assert loaded.job is not None or result.findings
    assert_well_formed(result, text)


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_bytes_give_findings_never_an_exception(data: bytes) -> None:
    text, failure = decode(data)
    if failure is not None:
        assert text is None and failure.rule == "PLC101"
        assert failure.line >= 1 and failure.column >= 1
        return
    assert text is not None
    loaded, result = check_str(text)
    assert loaded.job is not None or result.findings
    assert_well_formed(result, text)


# --- arbitrary data as YAML -------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
json_like = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=8), children, max_size=4),
    ),
    max_leaves=25,
)


@FUZZ
@given(json_like)
def test_arbitrary_data_dumped_as_yaml_gives_findings_or_a_job(data: Any) -> None:
    text = yaml.safe_dump(data, allow_unicode=True)
    loaded, result = check_str(text)
    assert loaded.job is not None or result.findings
    assert_well_formed(result, text)


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(
            ["version", "name", "model", "hardware", "parallelism", "training", "rules", "extra"]
        ),
        json_like,
        max_size=7,
    )
)
def test_arbitrary_sections_give_findings_or_a_job(data: dict[str, Any]) -> None:
    text = yaml.safe_dump(data, allow_unicode=True)
    loaded, result = check_str(text)
    assert loaded.job is not None or result.findings
    assert_well_formed(result, text)


# --- mutations of valid examples --------------------------------------------------------------


def paths_of(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path (mapping keys and list indices) in `data`."""
    out: list[tuple[Any, ...]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            out.append((*prefix, key))
            out += paths_of(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            out.append((*prefix, index))
            out += paths_of(value, (*prefix, index))
    return out


def parent_of(data: Any, path: tuple[Any, ...]) -> Any:
    for segment in path[:-1]:
        data = data[segment]
    return data


mutation_scalars = st.one_of(
    scalars,
    st.integers(min_value=-4, max_value=300),
    st.sampled_from(
        [
            0,
            1,
            2,
            3,
            4,
            8,
            16,
            24,
            64,
            1024,
            2**20 + 1,
            10**100,
            0.5,
            "8",
            "on",
            "tp-cp-dp-pp",
            "h100-sxm",
            "llama3-8b",
            [],
            {},
        ]
    ),
)


@st.composite
def mutated_example(draw: st.DrawFn) -> dict[str, Any]:
    data = example_data(draw(st.sampled_from(EXAMPLE_NAMES)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = paths_of(data)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = parent_of(data, path)
        kind = draw(st.sampled_from(["drop", "set", "rename"]))
        key = path[-1]
        if kind == "drop":
            del parent[key]
        elif kind == "set":
            parent[key] = draw(mutation_scalars)
        elif isinstance(parent, dict):
            new = draw(
                st.one_of(
                    st.text(max_size=10),
                    st.sampled_from(sorted({p[-1] for p in paths if isinstance(p[-1], str)})),
                )
            )
            value = parent.pop(key)
            parent[new] = value
    return data


@FUZZ
@given(mutated_example())
def test_mutated_examples_never_raise(data: dict[str, Any]) -> None:
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    loaded, result = check_str(text)
    assert loaded.job is not None or result.findings
    assert_well_formed(result, text)


@FUZZ
@given(
    st.sampled_from(EXAMPLE_NAMES),
    st.fixed_dictionaries(
        {},
        optional={
            "tensor": st.sampled_from([1, 2, 3, 4, 6, 8, 16, 24, 48, 72, 96]),
            "pipeline": st.integers(min_value=1, max_value=16),
            "context": st.sampled_from([1, 2, 3, 4]),
            "virtual_stages": st.integers(min_value=1, max_value=4),
            "zero_stage": st.integers(min_value=0, max_value=3),
            "sequence_parallel": st.booleans(),
            "order": st.permutations(["tp", "cp", "dp", "pp"]).map("-".join),
            "data": st.integers(min_value=1, max_value=64),
        },
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "seq_len": st.integers(min_value=1, max_value=20000),
            "micro_batch": st.integers(min_value=1, max_value=16),
            "global_batch": st.integers(min_value=1, max_value=5000),
            "recompute": st.sampled_from(["none", "selective", "full"]),
            "attention": st.sampled_from(["flash", "eager"]),
        },
    ),
)
def test_random_valid_layouts_are_checked_without_error(
    name: str, parallelism: dict[str, Any], training: dict[str, Any]
) -> None:
    """Schema-valid specs with random degrees reach every rule; no rule may raise."""
    data = example_data(name)
    data["parallelism"] = {**data.get("parallelism", {}), **parallelism}
    data["training"] = {**data["training"], **training}
    text = yaml.safe_dump(data, sort_keys=False)
    loaded, result = check_str(text)
    assert loaded.job is not None
    assert_well_formed(result, text)


# --- order and determinism --------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Valid, invalid, broken and unreadable inputs, each a path."""
    root = tmp_path_factory.mktemp("corpus")
    files = {
        "binary.yaml": b"version: 1\x00",
        "latin1.yaml": "name: caf\xe9\n".encode("latin-1"),
        "syntax.yaml": b"a: [\n",
        "empty.yaml": b"",
        "dup.yaml": (EXAMPLES / "llama3-8b-1node.yaml").read_bytes() + b"  seq_len: 1\n",
    }
    for name, data in files.items():
        (root / name).write_bytes(data)
    paths = [str(root / name) for name in files]
    paths += [str(p) for p in sorted(EXAMPLES.glob("*.yaml"))]
    paths += [str(p) for p in sorted((EXAMPLES / "invalid").glob("PLC00*/*.yaml"))]
    paths += [str(root / "missing.yaml"), str(root)]
    return paths


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_findings_per_file_do_not_depend_on_the_order(
    corpus: list[str], data: st.DataObject
) -> None:
    order = data.draw(st.permutations(corpus))
    chosen = data.draw(st.lists(st.sampled_from(corpus), min_size=1, max_size=6))
    reference = {r.path: [full(f) for f in r.findings] for r in check_paths(corpus)}
    for paths in (order, chosen):
        results = check_paths(paths)
        assert [r.path for r in results] == list(paths)
        for result in results:
            assert [full(f) for f in result.findings] == reference[result.path]


@FUZZ
@given(st.one_of(yamlish_text, mutated_example().map(lambda d: yaml.safe_dump(d, sort_keys=False))))
def test_same_input_twice_gives_identical_findings(text: str) -> None:
    first = check_str(text)[1]
    second = check_str(copy.copy(text))[1]
    assert [full(f) for f in first.findings] == [full(f) for f in second.findings]


def test_corpus_covers_every_kind_of_outcome(corpus: list[str]) -> None:
    """The permutation property above is only meaningful if the corpus mixes outcomes."""
    results = check_paths(corpus)
    worst = {r.worst().value if r.worst() else "clean" for r in results}
    assert {"clean", "error", "fatal"} <= worst
    assert Path(corpus[-1]).is_dir()
