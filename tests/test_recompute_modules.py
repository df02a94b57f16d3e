"""training.recompute_modules: Megatron-Core's --recompute-modules, in memory, time, traffic and
the launch files.

Expected bytes are worked by hand from the model's shapes (DeepSeek-V3: h 7,168, 128 heads,
q/k head dim 192 = 128 + 64 RoPE, v head dim 128, experts of f_e 2,048, top-8) at t 1, s 4,096,
b 1, BF16: one tensor of s·b·w elements is 2·4,096·w bytes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from planc.analysis import analyse
from planc.compile.frameworks import megatron_arguments
from planc.compile.plan import plan_json
from planc.memory.activations import (
    expert_shape,
    layer_bytes,
    moe_layer_bytes,
    recompute_working_set,
    shape_of,
)
from planc.perf.compute import layer_passes, pass_times, recompute_time_s
from planc.perf.inputs import device_of, efficiency_of, layer_shape
from planc.perf.ops import (
    activation,
    expert_activation,
    layer_ops,
    mla_rotary,
    mla_up_projections,
    mlp_down,
    mlp_up,
    moe_layer_ops,
)
from planc.plannable import Plannable
from planc.spec.load import load_text
from planc.verify import render, verify_text
from planc.vocab import GroupKind

from conftest import ROOT, check_text, compiled, plannable_of

TOKENS = 4096  # s·b
E2 = 2  # BF16 bytes


def _spec(training: dict[str, Any], parallelism: dict[str, Any] | None = None,
          model: str = "deepseek-v3", gpu: str = "b200", nodes: int = 8) -> str:
    return yaml.safe_dump(
        {
            "version": 1,
            "name": "t",
            "model": {"preset": model},
            "hardware": {"gpu": gpu, "nodes": nodes},
            "parallelism": {"tensor": 1, "pipeline": 1, "expert": 64, **(parallelism or {})},
            "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 256,
                         "precision": "bf16", "attention": "flash", **training},
        }
    )


def _job(modules: list[str] | None, recompute: str = "selective", **kw: Any) -> Plannable:
    training: dict[str, Any] = {"recompute": recompute}
    if modules is not None:
        training["recompute_modules"] = modules
    loaded = load_text("t.yaml", _spec(training, **kw))
    assert loaded.job is not None, loaded.findings
    return plannable_of(loaded.job)


def test_default_is_megatrons_core_attn() -> None:
    assert _job(None).training.recompute_modules == ("core_attn",)
    assert _job(None, "none").training.recompute_modules == ()
    assert _job(["mla_up_proj", "mla_up_proj", "moe_act"]).training.recompute_modules == (
        "mla_up_proj", "moe_act",
    )


def test_mla_up_proj_drops_q_k_and_v() -> None:
    # Q and K: 128 heads × 192 channels each, V: 128 × 128, BF16: 0.5 GiB per layer-micro-batch.
    q = k = E2 * TOKENS * 128 * 192
    v = E2 * TOKENS * 128 * 128
    assert q + k + v == 2**29
    x = shape_of(_job(None))
    kept = layer_bytes(x, "none")
    assert kept - layer_bytes(x, "selective", ("mla_up_proj",)) == q + k + v
    # core_attn (flash) drops the fp32 log-sum-exp, 4 bytes per token and head, besides.
    both = layer_bytes(x, "selective", ("core_attn", "mla_up_proj"))
    assert kept - both == q + k + v + 4 * TOKENS * 128
    # The backward re-creates them, once per rank.
    assert recompute_working_set(x, "selective", ("mla_up_proj",)) == q + k + v


def test_moe_modules_drop_their_own_tensors() -> None:
    job = _job(None)
    x, y = shape_of(job), expert_shape(job)
    rows = TOKENS * 8  # dropless top-8, balanced: T·k rows reach this rank's experts
    none = moe_layer_bytes(x, y, "none")
    # moe_act: the activation's output, fc2's input (ε·R·f_e); the fused weighted SwiGLU keeps
    # nothing else of its own.
    assert none - moe_layer_bytes(x, y, "selective", ("moe_act",)) == E2 * rows * 2048
    # shared_experts: one shared expert of 2,048, its fc1 output (2·f_s, gate and up) and fc2 input.
    shared = E2 * TOKENS * 2 * 2048 + E2 * TOKENS * 2048
    assert none - moe_layer_bytes(x, y, "selective", ("shared_experts",)) == shared
    # moe keeps the block's input (ε·T·h) and nothing else of the MoE side.
    attention = layer_bytes(x, "none") - sum(
        (E2 * TOKENS * 7168, E2 * TOKENS * 2 * 18432, E2 * TOKENS * 18432)  # dense MLP lines
    )
    assert moe_layer_bytes(x, y, "selective", ("moe",)) == attention + E2 * TOKENS * 7168


def test_layernorm_drops_the_norms_megatron_runs_as_modules() -> None:
    job = _job(None)
    x, y = shape_of(job), expert_shape(job)
    # Latent attention: the input norm's output (the down projections' input, ε·T·h); a MoE
    # layer also the pre-MLP norm's (the MoE input). Fused norms' fp32 statistics are not
    # counted (planc.memory.activations.norm_statistics).
    attention = E2 * TOKENS * 7168
    assert layer_bytes(x, "none") - layer_bytes(x, "selective", ("layernorm",)) == attention
    moe = moe_layer_bytes(x, y, "none") - moe_layer_bytes(x, y, "selective", ("layernorm",))
    assert moe == 2 * attention
    # Multi-head attention fuses its norms into the linear after them: nothing to drop.
    dense = shape_of(_job(None, model="llama3-8b", parallelism={"expert": 1}))
    assert layer_bytes(dense, "selective", ("layernorm",)) == layer_bytes(dense, "none")


def test_recompute_time_is_the_modules_forward() -> None:
    job = _job(None)
    shape, device, eff = layer_shape(job), device_of(job), efficiency_of(job)
    layer = layer_passes(layer_ops(shape), shape, device, eff)
    # the module is qkv_up_proj_and_rope_apply: the up projections and the RoPE kernels
    up = pass_times((*mla_up_projections(shape), mla_rotary(shape)), device, eff).forward_s
    assert recompute_time_s(layer, "selective", ("mla_up_proj",)) == pytest.approx(up)
    core = recompute_time_s(layer, "selective", ("core_attn",))
    assert core == pytest.approx(layer.core_forward_s)
    both = recompute_time_s(layer, "selective", ("core_attn", "mla_up_proj"))
    assert both == pytest.approx(up + core)
    mlp = pass_times((mlp_up(shape), activation(shape), mlp_down(shape)), device, eff).forward_s
    assert recompute_time_s(layer, "selective", ("mlp",)) == pytest.approx(mlp)
    assert recompute_time_s(layer, "selective", ()) == 0.0
    experts = job.dims.experts
    assert experts is not None
    moe = layer_passes(moe_layer_ops(shape, experts), shape, device, eff)
    act = pass_times((expert_activation(shape, experts),), device, eff).forward_s
    assert recompute_time_s(moe, "selective", ("moe_act",)) == pytest.approx(act)
    # moe re-runs the whole block, its activation once however many modules name it.
    whole = recompute_time_s(moe, "selective", ("moe",))
    assert whole > act and recompute_time_s(moe, "selective", ("moe", "moe_act")) == whole


def _calls(job: Plannable, group: GroupKind, collective: str, what: str = "") -> int:
    ops = [op for op in analyse(job).ops if op.stage == 0 and op.group is group
           and str(op.op) == collective and what in op.phase]
    return sum(op.calls for op in ops)


def test_recomputed_modules_run_their_collectives_again() -> None:
    # t 2 with SP on 128 GPUs, 61 layers of which 3 dense.
    tp = {"tensor": 2, "sequence_parallel": True}
    base = _job(None, parallelism=tp, nodes=16)
    up = _job(["mla_up_proj"], parallelism=tp, nodes=16)
    m, layers = base.m, 61
    for latent in ("query latent", "key/value latent"):
        # forward, and again in backward for the up projection's weight gradient
        assert _calls(base, GroupKind.TP, "all_gather", latent) == 2 * layers * m
        # mla_up_proj's recomputed up projection gathers once more
        assert _calls(up, GroupKind.TP, "all_gather", latent) == 3 * layers * m
    # The RoPE key is gathered before the up projections: once.
    assert _calls(up, GroupKind.TP, "all_gather", "RoPE") == layers * m
    # moe runs the exchange's forward again in backward: three calls per MoE layer, not two.
    # (Megatron's allgather dispatcher, the default here: 58 MoE layers, m = 4.)
    routed = "all-gather of the tokens"
    assert _calls(_job(None), GroupKind.EP, "all_gather", routed) == 2 * 58 * 4
    assert _calls(_job(["moe"]), GroupKind.EP, "all_gather", routed) == 3 * 58 * 4
    assert _calls(_job(["moe_act"]), GroupKind.EP, "all_gather", routed) == 2 * 58 * 4


@pytest.mark.parametrize("modules", [["mla_up_proj", "mlp"], ["moe", "layernorm"], ["shared_experts"]])
def test_verify_recounts_the_plans_collectives(modules: list[str]) -> None:
    job = _job(modules, parallelism={"tensor": 2, "sequence_parallel": True}, nodes=16)
    text = plan_json(compiled(job))
    assert json.loads(text)["training"]["recompute_modules"] == modules
    result = verify_text(text)
    assert result.ok, render(result)
    # A plan that hides the modules from verify no longer adds up.
    data = json.loads(text)
    del data["training"]["recompute_modules"]
    assert not verify_text(json.dumps(data)).ok


def test_megatron_arguments() -> None:
    args, _ = megatron_arguments(compiled(_job(["mla_up_proj", "moe_act"])))
    assert "--recompute-granularity selective" in args
    assert "--recompute-modules mla_up_proj moe_act" in args
    default, _ = megatron_arguments(compiled(_job(None)))
    assert "--recompute-granularity selective" in default
    assert not any(a.startswith("--recompute-modules") for a in default)
    # Nothing recomputed: no flag at all (Megatron's --recompute-modules takes one value or more).
    empty, _ = megatron_arguments(compiled(_job([])))
    assert not any(a.startswith("--recompute") for a in empty)


def test_a_change_of_mode_keeps_the_written_modules() -> None:
    written = _job(["mla_up_proj"], "none").training
    assert written.recompute_modules == ()
    assert written.with_recompute("selective").recompute_modules == ("mla_up_proj",)
    assert written.with_recompute("full").recompute_modules == ()
    assert _job(None, "none").training.with_recompute("selective").recompute_modules == (
        "core_attn",
    )


@pytest.mark.parametrize(
    ("training", "rule", "path_text"),
    [
        ({"recompute": "selective", "recompute_modules": ["core_attn", "mla_up_proj"]},
         "PLC048", "only supported with multi_latent_attention"),
        ({"recompute": "selective", "recompute_modules": ["moe_act"]},
         "PLC048", "only supported with moe_grouped_gemm"),
        ({"recompute": "full", "recompute_modules": ["mlp"]},
         "PLC051", "read only with recompute selective"),
        ({"recompute": "selective", "recompute_modules": ["mlp"], "framework": "deepspeed"},
         "PLC051", "DeepSpeed has no module list"),
    ],
)
def test_refusals(training: dict[str, Any], rule: str, path_text: str) -> None:
    text = _spec(training, parallelism={"expert": 1}, model="llama3-8b", gpu="h100-sxm", nodes=1)
    loaded = load_text("t.yaml", text)
    assert loaded.job is not None
    findings = [f for f in check_text(text).findings if f.rule == rule]
    assert any(path_text in f.message for f in findings), findings


def test_the_whole_moe_block_cannot_be_recomputed_with_combined_1f1b() -> None:
    text = _spec({"recompute": "selective", "recompute_modules": ["moe"]},
                 parallelism={"pipeline_schedule": "combined-1f1b"})
    loaded = load_text("t.yaml", text)
    assert loaded.job is not None
    messages = [f.message for f in check_text(text).findings if f.rule == "PLC030"]
    assert any("disable moe in recompute_modules" in m for m in messages), messages


def test_plc007_suggests_the_modules_nvidias_recipe_recomputes() -> None:
    # Megatron-Bridge 25.11's DeepSeek-V3 on 256 GB200 stated with plain selective recompute is
    # above HBM; the verified fix is the recipe's own recompute_modules, cheapest module first.
    spec = ROOT / "validation" / "runs" / "bridge2511-deepseek-v3-256xgb200-bf16.yaml"
    text = spec.read_text().replace(", recompute_modules: [mla_up_proj]", "")
    found = [f for f in check_text(text).findings if f.rule == "PLC007"]
    assert len(found) == 1
    # The peak it quotes is that of the spec with the fix written in it.
    fixed = text.replace(
        "recompute: selective,", "recompute: selective, recompute_modules: [core_attn, mla_up_proj],"
    )
    loaded = load_text("t.yaml", fixed)
    assert loaded.job is not None
    peak = analyse(plannable_of(loaded.job)).memory.peak.memory.total
    # The recipe's modules come first; on the GB200's 185 GiB more nodes would fit too.
    assert found[0].fix.startswith(
        "each of these alone fits (peak after it): recompute: selective, "
        f"recompute_modules: [core_attn, mla_up_proj] ({peak / 2**30:.2f} GiB)"
    )
    assert "PLC007" not in {f.rule for f in check_text(spec.read_text()).findings}
    assert "PLC007" not in {f.rule for f in check_text(fixed).findings}


def test_fix_variants_add_one_module_at_a_time() -> None:
    from planc.rules.fixes import recompute

    words = [w for w, _ in recompute(_job(None, "none"))]
    assert words == [
        "recompute: selective",
        "recompute: selective, recompute_modules: [core_attn, mla_up_proj]",
        "recompute: selective, recompute_modules: [core_attn, mla_up_proj, moe_act]",
        "recompute: selective, recompute_modules: [core_attn, mla_up_proj, moe_act, layernorm]",
        "recompute: selective, recompute_modules: [core_attn, mla_up_proj, moe_act, layernorm, "
        "shared_experts]",
        "recompute: selective, recompute_modules: [core_attn, mla_up_proj, moe_act, layernorm, "
        "shared_experts, mlp]",
        "recompute: full",
    ]
    # A dense multi-head model: the MLP only (its norms are fused); DeepSpeed: the modes.
    dense = _job(None, "none", model="llama3-8b", parallelism={"expert": 1})
    assert [w for w, _ in recompute(dense)] == [
        "recompute: selective",
        "recompute: selective, recompute_modules: [core_attn, mlp]",
        "recompute: full",
    ]


def test_explain_prints_the_recomputed_forward() -> None:
    # The line's seconds are the recomputed forward of the busiest stage over the step: here
    # one stage (p 1), so m × L × each layer's recompute time.
    from click.testing import CliRunner

    from planc.analysis import estimate_step
    from planc.cli.main import main

    spec = ROOT / "validation" / "runs" / "bridge2511-deepseek-v3-256xgb200-bf16.yaml"
    text = CliRunner().invoke(main, ["explain", str(spec)]).output
    line = next(x for x in text.splitlines() if x.strip().startswith("recompute:"))
    assert "the forward of each layer's latent up projections again in backward" in line
    assert "(recompute: selective, recompute_modules: [mla_up_proj])" in line
    out = CliRunner().invoke(main, ["explain", str(spec), "--format", "json"]).output
    seconds = json.loads(out)["step"]["recompute_s"]
    assert f"{seconds:8.2f} s" in line
    job = _job(["mla_up_proj"], parallelism={"expert": 8}, nodes=1)
    shape, device, eff = layer_shape(job), device_of(job), efficiency_of(job)
    # the module is qkv_up_proj_and_rope_apply: the up projections and the RoPE kernels
    up = pass_times((*mla_up_projections(shape), mla_rotary(shape)), device, eff).forward_s
    assert estimate_step(analyse(job)).recompute_s == pytest.approx(job.m * 61 * up)
    assert estimate_step(analyse(_job([]))).recompute_s == 0.0
