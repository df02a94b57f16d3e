"""Host↔device copies of one step under `training.offload` (exposed time)."""

from __future__ import annotations

from planc.plannable import Plannable


def offload_transfer_s(job: Plannable, stage_parameters: int) -> float:
    """Host↔device copies of one step under `training.offload`, all exposed, for a rank holding
    `stage_parameters` (Ψ_r): max(bytes to the host, bytes to the device) / the hardware's host
    bandwidth per GPU.

    Optimizer offload: each rank copies its gradient shard down (γ·Ψ_r/N) and its updated
    weights shard back (w·Ψ_r/N) once per step (DeepSpeed ZeRO-Offload, Megatron-Core's
    optimizer CPU offload). Parameter offload (DeepSpeed ZeRO-3 offload_param, FSDP2
    CPUOffloadPolicy) copies the weights shard up before each forward and each backward of every
    micro-batch (2·m·w·Ψ_r/N) and the gradient shard down per micro-batch (m·γ·Ψ_r/N). The CPU
    optimizer step itself is not timed.
    """
    tr, lay, m = job.training, job.layout, job.m
    if not (tr.offload_optimizer or tr.offload_parameters):
        return 0.0
    params_moved = tr.offload_parameters and (
        tr.framework == "fsdp2" or (tr.framework == "deepspeed" and lay.zero == 3)
    )
    w, g = job.numerics.weight, job.numerics.gradient
    shard = -(-stage_parameters // lay.shard_group)
    down = g * shard * (m if params_moved else 1)
    up = w * shard * (2 * m if params_moved else 1)
    return max(up, down) / (job.cluster.host_bandwidth_gbs * 1e9)
