"""Megatron's TP-overlap all-gathers run as Transformer Engine's ring exchange on the copy engines.

What a user relies on: with `overlap_tp` and sequence parallelism, Megatron's userbuffers run
the forward input all-gathers (qkv_fprop, fc1_fprop) and the backward output-gradient
all-gathers (proj_dgrad, fc2_dgrad) as ring exchange with `use_ce` (TE initialize_ub defaults):
the first GEMM chunk multiplies the rank's own shard, so a gather hides whole behind a long
enough GEMM, and the copy engines move it, taking no SMs from the GEMM. The reduce-scatters
and torchtitan's async TP keep the pipelined form and the SMs' share. Expected values by hand.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from planc.perf.inputs import (
    TpPerLayer,
    efficiency_of,
    pipelined_exposed_s,
    ring_exchange_exposed_s,
    tp_per_layer_on,
)
from planc.perf.step import StageInputs, StepInputs, overlaps

from conftest import job_of


def test_a_ring_exchange_gather_hides_whole_behind_a_long_gemm() -> None:
    # t = 4: three exchanges of c/3, each beside one GEMM chunk of g/4.
    assert ring_exchange_exposed_s(3.0, 8.0, 4) == 0.0
    # A GEMM too short: what its first three chunks (3g/4) do not cover shows.
    assert ring_exchange_exposed_s(3.0, 2.0, 4) == pytest.approx(3.0 - 1.5)
    assert ring_exchange_exposed_s(3.0, 2.0, 1) == 0.0
    # The pipelined form (a chunk with nothing beside it) keeps c/t however long the GEMM.
    assert pipelined_exposed_s(3.0, 8.0, 4) == pytest.approx(0.75)


def _tp(framework: dict[str, object]) -> TpPerLayer:
    spec = {
        "parallelism": {"tensor": 4, "sequence_parallel": True},
        "training": {"overlap_tp": True, **framework},
    }
    job = job_of(spec)
    return tp_per_layer_on(job, efficiency_of(job), "nvlink")


def test_megatrons_gathers_hide_on_the_copy_engines() -> None:
    tp = _tp({})
    assert tp.copy_engine_s > 0.0
    # the reduce-scatters still take SMs where they hide
    assert tp.backward_overlapped_s > 0.0


def test_torchtitans_async_tp_keeps_the_sms_share() -> None:
    tp = _tp({"framework": "fsdp2", "kernels": "compiled"})
    assert tp.copy_engine_s == 0.0


def test_the_step_reports_copy_engine_time_hidden_but_not_as_a_slowdown() -> None:
    stage = StageInputs(
        forward_s=(1.0,),
        backward_s=(2.0,),
        tp_forward_s=(0.1,),
        tp_backward_s=(0.2,),
        tp_overlapped_s=0.5,
        tp_copy_engine_s=0.4,
    )
    inputs = StepInputs(stages=(stage,), m=2, v=1, p2p_s=0.0, tp_processor_usage=0.1)
    (tp,) = [o for o in overlaps(inputs, 0, pp_total_s=0.0, pp_exposed_s=0.0) if o.kind == "tp"]
    # m = 2: hidden 2 × (0.5 + 0.4), exposed 2 × 0.3, slowing compute 0.1 × 2 × 0.5 only
    assert (tp.hidden_s, tp.exposed_s, tp.slowdown_s) == pytest.approx((1.8, 0.6, 0.1))
    without = replace(stage, tp_copy_engine_s=0.0)
    plain = StepInputs(stages=(without,), m=2, v=1, p2p_s=0.0, tp_processor_usage=0.1)
    (base,) = [o for o in overlaps(plain, 0, pp_total_s=0.0, pp_exposed_s=0.0) if o.kind == "tp"]
    assert base.slowdown_s == tp.slowdown_s
