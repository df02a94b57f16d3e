"""Sequence parallelism's backward re-gather: Megatron's column-parallel linears keep only the
rank's shard of their gathered input and all-gather it again in backward for the weight
gradient, beside the dgrad GEMM (megatron/core/tensor_parallel/layers.py
LinearWithGradAccumulationAndAsyncCommunication; Transformer Engine's LayerNormLinear,
`ln_out_needs_gather`). torchtitan's DTensor TP saves the gathered input and gathers once.

Counted by hand from that code, per block (attention, MLP) and micro-batch: all-gathers: the
input in forward, the output's gradient in backward, the input again in backward (three);
reduce-scatters: the output in forward, the input's gradient in backward (two)."""

from __future__ import annotations

import pytest

from planc.analysis import analyse
from planc.perf.inputs import comm_time_s, efficiency_of, tp_per_layer
from planc.plannable import Plannable

from conftest import job_of

LAYERS, M = 32, 2  # llama3-8b's layers; micro-batches per step below


def plan_of(framework: str, recompute: str = "none") -> Plannable:
    """The Llama 3 8B example at t = 4 with SP, ZeRO-3, m = 2 micro-batches."""
    return job_of(
        {
            "parallelism": {"tensor": 4, "zero_stage": 3},
            "training": {"global_batch": 2 * M, "recompute": recompute, "framework": framework},
        }
    )


def tp_calls(plan: Plannable) -> dict[str, int]:
    calls: dict[str, int] = {}
    for op in analyse(plan).ops:
        if op.group == "tp" and op.stage == 0:
            calls[str(op.op)] = calls.get(str(op.op), 0) + op.calls
    return calls


# The one stage also holds the model's ends (tests/test_tp_ends.py), once a micro-batch and not
# recomputed: the word embedding's reduce-scatter and its gradient's all-gather, the LM head's
# input all-gather (and re-gather under Megatron's layers) and its gradient's reduce-scatter, and
# the unfused loss's three fp32 all-reduces.
ENDS_GATHERS, ENDS_SCATTERS, LOSS = 2 * M, 2 * M, 3 * M


@pytest.mark.parametrize("framework", ["megatron", "deepspeed"])
def test_megatron_layers_gather_each_input_twice(framework: str) -> None:
    blocks = 2 * LAYERS * M
    assert tp_calls(plan_of(framework)) == {
        "all_gather": 3 * blocks + ENDS_GATHERS + M,  # + the head's re-gather
        "reduce_scatter": 2 * blocks + ENDS_SCATTERS,
        "all_reduce": LOSS,
    }
    # Full recompute runs each block's forward collectives once more, not the re-gather.
    assert tp_calls(plan_of(framework, "full")) == {
        "all_gather": 4 * blocks + ENDS_GATHERS + M,
        "reduce_scatter": 3 * blocks + ENDS_SCATTERS,
        "all_reduce": LOSS,
    }


def test_torchtitan_gathers_once() -> None:
    blocks = 2 * LAYERS * M
    assert tp_calls(plan_of("fsdp2")) == {
        "all_gather": 2 * blocks + ENDS_GATHERS,
        "reduce_scatter": 2 * blocks + ENDS_SCATTERS,
        "all_reduce": LOSS,
    }


def test_the_re_gather_hides_behind_the_dgrad_gemm() -> None:
    # On NVLink at t = 4 the 8B's re-gather (b·s·h·2 = 64 MiB per block) takes less than the
    # QKV and fc1 dgrad GEMMs: both blocks' re-gathers join what hides, nothing shows.
    megatron, titan = plan_of("megatron"), plan_of("fsdp2")
    eff = efficiency_of(megatron)
    ops = analyse(megatron).ops
    mine = tp_per_layer(megatron, eff, ops, 0)
    theirs = tp_per_layer(titan, efficiency_of(titan), analyse(titan).ops, 0)
    link = next(str(op.link) for op in ops if op.group == "tp")
    gather = comm_time_s(megatron, eff, "all_gather", 4, 1 * 8192 * 4096 * 2, link)
    assert mine.forward_s == pytest.approx(theirs.forward_s, rel=1e-12)
    # The backward's collectives: torchtitan's plus the two re-gathers.
    total = mine.backward_exposed_s + mine.backward_overlapped_s
    assert total == pytest.approx(
        theirs.backward_exposed_s + theirs.backward_overlapped_s + 2 * gather, rel=1e-12
    )
    # torchtitan shows its input gradients' reduce-scatters, which Megatron hides behind the
    # weight gradients; the re-gathers show nothing.
    assert mine.backward_exposed_s == pytest.approx(
        theirs.backward_exposed_s - 2 * comm_time_s(megatron, eff, "reduce_scatter", 4,
                                                    1 * 8192 * 4096 * 2, link),
        rel=1e-9,
    )
