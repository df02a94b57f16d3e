"""Sliding-window attention and attention sinks (model.sliding_window, full_attention_every,
attention_sinks), as GPT-OSS trains: alternating windowed and full layers, a learned softmax
offset per head.

What is checked, each against an independent derivation:
- the scores a windowed causal kernel computes: a numpy mask of the band (key j for query i when
  i − w < j ≤ i) counted, against planc's s·w − w²/2, which differs from it by w/2 as planc's
  causal s²/2 does from the triangle's s(s+1)/2;
- the layer pattern as Megatron-Core reads window_attn_skip_freq (layer_number % freq != 0
  windowed, from 1) and Hugging Face's layer_types for GPT-OSS (sliding first);
- the step: every windowed layer runs its fused core over the band and nothing else changes, so
  the compute saved is the full core's passes less the windowed one's, per windowed layer;
- Megatron-LM's own parser and validate_args read the emitted --window-size, --window-attn-skip-
  freq and --softmax-type (megatron-core 0.19.2; its GPTModel builds the model with planc's
  parameter count: tests/test_frameworks_megatron_build.py);
- the plan records the window and the sinks, and `planc verify` refuses a plan whose parameter
  count leaves the sinks out.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_frameworks import MEGATRON_PARSE, _run, megatron_python

from planc.analysis import analyse, estimate_step
from planc.compile.frameworks import megatron_files
from planc.compile.plan import plan_json
from planc.perf.compute import work_time_s
from planc.perf.inputs import (
    device_of,
    efficiency_of,
    layer_shape,
    model_flops,
    stage_chunk_times,
)
from planc.perf.ops import flash_attention, window_keys
from planc.spec.hf import from_config
from planc.spec.job import preset_model
from planc.verify import verify_text

from conftest import check_overlay, compiled, job_of, rules_fired

HF = Path(__file__).resolve().parent / "data" / "hf"

OSS: dict[str, Any] = {
    "model": {"preset": "gpt-oss-120b"},
    "hardware": {"gpu": "b200", "nodes": 8},
    "parallelism": {
        "tensor": 1,
        "pipeline": 1,
        "data": 64,
        "sequence_parallel": False,
        "expert": 8,
        "zero_stage": 1,
    },
    "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 128, "recompute": "none"},
}


def _band(s: int, w: int) -> int:
    i, j = np.ogrid[:s, :s]
    return int(((j <= i) & (i - j < w)).sum())


@pytest.mark.parametrize(("s", "w"), [(256, 1), (256, 16), (4096, 128), (512, 512), (300, 1000)])
def test_window_scores_are_the_masks_band(s: int, w: int) -> None:
    counted = _band(s, w)
    planc = s * window_keys(s, w)
    assert counted - planc == min(s, w) / 2


def test_gpt_oss_layers_alternate_window_then_full() -> None:
    model = preset_model("gpt-oss-120b", 4096)
    pattern = [model.is_window_layer(i) for i in range(model.L)]
    assert pattern == [True, False] * 18  # layer_types: sliding_attention, full_attention, ...
    every = replace(model, full_every=0)
    assert all(every.is_window_layer(i) for i in range(model.L))
    assert not any(replace(model, window=0).is_window_layer(i) for i in range(model.L))
    job = job_of(
        {**OSS, "parallelism": {**OSS["parallelism"], "pipeline": 4, "data": 16}},
        "mixtral-8x7b-64xh100.yaml",
    )
    assert [job.chunk_window_layers(r) for r in range(4)] == [
        ((0, 5),),  # layers 0-8: 0, 2, 4, 6, 8
        ((0, 4),),
        ((0, 5),),
        ((0, 4),),
    ]


def test_windowed_core_is_the_band_of_the_causal_one() -> None:
    job = job_of(OSS, "mixtral-8x7b-64xh100.yaml")
    shape = layer_shape(job)
    full, windowed = flash_attention(shape), flash_attention(replace(shape, window=128))
    s, w = 4096, 128
    assert windowed.forward.flops / full.forward.flops == pytest.approx((2 * s * w - w * w) / s**2)
    assert windowed.backward.flops == pytest.approx(2.5 * windowed.forward.flops)


def test_the_step_saves_the_core_on_each_windowed_layer() -> None:
    job = job_of(OSS, "mixtral-8x7b-64xh100.yaml")
    full_job = job_of(
        {**OSS, "model": {"preset": "gpt-oss-120b", "full_attention_every": 1}},
        "mixtral-8x7b-64xh100.yaml",
    )
    # every layer number a multiple of 1: full attention everywhere
    assert not any(full_job.model.is_window_layer(i) for i in range(36))
    device, eff = device_of(job), efficiency_of(job)
    shape = layer_shape(job)
    full, win = flash_attention(shape), flash_attention(replace(shape, window=128))

    def passes(op: Any) -> float:
        return work_time_s(op, op.forward, device, eff) + work_time_s(
            op, op.backward, device, eff, backward=True
        )

    assert job.layout.p == 1 and job.m == 2
    per_microbatch = 18 * (passes(full) - passes(win))  # 18 windowed layers
    (chunk,), (full_chunk,) = stage_chunk_times(job, eff, 0), stage_chunk_times(full_job, eff, 0)
    chunk_saved = full_chunk.forward_s + full_chunk.backward_s - chunk.forward_s - chunk.backward_s
    assert chunk_saved == pytest.approx(per_microbatch, rel=1e-9)
    # the step: m micro-batches of it, give or take what the shorter compute hides of the
    # communication beside it and the slowdown that hidden communication costs the compute
    # (its link's processor_usage: NCCL's SMs on the network, 0.12 of an H100's)
    step = estimate_step(analyse(job)).compute_s
    full_step = estimate_step(analyse(full_job)).compute_s
    saved = job.m * per_microbatch
    assert full_step - step == pytest.approx(saved, rel=0.02)
    assert saved > 0


def test_model_flops_count_twice_the_band() -> None:
    job = job_of(OSS, "mixtral-8x7b-64xh100.yaml")
    full_job = job_of(
        {**OSS, "model": {"preset": "gpt-oss-120b", "full_attention_every": 1}},
        "mixtral-8x7b-64xh100.yaml",
    )
    s, w, n, k, B = 4096, 128, 64, 64, 128
    # per windowed layer and sequence, forward: 2·s²·n·(k+v) for full attention, 2·s·(2w − w²/s)·n·(k+v)
    full_core = 2 * s * s * n * 2 * k
    band_core = 2 * s * (2 * w - w * w / s) * n * 2 * k
    assert model_flops(full_job) - model_flops(job) == pytest.approx(
        3 * B * 18 * (full_core - band_core)
    )


def test_megatron_reads_the_window_and_the_sinks() -> None:
    plan = compiled(job_of(OSS, "mixtral-8x7b-64xh100.yaml"))
    args = megatron_files(plan)["megatron/args.txt"]
    for flag in ("--window-size 127,0", "--window-attn-skip-freq 2", "--softmax-type learnable"):
        assert flag in args, flag
    python = megatron_python()
    record = json.loads(plan_json(plan))
    parsed = _run(
        python,
        MEGATRON_PARSE,
        {"oss": [args.splitlines(), record["world_size"], record["model"]["vocab"]]},
    )["oss"]
    assert parsed["window_size"] in ("(127, 0)", "[127, 0]")
    assert parsed["window_attn_skip_freq"] == 2 and parsed["softmax_type"] == "learnable"


def test_the_plan_records_them_and_verify_counts_the_sinks() -> None:
    text = plan_json(compiled(job_of(OSS, "mixtral-8x7b-64xh100.yaml")))
    model = json.loads(text)["model"]
    assert model["sliding_window"] == 128 and model["full_attention_every"] == 2
    assert model["attention_sinks"] is True
    assert verify_text(text).ok
    lying = json.loads(text)
    del lying["model"]["attention_sinks"]
    assert not verify_text(json.dumps(lying)).ok


def test_gpt_oss_configs_read_as_transformers_builds_them() -> None:
    """GptOssAttention windows a layer only where layer_types says sliding_attention and
    sliding_window is set; the experts and the router keep biases whatever attention_bias says,
    which planc's one model.bias cannot state."""
    config = json.loads((HF / "gpt-oss-120b" / "config.json").read_text("utf-8"))
    read = from_config(config)
    assert not isinstance(read, tuple)
    assert read.fields["sliding_window"] == 128 and read.fields["full_attention_every"] == 2
    for changed in ({"sliding_window": None}, {"layer_types": ["full_attention"] * 36}):
        plain = from_config({**config, **changed})
        assert not isinstance(plain, tuple)
        assert "sliding_window" not in plain.fields and plain.fields["attention_sinks"] is True
    refused = from_config({**config, "attention_bias": False})
    assert isinstance(refused, tuple) and refused[0].severity == "error"


def test_context_parallelism_takes_the_window_and_sinks_as_te_does() -> None:
    """Transformer Engine's attn_forward_func_with_cp: a sliding window with a2a or all_gather
    only, attention sinks with a2a only (PLC048, Megatron-LM's refusals)."""
    def fired(model: dict[str, Any], kind: str) -> set[str]:
        overlay = {
            **OSS,
            "model": model,
            "parallelism": {**OSS["parallelism"], "data": 32, "context": 2, "cp_comm_type": kind},
        }
        return rules_fired(check_overlay(overlay, "mixtral-8x7b-64xh100.yaml"))

    oss = {"preset": "gpt-oss-120b"}
    assert "PLC048" in fired(oss, "p2p")  # window and sinks
    assert "PLC048" in fired(oss, "allgather")  # sinks
    assert "PLC048" not in fired(oss, "a2a")
    windowed = {"preset": "gpt-oss-120b", "attention_sinks": False}
    assert "PLC048" not in fired(windowed, "allgather")
    assert "PLC048" in fired(windowed, "p2p")
