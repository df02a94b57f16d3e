"""Gradient accumulation outside the weight-gradient GEMMs: a memory-bound pass over a rank's
gradients after every micro-batch's backward.

With m micro-batches per step each parameter's gradient is summed m times. Megatron-LM fuses
the sum into the weight-gradient GEMM (`--gradient-accumulation-fusion`, its default since
83b1e42f of 2022-02-13: `fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_fp32/fp16`, or
Transformer Engine's `fuse_wgrad_accumulation`), which then writes into the main-grad buffer
with β = 1 and no pass of its own. Otherwise a kernel reads the micro-batch's gradient and
reads and writes the accumulator. Per parameter and micro-batch, w the 16-bit gradient's bytes
and γ the accumulator's (`Numerics.weight`, `Numerics.gradient`):

| engine | what runs | bytes | micro-batches |
|---|---|---|---|
| Megatron, fused (default) | the linear weights: nothing; the input embedding (its backward is no GEMM) through the hook below | w + 2γ | m |
| Megatron, `--no-gradient-accumulation-fusion` | DDP's backward hook `param.main_grad.add_(param.grad)` | w + 2γ | m |
| DeepSpeed ZeRO 0–1, 16-bit accumulation | autograd's AccumulateGrad adds in place into `param.grad` (the first micro-batch's gradient is taken as is) | 3w | m − 1 |
| DeepSpeed ZeRO 0–1, fp32 accumulation, fp16 | `_fill_param_grad_accum_attribute`: `grad_accum.add_(grad.to(fp32))` | w + 16 | m |
| DeepSpeed bf16, ZeRO-1 with fp32 accumulation or ZeRO-0 with a pipeline (BF16_Optimizer) | `clear_lp_grads` zeroes the 16-bit gradient (w), autograd adds the new one into it (3w), `update_hp_grads` casts it (w + 4) and adds it to the fp32 gradient (12) | 5w + 16 | m |

Sources: megatron-core 0.19.2 `distributed/distributed_data_parallel.py`
`_make_backward_post_hook` and `tensor_parallel/layers.py`
`LinearWithGradAccumulationAndAsyncCommunication`; Megatron-LM 83b1e42f (the fusion, then only
with fp32 accumulation); DeepSpeed 0.19.6 `runtime/engine.py` `_do_optimizer_sanity_check`
(which optimizer runs), `runtime/zero/stage_1_and_2.py` (`use_grad_accum_attribute`,
`_fill_param_grad_accum_attribute`), `runtime/bf16_optimizer.py` (`clear_lp_grads`,
`_update_hp_grad`), `runtime/pipe/engine.py` `_exec_backward_pass` (both called around every
micro-batch's backward). Megatron-FSDP is priced as Megatron: it takes the same
`--gradient-accumulation-fusion` (megatron-core 0.19.2 `mcore_fsdp_adapter.py`, with Transformer
Engine ≥ 2.10), and its strategies are priced as the ZeRO stages they match. Not priced (0):
DeepSpeed ZeRO-2/3 and FSDP2 reduce every micro-batch's gradients and accumulate only the 1/d
shard, a term at most 1/d of these; DeepSpeed's optimizer offload accumulates on the host.
"""

from __future__ import annotations

from planc.memory.params import rank_parameters
from planc.perf.compute import Device, work_time_s
from planc.perf.ops import OpCost, Work
from planc.plannable import Plannable
from planc.presets.efficiency import Efficiency
from planc.record import record
from planc.vocab import DType

FP32_BYTES = 4


@record
class Accumulation:
    """How a rank accumulates its gradients: bytes per parameter per pass and the passes per
    step (m or m − 1); `whole` is False when only the parameters outside the linear layers
    pass (Megatron's fusion: the input embedding)."""

    bytes_per_parameter: int
    passes: int
    whole: bool = True


def accumulation(job: Plannable) -> Accumulation | None:
    """The engine's accumulation path (the module's table), or None where it is not priced."""
    tr, m = job.training, job.m
    w, gamma = job.numerics.weight, job.numerics.gradient
    if tr.framework == "megatron":  # Megatron-FSDP too: the same argument and hook
        return Accumulation(w + 2 * gamma, m, whole=not tr.grad_accum_fusion)
    if tr.framework != "deepspeed" or job.layout.zero >= 2 or tr.offload_optimizer:
        return None
    bf16 = job.numerics.precision is DType.BF16
    # _do_optimizer_sanity_check: bf16 runs BF16_Optimizer under ZeRO-1 with fp32
    # accumulation, and under ZeRO-0 with a pipeline; the rest accumulate in param.grad.
    if bf16 and (tr.grad_accum_fp32 or (job.layout.zero == 0 and job.layout.p > 1)):
        return Accumulation(5 * w + 4 * FP32_BYTES, m)
    if tr.grad_accum_fp32:
        return Accumulation(w + 4 * FP32_BYTES, m)
    return Accumulation(3 * w, m - 1)


def accumulated_parameters(job: Plannable, stage: int, params: int, path: Accumulation) -> int:
    """The parameters of `stage` whose gradients pass through the accumulation kernel: all of
    Ψ_r (`params`), or under Megatron's fusion the input embedding's word and position tables
    on the first stage (`planc.memory.params.rank_parameters`)."""
    if path.whole:
        return params
    if stage != 0:
        return 0
    share = rank_parameters(job, stage)
    return share.embedding + share.position


def accumulation_s(
    job: Plannable, stage: int, params: int, device: Device, eff: Efficiency
) -> float:
    """Seconds of gradient accumulation per micro-batch on one rank of `stage` (the step's
    passes spread evenly over its m micro-batches): passes/m · N·bytes / (HBM · eff_hbm), N
    the accumulated parameters (`accumulated_parameters`), priced as one memory-bound vector
    op (`planc.perf.compute.work_time_s`)."""
    path = accumulation(job)
    if path is None or path.passes <= 0:
        return 0.0
    n = accumulated_parameters(job, stage, params, path)
    moved = path.bytes_per_parameter * n
    if moved <= 0:
        return 0.0
    work = Work(0, moved)
    one = work_time_s(OpCost("gradient accumulation", "vector", work, Work(0, 0)), work, device, eff)
    return one * path.passes / job.m
