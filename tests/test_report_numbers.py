"""One number per quantity (issue 31): every step-time part, the bubble, memory per rank and the
MFU the report shows are the numbers `planc explain --format json` prints for the same spec.

The page marks each number it shows with `data-quantity` (where it is in explain's JSON; `a-b`
is a less b) and `data-value` (the number drawn); the test reads those attributes, not prose,
and runs explain as a user does (the CLI), so that a second computation anywhere in the report
shows up as a mismatch.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from planc.cli.main import main
from planc.report import build_report

from conftest import EXAMPLES

SPECS = sorted(EXAMPLES.glob("*.yaml"))
MARKED = re.compile(r"""data-quantity=(["'])([^"']+)\1 data-value=(["'])([^"']+)\3""")


def explain_json(spec: Path) -> dict[str, Any]:
    done = CliRunner().invoke(main, ["explain", "--format", "json", str(spec)])
    assert done.exit_code in (0, 1), done.output
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def lookup(data: dict[str, Any], path: str) -> float:
    """`memory.stages.2.total` in explain's JSON."""
    item: Any = data
    for key in path.split("."):
        item = item[int(key)] if isinstance(item, list) else item[key]
    assert isinstance(item, (int, float)), (path, item)
    return float(item)


def marked(page: str) -> list[tuple[str, float]]:
    return [(m.group(2), float(m.group(4))) for m in MARKED.finditer(page)]


@pytest.fixture(scope="module", params=SPECS, ids=lambda p: p.stem)
def shown(request: pytest.FixtureRequest) -> tuple[list[tuple[str, float]], dict[str, Any]]:
    built = build_report(str(request.param))
    assert built.page is not None, built.result
    return marked(built.page), explain_json(request.param)


def test_every_marked_number_is_explains(
    shown: tuple[list[tuple[str, float]], dict[str, Any]],
) -> None:
    numbers, data = shown
    assert numbers
    for quantity, value in numbers:
        first, *less = quantity.split("-")
        want = lookup(data, first) - sum(lookup(data, name) for name in less)
        assert value == pytest.approx(want, rel=1e-12, abs=1e-12), quantity


def test_the_report_shows_every_quantity(
    shown: tuple[list[tuple[str, float]], dict[str, Any]],
) -> None:
    """The step time, every nonzero part of it explain names, the bubble (time, idle share and
    closed form), the peak and every stage's memory, tokens per second and the MFU."""
    numbers, data = shown
    names = {quantity for quantity, _ in numbers}
    step = data["step"]
    parts = [
        f"step.{key}"
        for key in ("tp_comm_s", "cp_comm_s", "ep_comm_s", "exposed_comm_s", "optimizer_s")
        if step[key] > 0
    ]
    want = {
        "step.step_time_s",
        "step.bubble_s",
        "step.mfu",
        "step.tokens_per_s",
        "pipeline.bubble_fraction",
        "bubble_fraction",
        "memory.peak.total",
        *parts,
        *(f"memory.stages.{i}.total" for i in range(len(data["memory"]["stages"]))),
    }
    assert want <= names, want - names
    compute = [name for name in names if name.startswith("step.compute_s")]
    # Compute is drawn without the exposed traffic explain counts inside it, each its own part.
    inside = [p for p in parts if p in ("step.tp_comm_s", "step.cp_comm_s", "step.ep_comm_s")]
    assert compute == ["step.compute_s" + "".join(f"-{p}" for p in inside)]


def test_the_step_bar_adds_up_to_the_step(
    shown: tuple[list[tuple[str, float]], dict[str, Any]],
) -> None:
    """Compute (less what is drawn beside it), the traffic parts, the bubble, the DP tail and
    the optimizer, by hand from explain's fields: the bar is the step time, no more, no less
    (an `other` part holds any remainder)."""
    numbers, data = shown
    step = data["step"]
    segments = dict(numbers)
    by_hand = step["compute_s"] + step["bubble_s"] + step["exposed_comm_s"] + step["optimizer_s"]
    other = next((v for q, v in numbers if q.startswith("step.step_time_s-")), 0.0)
    drawn = next(v for q, v in numbers if q.startswith("step.compute_s")) + sum(
        segments[f"step.{k}"]
        for k in ("tp_comm_s", "cp_comm_s", "ep_comm_s", "exposed_comm_s", "optimizer_s")
        if step[k] > 0
    )
    assert drawn + step["bubble_s"] == pytest.approx(by_hand, rel=1e-12)
    assert by_hand + other == pytest.approx(max(by_hand, step["step_time_s"]), rel=1e-9)
