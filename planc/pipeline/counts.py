"""The counts every pipeline schedule is built from: sizes checked, and the warm-up.

Kept apart from the schedule builder so that the memory model's in-flight counts (on `planc
check`'s path) do not load it.
"""

from __future__ import annotations


def check_sizes(p: int, m: int, v: int) -> None:
    for name, value in (("p", p), ("m", m), ("v", v)):
        # bool is an int subclass; True as a stage count is always a caller bug.
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"pipeline {name} must be a positive integer, got {value!r}")



def num_warmup(p: int, m: int, v: int, rank: int) -> int:
    """Forward passes stage ``rank`` runs before its first backward, in 1F1B and interleaved 1F1B.

    1F1B: ``min(p − r − 1, m)`` (Megatron-LM `megatron/core/pipeline_parallel/schedules.py`,
    forward_backward_pipelining_without_interleaving: num_warmup_microbatches = pipeline size −
    rank − 1, capped at num_microbatches; Narayanan et al. 2021 §2.2). Interleaved:
    ``min(2(p − r − 1) + (v − 1)·p, m·v)`` virtual micro-batches
    (forward_backward_pipelining_with_interleaving: (p − r − 1)·2 + (num_model_chunks − 1)·
    microbatch_group_size_per_vp_stage, the group size p by default; §2.2.1): the ``(v−1)·p``
    term fills every chunk but the last for one group of ``p`` micro-batches, the
    ``2(p − r − 1)`` term covers the round trip to the last stage.
    The one definition of the warm-up count (memory's in-flight counts use it too); it does not
    check the interleaved schedule's preconditions, :func:`build_schedule` does.
    """
    check_sizes(p, m, v)
    if not 0 <= rank < p:
        raise ValueError(f"stage rank must be in 0..{p - 1}, got {rank}")
    if v == 1:
        return min(p - rank - 1, m)
    return min(2 * (p - rank - 1) + (v - 1) * p, m * v)


def combined_warmup(p: int, m: int, v: int, rank: int) -> int:
    """Megatron-Core's combined 1F1B (`--overlap-moe-expert-parallel-comm`): interleaved 1F1B's
    warm-up plus one, capped at m·v (megatron/core/pipeline_parallel/schedules.py,
    get_pp_rank_microbatches: num_warmup_microbatches += 1 with the overlap, "one more
    micro-batch in flight" so that a forward and a backward can run together). Without a
    pipeline (p = 1, v = 1) the first micro-batch's forward runs alone, then each forward with
    the backward of the micro-batch before it (combined_1f1b.py,
    combined_1f1b_schedule_for_no_pipelining)."""
    return min(num_warmup(p, m, v, rank) + (1 if v > 1 or p == 1 else 0), m * v)


def dualpipe_v_warmup(p: int, m: int, v: int, rank: int) -> int:
    """DualPipeV's forwards before rank r's first backward: 2(p − r − 1) of chunk 0, then
    (r + 1) of each chunk, 2p in all (deepseek-ai/DualPipe dualpipev.py, steps 1 and 2)."""
    check_sizes(p, m, v)
    if not 0 <= rank < p:
        raise ValueError(f"stage rank must be in 0..{p - 1}, got {rank}")
    return 2 * p


def gpipe_warmup(p: int, m: int, v: int, rank: int) -> int:
    """GPipe's forwards before its first backward: all m·v of them, on every stage (Huang et al.
    2019 §2.2; PyTorch torch.distributed.pipelining ScheduleGPipe runs every micro-batch's
    forward, then every backward)."""
    check_sizes(p, m, v)
    if not 0 <= rank < p:
        raise ValueError(f"stage rank must be in 0..{p - 1}, got {rank}")
    return m * v
