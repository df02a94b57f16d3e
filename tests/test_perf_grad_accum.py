"""Gradient accumulation outside the weight-gradient GEMMs (planc.perf.grad_accum): the bytes per
parameter and the passes of each engine, derived by hand from the code the module cites
(megatron-core 0.19.2's DDP hook, DeepSpeed 0.19.6's ZeRO and BF16 optimizers), and the
parameter counts from the model's shape (12h²/t + 7h/t + 6h per GPT layer on a TP rank)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from planc.analysis import analyse, estimate_step
from planc.perf.inputs import build_inputs, efficiency_of
from planc.perf.step import StepInputs
from planc.plannable import Plannable, plannable
from planc.spec.load import load_text

from conftest import check_text

S, H, V, L, T = 2048, 4096, 51200, 8, 8
HBM = 2039e9  # a100-80gb, gpus.json (NVIDIA's datasheet)


def spec(framework: str, p: int, nodes: int, **training: Any) -> dict[str, Any]:
    zero = training.pop("zero_stage", 1)
    return {
        "version": 1,
        "name": "grad-accum",
        "model": {
            "layers": L,
            "hidden": H,
            "heads": 32,
            "ffn_hidden": 4 * H,
            "vocab": V,
            "mlp": "gelu",
            "norm": "layernorm",
            "bias": True,
            "position_embedding": "learned",
            "max_seq_len": S,
        },
        "hardware": {"gpu": "a100-80gb", "nodes": nodes},
        "parallelism": {"tensor": T, "pipeline": p, "zero_stage": zero},
        "training": {
            "seq_len": S,
            "micro_batch": 1,
            "global_batch": 16,
            "precision": "bf16",
            "recompute": "full",
            "attention": "eager",
            "framework": framework,
            **training,
        },
        "rules": {"ignore": ["PLC006"]},
    }


def plan_of(framework: str, p: int = 4, nodes: int = 8, **training: Any) -> Plannable:
    job = load_text("grad-accum.yaml", yaml.safe_dump(spec(framework, p, nodes, **training))).job
    assert job is not None
    plan = plannable(job)
    assert isinstance(plan, Plannable)
    return plan


def inputs_of(plan: Plannable) -> StepInputs:
    analysis = analyse(plan)
    params = [share.total for share in analysis.parameters]
    experts = [share.expert_total for share in analysis.parameters]
    return build_inputs(plan, params, experts, efficiency_of(plan), analysis.ops)


def seconds(plan: Plannable, moved: float) -> float:
    """One memory-bound pass of `moved` bytes at the preset's HBM efficiency."""
    return moved / (HBM * efficiency_of(plan).hbm.at(moved))


# A GPT layer on one of the t ranks: QKV and MLP weights and biases split, the output
# projection's and fc2's biases and both LayerNorms (weight and bias) whole.
LAYER = 12 * H * H // T + 7 * H // T + 6 * H
EMBEDDING = V // T * H + S * H  # the word table's slice and the learned positions


def test_megatron_fuses_all_but_the_input_embedding() -> None:
    # Default: the weight-gradient GEMMs add into main_grad; the first stage's embedding
    # tables go through the hook: w + 2γ = 2 + 2·2 bytes each (bf16, 16-bit main grads).
    plan = plan_of("megatron")
    assert plan.training.grad_accum_fusion
    stages = inputs_of(plan).stages
    assert stages[0].accumulate_s == pytest.approx(seconds(plan, 6 * EMBEDDING), rel=1e-12)
    assert all(st.accumulate_s == 0.0 for st in stages[1:])


def test_megatron_without_fusion_adds_every_gradient_each_micro_batch() -> None:
    # --no-gradient-accumulation-fusion: the middle stages hold 2 layers; with fp32 main grads
    # the hook moves 2 + 2·4 = 10 bytes per parameter.
    plan = plan_of("megatron", grad_accum_fusion=False)
    middle = inputs_of(plan).stages[1]
    assert middle.accumulate_s == pytest.approx(seconds(plan, 6 * 2 * LAYER), rel=1e-12)
    wide = plan_of("megatron", grad_accum_fusion=False, grad_accum_fp32=True)
    assert inputs_of(wide).stages[1].accumulate_s == pytest.approx(
        seconds(wide, 10 * 2 * LAYER), rel=1e-12
    )


@pytest.mark.parametrize(
    ("training", "moved", "passes"),
    [
        # ZeRO-1, bf16 accumulation: autograd adds into param.grad (3·2 bytes) on m − 1 of m.
        ({}, 6, 7),
        # fp16 the same.
        ({"precision": "fp16"}, 6, 7),
        # bf16 with fp32 accumulation under ZeRO-1: BF16_Optimizer, 5·2 + 16 bytes every time.
        ({"grad_accum_fp32": True}, 26, 8),
        # fp16 with fp32 accumulation: grad_accum += grad.to(fp32), 2 + 16 bytes every time.
        ({"precision": "fp16", "grad_accum_fp32": True}, 18, 8),
        # ZeRO-0 bf16 with a pipeline: BF16_Optimizer too.
        ({"zero_stage": 0}, 26, 8),
    ],
)
def test_deepspeed_accumulates_as_its_optimizer_does(
    training: dict[str, Any], moved: int, passes: int
) -> None:
    # 64 GPUs, t 8, p 4: d 2, m = 16/2 = 8 micro-batches; the middle stage's two layers.
    plan = plan_of("deepspeed", **training)
    assert plan.m == 8
    middle = inputs_of(plan).stages[1]
    expected = seconds(plan, moved * 2 * LAYER) * passes / 8
    assert middle.accumulate_s == pytest.approx(expected, rel=1e-12)


def test_sharded_gradients_are_not_priced() -> None:
    # ZeRO-2 and FSDP2 reduce every micro-batch's gradients and accumulate only their shard.
    for plan in (
        plan_of("deepspeed", p=1, nodes=1, zero_stage=2),
        plan_of("fsdp2", p=1, nodes=1, zero_stage=3),
    ):
        assert all(st.accumulate_s == 0.0 for st in inputs_of(plan).stages)


def test_the_pass_lies_on_each_micro_batchs_backward() -> None:
    # One node, t 8, p 1, d 1: no data-parallel traffic, m = 16 micro-batches one after the
    # other, so the step grows by 16 × the accumulation each one adds.
    fused = plan_of("megatron", p=1, nodes=1)
    unfused = plan_of("megatron", p=1, nodes=1, grad_accum_fusion=False)
    assert fused.m == 16
    # The layers, the tables, the final LayerNorm and the output layer (untied: the spec's
    # default) on the one stage.
    every = 6 * (L * LAYER + EMBEDDING + 2 * H + V // T * H)
    added = 16 * (seconds(unfused, every) - seconds(fused, 6 * EMBEDDING))
    step = estimate_step(analyse(unfused)).step_time_s - estimate_step(analyse(fused)).step_time_s
    assert step == pytest.approx(added, rel=1e-9)


def test_deepspeed_defaults_to_no_fusion_and_reports_one_asked_for() -> None:
    assert not plan_of("deepspeed").training.grad_accum_fusion
    assert plan_of("megatron-fsdp", p=1, nodes=1, zero_stage=0).training.grad_accum_fusion
    text = yaml.safe_dump(spec("deepspeed", 4, 8, grad_accum_fusion=True))
    found = [f for f in check_text(text).findings if f.rule == "PLC051"]
    assert len(found) == 1 and "gradient-accumulation fusion" in found[0].message
    assert found[0].field == "training.grad_accum_fusion" and found[0].line > 0
    quiet = yaml.safe_dump(spec("deepspeed", 4, 8))
    assert not [f for f in check_text(quiet).findings if f.rule == "PLC051"]
