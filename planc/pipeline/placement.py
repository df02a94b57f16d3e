"""Which virtual stage each model chunk of a pipeline rank holds (`planc.vocab.ChunkPlacement`).

Kept apart from the schedule builder so that the plannable job's layer ranges (on `planc check`'s
path) do not load it.
"""

from __future__ import annotations

from planc.vocab import ChunkPlacement

__all__ = ["path_length", "stage_of", "virtual_stage"]


def path_length(p: int, v: int, placement: ChunkPlacement) -> int:
    """The virtual stages a micro-batch passes: p·v, or p in DualPipe's two directions."""
    return p if placement is ChunkPlacement.DUAL else p * v


def virtual_stage(p: int, rank: int, chunk: int, placement: ChunkPlacement) -> int:
    """The virtual stage (position on the micro-batch's path) chunk `chunk` of `rank` holds:
    ``chunk·p + rank`` in the loop placement (Megatron's interleaved assignment), ``rank`` or
    ``2p − 1 − rank`` in the V placement (Qi et al. 2024 §3, ZB-V; DualPipeV)."""
    if placement is ChunkPlacement.V:
        return rank if chunk == 0 else 2 * p - 1 - rank
    if placement is ChunkPlacement.DUAL:  # the position on its own direction's path
        return rank if chunk == 0 else p - 1 - rank
    return chunk * p + rank


def stage_of(p: int, here: int, placement: ChunkPlacement, chunk: int = 0) -> tuple[int, int]:
    """(rank, chunk) holding virtual stage `here`: the inverse of `virtual_stage` (in the dual
    placement, `here` on the path of direction `chunk`)."""
    if placement is ChunkPlacement.DUAL:
        return (here if chunk == 0 else p - 1 - here), chunk
    if placement is ChunkPlacement.V:
        return (here, 0) if here < p else (2 * p - 1 - here, 1)
    return here % p, here // p
