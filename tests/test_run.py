"""The whole run (issue 29): failures, the optimal interval, goodput, checkpoint bytes and
times, steps, GPU-hours and cost, each against a hand derivation or a published figure."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planc.analysis import analyse, estimate_step
from planc.run import estimate_run
from planc.run.checkpoint import checkpoint_size, transfer_s
from planc.run.failures import (
    daly_interval_s,
    expected_wall_s,
    first_order_waste,
    goodput,
    job_mtbf_s,
    young_interval_s,
)
from planc.spec.job import DEFAULT_GPU_MTBF_HOURS
from tests.conftest import analysis_of, job_of

MINUTE = 60.0
HOUR = 3600.0
STORAGE = {"hardware": {"storage": {"write_gbs": 100.0, "node_write_gbs": 10.0}}}


# --- failures -----------------------------------------------------------------------------------


def test_llama3_interruptions_give_one_every_three_hours() -> None:
    """Llama 3 405B (Dubey et al. 2024, §3.3.4): 419 unexpected interruptions in 54 days on
    16,384 GPUs is one every 54·24/419 = 3.093 h, from the per-GPU default."""
    assert job_mtbf_s(DEFAULT_GPU_MTBF_HOURS, 16_384) / HOUR == pytest.approx(54 * 24 / 419)
    # and 10,000 GPUs at the same per-GPU rate: 16,384/10,000 × 3.093 h = 5.07 h
    assert job_mtbf_s(DEFAULT_GPU_MTBF_HOURS, 10_000) / HOUR == pytest.approx(5.067, abs=1e-3)


@pytest.mark.parametrize(
    ("mtbf_min", "published_min", "tolerance"),
    [(24 * 60, 117, 0.5), (6 * 60, 57, 0.5), (15, 9.1, 0.05)],
)
def test_daly_reproduces_his_published_intervals(
    mtbf_min: float, published_min: float, tolerance: float
) -> None:
    """Daly 2006 (FGCS 22(3)), δ = 5 min: the optimal interval is 117 min at M = 24 h, 57 min
    at 6 h and 9.1 min at 15 min (the paper's figures, rounded as it prints them)."""
    assert daly_interval_s(5 * MINUTE, mtbf_min * MINUTE) / MINUTE == pytest.approx(
        published_min, abs=tolerance
    )


def test_young_is_the_square_root_form() -> None:
    """Young 1974: √(2·5 min·24 h) = √(2·5·1440) min = 120 min."""
    assert young_interval_s(5 * MINUTE, 24 * HOUR) / MINUTE == pytest.approx(120.0)


def test_daly_beyond_twice_the_mtbf_is_the_mtbf() -> None:
    assert daly_interval_s(3 * HOUR, 1 * HOUR) == 1 * HOUR


def _simulated_wall(tau: float, delta: float, restart: float, mtbf: float, n: int) -> float:
    """Mean wall time of one segment (τ compute, then δ checkpoint) under exponential failures:
    a failure anywhere in the segment or during the restart R throws the segment away and
    costs a new restart (failures during restarts restart again)."""
    rng = random.Random(29)
    total = 0.0
    for _ in range(n):
        while True:
            fail = rng.expovariate(1 / mtbf)
            if fail >= tau + delta:
                total += tau + delta
                break
            total += fail
            while True:  # restart until one completes without a failure
                fail = rng.expovariate(1 / mtbf)
                if fail >= restart:
                    total += restart
                    break
                total += fail
    return total / n


def test_expected_wall_time_matches_a_simulation() -> None:
    """Daly's complete model against a seeded discrete-event simulation (20,000 segments):
    τ = 1 h, δ = 5 min, R = 10 min, M = 3 h; the simulated mean within 2 %."""
    tau, delta, restart, mtbf = 1 * HOUR, 5 * MINUTE, 10 * MINUTE, 3 * HOUR
    simulated = _simulated_wall(tau, delta, restart, mtbf, 20_000)
    assert simulated == pytest.approx(expected_wall_s(tau, delta, restart, mtbf), rel=0.02)
    # The same by hand: M·e^{R/M}·(e^{(τ+δ)/M} − 1) = 3 h·e^{1/18}·(e^{65/180} − 1)
    by_hand = 3 * HOUR * math.exp(1 / 18) * (math.exp(65 / 180) - 1)
    assert expected_wall_s(tau, delta, restart, mtbf) == pytest.approx(by_hand)


def test_llama3_async_goodput_matches_the_published_ninety_percent() -> None:
    """Landscape §5.4 worked example: M = 3.09 h, R = 10 min, a 5 s blocking save: Daly's τ is
    about 5.6 min and the goodput about 92 %, as Llama 3's ">90% effective training time"."""
    mtbf = job_mtbf_s(DEFAULT_GPU_MTBF_HOURS, 16_384)
    tau = daly_interval_s(5.0, mtbf)
    assert tau / MINUTE == pytest.approx(5.5, abs=0.2)
    assert 0.90 < goodput(tau, 5.0, 10 * MINUTE, mtbf) < 0.93


@settings(max_examples=200, deadline=None)
@given(
    tau=st.floats(1.0, 1e5),
    delta=st.floats(0.0, 1e4),
    restart=st.floats(0.0, 1e4),
    mtbf=st.floats(HOUR, 1e7),
    more=st.floats(1.0, 100.0),
)
def test_goodput_is_a_fraction_that_grows_with_the_mtbf(
    tau: float, delta: float, restart: float, mtbf: float, more: float
) -> None:
    g = goodput(tau, delta, restart, mtbf)
    assert 0.0 < g <= 1.0
    assert goodput(tau, delta, restart, mtbf * more) >= g * (1 - 1e-12)


@settings(max_examples=100, deadline=None)
@given(delta=st.floats(1.0, 600.0), mtbf=st.floats(HOUR, 100 * HOUR))
def test_daly_interval_is_near_the_best_goodput(delta: float, mtbf: float) -> None:
    """Daly's τ is within 0.1 % goodput of every other interval on a grid around it."""
    best = daly_interval_s(delta, mtbf)
    at_best = goodput(best, delta, 0.0, mtbf)
    for factor in (0.25, 0.5, 0.8, 1.25, 2.0, 4.0):
        assert goodput(best * factor, delta, 0.0, mtbf) <= at_best + 1e-3


def test_first_order_waste_is_the_small_limit_of_goodput() -> None:
    """For τ, δ, R ≪ M the complete model's 1 − G is δ/τ + (τ/2 + R)/M to first order."""
    tau, delta, restart, mtbf = 600.0, 1.0, 60.0, 1000 * HOUR
    waste = first_order_waste(tau, delta, restart, mtbf)
    assert 1 - goodput(tau, delta, restart, mtbf) == pytest.approx(waste, rel=0.01)


# --- checkpoint bytes -----------------------------------------------------------------------------


ENGINES = [
    ("megatron", 1, False),
    ("megatron", 1, True),
    ("megatron", 3, False),
    ("deepspeed", 1, False),
    ("deepspeed", 2, True),
    ("deepspeed", 3, False),
    ("fsdp2", 0, False),
]


def _with(framework: str, zero: int, offload: bool, fully: bool = False) -> dict[str, object]:
    return {
        **STORAGE,
        "training": {"framework": framework, "offload": {"optimizer": offload}},
        "parallelism": {"zero_stage": zero},
        "checkpoint": {"fully_parallel_save": fully},
    }


@pytest.mark.parametrize(("framework", "zero", "offload"), ENGINES)
def test_a_rank_writes_the_saved_terms_of_its_budget(
    framework: str, zero: int, offload: bool
) -> None:
    """Without a fully parallel save, data-parallel rank 0 of each stage writes exactly the
    weights and optimizer state its memory budget holds (HBM and host), and no gradient or
    buffer: the component sums of `planc memory`."""
    an = analysis_of(_with(framework, zero, offload))
    size = checkpoint_size(an.plan, an.memory)
    for stage, ckpt in zip(an.memory.stages, size.stages, strict=True):
        mem = stage.memory
        host = sum(t.bytes for t in mem.host_terms if t.component in ("weights", "optimizer"))
        assert ckpt.resident == mem.weights + mem.optimizer + host
        if framework == "deepspeed" or zero >= 3 or framework == "fsdp2":
            assert ckpt.written == ckpt.resident


@pytest.mark.parametrize(
    ("framework", "bytes_per_parameter"), [("megatron", 14), ("deepspeed", 14), ("fsdp2", 12)]
)
def test_a_whole_checkpoint_is_fourteen_or_twelve_bytes_a_parameter(
    framework: str, bytes_per_parameter: int
) -> None:
    """bf16 with Adam: 2 (weights) + 4 (master) + 8 (m, v) = 14 bytes a parameter for
    Megatron and DeepSpeed, 4 (fp32 weights) + 8 = 12 for FSDP2 under torch DCP (landscape
    §5.1). planc charges every TP rank its copy of the norms (a few thousand parameters of
    8 billion), so the total is within 0.1 %."""
    an = analysis_of(_with(framework, 0 if framework == "fsdp2" else 1, False))
    size = checkpoint_size(an.plan, an.memory)
    assert size.total_bytes == pytest.approx(bytes_per_parameter * an.memory.parameters, rel=1e-3)


def test_fully_parallel_save_splits_the_weights_over_the_replicas() -> None:
    """Megatron, llama3-8b on 8 GPUs (t = 2, d = 4): rank 0 writes 2Ψ_r/4 + 12Ψ_r/4 with a
    fully parallel save and 2Ψ_r + 12Ψ_r/4 without it."""
    fully = analysis_of(_with("megatron", 1, False, fully=True))
    one = analysis_of(_with("megatron", 1, False, fully=False))
    psi_r = fully.parameters[0].total
    assert fully.plan.layout.d == 4
    split = checkpoint_size(fully.plan, fully.memory).rank_bytes
    whole = checkpoint_size(one.plan, one.memory).rank_bytes
    assert split == pytest.approx(2 * psi_r / 4 + 12 * psi_r / 4, rel=1e-6)
    assert whole == pytest.approx(2 * psi_r + 12 * psi_r / 4, rel=1e-6)


def test_torchtitan_1301_eight_billion_in_six_minutes() -> None:
    """torchtitan #1301: Llama 3 8B (8,030,261,248 parameters) under FSDP on one node of 8 H100
    took about 6 minutes to save. Its DCP checkpoint is 12 bytes a parameter, 96.4 GB, so the
    node wrote at 96.4 GB / 360 s = 0.268 GB/s; planc at that bandwidth saves it in 6 minutes."""
    an = analysis_of(
        {
            "hardware": {"storage": {"write_gbs": 1000.0, "node_write_gbs": 0.268}},
            "training": {"framework": "fsdp2"},
            "parallelism": {"zero_stage": 0, "tensor": 1},
            "checkpoint": {},
        }
    )
    size = checkpoint_size(an.plan, an.memory)
    assert size.total_bytes == pytest.approx(12 * 8_030_261_248, rel=1e-3)
    # One node: S_node = 8 ranks × S_rank = the whole checkpoint.
    assert size.node_bytes == pytest.approx(size.total_bytes, rel=1e-3)
    save = transfer_s(size.total_bytes, size.node_bytes, 1000.0, 0.268)
    assert save / MINUTE == pytest.approx(6.0, abs=0.1)


# --- the run ------------------------------------------------------------------------------------


def test_steps_hours_and_cost_by_hand() -> None:
    """llama3-8b on 8 H100, s = 8192, B = 64 (the example), 10^10 tokens: ⌈10^10/(64·8192)⌉ =
    ⌈19,073.49⌉ = 19,074 steps; GPU-hours = 8 × steps × T_step / 3600 (no checkpoint: no goodput loss);
    cost at 2.5 a GPU-hour; energy at 700 W and PUE 1.2."""
    an = analysis_of(
        {
            "training": {"tokens": 10**10},
            "cost": {"price_per_gpu_hour": 2.5, "gpu_power_w": 700.0, "pue": 1.2},
        }
    )
    step = estimate_step(an)
    run = estimate_run(an, step)
    assert an.plan.training.s == 8192 and an.plan.training.B == 64
    assert run.steps == 19_074
    wall = 19_074 * step.step_time_s
    assert run.wall_s == pytest.approx(wall)
    assert run.gpu_hours == pytest.approx(8 * wall / 3600)
    assert run.cost == pytest.approx(2.5 * 8 * wall / 3600)
    assert run.energy_kwh == pytest.approx(8 * 700 * wall * 1.2 / 3.6e6)
    assert run.checkpoint is None and run.goodput is None
    assert run.six_nd_flops == pytest.approx(6 * an.memory.parameters * run.tokens)


def test_steps_instead_of_tokens() -> None:
    an = analysis_of({"training": {"steps": 1000}})
    run = estimate_run(an, estimate_step(an))
    assert run.steps == 1000 and run.tokens == 1000 * 64 * 8192


def test_a_batch_ramp_prices_each_phase_at_its_own_batch() -> None:
    """A ramp of 16 sequences for 16·8192·100 tokens (100 steps), then B = 64: the first
    phase's step is the plan at B = 16 (half the micro-batches), estimated on its own."""
    ramp_tokens = 16 * 8192 * 100
    an = analysis_of(
        {
            "training": {
                "tokens": ramp_tokens + 64 * 8192 * 50,
                "batch_ramp": [{"global_batch": 16, "tokens": ramp_tokens}],
            }
        }
    )
    run = estimate_run(an, estimate_step(an))
    first, main = run.phases
    assert (first.B, first.steps, main.B, main.steps) == (16, 100, 64, 50)
    at_16 = analysis_of({"training": {"global_batch": 16}})
    assert first.step_time_s == pytest.approx(estimate_step(at_16).step_time_s)
    assert run.compute_s == pytest.approx(100 * first.step_time_s + 50 * main.step_time_s)


def test_checkpointing_stretches_the_run_by_the_goodput() -> None:
    """With a checkpoint, T_wall = compute / G, G at the interval in whole steps; the
    interval is Daly's for δ = T_save and M = 50,677 h / 8 GPUs."""
    an = analysis_of({**STORAGE, "training": {"tokens": 10**10}, "checkpoint": {}})
    step = estimate_step(an)
    run = estimate_run(an, step)
    ckpt = run.checkpoint
    assert ckpt is not None
    assert ckpt.mtbf_s == pytest.approx(DEFAULT_GPU_MTBF_HOURS * HOUR / 8)
    assert ckpt.optimal_s == pytest.approx(daly_interval_s(ckpt.blocking_s, ckpt.mtbf_s))
    assert ckpt.interval_steps == max(1, round(ckpt.optimal_s / step.step_time_s))
    assert run.wall_s == pytest.approx(run.compute_s / ckpt.goodput)
    # R = 10 min + the load at the read bandwidth (write_gbs by default)
    assert ckpt.restart_s == pytest.approx(600 + ckpt.load_s)


def test_an_async_save_blocks_only_for_the_host_copy() -> None:
    """Asynchronous: δ = S_rank / the host link's bandwidth per GPU, the write continues in
    the background, and the interval covers it; each node pins G·S_rank of host memory."""
    an = analysis_of(
        {**STORAGE, "training": {"tokens": 10**10}, "checkpoint": {"async_save": True}}
    )
    step = estimate_step(an)
    ckpt = estimate_run(an, step).checkpoint
    assert ckpt is not None
    # The rank's whole saved state (weights and optimizer, `planc memory`'s component sums)
    staged = max(s.memory.weights + s.memory.optimizer for s in an.memory.stages)
    assert ckpt.blocking_s == pytest.approx(staged / (an.plan.cluster.host_bandwidth_gbs * 1e9))
    assert ckpt.background_s == pytest.approx(ckpt.save_s)
    assert ckpt.interval_s >= ckpt.background_s
    assert ckpt.host_bytes_per_node == 8 * staged


def test_without_the_new_sections_the_plan_has_no_run() -> None:
    plan = job_of()
    assert not plan.run.asked
    assert analyse(plan).plan.run.checkpoint is None


@settings(max_examples=30, deadline=None)
@given(
    engine=st.sampled_from(ENGINES),
    tensor=st.sampled_from([1, 2, 4, 8]),
    pipeline=st.sampled_from([1, 2, 4]),
    fully=st.booleans(),
)
def test_checkpoint_bytes_are_the_saved_terms_for_every_engine(
    engine: tuple[str, int, bool], tensor: int, pipeline: int, fully: bool
) -> None:
    """For every engine and layout: each stage's writing rank stages exactly the weights and
    optimizer terms of its budget (HBM and host); it writes them whole, or the replicated
    weights split over the d·c replicas under Megatron's fully parallel save; and the stages'
    totals add up to the checkpoint."""
    framework, zero, offload = engine
    overlay = _with(framework, zero, offload, fully)
    overlay["parallelism"] = {"zero_stage": zero, "tensor": tensor, "pipeline": pipeline}
    overlay["hardware"] = {**STORAGE["hardware"], "nodes": 4, "hosts": []}  # 32 GPUs
    an = analysis_of(overlay)
    size = checkpoint_size(an.plan, an.memory)
    lay = an.plan.layout
    for stage, ckpt in zip(an.memory.stages, size.stages, strict=True):
        mem = stage.memory
        host = sum(t.bytes for t in mem.host_terms if t.component in ("weights", "optimizer"))
        assert ckpt.resident == mem.weights + mem.optimizer + host
        splits = framework == "megatron" and fully and zero < 3
        if splits:
            assert ckpt.written == pytest.approx(
                ckpt.replicated / (lay.d * lay.c) + ckpt.sharded, rel=1e-6
            )
        else:
            assert ckpt.written == ckpt.resident
    assert size.rank_bytes == max(s.written for s in size.stages)
    ranks = an.plan.world // lay.p
    assert size.total_bytes == pytest.approx(sum(ranks * s.mean for s in size.stages), rel=1e-9)
