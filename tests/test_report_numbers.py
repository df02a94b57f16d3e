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


# --- the same quantities on planc diff's and planc search's surfaces ---------------------------


def test_compare_view_numbers_are_the_reports() -> None:
    """`--compare`: planc diff's numbers of the report's own side (its JSON in the page) are the
    numbers the page marks (explain's): memory per stage and the peak, step, tokens/s, MFU and
    the stages' idle share (what planc diff calls the pipeline bubble)."""
    spec, base = EXAMPLES / "llama3-70b-8x8.yaml", EXAMPLES / "llama3-70b-64xh100-fp8.yaml"
    built = build_report(str(spec), str(base))
    assert built.page is not None
    shown = dict(marked(built.page))
    data = json.loads(built.page.split("id='planc-data'>", 1)[1].split("</script>", 1)[0])
    plan = data["compare"]["new"]["plan"]
    assert plan["step_time_s"] == shown["step.step_time_s"]
    assert plan["tokens_per_s"] == shown["step.tokens_per_s"]
    assert plan["mfu"] == shown["step.mfu"]
    assert plan["bubble_fraction"] == shown["pipeline.bubble_fraction"]
    assert plan["peak_memory_bytes"] == shown["memory.peak.total"]
    assert plan["memory_per_stage"] == [
        shown[f"memory.stages.{i}.total"] for i in range(len(plan["memory_per_stage"]))
    ]


def test_search_candidates_are_explains(tmp_path: Path) -> None:
    """planc search --report's candidates: the layout a candidate names, written as a spec and
    explained, has the candidate's step time, tokens/s, MFU and peak memory."""
    import yaml
    from test_html_report import SEARCH_SPEC, searched

    from planc.report.explorer import explorer_page

    search_spec = tmp_path / "search.yaml"
    search_spec.write_text(SEARCH_SPEC, encoding="utf-8")
    heading, setup, result = searched(search_spec)
    page = explorer_page(heading, setup, result)
    found = json.loads(page.split("id='planc-candidates'>", 1)[1].split("</script>", 1)[0])
    candidates = found["candidates"]
    for candidate in (candidates[0], candidates[len(candidates) // 2], candidates[-1]):
        values = candidate["values"]
        spec = yaml.safe_load(SEARCH_SPEC)
        spec["parallelism"] = {
            "tensor": int(values["tensor"]),
            "pipeline": int(values["pipeline"]),
            "context": 1,
            "virtual_stages": 1,
            "sequence_parallel": values["sequence_parallel"] == "true",
            "zero_stage": int(values["zero_stage"]),
        }
        spec["training"]["micro_batch"] = int(values["micro_batch"])
        spec["training"]["recompute"] = values["recompute"]
        path = tmp_path / f"candidate-{candidate['place']}.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
        explained = explain_json(path)
        assert candidate["step_time_s"] == pytest.approx(
            explained["step"]["step_time_s"], rel=1e-12
        ), values
        assert candidate["tokens_per_s"] == pytest.approx(
            explained["step"]["tokens_per_s"], rel=1e-12
        )
        assert candidate["mfu"] == pytest.approx(explained["step"]["mfu"], rel=1e-12)
        assert candidate["peak_memory_bytes"] == explained["memory"]["peak"]["total"]


def test_the_step_card_quotes_the_error_of_runs_like_this_one() -> None:
    # The Mixtral example (MoE on H100): the Hopper runs' bar and the Hopper MoE runs' one, as
    # planc explain prints them (docs/validation.md's rows).
    spec = EXAMPLES / "mixtral-8x7b-64xh100.yaml"
    built = build_report(str(spec))
    assert built.page is not None
    text = CliRunner().invoke(main, ["explain", str(spec)]).output
    for words in ("validated hopper runs", "validated hopper moe runs"):
        (said,) = [line.strip() for line in text.splitlines() if words in line]
        assert said.removesuffix(" (docs/validation.md)") in built.page.replace("&#x27;", "'")
