"""One byte line of a rank's budget, and the small integer helpers every term uses.

A `Term` carries its bytes together with the formula (in the papers' symbols) and the source it
comes from, so that a report can show *why* a number is what it is, not only the number.
"""

from __future__ import annotations

from typing import Literal

from planc.dims import ceil_div
from planc.record import record

Component = Literal["weights", "gradients", "optimizer", "activations", "buffers", "reserve"]
COMPONENTS: tuple[Component, ...] = (
    "weights",
    "gradients",
    "optimizer",
    "activations",
    "buffers",
    "reserve",
)


@record
class Term:
    """One line of a rank's memory: what it is, which component, how many bytes, and why."""

    name: str
    component: Component
    bytes: int
    formula: str
    source: str


def shard(total: int, parts: int, index: int) -> int:
    """Elements that part `index` of `parts` holds when `total` elements are split as evenly as
    possible: the low indices take ⌈total/parts⌉, the high ones ⌊total/parts⌋ (a flat buffer cut
    into contiguous ranges, as ZeRO and Megatron's distributed optimizer do).
    """
    if not 0 <= index < parts:
        raise ValueError(f"shard index {index} is outside 0..{parts - 1}")
    return total // parts + (1 if index < total % parts else 0)


def quantized_bytes(elements: int, bits: int, block: int, scale_bytes: int) -> int:
    """⌈n·bits/8⌉ + ⌈n/block⌉·scale bytes: one quantized copy of n elements with one scale per
    `block` consecutive elements (block 0: one scale per tensor, a few bytes counted with the
    recipe's amax terms, not here)."""
    data = ceil_div(elements * bits, 8)
    return data + (ceil_div(elements, block) * scale_bytes if block else 0)


__all__ = ["COMPONENTS", "Component", "Term", "ceil_div", "quantized_bytes", "shard"]
