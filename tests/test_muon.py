"""Muon (training.optimizer: muon): Megatron-Core's TensorParallelMuon and its layer-wise
distributed optimizer.

What is checked, each against an independent derivation:
- the Newton-Schulz FLOPs: a numpy quintic iteration, its matmuls counted as 2·M·N·K from the
  shapes numpy multiplies (tall matrices transposed first, as emerging_optimizers does), against
  planc's 5·(4·m²·n + 2·m³);
- which parameters Muon takes: every preset's layer, its 2-D weights counted here from the
  Hugging Face module list plus its 1-D tensors (norms, biases, QK-norm, latent norms, router
  bias) counted apart, add up to planc's layer parameter count;
- the optimizer memory of Llama 3 8B by hand (fp32 master and momentum for the matrices, Adam's
  m and v for the embedding, head and norms), replicated at zero_stage 0 and shared over the
  data-parallel ranks at 1;
- the traffic as Megatron-Core runs it: the layer-wise optimizer all-reduces gradients whole
  before 0.18 (framework_release nemo-26.04), reduce-scatters them from 0.18, and all-gathers
  the parameters after the step; `planc verify` recounts it and refuses a plan that lies;
- Megatron-LM's arguments (dist_muon before 0.18, muon with --use-distributed-optimizer
  after) and the refusals Megatron-LM's own checks make (PLC074).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_frameworks import MEGATRON_PARSE, _run, megatron_python

from planc.analysis import estimate_step
from planc.compile.frameworks import megatron_files
from planc.compile.plan import plan_json
from planc.memory.budget import rank_memory
from planc.memory.matrices import Matrix, layer_matrices, stage_matrices
from planc.memory.params import (
    layer_parameters,
    local_expert_parameters,
    moe_layer_dense_parameters,
)
from planc.perf.inputs import device_of, efficiency_of
from planc.perf.muon import matrix_ns_work, muon_step, ns_flops
from planc.presets import all_model_presets
from planc.spec.job import preset_model
from planc.verify import render, verify_text

from conftest import analysis_of, check_overlay, compiled, job_of, rules_fired

H, F, V, L = 4096, 14336, 128_256, 32  # Llama 3 8B
N_HEADS, KV_HEADS, HEAD = 32, 8, 128


def _muon(**training: Any) -> dict[str, Any]:
    return {"training": {"optimizer": "muon", **training}}


# --- Newton-Schulz FLOPs -------------------------------------------------------------------


def _counted_ns(rows: int, cols: int, steps: int) -> int:
    """Run the quintic iteration in numpy on a rows × cols matrix and count each matmul's
    2·M·N·K from the operands' shapes."""
    a, b, c = 3.4445, -4.7750, 2.0315  # Muon's quintic coefficients (Jordan et al. 2024)
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    if rows > cols:
        x = x.T
    x /= np.linalg.norm(x) + 1e-7
    flops = 0

    def mm(p: np.ndarray, q: np.ndarray) -> np.ndarray:
        nonlocal flops
        flops += 2 * p.shape[0] * p.shape[1] * q.shape[1]
        return p @ q

    for _ in range(steps):
        gram = mm(x, x.T)
        poly = b * gram + c * mm(gram, gram)
        x = a * x + mm(poly, x)
    return flops


@pytest.mark.parametrize(("rows", "cols"), [(64, 256), (256, 64), (96, 96), (8, 200)])
def test_newton_schulz_flops_are_the_iterations_matmuls(rows: int, cols: int) -> None:
    for steps in (1, 5):
        assert ns_flops(rows, cols, steps) == _counted_ns(rows, cols, steps)


# --- what Muon takes ------------------------------------------------------------------------


def _one_d(model: Any, t: int, moe_layer: bool) -> int:
    """A layer's 1-D tensors on one TP rank: two norms (weight, and bias for LayerNorm), QK-norm,
    the latent norms, the biases (column-parallel split, row-parallel whole), attention sinks,
    the router's biases and the shared experts'."""
    nu = 2 if model.norm == "layernorm" else 1
    total = 2 * nu * model.h
    if model.qk_norm:
        total += 2 * model.k
    if model.mla is not None:
        total += model.mla.kv_lora + (model.mla.q_lora or 0)
    if model.bias:
        total += (-(-model.n // t) + 2 * -(-model.g // t)) * model.k + model.h
        if not moe_layer:
            total += (2 if model.mlp in GATED else 1) * -(-model.f // t) + model.h
    if model.sinks:
        total += -(-model.n // t)  # one softmax offset per head
    if moe_layer and model.moe.router_bias:
        total += model.moe.E
    if moe_layer and model.bias:  # the gate's bias and the shared experts' fc1 and fc2 biases
        total += model.moe.E
        shared = -(-(model.moe.E_s * model.moe.f_s) // t)
        total += ((2 if model.mlp in GATED else 1) * shared + model.h) if model.moe.E_s else 0
    return total


# The gated MLPs: fc1 writes a gate and an up projection (two biases of f).
GATED = ("swiglu", "quick_geglu")


def _expert_one_d(model: Any, ep: int, et: int) -> int:
    """The rank's routed experts' biases: fc1's γ'·f_e/ETP and fc2's h, per local expert."""
    if not model.bias:
        return 0
    gated = 2 if model.mlp in GATED else 1
    return model.moe.E // ep * (gated * -(-model.moe.f_e // et) + model.h)


@pytest.mark.parametrize("name", sorted(all_model_presets()))
def test_matrices_and_vectors_make_up_each_layer(name: str) -> None:
    model = preset_model(name, 4096)
    for t in (1, 2):
        dense = sum(m.count * m.local_elements for m in layer_matrices(model, t, False))
        assert dense + _one_d(model, t, False) == layer_parameters(model, t), (name, t)
        if model.moe is None:
            continue
        moe = layer_matrices(model, t, True, ep=2, et=1)
        routed = sum(m.count * m.local_elements for m in moe if m.expert)
        shared = sum(m.count * m.local_elements for m in moe if not m.expert)
        assert routed + _expert_one_d(model, 2, 1) == local_expert_parameters(model, 2, 1), name
        assert shared + _one_d(model, t, True) == moe_layer_dense_parameters(model, t), name


def test_split_qkv_gives_q_k_and_v_their_own_matrices() -> None:
    model = preset_model("llama3-8b", 8192)
    names = {m.name: m.whole for m in layer_matrices(model, 2, False, split_qkv=True)}
    assert names["linear_qkv (Q)"] == (N_HEADS * HEAD, H)
    assert names["linear_qkv (K)"] == names["linear_qkv (V)"] == (KV_HEADS * HEAD, H)
    fused = {m.name: m.whole for m in layer_matrices(model, 2, False, split_qkv=False)}
    assert fused["linear_qkv"] == ((N_HEADS + 2 * KV_HEADS) * HEAD, H)
    assert fused["linear_proj"] == (H, N_HEADS * HEAD)  # row-parallel, gathered over columns


# --- memory ----------------------------------------------------------------------------------

MATRICES = L * (2 * H * H + 2 * KV_HEADS * HEAD * H + 3 * H * F)  # Q, O, K, V, fc1 (2f), fc2
PSI = 8_030_261_248


def _optimizer_terms(zero: int, data: int) -> dict[str, int]:
    job = job_of(
        {
            "parallelism": {"tensor": 1, "sequence_parallel": False, "zero_stage": zero},
            **_muon(),
        }
    )
    assert job.layout.d == data
    return {t.name: t.bytes for t in rank_memory(job, 0).terms if t.component == "optimizer"}


def test_optimizer_state_by_hand_replicated_and_layer_wise() -> None:
    assert (
        stage_matrices(
            job_of({"parallelism": {"tensor": 1, "sequence_parallel": False}, **_muon()}), 0
        ).elements(False)
        == MATRICES
    )
    rest = PSI - MATRICES  # the embedding, the head and 65 norms of 4,096
    assert rest == 2 * V * H + (2 * L + 1) * H
    replicated = _optimizer_terms(0, 8)
    assert replicated == {
        "fp32 master weights": 4 * PSI,
        "Muon momentum (fp32)": 4 * MATRICES,
        "Adam m (fp32, non-matrix parameters)": 4 * rest,
        "Adam v (fp32, non-matrix parameters)": 4 * rest,
    }
    shared = _optimizer_terms(1, 8)
    assert shared["Muon momentum (fp32)"] == 4 * -(-MATRICES // 8)
    assert shared["Adam m (fp32, non-matrix parameters)"] == 4 * -(-rest // 8)
    adam = job_of({"parallelism": {"tensor": 1, "sequence_parallel": False, "zero_stage": 0}})
    adam_bytes = sum(t.bytes for t in rank_memory(adam, 0).terms if t.component == "optimizer")
    assert adam_bytes - sum(replicated.values()) == 4 * MATRICES  # no second moment for them


# --- step time -------------------------------------------------------------------------------


def test_the_step_pays_the_iterations_on_its_share() -> None:
    base = {"parallelism": {"tensor": 1, "sequence_parallel": False, "zero_stage": 1}}
    adam = estimate_step(analysis_of(base))
    muon = estimate_step(analysis_of({**base, **_muon()}))
    extra = muon.step_time_s - adam.step_time_s
    # 32 layers of Q, O (4,096²), K, V (1,024 × 4,096), fc1 (28,672 × 4,096), fc2 (4,096 × 14,336)
    per_layer = (
        2 * ns_flops(H, H, 5)
        + 2 * ns_flops(KV_HEADS * HEAD, H, 5)
        + ns_flops(2 * F, H, 5)
        + ns_flops(H, F, 5)
    )
    flops = L * per_layer / 8  # shared over the 8 data-parallel ranks
    peak = 989e12  # h100-sxm's dense BF16 peak
    assert flops / peak < extra < 3 * flops / peak


# --- traffic, plan and verify -----------------------------------------------------------------


def _dp_ops(job: Any) -> list[tuple[str, str]]:
    analysis = analysis_of(job) if isinstance(job, dict) else job
    return sorted({(op.group, str(op.op)) for op in analysis.ops if op.group == "dp_cp"})


def test_layer_wise_traffic_by_release_and_verify_recounts_it() -> None:
    old = {"parallelism": {"tensor": 2, "zero_stage": 1}, **_muon(framework_release="nemo-26.04")}
    assert _dp_ops(old) == [("dp_cp", "all_gather"), ("dp_cp", "all_reduce")]
    new = {"parallelism": {"tensor": 2, "zero_stage": 1}, **_muon()}
    assert _dp_ops(new) == [("dp_cp", "all_gather"), ("dp_cp", "reduce_scatter")]
    plan = compiled(job_of(old))
    text = plan_json(plan)
    record = json.loads(text)["training"]["optimizer"]
    assert record == {
        "name": "muon",
        "tp_mode": "blockwise",
        "ns_steps": 5,
        "split_qkv": True,
        "layer_wise": True,
        "gradients_all_reduced": True,
    }
    report = verify_text(text)
    assert report.ok, render(report)
    lying = json.loads(text)
    lying["training"]["optimizer"]["gradients_all_reduced"] = False
    assert not verify_text(json.dumps(lying)).ok


def test_megatron_arguments_follow_the_release() -> None:
    old = megatron_files(
        compiled(
            job_of({"parallelism": {"zero_stage": 1}, **_muon(framework_release="nemo-26.04")})
        )
    )
    args = old["megatron/args.txt"]
    assert "--optimizer dist_muon" in args and "--use-distributed-optimizer" not in args
    new = megatron_files(
        compiled(
            job_of(
                {
                    "parallelism": {"zero_stage": 1},
                    **_muon(muon={"tp_mode": "duplicated", "ns_steps": 6, "split_qkv": False}),
                }
            )
        )
    )["megatron/args.txt"]
    for flag in (
        "--optimizer muon",
        "--use-distributed-optimizer",
        "--muon-tp-mode duplicated",
        "--muon-num-ns-steps 6",
        "--muon-no-split-qkv",
    ):
        assert flag in new, flag


def test_megatron_parser_takes_the_muon_arguments() -> None:
    """Megatron-LM's own parser and validate_args (megatron-core 0.19.2) on the emitted
    arguments: Muon with --use-distributed-optimizer becomes its layer-wise optimizer."""
    python = megatron_python()
    cases = {
        "layer-wise": {"parallelism": {"zero_stage": 1}, **_muon(muon={"tp_mode": "distributed"})},
        "replicated": {"parallelism": {"zero_stage": 0}, **_muon(muon={"ns_steps": 6})},
    }
    payload = {}
    for name, overlay in cases.items():
        files = megatron_files(compiled(job_of(overlay)))
        record = json.loads(plan_json(compiled(job_of(overlay))))
        payload[name] = [
            files["megatron/args.txt"].splitlines(),
            record["world_size"],
            record["model"]["vocab"],
        ]
    parsed = _run(python, MEGATRON_PARSE, payload)
    wise, plain = parsed["layer-wise"], parsed["replicated"]
    assert wise["optimizer"] == plain["optimizer"] == "muon"
    assert wise["validated_layer_wise"] and not wise["validated_distributed_optimizer"]
    assert not plain["validated_layer_wise"]
    # the spec's tp_mode is what Megatron runs, its default (blockwise) included
    assert wise["muon_tp_mode"] == "distributed" and plain["muon_tp_mode"] == "blockwise"
    assert plain["muon_num_ns_steps"] == 6
    assert wise["muon_split_qkv"] and wise["muon_num_ns_steps"] == 5


# --- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overlay",
    [
        {"parallelism": {"zero_stage": 2}, **_muon()},
        {
            "training": {"optimizer": "muon", "framework": "fsdp2"},
            "parallelism": {"tensor": 1, "sequence_parallel": False},
        },
        {"training": {"optimizer": "muon", "precision": "fp16"}},
        {"training": {"muon": {"ns_steps": 3}}},
        {
            "parallelism": {
                "tensor": 1,
                "sequence_parallel": False,
                "zero_stage": 1,
                "data_shard": 4,
            },
            **_muon(),
        },
        {"parallelism": {"zero_stage": 0}, **_muon(framework_release="nemo-26.04")},
    ],
)
def test_megatron_refusals(overlay: dict[str, Any]) -> None:
    assert "PLC074" in rules_fired(check_overlay(overlay))


def test_muon_with_the_layer_wise_optimizer_passes() -> None:
    assert "PLC074" not in rules_fired(check_overlay({"parallelism": {"zero_stage": 1}, **_muon()}))
    plain = {"parallelism": {"zero_stage": 0}, **_muon(framework_release="nemo-26.04")}
    plain["training"]["overlap_grad_reduce"] = False
    assert "PLC074" not in rules_fired(check_overlay(plain))


def test_the_priced_gemms_are_the_formulas_flops() -> None:
    """The three GEMMs planc prices per iteration carry exactly ns_flops (duplicated: the whole
    matrix); distributed splits the two m²·n GEMMs over the group and keeps A·A whole."""
    job = job_of()
    device, eff = device_of(job), efficiency_of(job)
    fc1 = Matrix("linear_fc1", 2 * F // 2, H, 0, 2)  # 28,672 × 4,096 gathered over t = 2
    _, flops = matrix_ns_work(fc1, "duplicated", 5, device, eff)
    assert flops == ns_flops(2 * F, H, 5)
    _, split = matrix_ns_work(fc1, "distributed", 5, device, eff)
    assert split == 5 * (4 * H * H * (2 * F) / 2 + 2 * H**3)
    _, block = matrix_ns_work(fc1, "blockwise", 5, device, eff)
    assert block == ns_flops(F, H, 5)


def test_distributed_iterates_along_the_unsplit_side() -> None:
    """emerging_optimizers newton_schulz_tp (NVIDIA-NeMo/Emerging-Optimizers 0001f6e2) in
    distributed mode transposes by the split dimension, not by size: the Gram matrix is the
    unsplit side's, so a column-parallel K projection [g·k/t, h] (split rows, 1,024 × 4,096
    whole over t = 2) iterates on m = h = 4,096, the long side ("wastes compute"). Per step:
    X·Xᵀ over the 512 local rows, 2·h²·512, A·A, 2·h³, and B·X, 2·h²·512; an all-reduce of the
    bfloat16 h × h Gram matrix each step and of the fp32 squared norm once."""
    job = job_of({"parallelism": {"tensor": 2}, **_muon(muon={"tp_mode": "distributed"})})
    device, eff = device_of(job), efficiency_of(job)
    k_proj = Matrix("linear_k", 512, H, 0, 2)
    _, flops = matrix_ns_work(k_proj, "distributed", 5, device, eff)
    assert flops == 5 * (2 * H * H * 512 + 2 * H**3 + 2 * H * H * 512)
    assert flops > ns_flops(1024, H, 5)  # more than iterating on the whole matrix
    exchanges = {
        (e.collective.value, e.bytes)
        for e in muon_step(job, 0, device, eff, 1, 1).exchanges
        if not e.expert
    }
    assert ("all_reduce", 2 * H * H) in exchanges and ("all_reduce", 4) in exchanges


@settings(max_examples=40, deadline=None)
@given(
    preset=st.sampled_from(["llama3-8b", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-120b"]),
    t=st.sampled_from([1, 2, 4]),
    ep=st.sampled_from([1, 2, 8]),
)
def test_a_layers_matrices_leave_its_vectors_to_adam(preset: str, t: int, ep: int) -> None:
    """Every Muon matrix has a shape and a count, and a layer's matrices are fewer elements
    than its parameters: its norms stay Adam's at every tensor-parallel and expert degree."""
    model = preset_model(preset, 4096)
    for moe_layer in (False, True) if model.moe is not None else (False,):
        matrices = layer_matrices(
            model, t, moe_layer, ep=ep if model.moe and model.moe.E % ep == 0 else 1
        )
        assert all(m.rows > 0 and m.cols > 0 and m.count > 0 for m in matrices)
        whole = sum(m.count * m.local_elements for m in matrices if not m.expert)
        assert whole < (
            moe_layer_dense_parameters(model, t) if moe_layer else layer_parameters(model, t)
        )
