"""SVG primitives as strings: every attribute and text escaped, every number formatted the same
way, so that a chart is a pure function of its data (byte-identical output for the same plan).

Colours are CSS classes (the page's stylesheet gives them light and dark values), except the
pipeline-stage colours of the placement grid, which are computed (`stage_colour`).
"""

from __future__ import annotations

import colorsys
import string
from collections.abc import Iterable
from html import escape
from typing import Any


class Html(str):
    """Markup the page contains as it is. Made only here: by `esc` (text escaped) and by `markup`
    (the page's own template, every field escaped unless it is Html already). A function that
    draws part of the page returns Html and takes Html children, so a plain `str` from a spec,
    a preset, a file or the analysis cannot reach the page unescaped: mypy refuses it."""

    __slots__ = ()


NOTHING = Html()


def esc(text: object) -> Html:
    """`text` safe inside HTML/SVG text and double- or single-quoted attributes: the one escaping
    function of the report (`&`, `<`, `>`, `"` and `'` as character references). Html is
    already safe and passes unchanged."""
    if isinstance(text, Html):
        return text
    return Html(escape(str(text), quote=True))


class _Escaping(string.Formatter):
    """str.format whose fields are formatted as usual, then escaped (Html fields as they are)."""

    def format_field(self, value: Any, format_spec: str) -> str:
        if isinstance(value, Html):
            return value
        return esc(format(value, format_spec))


_ESCAPING = _Escaping()


def markup(template: str, *fields: object) -> Html:
    """The page's own `template` (a literal in planc's source) with its `{}` fields filled, each
    escaped unless it is Html: the only way markup other than escaped text is made."""
    return Html(_ESCAPING.format(template, *fields))


def join(parts: Iterable[Html]) -> Html:
    """Pieces of markup one after the other."""
    return Html("".join(parts))


def num(value: float) -> str:
    """A coordinate: at most two decimals, no trailing zeros, no "-0"."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def attrs(**values: object) -> Html:
    """` key="value"` pairs in the order given; `cls` becomes `class`, `_` in names becomes `-`,
    None values are left out, floats go through `num`."""
    out = []
    for key, value in values.items():
        if value is None:
            continue
        name = "class" if key == "cls" else key.replace("_", "-")
        shown = num(value) if isinstance(value, float) else value
        out.append(markup(' {}="{}"', name, shown))
    return join(out)


def title(text: str | None) -> Html:
    """A `<title>` child: the tooltip browsers show on hover (and screen readers read)."""
    return markup("<title>{}</title>", text) if text else NOTHING


def rect(
    x: float,
    y: float,
    w: float,
    h: float,
    cls: str | None = None,
    tip: str | None = None,
    **more: object,
) -> Html:
    body = title(tip)
    head = attrs(
        x=float(x), y=float(y), width=float(max(w, 0.0)), height=float(max(h, 0.0)), cls=cls, **more
    )
    return markup("<rect{}>{}</rect>", head, body) if body else markup("<rect{}/>", head)


def line(
    x1: float, y1: float, x2: float, y2: float, cls: str | None = None, **more: object
) -> Html:
    return markup(
        "<line{}/>", attrs(x1=float(x1), y1=float(y1), x2=float(x2), y2=float(y2), cls=cls, **more)
    )


def text(
    x: float,
    y: float,
    content: str,
    cls: str | None = None,
    anchor: str | None = None,
    **more: object,
) -> Html:
    return markup(
        "<text{}>{}</text>",
        attrs(x=float(x), y=float(y), cls=cls, text_anchor=anchor, **more),
        content,
    )


def circle(
    cx: float, cy: float, r: float, cls: str | None = None, tip: str | None = None, **more: object
) -> Html:
    head = attrs(cx=float(cx), cy=float(cy), r=float(r), cls=cls, **more)
    body = title(tip)
    return markup("<circle{}>{}</circle>", head, body) if body else markup("<circle{}/>", head)


def polyline(points: Iterable[tuple[float, float]], cls: str | None = None) -> Html:
    """A line through `points` in order."""
    shown = " ".join(f"{num(x)},{num(y)}" for x, y in points)
    return markup("<polyline{}/>", attrs(points=shown, cls=cls))


def group(
    children: Iterable[Html], cls: str | None = None, tip: str | None = None, **more: object
) -> Html:
    return markup("<g{}>{}{}</g>", attrs(cls=cls, **more), title(tip), join(children))


def svg(
    width: float, height: float, children: Iterable[Html], label: str, cls: str | None = None
) -> Html:
    """A scalable `<svg>`: the viewBox is width × height, the page's CSS sizes it, never wider
    than `width` CSS pixels (a small chart is not blown up)."""
    head = attrs(
        viewBox=f"0 0 {num(width)} {num(height)}",
        cls=cls,
        role="img",
        aria_label=label,
        style=f"max-width:{num(width)}px",
    )
    return markup(
        '<svg xmlns="http://www.w3.org/2000/svg"{}>{}{}</svg>', head, title(label), join(children)
    )


def label_every(pitch: float, room: float) -> int:
    """Label every k-th of items `pitch` apart so labels are at least `room` apart: k = 1, 2, 5,
    10, 20, 50, ..."""
    step = 1
    while step * pitch < room:
        step = step * 5 // 2 if str(step)[0] == "2" else step * 2
    return step


def stage_colour(stage: int, stages: int) -> str:
    """A distinct fill per pipeline stage: hues spread around the wheel (golden-ratio steps
    once there are more stages than a palette could name), as #rrggbb."""
    hue = (stage / stages) if stages <= 12 else (stage * 0.618033988749895) % 1.0
    red, green, blue = colorsys.hls_to_rgb(hue, 0.58, 0.55)
    return f"#{round(red * 255):02x}{round(green * 255):02x}{round(blue * 255):02x}"
