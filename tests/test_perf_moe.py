"""The step model of MoE layers against hand-derived numbers and one published figure.

Mixtral 8x7B example: h = 4,096, k = 2, f_e = 14,336, SwiGLU, E = 8, EP = 8, T = 4,096.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from planc.analysis import analyse, estimate_step
from planc.dims import ExpertDims
from planc.perf.inputs import (
    dispatch_combine_s,
    efficiency_of,
    ep_per_layer,
    layer_shape,
    model_flops,
)
from planc.perf.ops import expert_down, expert_up, moe_layer_ops, router

from conftest import job_of

MIXTRAL = "mixtral-8x7b-64xh100.yaml"


def _experts(ep: int = 1, et: int = 1, shared: int = 0) -> ExpertDims:
    """Mixtral's MoE layer on one rank, by hand: T = 4,096 tokens (t = c = 1), top-2 of E = 8,
    f_e = 14,336 split over ETP, dropless and balanced (T·k rows, gathered over ETP)."""
    T, k = 4096, 2
    return ExpertDims(
        E=8, topk=k, ep=ep, et=et, tokens=T, routed=T * k, sent=T * k, received=T * k * et,
        f_e=14336 // et, f_s=shared, capacity=False,
    )


def test_expert_gemms_count_k_experts_per_token_whatever_the_split() -> None:
    shape = layer_shape(job_of(None, MIXTRAL))
    for ep, et in ((8, 1), (4, 2), (1, 1)):
        experts = _experts(ep, et)
        up, down = expert_up(shape, experts), expert_down(shape, experts)
        # fc1: 2 FLOPs × ETP·T·k gathered rows × h × 2·f_e/ETP (gate and up); fc2 likewise:
        # ETP cancels, a rank computes k experts' worth of its own T tokens.
        assert up.forward.flops == pytest.approx(2 * 4096 * 2 * 4096 * 2 * 14336)
        assert down.forward.flops == pytest.approx(2 * 4096 * 2 * 14336 * 4096)
        # One matmul per local expert, of ETP·T·k·EP/E rows (balanced).
        assert up.shape is not None and up.shape.batch == 8 // ep
        assert up.shape.m == et * 4096 * 2 * ep // 8
    gate = router(shape, _experts())
    assert gate.forward.flops == 2 * 4096 * 4096 * 8


def test_moe_layer_has_no_dense_mlp() -> None:
    shape = layer_shape(job_of(None, MIXTRAL))
    names = [op.name for op in moe_layer_ops(shape, _experts())]
    assert "mlp fc1" not in names and "expert fc1" in names and "router" in names
    shared = moe_layer_ops(shape, _experts(shared=2816))
    assert [op.name for op in shared].count("mlp fc1") == 1


def test_exchange_time_by_hand() -> None:
    job = job_of(None, MIXTRAL)
    eff = efficiency_of(job)
    # NVLink 450 GB/s × 0.82 (all_to_all = send_recv efficiency), α = 2 µs, one latency:
    # NCCL runs the 7 peers together (eight per channel batch):
    one = 1 * 2e-6 + 58_720_256 / (450e9 * 0.82)
    assert dispatch_combine_s(job, eff) == pytest.approx(2 * one)
    probs = 1 * 2e-6 + 14_336 / (450e9 * 0.82)  # an all-to-all too: one latency
    counts = 7 * 2e-6 + 448 / (450e9 * 0.82)  # a ring all-gather of 512 B, 7/8 sent: 7 steps
    per = ep_per_layer(job, eff)
    assert per.forward_s == pytest.approx(2 * one + probs + counts)
    assert per.backward_s == pytest.approx(2 * one + probs)


def test_exchange_over_infiniband_at_one_nics_all_to_all_bandwidth() -> None:
    # Expert data parallelism (EDP 2) before ep in the order puts each EP group's 8 ranks 2
    # apart: 4 on each of 2 nodes. Of the 64 MiB buffer each rank keeps 1/8, sends 3/8 to the
    # 3 others of its node over NVLink and 4/8 over InfiniBand, at the same time; the network
    # part is the longer. An NCCL all-to-all cannot spread over several NICs: one ConnectX-7 at
    # NDR, 50 GB/s, of which an all-to-all reaches 48 (nccl-tests #267), so 0.96; α = 5 µs once
    # (7 peers, one batch of 8).
    job = job_of({"parallelism": {"order": "tp-cp-dp-ep-pp"}}, MIXTRAL)
    network = 1 * 5e-6 + 33_554_432 / (50e9 * 0.96)
    nvlink = 25_165_824 / (450e9 * 0.82)  # 3/4 of the 1/2 share for the own node
    assert nvlink < network
    assert dispatch_combine_s(job, efficiency_of(job)) == pytest.approx(2 * network)


def test_step_charges_the_exchange_of_every_moe_layer_and_micro_batch() -> None:
    an = analyse(job_of(None, MIXTRAL))
    step = estimate_step(an)
    per = ep_per_layer(an.plan, an.efficiency)
    # Every stage holds 8 MoE layers; m = 32 micro-batches.
    assert step.ep_comm_s == pytest.approx(32 * 8 * (per.forward_s + per.backward_s))
    assert 0 < step.ep_comm_s < step.compute_s


def test_model_flops_count_the_active_parameters() -> None:
    job = job_of(None, MIXTRAL)
    s, B, h, L, V = 4096, 512, 4096, 32, 32000
    attention = h * 128 * (32 + 8) * 2
    experts = 3 * h * 2 * 14336 + h * 8  # k = 2 experts and the router
    per_layer = 2 * s * (attention + experts) + 4 * s * s * 32 * 128
    assert model_flops(job) == pytest.approx(3 * B * (L * per_layer + 2 * s * h * V))


def test_mixtral_throughput_near_megatron_cores_published_figure() -> None:
    """Megatron-Core's MoE README (2025-2026 versions): 468 TFLOPS per H100 for Mixtral 8x7B
    in bf16 with MCore v0.9. The README gives no layout; this compares planc's estimate for the
    example layout (EP 8 inside a node, p = 4, s = 4,096) as an order-of-magnitude check, not a
    fit: planc's model FLOPs (no causal discount) per second per GPU within 25 %."""
    an = analyse(job_of(None, MIXTRAL))
    step = estimate_step(an)
    tflops = step.model_flops / step.step_time_s / an.plan.world / 1e12
    assert tflops == pytest.approx(468, rel=0.25)


# Drop and pad (model.moe.pad_to_capacity) at CF 1.25: every expert filled to its capacity
# C = ⌈(T·k/E)·CF⌉ = ⌈(4,096·2/8)·1.25⌉ = 1,280 rows from each rank, E·C = 10,240 rows sent
# where the balanced T·k is 8,192.
T, K, E = 4096, 2, 8
C = math.ceil((T * K / E) * 1.25)


def _capacity(padded: bool) -> dict[str, Any]:
    return {"model": {"moe": {"capacity_factor": 1.25, "pad_to_capacity": padded}}}


def test_padded_exchange_time_by_hand() -> None:
    # As test_exchange_time_by_hand with E·C rows: 10,240 rows of h = 4,096 bf16 values, 7/8
    # of them leave the rank; no token-count all-gather (the counts are C, known on the host).
    job = job_of(_capacity(True), MIXTRAL)
    assert C == 1280
    one = 1 * 2e-6 + E * C * 4096 * 2 * 7 // 8 / (450e9 * 0.82)
    probs = 1 * 2e-6 + E * C * 2 * 7 // 8 / (450e9 * 0.82)
    per = ep_per_layer(job, efficiency_of(job))
    assert per.forward_s == pytest.approx(2 * one + probs)
    assert per.backward_s == pytest.approx(2 * one + probs)


def test_drop_only_exchange_keeps_the_balanced_rows_and_the_counts() -> None:
    # Without padding the same capacity sends the balanced T·k rows and gathers the counts.
    job = job_of(_capacity(False), MIXTRAL)
    one = 1 * 2e-6 + T * K * 4096 * 2 * 7 // 8 / (450e9 * 0.82)
    probs = 1 * 2e-6 + T * K * 2 * 7 // 8 / (450e9 * 0.82)
    counts = 7 * 2e-6 + 448 / (450e9 * 0.82)
    per = ep_per_layer(job, efficiency_of(job))
    assert per.forward_s == pytest.approx(2 * one + probs + counts)


def test_padded_expert_gemms_take_c_rows_from_every_rank() -> None:
    # One local expert (EP 8) takes C rows from each of the 8 ranks: C·EP·ETP = 10,240 rows,
    # against ETP·T·k·EP/E = 8,192 unpadded.
    padded, dropped = job_of(_capacity(True), MIXTRAL), job_of(_capacity(False), MIXTRAL)
    for job, rows in ((padded, C * 8 * 1), (dropped, T * K * 8 // E)):
        experts = job.dims.experts
        assert experts is not None
        up = expert_up(layer_shape(job), experts)
        assert up.shape is not None and (up.shape.m, up.shape.batch) == (rows, 1)
        assert up.forward.flops == pytest.approx(2 * rows * 4096 * 2 * 14336)


def test_padding_costs_time_but_is_no_model_flop() -> None:
    # The padding rows are real GEMM and exchange work (zero-weight tokens), not model FLOPs.
    padded, dropped = (estimate_step(analyse(job_of(_capacity(p), MIXTRAL))) for p in (True, False))
    assert padded.model_flops == dropped.model_flops
    assert padded.step_time_s > dropped.step_time_s
