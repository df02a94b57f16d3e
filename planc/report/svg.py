"""SVG primitives as strings: every attribute and text escaped, every number formatted the same
way, so that a chart is a pure function of its data (byte-identical output for the same plan).

Colours are CSS classes (the page's stylesheet gives them light and dark values), except the
pipeline-stage colours of the placement grid, which are computed (`stage_colour`).
"""

from __future__ import annotations

import colorsys
from html import escape


def esc(text: object) -> str:
    """`text` safe inside HTML/SVG text and double- or single-quoted attributes."""
    return escape(str(text), quote=True)


def num(value: float) -> str:
    """A coordinate: at most two decimals, no trailing zeros, no "-0"."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def attrs(**values: object) -> str:
    """` key="value"` pairs in the order given; `cls` becomes `class`, `_` in names becomes `-`,
    None values are left out, floats go through `num`."""
    out = []
    for key, value in values.items():
        if value is None:
            continue
        name = "class" if key == "cls" else key.replace("_", "-")
        shown = num(value) if isinstance(value, float) else value
        out.append(f' {name}="{esc(shown)}"')
    return "".join(out)


def title(text: str | None) -> str:
    """A `<title>` child: the tooltip browsers show on hover (and screen readers read)."""
    return f"<title>{esc(text)}</title>" if text else ""


def rect(
    x: float,
    y: float,
    w: float,
    h: float,
    cls: str | None = None,
    tip: str | None = None,
    **more: object,
) -> str:
    body = title(tip)
    head = f"<rect{attrs(x=float(x), y=float(y), width=float(max(w, 0.0)), height=float(max(h, 0.0)), cls=cls, **more)}"
    return f"{head}>{body}</rect>" if body else f"{head}/>"


def line(x1: float, y1: float, x2: float, y2: float, cls: str | None = None, **more: object) -> str:
    return (
        f"<line{attrs(x1=float(x1), y1=float(y1), x2=float(x2), y2=float(y2), cls=cls, **more)}/>"
    )


def text(
    x: float,
    y: float,
    content: str,
    cls: str | None = None,
    anchor: str | None = None,
    **more: object,
) -> str:
    return f"<text{attrs(x=float(x), y=float(y), cls=cls, text_anchor=anchor, **more)}>{esc(content)}</text>"


def group(
    children: list[str], cls: str | None = None, tip: str | None = None, **more: object
) -> str:
    return f"<g{attrs(cls=cls, **more)}>{title(tip)}{''.join(children)}</g>"


def svg(
    width: float, height: float, children: list[str], label: str, cls: str | None = None
) -> str:
    """A scalable `<svg>`: the viewBox is width × height, the page's CSS sizes it, never wider
    than `width` CSS pixels (a small chart is not blown up)."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg"{attrs(viewBox=f"0 0 {num(width)} {num(height)}", cls=cls, role="img", aria_label=label, style=f"max-width:{num(width)}px")}>'
        f"{title(label)}{''.join(children)}</svg>"
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
