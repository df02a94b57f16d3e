"""Expert-aware memory: the routed experts' state sharded over the expert data-parallel group,
the MoE layers' activations and the all-to-all buffers, against hand derivations and Megatron's
own estimator (megatron/training/theoretical_memory_usage.py)."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from planc.memory import budget, rank_memory
from planc.memory.activations import expert_shape
from planc.plannable import Plannable, plannable, refusals
from planc.spec.load import load_text

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "mixtral-8x7b-64xh100.yaml"

# Mixtral 8x7B (Jiang et al. 2024; Hugging Face config.json): h = 4096, 32 query heads of
# k = 128, g = 8 KV heads, f_e = 14336 (SwiGLU), E = 8, top-2, V = 32000, RMSNorm, untied.
H, K, N_HEADS, G, F_E, E, V = 4096, 128, 32, 8, 14336, 8, 32000
ATTENTION = 2 * H * K * (N_HEADS + G)  # Q, O: h·n·k; K, V: h·g·k → 41,943,040
NORMS = 2 * H  # two RMSNorms of h
ROUTER = H * E  # the h × E gate
EXPERT = 3 * H * F_E  # gate, up, down: 176,160,768


def spec(**changes: Any) -> Plannable:
    data = yaml.safe_load(EXAMPLE.read_text())
    for path, value in changes.items():
        section, key = path.split("__")
        data[section][key] = value
    loaded = load_text("t.yaml", yaml.safe_dump(data))
    assert loaded.job is not None, loaded.findings
    plan = plannable(loaded.job)
    assert isinstance(plan, Plannable), plan
    return plan


def terms(plan: Plannable, stage: int = 0) -> dict[str, int]:
    return {t.name: t.bytes for t in rank_memory(plan, stage).terms}


def test_mixtral_example_static_state_by_hand() -> None:
    # The example: 64 H100, PP 4, DP 16, EP 8, ETP 1 → EDP = 64 / (1·8·4) = 2. Stage 0 holds
    # layers 0–7, all MoE, each with E/EP = 1 expert, and the word embedding.
    plan = spec()
    assert (plan.layout.edp, plan.layout.expert_shard_group, plan.layout.shard_group) == (2, 2, 16)
    psi_e = 8 * EXPERT  # 1,409,286,144
    psi_d = 8 * (ATTENTION + NORMS + ROUTER) + V * H  # 335,872,000 + 131,072,000
    assert (psi_e, psi_d) == (1_409_286_144, 466_944_000)
    got = terms(plan)
    # bf16 + Adam, distributed optimizer (ZeRO-1): 2 + 2 bytes whole, 12 bytes sharded.
    assert got["expert weights (bf16)"] == 2 * psi_e == 2_818_572_288
    assert got["expert gradients (bf16)"] == 2 * psi_e
    for name in ("expert fp32 master weights", "expert Adam m (fp32)", "expert Adam v (fp32)"):
        assert got[name] == 4 * psi_e // 2 == 2_818_572_288  # over EDP = 2, not d·c = 16
    assert got["layer weights (bf16)"] + got["word embedding weights (bf16)"] == 2 * psi_d
    assert got["gradients (bf16)"] == 2 * psi_d
    assert got["Adam m (fp32)"] == 4 * psi_d // 16 == 116_736_000
    mem = rank_memory(plan, 0)
    assert mem.optimizer == 12 * psi_d // 16 + 12 * psi_e // 2 == 8_805_924_864
    # Sharded over d·c = 16 as before, the optimizer state would have been 12·(Ψ_d + Ψ_e)/16.
    assert mem.optimizer - 12 * (psi_d + psi_e) // 16 == 7_398_752_256


def test_mixtral_example_moe_activations_by_hand() -> None:
    # T = s·b = 4096 tokens per rank (t = c = 1); dropless top-2 → S = R = 8192 rows; stage 0
    # holds p = 4 micro-batches of its 8 layers at the 1F1B peak: 32 layer-micro-batches.
    plan = spec()
    s, topk, count = 4096, 2, 32
    rows = s * topk
    y = plan.dims.experts
    assert y is not None and (y.sent, y.received) == (rows, rows)
    got = terms(plan)
    assert got["expert fc1 input (received rows)"] == 2 * rows * H * count
    assert got["expert activation input (fc1 output)"] == 2 * 2 * rows * F_E * count
    assert got["expert fc2 input"] == 2 * rows * F_E * count
    assert got["router scores (fp32)"] == 4 * s * E * count
    assert got["permutation indices (int64)"] == 8 * rows * count
    assert "fc1 input" not in got and "MLP activation input (fc1 output)" not in got
    assert got["all-to-all dispatch and combine buffers (transient)"] == 2 * H * (rows + rows)


def test_the_allgather_dispatcher_holds_its_groups_tokens() -> None:
    # Megatron's allgather dispatcher gathers the T = 4,096 hidden states of each of the EP = 8
    # ranks of its group into the global buffer: 8 × 4,096 × 4,096 bf16 values, once.
    got = terms(spec(parallelism__expert_dispatcher="allgather"))
    assert got["allgather dispatcher's gathered tokens (transient)"] == 2 * 8 * 4096 * H
    assert "allgather dispatcher's gathered tokens (transient)" not in terms(spec())


def test_rows_with_expert_tensor_parallelism_capacity_and_imbalance() -> None:
    # ETP = 2 gathers each EP rank's rows over its 2 expert-tensor ranks, and splits f_e.
    plan = spec(parallelism__expert=4, parallelism__expert_tensor=2)
    y = expert_shape(plan)
    assert (y.tokens, y.sent, y.rows, y.f_e) == (4096, 8192, 16384, F_E // 2)
    # Dropless with an allowance α = 1.5: R = ⌈T·topk·α⌉.
    assert expert_shape(spec(training__expert_imbalance=1.5)).rows == 12288
    # Capacity factor 1.25: C = ⌈4096·2/8·1.25⌉ = 1280 rows per expert per rank; S = E·C.
    data = yaml.safe_load(EXAMPLE.read_text())
    data["model"]["moe"] = {"capacity_factor": 1.25}
    loaded = load_text("t.yaml", yaml.safe_dump(data))
    assert loaded.job is not None
    capped = plannable(loaded.job)
    assert isinstance(capped, Plannable)
    y = capped.dims.experts
    assert y is not None and y.tokens == 4096
    assert (y.sent, y.received) == (8 * 1280, 8 * 1280)


def megatron_weight_and_optimizer_bytes(
    L: int,
    h: int,
    n: int,
    g: int,
    k: int,
    f_e: int,
    E: int,
    V: int,
    t: int,
    p: int,
    d: int,
    ep: int,
    etp: int,
    world: int,
) -> Fraction:
    """compute_weight_and_optimizer_memory of Megatron-LM's theoretical_memory_usage.py (mirror
    commit d98e8a6, lines 12–300), transcribed for a SwiGLU RMSNorm model whose every layer is
    MoE, untied, no bias, no shared experts, no MTP, with the distributed optimizer:
    (TP-sharded + replicated)·(6 + 12/d) + expert·(6 + 12/EDP), EDP = W/(ETP·EP·PP)."""
    attention = 2 * h * h * Fraction((1 + Fraction(g, n)) * Fraction(k * n, h))
    routed = 2 * h * f_e * E * Fraction(3, 2)
    layernorm, router = 2 * h * 1, h * E
    embedding = h * V
    tp_sharded = (attention * L / p + embedding) / t
    replicated = (layernorm + router) * L / p + h  # + final_layernorm
    expert = routed * L / p / (etp * ep)
    if p == 1:  # untied: the output layer on the only stage
        tp_sharded += Fraction(embedding, t)
    edp = world // (etp * ep * p)
    return (tp_sharded + replicated) * (6 + Fraction(12, d)) + expert * (6 + Fraction(12, edp))


def test_static_state_matches_megatron_estimator_for_mixtral() -> None:
    # A layout both count the same way: PP 1 (Megatron's estimator puts the output layer on the
    # "most loaded" shard only then), bf16 with fp32 main grads (its 18 bytes), distributed
    # optimizer, Mixtral 8x7B over 16 GPUs with EP 8 → EDP 2. Equal up to planc's ⌈⌉ shards.
    plan = spec(
        hardware__nodes=2,
        hardware__hosts="gpu-{000..001}",
        parallelism__pipeline=1,
        training__grad_accum_fp32=True,
        training__global_batch=16,
    )
    mem = rank_memory(plan, 0)
    static = mem.weights + mem.gradients + mem.optimizer
    expected = megatron_weight_and_optimizer_bytes(
        L=32,
        h=H,
        n=N_HEADS,
        g=G,
        k=K,
        f_e=F_E,
        E=E,
        V=V,
        t=1,
        p=1,
        d=16,
        ep=8,
        etp=1,
        world=16,
    )
    assert abs(static - expected) <= 12 * 2  # one element of 12 bytes per sharded buffer
    assert math.isclose(static, float(expected), rel_tol=1e-12)


@pytest.mark.parametrize("framework", ["megatron", "deepspeed", "fsdp2"])
def test_every_engine_shards_the_experts_over_edp(framework: str) -> None:
    plan = spec(training__framework=framework)
    got = terms(plan)
    expert_moments = {n: b for n, b in got.items() if n.startswith("expert Adam")}
    assert expert_moments and all(b == 4 * 8 * EXPERT // 2 for b in expert_moments.values())


def test_data_shard_replicas_must_divide_edp() -> None:
    # d·c = 16, data_shard 2 → 8 replicas, which do not divide EDP = 2 (Megatron asserts it).
    data = yaml.safe_load(EXAMPLE.read_text())
    data["parallelism"]["data_shard"] = 2
    loaded = load_text("t.yaml", yaml.safe_dump(data))
    assert loaded.job is not None
    refused = refusals(loaded.job)
    assert [r.rule for r in refused] == ["PLC022"]
    assert "such as 8" in refused[0].violation.fix  # 16 / gcd(8, 2) = 8 → 2 replicas
    data["parallelism"]["data_shard"] = 8
    ok = load_text("t.yaml", yaml.safe_dump(data)).job
    assert ok is not None and not refusals(ok)


def test_dense_models_have_no_expert_lines() -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["model"] = {"preset": "llama3-8b"}
    data["parallelism"]["expert"] = 1
    loaded = load_text("t.yaml", yaml.safe_dump(data))
    assert loaded.job is not None
    plan = plannable(loaded.job)
    assert isinstance(plan, Plannable)
    names = [t.name for s in budget(plan).stages for t in s.memory.terms]
    assert not any("expert" in n or "router" in n or "all-to-all" in n for n in names)
