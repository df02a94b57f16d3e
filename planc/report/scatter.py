"""The search page's scatter: each estimated candidate's step time against its peak memory per
GPU, the HBM line, and the Pareto frontier (the candidates no other one beats on both: none is
as fast with less memory, or as small and faster) joined and marked.

The numbers are the search's own (its Metrics and Verdict per candidate); the frontier is a
choice among them, not a new quantity.
"""

from __future__ import annotations

from collections.abc import Sequence

from planc.record import record
from planc.report import fmt
from planc.report.gantt import nice_step
from planc.report.svg import Html, circle, line, polyline, svg, text
from planc.spec.job import GIB

WIDTH = 960
HEIGHT = 340
LEFT, RIGHT, TOP, BOTTOM = 72, 24, 14, 46


@record
class Point:
    """One candidate: its place in the ranking, what the tooltip says, its two numbers."""

    place: int
    label: str
    step_time_s: float
    peak_memory_bytes: int


def frontier(points: Sequence[Point]) -> tuple[int, ...]:
    """Places of the Pareto-optimal candidates (lower step time and lower memory are better),
    by increasing memory: a point is on it when every point with no more memory is slower
    (ties: the better-ranked one)."""
    ordered = sorted(points, key=lambda p: (p.peak_memory_bytes, p.step_time_s, p.place))
    out: list[int] = []
    best = float("inf")
    for point in ordered:
        if point.step_time_s < best:
            out.append(point.place)
            best = point.step_time_s
    return tuple(out)


def _range(low: float, high: float) -> tuple[float, float]:
    pad = (high - low) * 0.06 or abs(high) * 0.05 or 1.0
    return max(0.0, low - pad), high + pad


def scatter_svg(points: Sequence[Point], hbm_bytes: int) -> Html:
    """The chart; each point carries data-cand (its place) for the page's script."""
    on_front = set(frontier(points))
    mem = [p.peak_memory_bytes / GIB for p in points]
    x_lo, x_hi = _range(min(mem), max(max(mem), hbm_bytes / GIB))
    times = [p.step_time_s for p in points]
    y_lo, y_hi = _range(min(times), max(times))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(gib: float) -> float:
        return LEFT + plot_w * (gib - x_lo) / (x_hi - x_lo)

    def y(seconds: float) -> float:
        return TOP + plot_h * (1 - (seconds - y_lo) / (y_hi - y_lo))

    parts: list[Html] = []
    step = nice_step(y_hi - y_lo, 6)
    tick = step * -(-y_lo // step)
    while tick <= y_hi:
        parts.append(line(LEFT, y(tick), LEFT + plot_w, y(tick), "grid"))
        parts.append(text(LEFT - 6, y(tick) + 4, fmt.seconds(tick), "axis", "end"))
        tick += step
    step = nice_step(x_hi - x_lo, 8)
    tick = step * -(-x_lo // step)
    while tick <= x_hi:
        parts.append(line(x(tick), TOP + plot_h, x(tick), TOP + plot_h + 5, "tick"))
        parts.append(text(x(tick), TOP + plot_h + 18, f"{tick:g}", "axis", "middle"))
        tick += step
    parts.append(text(LEFT + plot_w / 2, HEIGHT - 8, "peak memory per GPU (GiB)", "axis", "middle"))
    parts.append(
        text(
            14,
            TOP + plot_h / 2,
            "step time",
            "axis",
            "middle",
            transform=f"rotate(-90 14 {TOP + plot_h / 2:.0f})",
        )
    )
    parts.append(line(x(hbm_bytes / GIB), TOP, x(hbm_bytes / GIB), TOP + plot_h, "hbm"))
    parts.append(text(x(hbm_bytes / GIB) - 4, TOP + 12, "HBM", "hbm-label", "end"))
    by_place = {p.place: p for p in points}
    front = [by_place[place] for place in frontier(points)]
    stairs: list[tuple[float, float]] = []
    for a, b in zip(front, [*front[1:], None], strict=True):
        stairs.append((x(a.peak_memory_bytes / GIB), y(a.step_time_s)))
        if b is not None:
            stairs.append((x(b.peak_memory_bytes / GIB), y(a.step_time_s)))
    parts.append(polyline(stairs, "front-line"))
    for point in sorted(points, key=lambda p: (p.place in on_front, -p.place)):
        front_point = point.place in on_front
        tip = (
            f"#{point.place}: {point.label}; step {fmt.seconds(point.step_time_s)}, peak "
            f"{fmt.gib(point.peak_memory_bytes)}" + (" (on the frontier)" if front_point else "")
        )
        parts.append(
            circle(
                x(point.peak_memory_bytes / GIB),
                y(point.step_time_s),
                6 if front_point else 4,
                "pt front" if front_point else "pt",
                tip,
                data_cand=point.place,
            )
        )
    label = (
        f"Step time against peak memory of {len(points)} candidates; "
        f"{len(front)} on the Pareto frontier"
    )
    return svg(WIDTH, HEIGHT, parts, label, "chart scatter")
