"""Published MoE layouts against planc search (issue 28): on the published model, cluster and
batch, the search finds a layout at least as fast as the published one by planc's own estimate,
or says why the published one is outside the space (a rule that rejects it, or an axis value it
does not try).

Qwen3-235B-A22B: NVIDIA's Megatron-MoE-ModelZoo H100 row (validation/runs/
moezoo-qwen3-235b-256xh100-fsdp.yaml: t 2, ep 8, etp 1, p 1, Megatron-FSDP, micro-batch 4, full
recompute). DeepSeek-V3: DeepSeek's own 2,048 H800 layout (examples/deepseek-v3-2048xh800.yaml:
p 16 × 2 DualPipeV chunks, ep 64, ZeRO-1); NVIDIA's Megatron-Bridge tables were not at hand, so
this is the published layout planc ships. The spaces are the published layout's neighbourhood
(each searched axis over a few values around the published one), so that the test runs in
minutes, not the full default space.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from planc.cli.search import Request, setup_of
from planc.search.advice import own_layout
from planc.search.run import search
from planc.spec.load import load_text

ROOT = Path(__file__).resolve().parent.parent


def _searched(path: Path, keep: dict[str, Any], search_axes: dict[str, Any]) -> str:
    """The published spec with its layout fields removed (searched instead), `keep` written."""
    data = yaml.safe_load(path.read_text())
    data["parallelism"] = keep
    data["search"] = search_axes
    return yaml.safe_dump(data, sort_keys=False)


def _compare(published: Path, text: str) -> tuple[Any, Any]:
    loaded = load_text("search.yaml", text)
    assert loaded.job is not None, loaded.findings
    setup = setup_of(loaded, Request("search.yaml"))
    result = search(setup, 3)
    mine = load_text(str(published), published.read_text())
    assert mine.spec is not None
    # The published layout judged and priced as the spec's own layout of this search.
    own = own_layout(dataclasses.replace(setup, spec=mine.spec), result, 3)
    return result, own


@pytest.mark.slow
def test_qwen3_235b_search_matches_or_beats_the_model_zoo_layout() -> None:
    path = ROOT / "validation/runs/moezoo-qwen3-235b-256xh100-fsdp.yaml"
    text = _searched(
        path,
        {"pipeline": 1, "sequence_parallel": True},
        {
            "tensor": [1, 2],
            "expert": [4, 8],
            "expert_tensor": [1],
            "context": [1],
            "micro_batch": [4],
            "recompute": [full_or(path)],
            "precision": ["bf16"],
            "data_shard": ["all"],
            "offload": ["none"],
            "order": ["tp-cp-ep-dp-pp"],
        },
    )
    result, own = _compare(path, text)
    assert result.results, result.rejected_by_rule
    assert own is not None
    if own.rejected or own.outside:
        # Said why: a rule's message, or the axes it leaves.
        assert own.message or own.outside
    else:
        assert result.results[0].metrics.step_time_s <= own.step_time_s * (1 + 1e-9)


def full_or(path: Path) -> str:
    return str(yaml.safe_load(path.read_text())["training"]["recompute"])


@pytest.mark.slow
def test_deepseek_v3_search_matches_or_beats_the_published_layout() -> None:
    path = ROOT / "examples/deepseek-v3-2048xh800.yaml"
    data = yaml.safe_load(path.read_text())
    keep = {
        "pipeline": 16,
        "virtual_stages": 2,
        "pipeline_layout": data["parallelism"]["pipeline_layout"],
        "context": 1,
        "tensor": 1,
        "zero_stage": 1,
    }
    text = _searched(
        path,
        keep,
        {
            "expert": [32, 64],
            "expert_tensor": [1],
            "pipeline_schedule": ["dualpipev", "interleaved-1f1b"],
            "order": ["tp-cp-ep-dp-pp"],
            "sequence_parallel": [False],
            "micro_batch": [1],
            "recompute": ["full"],
            "precision": ["bf16"],
        },
    )
    result, own = _compare(path, text)
    assert own is not None
    if not result.results:
        pytest.fail(f"nothing feasible: {dict(result.rejected_by_rule)}")
    if own.rejected or own.outside:
        assert own.message or own.outside
    else:
        assert result.results[0].metrics.step_time_s <= own.step_time_s * (1 + 1e-9)
