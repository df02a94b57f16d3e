"""Shared helpers: load and check specs from text, and overlay changes on the shipped examples."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from planc.analysis import Analysis, analyse
from planc.check import check_loaded
from planc.compile import Plan, compile_job
from planc.findings import FileResult
from planc.plannable import Plannable, plannable
from planc.spec.job import Job
from planc.spec.load import load_text

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge `overlay` onto a copy of `base` (mappings merge, everything else replaces)."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def example_data(name: str = "llama3-8b-1node.yaml") -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text(encoding="utf-8"))
    return data


def spec_text(
    overlay: dict[str, Any] | str | None = None, base: str = "llama3-8b-1node.yaml"
) -> str:
    """YAML text of an example with `overlay` (a mapping or YAML text) merged in."""
    data = example_data(base)
    if overlay:
        data = merge(data, yaml.safe_load(overlay) if isinstance(overlay, str) else overlay)
    return yaml.safe_dump(data, sort_keys=False)


def check_text(text: str, path: str = "spec.yaml") -> FileResult:
    return check_loaded(load_text(path, text))


def check_overlay(
    overlay: dict[str, Any] | str | None = None, base: str = "llama3-8b-1node.yaml"
) -> FileResult:
    return check_text(spec_text(overlay, base))


def rules_fired(result: FileResult, include_info: bool = False) -> set[str]:
    return {f.rule for f in result.findings if include_info or f.severity.value != "info"}


def resolved_of(
    overlay: dict[str, Any] | str | None = None, base: str = "llama3-8b-1node.yaml"
) -> Job:
    """The resolved (not necessarily plannable) job of an example with `overlay` merged in."""
    loaded = load_text("spec.yaml", spec_text(overlay, base))
    assert loaded.job is not None, loaded.findings
    return loaded.job


def model_job(model: dict[str, Any], parallelism: dict[str, Any] | None = None) -> Job:
    """The resolved job of `model` on 8 nodes of 8 H100s, s = 4,096, B = 256 (the test fails if
    the spec does not load)."""
    spec = {
        "version": 1,
        "name": "t",
        "model": model,
        "hardware": {"gpu": "h100-sxm", "nodes": 8},
        "parallelism": parallelism or {},
        "training": {"seq_len": 4096, "global_batch": 256},
    }
    loaded = load_text("t.yaml", yaml.safe_dump(spec))
    assert loaded.job is not None, loaded.findings
    return loaded.job


def plannable_of(job: Job | None) -> Plannable:
    """The plannable form of a resolved job (the test fails if it has none)."""
    assert job is not None
    plan = plannable(job)
    assert not isinstance(plan, tuple), plan
    return plan


def job_of(
    overlay: dict[str, Any] | str | None = None, base: str = "llama3-8b-1node.yaml"
) -> Plannable:
    """The plannable job of an example with `overlay` merged in (the test fails if it has none)."""
    return plannable_of(resolved_of(overlay, base))


def analysis_of(
    overlay: dict[str, Any] | str | None = None, base: str = "llama3-8b-1node.yaml"
) -> Analysis:
    return analyse(job_of(overlay, base))


def hybridep_job(
    ep: int,
    nodes: int,
    schedule: str = "1f1b",
    gpu: str = "gb200-nvl72",
    dispatcher: str = "hybridep",
    parallelism: dict[str, Any] | None = None,
    **training: Any,
) -> Plannable:
    """Qwen3-30B-A3B on `nodes` nodes of `gpu` (GB200 trays in one NVL72 domain by default),
    EP `ep` with HybridEP (or `dispatcher`), BF16 unless `training` says otherwise."""
    spec = {
        "version": 1,
        "name": "t",
        "model": {"preset": "qwen3-30b-a3b"},
        "hardware": {"gpu": gpu, "nodes": nodes},
        "parallelism": {
            "tensor": 1, "pipeline": 1, "expert": ep, "expert_tensor": 1,
            "expert_dispatcher": dispatcher, "pipeline_schedule": schedule,
            **(parallelism or {}),
        },
        "training": {
            "seq_len": 4096, "micro_batch": 1, "global_batch": 32 * nodes,
            "precision": "bf16", "recompute": "none", **training,
        },
    }
    loaded = load_text("t.yaml", yaml.safe_dump(spec))
    assert loaded.job is not None, loaded.findings
    return plannable_of(loaded.job)


def value_position(text: str, line: str) -> tuple[int, int]:
    """1-based (line, column) of the value on the single line of `text` equal to `line`."""
    lines = text.splitlines()
    assert lines.count(line) == 1, f"{line!r} must occur once"
    return lines.index(line) + 1, line.index(": ") + 3


@pytest.fixture
def examples_dir() -> Path:
    return EXAMPLES


def compiled(job: Plannable) -> Plan:
    """The compiled plan of a plannable job (analysed once, as `planc compile` does)."""
    return compile_job(analyse(job))


# Headless Chromium for the report's rendering tests (Debian's package; .ci/run installs it).
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (apt-get install -y chromium; .ci/run installs it)",
)
# As root, headless, and quiet on a closed network (no background connections).
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def loaded_spec(text: str) -> Any:
    """A spec text loaded as `spec.yaml`, which must resolve to a job."""
    loaded = load_text("spec.yaml", text)
    assert loaded.job is not None, loaded.findings
    return loaded


def search_setup(text: str, **request: Any) -> Any:
    """`planc search`'s setup of a spec text, as the command builds it (`Request` fields by
    keyword)."""
    from planc.cli.search import Request, setup_of

    return setup_of(loaded_spec(text), Request("spec.yaml", **request))


def grid_overlay(t: int, c: int, d: int, p: int, order: tuple[str, ...], per_node: int) -> str:
    """A gpt2-small spec overlay of degrees t·c·d·p in `order` on nodes of `per_node` GPUs, one
    NVLink domain a node (the rank-grid property tests)."""
    world = t * c * d * p
    return (
        f"{{hardware: {{nodes: {world // per_node}, gpus_per_node: {per_node}, nvlink_domain: {per_node}, hosts: []}},"
        f" parallelism: {{tensor: {t}, context: {c}, data: {d}, pipeline: {p}, order: {'-'.join(order)},"
        f" sequence_parallel: false, zero_stage: 0}}, model: {{preset: gpt2-small}}, training: {{seq_len: 1024, global_batch: {d * 4}}}}}"
    )
