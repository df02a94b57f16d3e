"""training.offload.activations: Megatron-Core's --cpu-offloading-num-layers (Transformer
Engine's CPU offload of the first N layers' saved activations): HBM, host memory, the copies'
wait, and the rules Megatron-Core enforces."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from planc.analysis import analyse, estimate_step
from planc.cli.main import main
from planc.memory.budget import budget
from planc.perf.offload import activation_offload_s, offload_lag_s, offloaded_layer_bytes
from planc.plannable import Plannable, plannable
from planc.spec.load import load_text

# Llama 3 70B on 64 GB200 under Megatron-FSDP, micro-batch 2 × 8192, FP8 current scaling, no
# recompute: Megatron-Bridge 26.04.01's layout, which offloads 40 of the 80 layers.
SPEC = """version: 1
name: offload
model: {preset: llama3-70b}
hardware: {gpu: gb200-nvl72, nodes: 16, nvlink_domain: 64}
parallelism: {tensor: 1, pipeline: 1, context: 1, zero_stage: 3}
training: {seq_len: 8192, micro_batch: 2, global_batch: 256, precision: fp8,
  fp8: {recipe: current, param_gather: true}, recompute: none, attention: flash,
  framework: megatron-fsdp, offload: {activations: OFFLOADED}}
"""

# Korthikanti et al. 2022 §4.1 per layer with flash attention, FP8 linear inputs saved
# quantized (one byte), typed here from the paper's terms, not from planc: s·b·h·(2 attention
# norm input + 1 QKV input + 2 Q + 2 out-projection input + 1 its quantized copy + 2 MLP norm
# input + 1 fc1 input) + 2·2·s·b·g·k (K, V) + 4·a·s·b (softmax statistics) + s·b·f·(4 fc1
# output + 1 fc2 input).
S, B, H, G, K, A, F = 8192, 2, 8192, 8, 128, 64, 28672
LAYER_BYTES = S * B * H * 11 + 4 * S * B * G * K + 4 * A * S * B + S * B * F * 5


def _plan(offloaded: int, text: str = SPEC) -> Plannable:
    loaded = load_text("spec.yaml", text.replace("OFFLOADED", str(offloaded)))
    assert loaded.job is not None, loaded.findings
    plan = plannable(loaded.job)
    assert not isinstance(plan, tuple)
    return plan


def test_the_offloaded_layers_move_from_hbm_to_the_host() -> None:
    kept, moved = budget(_plan(0)).peak.memory, budget(_plan(40)).peak.memory
    assert LAYER_BYTES == 3_896_508_416  # 3.90 GB a layer and micro-batch
    assert moved.host == 40 * LAYER_BYTES
    assert [t.name for t in moved.host_terms] == ["offloaded activations (40 layers, host)"]
    assert kept.total - moved.total == 40 * LAYER_BYTES
    assert kept.host == 0
    assert offloaded_layer_bytes(_plan(40)) == LAYER_BYTES


def test_host_memory_per_node_counts_the_offloaded_activations() -> None:
    # Four GPUs a tray, each rank's pinned buffers on the Grace host (PLC021 reads it).
    result = CliRunner().invoke(main, ["memory", "-"], input=SPEC.replace("OFFLOADED", "40"))
    line = next(row for row in result.output.splitlines() if "Host memory per node" in row)
    assert f"{4 * 40 * LAYER_BYTES / 1e9:.2f} GB offloaded" in line


def test_copies_that_fit_beside_the_next_layers_cost_nothing() -> None:
    # 3.90 GB at 225 GB/s is 17.3 ms a copy, under the forward of the 39 layers between each
    # offloaded layer and the one that waits for it, and N·c = 0.69 s under 78 layers' forward.
    plan = _plan(40)
    step = estimate_step(analyse(plan))
    assert step.offload_wait_s == 0.0
    assert step.step_time_s == pytest.approx(estimate_step(analyse(_plan(0))).step_time_s)


def test_a_slow_host_link_adds_the_wait_to_every_micro_batch() -> None:
    plan = _plan(40)
    slow = replace(plan, cluster=replace(plan.cluster, host_bandwidth_gbs=8.0))
    kept = replace(slow, training=replace(slow.training, offload_activation_layers=0))
    base, step = estimate_step(analyse(kept)), estimate_step(analyse(slow))
    copy = LAYER_BYTES / 8e9  # 0.487 s a copy
    assert copy > 0.4
    assert step.offload_wait_s > 0
    # Every micro-batch's forward and backward wait N·c − (L − 2)·(layer time) each.
    assert step.step_time_s - base.step_time_s == pytest.approx(step.offload_wait_s, rel=0.02)
    per_microbatch = step.offload_wait_s / slow.m
    assert per_microbatch < 2 * 40 * copy


def _simulated_lag(n: int, layers: int, copy: float, layer: float) -> float:
    """Transformer Engine's DefaultOffloadSynchronizer as events: copy i starts after layer i's
    forward and after copy i − 1, and layer L − N + i's forward waits for it."""
    t, stream_free, done = 0.0, 0.0, []
    for i in range(layers):
        if i >= layers - n:
            t = max(t, done[i - (layers - n)])
        t += layer
        if i < n:
            stream_free = max(stream_free, t) + copy
            done.append(stream_free)
    return t - layers * layer


@settings(max_examples=300, deadline=None)
@given(
    layers=st.integers(3, 96),
    share=st.floats(0.0, 1.0),
    copy=st.floats(0.0, 5.0),
    layer=st.floats(0.01, 2.0),
)
def test_the_wait_is_the_synchronizer_s(
    layers: int, share: float, copy: float, layer: float
) -> None:
    n = min(layers - 1, int(share * (layers - 1)))
    assert offload_lag_s(n, layers, copy, layer) == pytest.approx(
        _simulated_lag(n, layers, copy, layer), abs=1e-9
    )


def test_the_wait_grows_with_the_copies_and_shrinks_with_the_compute() -> None:
    rng = random.Random(7)
    for _ in range(200):
        layers = rng.randint(3, 80)
        n = rng.randint(1, layers - 1)
        copy, layer = rng.uniform(0, 1), rng.uniform(0.01, 1)
        lag = offload_lag_s(n, layers, copy, layer)
        assert offload_lag_s(n, layers, copy * 1.5, layer) >= lag
        assert offload_lag_s(n, layers, copy, layer * 1.5) <= lag
        if n < layers - 1:
            assert offload_lag_s(n + 1, layers, copy, layer) >= lag


def test_no_offload_no_wait() -> None:
    assert activation_offload_s(_plan(0), 1.0, 2.0) == (0.0, 0.0)


# Micro-batch 1, whose 40 kept layers fit the GB200's HBM: a spec planc passes.
FITS = SPEC.replace("micro_batch: 2", "micro_batch: 1").replace("OFFLOADED", "40")


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ("pipeline: 1", "pipeline: 2", "no support for Pipeline parallelism"),
        ("recompute: none", "recompute: selective", "does not work when activation recomputation"),
        ("activations: 40", "activations: 80", "only for layers less than 80"),
    ],
)
def test_megatron_refuses_what_its_config_refuses(old: str, new: str, words: str) -> None:
    assert CliRunner().invoke(main, ["check", "-"], input=FITS).exit_code == 0
    result = CliRunner().invoke(main, ["check", "-"], input=FITS.replace(old, new))
    assert result.exit_code == 1
    assert "error PLC048" in result.output and words in result.output


@pytest.mark.parametrize("framework", ["deepspeed", "fsdp2"])
def test_other_frameworks_keep_activations_in_hbm(framework: str) -> None:
    text = FITS.replace("framework: megatron-fsdp", f"framework: {framework}")
    result = CliRunner().invoke(main, ["check", "-"], input=text)
    assert "PLC051" in result.output and "offload.activations 40" in result.output
    loaded = load_text("spec.yaml", text)
    assert loaded.job is not None
    plan = plannable(loaded.job)
    assert not isinstance(plan, tuple)
    assert budget(plan).peak.memory.host == 0
