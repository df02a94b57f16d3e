"""Numbers for people, one format each: GiB (2^30 bytes) for memory, GB (10^9 bytes) for
traffic, seconds with a sensible unit, percentages with one decimal."""

from __future__ import annotations

from planc.spec.job import GB, GIB


def gib(n: float) -> str:
    return f"{n / GIB:,.2f} GiB"


def gb(n: float) -> str:
    return f"{n / GB:,.2f} GB"


def seconds(s: float) -> str:
    if s == 0:
        return "0 s"
    if s >= 1:
        return f"{s:,.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:,.2f} ms"
    return f"{s * 1e6:,.1f} µs"


def percent(share: float) -> str:
    return f"{share:.1%}"


def count(n: int) -> str:
    return f"{n:,}"
