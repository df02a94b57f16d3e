"""What torch's checkpoint and DTensor's sequence parallelism cost an FSDP2 run (issue 24).

What a user relies on, for `framework: fsdp2` (torchtitan and the trainers built like it):

- Full activation checkpointing by torch's non-reentrant checkpoint recomputes only what the
  backward reads. Eager it stops once the last saved tensor is packed again: the MLP's down
  projection w2 still runs, the TP reduction of its output and the block's closing residual
  add do not. Compiled, the partitioner rebuilds only w2's input, so w2 and its casts are not
  recomputed either. Megatron's checkpoint re-runs the whole layer.
- DTensor shards the residual stream on the sequence, dim 1 of [b, s, h]; each sequence-
  parallel collective runs NCCL on dim 0 and permutes the whole tensor around it with a copy
  (funcol's `torch.cat(torch.chunk(...))`) when b > 1.

Expected values are hand counts of those code paths, each copy a read and a write of the whole
tensor priced on the GPU's published HBM curve.
"""

from __future__ import annotations

from typing import Any

import pytest

from planc.analysis import analyse
from planc.compile.plan import plan_json
from planc.perf.compute import layer_passes, recompute_time_s, work_time_s
from planc.perf.inputs import (
    device_of,
    efficiency_of,
    layer_shape,
    layout_copy_s,
    sp_layout_copies,
    tp_per_layer_on,
)
from planc.perf.ops import layer_ops
from planc.perf.sac import recomputed_shares, unread_tail
from planc.plannable import Plannable
from planc.presets import gpu_preset
from planc.scoring import analysed
from planc.verify import render, verify_text

from conftest import compiled, job_of

RUNS = "validation/runs/"


def _fsdp2(recompute: str, kernels: str = "compiled", **parallelism: Any) -> Plannable:
    return job_of(
        {
            "parallelism": {"tensor": 2, "sequence_parallel": True, **parallelism},
            "training": {"framework": "fsdp2", "recompute": recompute, "kernels": kernels},
        }
    )


def _unread(job: Plannable) -> list[str]:
    shape = layer_shape(job)
    ops = layer_ops(shape)
    return [op.name for op, mark in zip(ops, unread_tail(ops, shape), strict=True) if mark]


def test_compiled_full_checkpointing_leaves_w2_and_the_closing_add_out() -> None:
    assert _unread(_fsdp2("full")) == ["mlp fc2", "MLP dropout + residual"]
    # eager, w2 runs again (its backward node packs its input as it is created)
    assert _unread(_fsdp2("full", kernels="fused")) == ["MLP dropout + residual"]
    # Megatron's CheckpointFunction re-runs the whole layer
    megatron = job_of({"training": {"recompute": "full"}})
    assert _unread(megatron) == []


def test_the_recomputed_forward_is_the_forward_less_what_no_backward_reads() -> None:
    job = _fsdp2("full")
    shape, device, eff = layer_shape(job), device_of(job), efficiency_of(job)
    ops = {op.name: op for op in layer_ops(shape)}
    layer = layer_passes(tuple(ops.values()), shape, device, eff)
    skipped = sum(
        work_time_s(ops[name], ops[name].forward, device, eff)
        for name in ("mlp fc2", "MLP dropout + residual")
    )
    assert skipped > 0.0
    assert recompute_time_s(layer, "full") == pytest.approx(layer.forward_s - skipped, rel=1e-12)


def test_under_the_per_op_policy_wo_feeding_a_saved_reduce_scatter_is_not_recomputed() -> None:
    def shares(job: Plannable) -> dict[str, float]:
        shape = layer_shape(job)
        ops = layer_ops(shape)
        return dict(zip((op.name for op in ops), recomputed_shares(ops, shape), strict=True))

    sp = shares(_fsdp2("selective-op"))
    # wo's output only feeds the reduce-scatter, whose output the policy saves; the closing add
    # feeds the block's output alone
    assert (sp["attention output"], sp["MLP dropout + residual"]) == (0.0, 0.0)
    assert sp["qkv (wk)"] == 1.0 and sp["mlp fc1 (w3)"] == 1.0  # the 2nd and 6th matmuls
    # without SP wo's output makes the residual the MLP's norm reads: recomputed
    plain = shares(_fsdp2("selective-op", tensor=1, sequence_parallel=False))
    assert plain["attention output"] == 1.0


def _tp_calls(job: Plannable, collective: str) -> int:
    return sum(
        op.calls
        for op in analyse(job).ops
        if op.group == "tp" and op.op == collective and "after attention and MLP" in op.phase
    )


def test_full_recompute_reduces_the_mlp_output_once_under_torchs_checkpoint() -> None:
    # Llama 3 8B, 32 layers, t = 2 with SP, 32 micro-batches of one rank (global 64, d = 4):
    # per layer and micro-batch 2 blocks x (forward + backward) and the forward again but the
    # MLP's output reduction: 5, against Megatron's 6.
    fsdp2 = _fsdp2("full")
    megatron = job_of({"training": {"recompute": "full"}})
    m = fsdp2.m
    assert m == megatron.m
    assert _tp_calls(fsdp2, "reduce_scatter") == 5 * 32 * m
    assert _tp_calls(megatron, "reduce_scatter") == 6 * 32 * m


def test_a_plan_with_the_unread_reductions_verifies() -> None:
    result = verify_text(plan_json(compiled(_fsdp2("full"))))
    assert result.ok, render(result)


def _copy(job: Plannable, moved: float) -> float:
    """A read and a write of `moved` bytes in all on the GPU's HBM curve: (B + B½)/(peak·e)."""
    hbm = efficiency_of(job).hbm
    peak = gpu_preset(job.cluster.gpu.name)["memory_bandwidth_gbs"] * 1e9
    return (moved + hbm.half_bytes) / (peak * hbm.efficiency)


def _spec(name: str) -> Plannable:
    """A validation run's plannable job, as the corpus scorer plans it."""
    return analysed(RUNS + name + ".yaml")[1].plan


# torchtitan's June 2025 async-TP benchmark: Llama 3.1 8B, local batch 12 x 8,192 tokens, TP 8
# with SP, h = 4,096: every gathered or reduced tensor is 12·8192·4096·2 bytes in bf16.
E_8B = 12 * 8192 * 4096 * 2


def test_each_block_of_the_8b_run_copies_its_gathered_input_and_its_output() -> None:
    job = _spec("torchtitan2506-llama31-8b-64xh100-bf16")
    assert sp_layout_copies(job)
    c = _copy(job, 2 * E_8B)
    eff = efficiency_of(job)
    # compiled, per-op policy: forward the input gather's copy and the output's; backward the
    # output gradient's gather (the input gradient's fuses into the projections' sum); the
    # policy gathers the input again, its copy with it; the reduce-scatter's output is saved.
    for mlp in (False, True):
        got = layout_copy_s(job, eff, E_8B, E_8B, mlp)
        assert got == pytest.approx((2 * c, c, c), rel=1e-12)


def test_rowwise_casts_absorb_the_gathers_copies() -> None:
    job = _spec("torchtitan2506-llama31-8b-64xh100-fp8rw")
    c = _copy(job, 2 * E_8B)
    assert layout_copy_s(job, efficiency_of(job), E_8B, E_8B, False) == pytest.approx((c, 0.0, 0.0))


def test_async_tp_sums_partials_and_copies_what_weight_gradients_read() -> None:
    job = _spec("torchtitan2506-llama31-8b-64xh100-bf16-asynctp")
    reduce = _copy(job, E_8B + E_8B / 8)  # read 8 partials of E/8 each, write E/8
    c = _copy(job, 2 * E_8B)
    got = layout_copy_s(job, efficiency_of(job), E_8B, E_8B, True)
    assert got == pytest.approx((reduce, 2 * c, 0.0), rel=1e-12)


def test_full_recompute_copies_again_all_but_the_mlp_output() -> None:
    job = _spec("torchtitan2506-llama31-70b-256xh100-bf16")
    e = 16 * 8192 * 8192 * 2
    c = _copy(job, 2 * e)
    eff = efficiency_of(job)
    assert layout_copy_s(job, eff, e, e, False) == pytest.approx((2 * c, c, 2 * c), rel=1e-12)
    assert layout_copy_s(job, eff, e, e, True) == pytest.approx((2 * c, c, c), rel=1e-12)


def test_the_copies_add_to_the_layers_exposed_tp_time(monkeypatch: pytest.MonkeyPatch) -> None:
    job = _spec("torchtitan2506-llama31-8b-64xh100-bf16")
    eff = efficiency_of(job)
    with_copies = tp_per_layer_on(job, eff, "nvlink")
    monkeypatch.setattr("planc.perf.inputs.sp_layout_copies", lambda _: False)
    without = tp_per_layer_on(job, eff, "nvlink")
    c = _copy(job, 2 * E_8B)
    assert with_copies.forward_s - without.forward_s == pytest.approx(4 * c, rel=1e-9)
    assert with_copies.backward_exposed_s - without.backward_exposed_s == pytest.approx(
        2 * c, rel=1e-9
    )
    assert with_copies.recompute_s - without.recompute_s == pytest.approx(2 * c, rel=1e-9)


def test_no_copy_at_micro_batch_one_nor_for_megatron() -> None:
    assert not sp_layout_copies(_fsdp2("full"))  # the example's micro-batch is 1
    assert sp_layout_copies(
        job_of(
            {
                "parallelism": {"tensor": 2, "sequence_parallel": True},
                "training": {"framework": "fsdp2", "micro_batch": 2, "global_batch": 64},
            }
        )
    )
    assert not sp_layout_copies(job_of({"training": {"micro_batch": 2, "global_batch": 64}}))
