"""FSDP2's exposed ends, its all-gather copy-outs and reduce-scatter copy-ins (planc/perf/fsdp2.py,
issue 24).

torchtitan shards each block and the root (embedding, final norm, output) as FSDP2 units; the
root's pre-forward makes the all-gather streams wait for compute, so the root's and the first
block's all-gathers start every micro-batch exposed, and their reduce-scatters end the step's
backward; every gathered unit is copied out of the all-gather buffer on the compute stream.
"""

from __future__ import annotations

from typing import Any

import pytest

from planc.analysis import analyse, estimate_step
from planc.perf.compute import ChunkTimes
from planc.perf.fsdp2 import end_units, root_elements
from planc.perf.inputs import device_of, fsdp2_ends, with_copy_out
from planc.plannable import plannable

from conftest import loaded_spec

SPEC = """version: 1
name: fsdp2-ends
model: {preset: llama3-8b}
hardware: {gpu: h100-sxm, nodes: 1}
parallelism: {data: 8}
training: {seq_len: 8192, micro_batch: 2, global_batch: %d, framework: %s}
"""

# Llama 3 8B: V = 128,256, h = 4096, n = 32, g = 8, k = 128, f = 14,336, untied, RMSNorm.
ROOT = 2 * 128_256 * 4096 + 4096  # embedding and output, final norm: 1,050,677,248
BLOCK = 4096 * (32 + 2 * 8) * 128 + 32 * 128 * 4096 + 3 * 4096 * 14_336 + 2 * 4096  # 218,112,000


def _plan(global_batch: int = 16, framework: str = "fsdp2") -> Any:
    plan = plannable(loaded_spec(SPEC % (global_batch, framework)).job)
    assert not isinstance(plan, tuple), plan
    return plan


def test_the_root_and_first_block_units() -> None:
    plan = _plan()
    assert root_elements(plan) == ROOT
    total = ROOT + 32 * BLOCK  # 8,030,261,248: Llama 3 8B's parameters
    assert total == 8_030_261_248
    units = end_units(plan, total)
    assert (units.first, units.last) == (ROOT + BLOCK, ROOT + BLOCK)


def test_megatron_has_no_fsdp2_ends() -> None:
    plan = _plan(framework="megatron")
    assert end_units(plan, 8_030_261_248).first == 0


@pytest.mark.parametrize(("m", "reduce_dtype", "reduced"), [(1, "fp32", 4), (4, "bf16", 2)])
def test_exposed_ends_by_hand(m: int, reduce_dtype: str, reduced: int) -> None:
    spec = (SPEC % (16 * m, "fsdp2")).replace(
        "framework: fsdp2}", f"framework: fsdp2, reduce_dtype: {reduce_dtype}}}"
    )
    plan = plannable(loaded_spec(spec).job)
    assert not isinstance(plan, tuple)
    assert plan.m == m
    analysis = analyse(plan)
    gather_s, reduce_s = fsdp2_ends(plan, analysis.efficiency, analysis.ops, 0, 8_030_261_248)
    # One NVLink ring of 8: 7 steps of 2 µs, (n − 1)/n of the buffer at 450 GB/s × 0.82
    # (h100-sxm's NVLink entry), per micro-batch for the gathers, once for the reduction, whose
    # gradients cross the wire in reduce_dtype (fp32: torchtitan's mixed_precision_reduce).
    ring = 450e9 * 0.82
    one_gather = 7 * 2e-6 + 7 / 8 * (ROOT + BLOCK) * 2 / ring
    one_reduce = 7 * 2e-6 + 7 / 8 * (ROOT + BLOCK) * reduced / ring
    assert gather_s == pytest.approx(m * one_gather, rel=1e-9)
    assert reduce_s == pytest.approx(one_reduce, rel=1e-9)
    # both lie on the step's path: the gathers before each forward, the reduction at the end
    assert estimate_step(analysis).exposed_comm_s >= gather_s + reduce_s - 1e-12


@pytest.mark.parametrize("reshard", [True, False])
def test_copy_outs_by_hand(reshard: bool) -> None:
    plan = plannable(loaded_spec(_with_reshard(reshard)).job)
    assert not isinstance(plan, tuple)
    analysis = analyse(plan)
    chunk = ChunkTimes(0.0, 0.0, 0.0, 32)
    (out,) = with_copy_out(plan, (chunk,), 8_030_261_248, device_of(plan), analysis.efficiency)

    # split_with_sizes_copy reads the gathered unit and writes its parameters: 4 bytes per
    # bf16 element, at 3,350 GB/s × 0.9 × B/(B + 8.21 MB) (h100-sxm's HBM entry).
    def copy(elements: int) -> float:
        moved = 4 * elements
        return moved / (3350e9 * 0.9 * moved / (moved + 8.21e6))

    # foreach_reduce's copy-in reads each unit's bf16 gradients and writes the fp32
    # reduce-scatter input (torchtitan's reduce_dtype): 6 bytes per element, every unit.
    def copy_in(elements: int) -> float:
        moved = 6 * elements
        return moved / (3350e9 * 0.9 * moved / (moved + 8.21e6))

    forward = copy(ROOT) + 32 * copy(BLOCK)
    backward = 31 * copy(BLOCK) if reshard else 0.0  # the last block and the root stay whole
    backward += copy_in(ROOT) + 32 * copy_in(BLOCK)
    assert out.forward_s == pytest.approx(forward, rel=1e-9)
    assert out.backward_s == pytest.approx(backward, rel=1e-9)


def _with_reshard(reshard: bool) -> str:
    return (SPEC % (16, "fsdp2")).replace(
        "framework: fsdp2}", f"framework: fsdp2, reshard_after_forward: {str(reshard).lower()}}}"
    )
