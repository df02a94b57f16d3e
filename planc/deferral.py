"""Megatron-Core's deferred LM-head weight gradients (`training.defer_embedding_wgrad_compute`).

With the flag the rank holding the LM head keeps, instead of computing it, the weight gradient
of its output layer for the first `wgrad_deferral_limit` calls of a step (0: all), and computes
them in the pipeline flush, while the stages before it still run their last backwards
(Megatron-Core d98e8a64, and 23e00ed0 alike):

- tensor_parallel/layers.py, `LinearWithGradAccumulationAndAsyncCommunication.backward`: a
  deferred call appends its output gradient to the buffer and skips the weight-gradient GEMM
  and, under sequence parallelism, the all-gather of its input for it; its input-gradient
  reduction then has no GEMM to run beside (the reduce-scatter is waited for at the backward's
  end). `ColumnParallelLinear.forward` keeps the input (`embedding_activation_buffer`).
- pipeline_parallel/schedules.py `finish_embedding_wgrad_compute` after the schedule, before the
  gradients are finalized: utils.py `drain_embedding_wgrad_compute` all-gathers the first
  buffered input, then each next one beside the current GEMM (two buffers).

Symbols: m micro-batches, h_p the head's calls per micro-batch on the rank (the model's head and
each multi-token prediction module's, which call the same output layer), n = m·h_p, W one
call's weight-gradient GEMM, G one all-gather of its input (0 without sequence parallelism).

    k = n if limit = 0, else min(limit, n)          the calls deferred per step
    f = k / n                                       their share, what each micro-batch loses on
                                                    average: f·h_p·W of backward
    flush = G + (k − 1)·max(W, G) + W  (SP),  k·W  (no SP)
"""

from __future__ import annotations

from planc.plannable import Plannable


def head_calls(job: Plannable, stage: int) -> int:
    """h_p: the output layer's calls per micro-batch on pipeline rank `stage`: the model's head
    on the rank holding the last virtual stage, and each multi-token prediction module's there."""
    modules, _ = job.mtp_modules(stage)
    return int(stage == job.layout.last_stage) + modules


def deferred_calls(job: Plannable, stage: int) -> tuple[int, int]:
    """(k, n): the head's calls per step on pipeline rank `stage` that wait for the flush, of
    all n; (0, n) where nothing is deferred (the flag off, or no head on the rank)."""
    tr = job.training
    n = job.m * head_calls(job, stage)
    if not tr.defer_embedding_wgrad or n == 0:
        return 0, n
    limit = tr.wgrad_deferral_limit
    return (n if limit == 0 else min(limit, n)), n


def deferred_share(job: Plannable, stage: int) -> float:
    """f = k/n on pipeline rank `stage` (`deferred_calls`); 0 where nothing is deferred."""
    k, n = deferred_calls(job, stage)
    return k / n if k else 0.0


def flush_s(k: int, weight_s: float, gather_s: float) -> float:
    """Seconds of the k deferred weight gradients in the flush: G + (k − 1)·max(W, G) + W, the
    first input gathered alone and each next one beside the current GEMM (k·W where nothing is
    gathered); 0 for k = 0."""
    if k == 0:
        return 0.0
    return gather_s + (k - 1) * max(weight_s, gather_s) + weight_s
