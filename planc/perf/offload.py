"""Host↔device copies of one step under `training.offload` (exposed time)."""

from __future__ import annotations

from planc.memory.activations import offloaded_layers, stage_lines
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


def offloaded_layer_bytes(job: Plannable) -> int:
    """Bytes one offloaded layer copies out per micro-batch (and back for its backward): the
    host term of the first stage with one micro-batch in flight, over the N layers
    (`planc.memory.activations.offloaded_layers`; 0 without activation offload)."""
    # Asked by every step estimate of the job (a calibration's, a search's) and by explain, and
    # a pure function of the frozen job: kept on the instance, as `dispatch_group` keeps its group.
    found: int | None = job.__dict__.get("_offloaded_layer_bytes")
    if found is None:
        n = offloaded_layers(job)
        found = sum(t.bytes for t in stage_lines(job, 0).host((1,))) // n if n else 0
        job.__dict__["_offloaded_layer_bytes"] = found
    return found


def offload_lag_s(n: int, layers: int, copy_s: float, layer_s: float) -> float:
    """Seconds a pass of `layers` layers waits on the copies of `n` offloaded layers, each
    `copy_s` on the host link, each layer's compute `layer_s`.

    Transformer Engine 2.14's DefaultOffloadSynchronizer (pytorch/cpu_offload.py) copies layer
    i out on its offload stream after layer i's forward, one copy after another, and makes the
    compute stream wait for it before the forward of layer L − N + i; the backward reloads
    them in reverse with the same window. The pass ends on the longest path through those
    events: the layers' compute, with runs of q consecutive copies in place of q + w − 1
    layers (w = L − N), each run adding q·c − (q + w − 2)·f. With w ≥ 2 one run is the longest,
    of one copy (c ≤ f) or all N (c > f); with w = 1 (N = L − 1, which Transformer Engine warns
    'prevents overlapping') every copy is its own run and the pass serialises them:

        lag = max(0, c − (L − N − 1)·f, N·c − (L − 2)·f)    (N < L − 1)
        lag = N·c                                            (N = L − 1)
    """
    if n <= 0:
        return 0.0
    if n >= layers - 1:
        return n * copy_s
    window = (layers - n - 1) * layer_s
    return max(0.0, copy_s - window, n * copy_s - (layers - 2) * layer_s)


def activation_offload_s(
    job: Plannable, forward_s: float, backward_s: float
) -> tuple[float, float]:
    """(forward, backward) seconds per micro-batch the one stage waits on its activation
    copies (`offload_lag_s`), its chunk taking `forward_s` and `backward_s` per micro-batch and
    a layer the L-th of them (planc's per-layer average, the stem and head included), each copy
    `offloaded_layer_bytes` over the host link per direction (hardware.host_bandwidth_gbs, no
    efficiency applied, as for the other offload copies); (0, 0) without activation offload."""
    n = offloaded_layers(job)
    if not n:
        return 0.0, 0.0
    layers = job.model.L
    copy_s = offloaded_layer_bytes(job) / (job.cluster.host_bandwidth_gbs * 1e9)
    return (
        offload_lag_s(n, layers, copy_s, forward_s / layers),
        offload_lag_s(n, layers, copy_s, backward_s / layers),
    )
