"""training.overlap_tp under torchtitan is its async TP (compile.enable_async_tensor_parallel), a
torch.compile pass: with the model compiled the TP collectives are pipelined with their matmuls
as Megatron's overlap is; with eager kernels torchtitan refuses it, the collectives run exposed,
planc prices them so and PLC051 says why."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from planc.analysis import analyse
from planc.check import check_loaded
from planc.perf.inputs import efficiency_of, tp_per_layer
from planc.plannable import Plannable, plannable
from planc.spec.load import load_text


def spec(framework: str, kernels: str, overlap: bool) -> dict[str, Any]:
    return {
        "version": 1,
        "name": "async-tp",
        "model": {"preset": "llama3-8b"},
        "hardware": {"gpu": "h100-sxm", "nodes": 1},
        "parallelism": {"tensor": 4, "sequence_parallel": True, "zero_stage": 3},
        "training": {
            "seq_len": 8192,
            "micro_batch": 1,
            "global_batch": 2,
            "precision": "bf16",
            "recompute": "full",
            "attention": "flash",
            "framework": framework,
            "kernels": kernels,
            "overlap_tp": overlap,
        },
    }


def plan_of(framework: str, kernels: str, overlap: bool) -> Plannable:
    job = load_text("async-tp.yaml", yaml.safe_dump(spec(framework, kernels, overlap))).job
    assert job is not None
    plan = plannable(job)
    assert isinstance(plan, Plannable)
    return plan


def tp_seconds(framework: str, kernels: str, overlap: bool) -> tuple[float, float, float]:
    """(forward, exposed backward, hidden) TP seconds of one layer on stage 0."""
    plan = plan_of(framework, kernels, overlap)
    layer = tp_per_layer(plan, efficiency_of(plan), analyse(plan).ops, 0)
    return layer.forward_s, layer.backward_exposed_s, layer.backward_overlapped_s


def rules(framework: str, kernels: str, overlap: bool) -> list[str]:
    text = yaml.safe_dump(spec(framework, kernels, overlap))
    return [f.rule for f in check_loaded(load_text("async-tp.yaml", text)).findings]


def test_compiled_async_tp_hides_what_megatrons_overlap_hides() -> None:
    # The same pipelined model of each all-gather and reduce-scatter with its GEMM: torchtitan's
    # micro-pipelined async TP and Transformer Engine's userbuffers split the same collectives.
    compiled = tp_seconds("fsdp2", "compiled", True)
    exposed = tp_seconds("fsdp2", "compiled", False)
    assert compiled[0] < exposed[0]
    assert compiled[2] > exposed[2]
    # The hidden part is what no longer shows: the collectives' total is the same.
    assert sum(compiled) == pytest.approx(sum(exposed), rel=1e-12)


@pytest.mark.parametrize("kernels", ["fused", "unfused"])
def test_eager_torchtitan_runs_tp_exposed(kernels: str) -> None:
    # torchtitan refuses async TP without compiling the model: overlap_tp then prices as off.
    assert tp_seconds("fsdp2", kernels, True) == tp_seconds("fsdp2", kernels, False)
    assert "PLC051" in rules("fsdp2", kernels, True)


def test_plc051_only_where_torchtitan_refuses() -> None:
    assert "PLC051" not in rules("fsdp2", "compiled", True)
    assert "PLC051" not in rules("fsdp2", "fused", False)
    # Megatron's --tp-comm-overlap needs no compiler.
    assert tp_seconds("megatron", "fused", True)[0] < tp_seconds("megatron", "fused", False)[0]


def test_dtensor_tp_reduces_the_input_gradient_after_the_weight_gradients() -> None:
    # torchtitan without async TP: the column-parallel dX reduce-scatter is the backward of the
    # block's input redistribution, issued after the linears' dX and dW and waited on at once
    # by the norm: nothing of it hides. Megatron hides it behind dW (async_tp_allreduce).
    torchtitan = tp_seconds("fsdp2", "fused", False)
    megatron = tp_seconds("megatron", "fused", False)
    assert torchtitan[2] == 0.0
    assert megatron[2] > 0.0
    # The same collectives: what Megatron hides, torchtitan shows.
    assert sum(torchtitan) == pytest.approx(sum(megatron), rel=1e-12)
    assert torchtitan[1] == pytest.approx(megatron[1] + megatron[2], rel=1e-12)
