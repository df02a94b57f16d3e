"""FSDP2's optimizer step: torch.optim's AdamW in the implementation torchtitan selects, after
torch's gradient clipping (planc/perf/ops.py optimizer_bytes_per_parameter, issue 24).

The kernels are read from torch/optim/adam.py (_fused_adam, _multi_tensor_adam: AdamW with
decoupled weight decay, not capturable) and torch/nn/utils/clip_grad.py (clip_grad_norm_ with
foreach): every tensor is a rank's fp32 shard, 4 bytes per element, each kernel reads and
writes whole tensors in HBM.
"""

from __future__ import annotations

from typing import Any

import pytest

from planc.analysis import analyse, estimate_step
from planc.plannable import plannable

from conftest import loaded_spec

SPEC = """version: 1
name: fsdp2-optimizer
model: {preset: llama3-8b}
hardware: {gpu: h100-sxm, nodes: 1}
parallelism: {data: 8}
training: {seq_len: 8192, micro_batch: 2, global_batch: 16, framework: %s%s}
"""

PARAMETERS = 8_030_261_248 // 8  # Llama 3 8B over 8 FSDP2 ranks (8 divides it)

# (reads, writes) of fp32 tensors per kernel.
FUSED_ADAMW = [(4, 3)]  # _fused_adamw_: p, g, m, v in; p, m, v out
FOREACH_ADAMW = [
    (1, 1),  # _foreach_mul_(params, 1 - lr * weight_decay)
    (2, 1),  # _foreach_lerp_(exp_avgs, grads, 1 - beta1)
    (1, 1),  # _foreach_mul_(exp_avg_sqs, beta2)
    (2, 1),  # _foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2): grads read once
    (1, 1),  # exp_avg_sq_sqrt = _foreach_sqrt(exp_avg_sqs)
    (1, 1),  # _foreach_div_(exp_avg_sq_sqrt, bias_correction2_sqrt)
    (1, 1),  # _foreach_add_(exp_avg_sq_sqrt, eps)
    (3, 1),  # _foreach_addcdiv_(params, exp_avgs, exp_avg_sq_sqrt, step_size)
]
CLIP = [(1, 0), (1, 1)]  # _foreach_norm(grads); _foreach_mul_(grads, clip_coef_clamped)


def _bytes(kernels: list[tuple[int, int]]) -> int:
    return sum(4 * (reads + writes) for reads, writes in kernels)


def _optimizer_s(framework: str, extra: str = "") -> float:
    plan = plannable(loaded_spec(SPEC % (framework, extra)).job)
    assert not isinstance(plan, tuple)
    return estimate_step(analyse(plan)).optimizer_s


def _hbm_s(per_parameter: int) -> float:
    # h100-sxm's HBM: 3,350 GB/s × 0.9 × B/(B + 8.21 MB) at the step's B bytes.
    moved = per_parameter * PARAMETERS
    return moved / (3350e9 * 0.9 * moved / (moved + 8.21e6))


@pytest.mark.parametrize(
    ("extra", "kernels"),
    [("", FUSED_ADAMW + CLIP), (", optimizer_implementation: foreach", FOREACH_ADAMW + CLIP)],
)
def test_fsdp2_optimizer_step_by_hand(extra: str, kernels: list[Any]) -> None:
    assert _optimizer_s("fsdp2", extra) == pytest.approx(_hbm_s(_bytes(kernels)), rel=1e-9)


def test_foreach_moves_more_than_twice_the_fused_bytes() -> None:
    assert _bytes(FOREACH_ADAMW) == 80 and _bytes(FUSED_ADAMW) == 28
    assert _optimizer_s("fsdp2", ", optimizer_implementation: foreach") > 2 * _optimizer_s("fsdp2")


def test_megatron_ignores_the_implementation() -> None:
    # Megatron runs its own fused Adam (and DeepSpeed its FusedAdam) whatever the field says.
    fused = _optimizer_s("megatron")
    foreach = _optimizer_s("megatron", ", optimizer_implementation: foreach")
    assert foreach == fused
