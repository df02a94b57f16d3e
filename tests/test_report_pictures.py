"""planc report's pictures (issue 31): the rank drill-down's groups, the expert-parallel groups in
the placement view, styled tooltips, and, in headless Chromium from file://, the drill-down,
hover and the other pages' controls with no console errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from test_html_report import SEARCH_SPEC, chromium, console_errors, searched, with_script

from planc.plannable import Plannable, plannable
from planc.report import build_report
from planc.report.drill import members_words, memberships, rank_record
from planc.report.placement import placement_svg
from planc.report.scatter import Point, frontier, scatter_svg
from planc.spec.load import load_path

from conftest import EXAMPLES, needs_chromium

DENSE = EXAMPLES / "llama3-70b-8x8.yaml"  # t=8 d=2 p=4, order tp-cp-dp-pp, 8 GPUs a node
MOE = EXAMPLES / "mixtral-8x7b-64xh100.yaml"


def plan_of(path: Path) -> Plannable:
    job = load_path(str(path)).job
    assert job is not None
    plan = plannable(job)
    assert not isinstance(plan, tuple)
    return plan


def page_of(path: Path) -> str:
    built = build_report(str(path))
    assert built.page is not None
    return built.page


def page_data(page: str) -> dict[str, Any]:
    found = re.search(r"id='planc-data'>(.*?)</script>", page)
    assert found is not None
    data: dict[str, Any] = json.loads(found.group(1))
    return data


def test_members_words() -> None:
    assert members_words([3, 1, 2, 0]) == "4 ranks: 0–3"
    assert members_words([9, 25, 41, 57]) == "4 ranks: 9, 25, 41, 57"
    assert members_words(range(5, 5 + 8 * 128, 8)) == "128 ranks: 5, 13, 21, …, 1,021 (stride 8)"
    assert members_words([0, 1, 5, 9, 11, 20, 30, 31, 40]) == (
        "9 ranks: 0, 1, 5, 9, 11, 20, 30, 31, …"
    )


def test_a_ranks_groups_follow_the_rank_order() -> None:
    """Order tp-cp-dp-pp with t=8, d=2, p=4: rank = tp + 8·dp + 16·pp, so rank 41 (tp 1,
    dp 1, pp 2) is in TP 40–47, DP {33, 41} and PP {9, 25, 41, 57}, on node 41 // 8 = 5."""
    plan = plan_of(DENSE)
    record = rank_record(plan, memberships(plan), 41)
    assert record["node"] == 5 and record["gpu"] == 1 and record["stage"] == 2
    assert dict(record["groups"]) == {
        "tensor-parallel (TP)": "8 ranks: 40–47",
        "data-parallel (DP)": "2 ranks: 33, 41",
        "pipeline (PP)": "4 ranks: 9, 25, 41, 57",
    }


def test_expert_groups_are_drawn_for_moe_only() -> None:
    """Mixtral on 64 H100s, EP = 8: one dashed outline per EP group of the drawn nodes (64
    ranks / 8); the dense example has none."""
    plan = plan_of(MOE)
    assert plan.layout.ep == 8
    svg = placement_svg(plan)
    assert svg.count('class="ep"') == plan.world // plan.layout.ep
    assert 'class="ep"' not in placement_svg(plan_of(DENSE))
    record = rank_record(plan, memberships(plan), 9)
    assert ["expert-parallel (EP)", "8 ranks: 8–15"] in record["groups"]


def test_every_drawn_gpu_has_its_drill_down() -> None:
    page = page_of(DENSE)
    drill = page_data(page)["drill"]
    drawn = set(re.findall(r'data-rank="(\d+)"', page))
    assert drawn == set(drill["ranks"]) and len(drawn) == plan_of(DENSE).world
    assert len(drill["stages"]) == plan_of(DENSE).layout.p


# --- in headless Chromium, from file:// --------------------------------------------------------


def dom_after(page: str, poke: str, tmp_path: Path) -> str:
    path = tmp_path / "page.html"
    path.write_text(with_script(page, poke), encoding="utf-8")
    done = chromium(path, tmp_path / "profile", "--dump-dom")
    assert done.returncode == 0, done.stderr
    assert console_errors(done.stderr) == []
    return done.stdout


@needs_chromium
def test_clicking_a_gpu_shows_its_groups(tmp_path: Path) -> None:
    poke = (
        "document.querySelector('rect[data-rank=\"41\"]')"
        ".dispatchEvent(new MouseEvent('click', {bubbles: true}));"
    )
    dom = dom_after(page_of(DENSE), poke, tmp_path)
    panel = re.search(
        r'<div id="rank-panel" class="drill"[^>]*data-rank="41">(.*?)</table></div>', dom
    )
    assert panel is not None, "the panel did not open"
    text = panel.group(1)
    assert "Rank 41: node 5" in text and "stage 2" in text
    assert "<th>tensor-parallel (TP)</th><td>8 ranks: 40–47</td>" in text
    assert "<th>pipeline (PP)</th><td>4 ranks: 9, 25, 41, 57</td>" in text
    assert "memory (stage 2)" in text and "traffic (stage 2)" in text
    assert re.search(r'<rect[^>]*class="gpu picked"[^>]*data-rank="41"', dom)


@needs_chromium
def test_a_gpu_and_a_node_are_picked_by_keyboard(tmp_path: Path) -> None:
    """Tab reaches every GPU and node name (tabindex 0, role button); Enter on a focused GPU opens
    its panel as a click does, and Space on a node's name opens the node's."""
    poke = (
        "var g = document.querySelector('rect[data-rank=\"41\"]'); g.focus();"
        "document.title = document.activeElement === g ? 'focused' : 'not focused';"
        "g.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', bubbles: true}));"
    )
    dom = dom_after(page_of(DENSE), poke, tmp_path)
    assert "<title>focused</title>" in dom, "the GPU cannot take the keyboard focus"
    panel = re.search(
        r'<div id="rank-panel" class="drill"[^>]*data-rank="41">(.*?)</table></div>', dom
    )
    assert panel is not None and "Rank 41: node 5" in panel.group(1)
    poke = (
        "var n = document.querySelector('text[data-node=\"5\"]'); n.focus();"
        "n.dispatchEvent(new KeyboardEvent('keydown', {key: ' ', bubbles: true}));"
    )
    dom = dom_after(page_of(DENSE), poke, tmp_path)
    assert re.search(r'<div id="rank-panel"[^>]*data-node="5">', dom), "Space did not pick the node"
    assert re.search(r'<rect[^>]*data-rank="0"[^>]*tabindex="0"', dom) or re.search(
        r'<rect[^>]*tabindex="0"[^>]*data-rank="0"', dom
    )


@needs_chromium
def test_hover_shows_a_styled_tooltip(tmp_path: Path) -> None:
    """The SVG titles become one floating box; hovering a memory segment shows its terms."""
    poke = (
        "document.querySelector('.stage-bar rect.m-weights')"
        ".dispatchEvent(new MouseEvent('mouseover', {bubbles: true, clientX: 50, clientY: 60}));"
    )
    dom = dom_after(page_of(DENSE), poke, tmp_path)
    tip = re.search(r'<div class="tip" role="tooltip" style="([^"]*)">([^<]*)</div>', dom)
    assert tip is not None, "no visible tooltip"
    assert "left: 64px" in tip.group(1) and "top: 76px" in tip.group(1)
    assert tip.group(2).startswith("stage 0 (rank 0), weights:")
    # The native tooltips are gone (no double tooltip), each element keeps its text.
    body = dom.split("<body", 1)[1]
    owners = re.findall(r"<([a-z]+)\b[^<>]*><title>", body)
    assert owners and set(owners) == {"svg"}, owners
    assert 'data-tip="stage 0 (rank 0), weights:' in body


# --- the search page's scatter -----------------------------------------------------------------


def test_frontier_by_hand() -> None:
    """(memory GiB, step s): A(10, 9), B(20, 5), C(15, 9.5) beaten by A, D(30, 5) tied with B on
    time but larger, E(40, 2): the frontier is A, B, E by increasing memory."""
    gib = 2**30
    points = [
        Point(1, "A", 9.0, 10 * gib),
        Point(2, "B", 5.0, 20 * gib),
        Point(3, "C", 9.5, 15 * gib),
        Point(4, "D", 5.0, 30 * gib),
        Point(5, "E", 2.0, 40 * gib),
    ]
    assert frontier(points) == (1, 2, 5)
    chart = scatter_svg(points, 80 * gib)
    assert chart.count("<circle") == 5
    assert re.findall(r'class="pt front"[^>]*data-cand="(\d)"', chart) == ["5", "2", "1"]


@pytest.fixture(scope="module")
def explorer(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any]:
    from planc.report.explorer import explorer_page

    path = tmp_path_factory.mktemp("search") / "search.yaml"
    path.write_text(SEARCH_SPEC, encoding="utf-8")
    heading, setup, result = searched(path)
    return explorer_page(heading, setup, result), result


def test_scatter_has_every_candidate(explorer: tuple[str, Any]) -> None:
    page, result = explorer
    scatter = page.split("<section id='scatter'>", 1)[1].split("</section>", 1)[0]
    places = sorted(int(p) for p in re.findall(r'<circle[^>]*data-cand="(\d+)"', scatter))
    assert places == list(range(1, len(result.results) + 1))
    # The fastest candidate is always on the frontier (nothing is faster).
    assert re.search(r'class="pt front"[^>]*data-cand="1"', scatter)


@needs_chromium
def test_clicking_a_scatter_point_shows_its_candidate(
    explorer: tuple[str, Any], tmp_path: Path
) -> None:
    page, result = explorer
    last = len(result.results)
    poke = (
        f"document.querySelector('circle[data-cand=\"{last}\"]')"
        ".dispatchEvent(new MouseEvent('click', {bubbles: true}));"
    )
    dom = dom_after(page, poke, tmp_path)
    visible = re.findall(r'<section class="cand" id="cand-(\d+)">', dom)
    assert visible == [str(last)], visible
    assert re.search(rf'<circle[^>]*class="pt( front)? on"[^>]*data-cand="{last}"', dom)


# --- the compare view --------------------------------------------------------------------------

BASE = EXAMPLES / "llama3-70b-64xh100-fp8.yaml"


def test_compare_draws_what_planc_diff_says(tmp_path: Path) -> None:
    """`planc report SPEC --compare BASE` holds `planc diff BASE SPEC`'s table: every row's
    before, after and change, as planc diff prints them."""
    from click.testing import CliRunner

    from planc.cli.main import main

    out = tmp_path / "compare.html"
    done = CliRunner().invoke(main, ["report", str(DENSE), "--compare", str(BASE), "-o", str(out)])
    assert done.exit_code == 0, done.output
    page = out.read_text(encoding="utf-8")
    section = page.split("<section id='compare'>", 1)[1].split("</section>", 1)[0]
    cells = re.findall(
        r"<tr><td>[^<]*</td><td class='n'>([^<]*)</td><td class='n'>([^<]*)</td>"
        r"<td class='n'>([^<]*)</td></tr>",
        section,
    )
    text = CliRunner().invoke(main, ["diff", str(BASE), str(DENSE)]).output
    table = [line for line in text.splitlines()[3:] if line.strip()][: len(cells)]
    assert len(cells) == len(table) > 10
    for (before, after, change), printed in zip(cells, table, strict=True):
        for value in (before, after, change.replace("&#x27;", "'")):
            assert value in printed, (value, printed)
    assert 'class="chart compare-step"' in section and 'class="chart compare-memory"' in section
    assert page_data(page)["compare"]["old"]["source"] == str(BASE)


def test_compare_with_an_unreadable_base_exits_2(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from planc.cli.main import main

    out = tmp_path / "compare.html"
    done = CliRunner().invoke(
        main, ["report", str(DENSE), "--compare", str(tmp_path / "no.yaml"), "-o", str(out)]
    )
    assert done.exit_code == 2 and "no such file" in done.output and not out.exists()


@needs_chromium
def test_compare_page_renders_without_errors(tmp_path: Path) -> None:
    built = build_report(str(DENSE), str(BASE))
    assert built.page is not None
    poke = (
        "document.querySelector('svg.compare-memory rect.side-new')"
        ".dispatchEvent(new MouseEvent('mouseover', {bubbles: true, clientX: 20, clientY: 20}));"
    )
    dom = dom_after(built.page, poke, tmp_path)
    # Stage 0's memory as planc explain prints it (explain's JSON, in GiB of 2^30 bytes).
    stage0 = page_data(built.page)["explain"]["memory"]["stages"][0]["total"] / 2**30
    assert re.search(rf'role="tooltip"[^>]*>stage 0 after: {stage0:.2f} GiB</div>', dom)


def test_compare_page_is_deterministic() -> None:
    first = build_report(str(DENSE), str(BASE)).page
    assert first is not None and first == build_report(str(DENSE), str(BASE)).page


# --- the step bar's legend and colours ----------------------------------------------------------


def test_step_legend_is_html_and_every_segment_has_its_own_colour() -> None:
    """Mixtral (an expert all-to-all part, the page where the SVG legend ran past 960 px): the
    step chart has no text beyond its width, its legend is an HTML list, and no two segments
    share a colour in either colour scheme."""
    from planc.report.assets import CSS

    page = page_of(MOE)
    chart = re.search(r'<svg[^>]*class="chart step".*?</svg>', page)
    assert chart is not None
    assert all(float(x) < 960 for x in re.findall(r'<text x="([\d.]+)"', chart.group(0)))
    classes = re.findall(r'<rect[^>]*class="(t-[a-z]+)"', chart.group(0))
    assert "t-ep" in classes and len(classes) == len(set(classes))
    legend = page.split(chart.group(0), 1)[1].split("</ul>", 1)[0]
    assert legend.startswith("<ul class='legend'>") and legend.count("<li>") == len(classes)
    light, dark = CSS.split("@media (prefers-color-scheme:dark)", 1)
    for scheme in (light, dark.split("}}", 1)[0]):
        colours = [re.search(rf"--{c}:(#[0-9a-f]+)", scheme) for c in classes]
        assert all(colours), classes
        shown = [c.group(1) for c in colours if c]
        assert len(set(shown)) == len(shown), shown


def test_a_nodes_groups_by_hand() -> None:
    """Node 5 of the dense example holds ranks 40–47 (stage 40 // 16 = 2): one TP group inside
    it; DP pairs r with r − 8 (node 4): 8 groups over 2 nodes; PP r + 16k: 8 groups over 4."""
    from planc.report.drill import node_record

    plan = plan_of(DENSE)
    record = node_record(plan, memberships(plan), 5, "node 5")
    assert record["ranks"] == "8 ranks: 40–47" and record["stages"] == "2"
    assert dict(record["groups"]) == {
        "tensor-parallel (TP)": "1 group of 8 ranks, inside the node",
        "data-parallel (DP)": "8 groups of 2 ranks, reaching over up to 2 nodes",
        "pipeline (PP)": "8 groups of 4 ranks, reaching over up to 4 nodes",
    }


@needs_chromium
def test_clicking_a_node_name_shows_its_groups(tmp_path: Path) -> None:
    poke = (
        "document.querySelector('text[data-node=\"5\"]')"
        ".dispatchEvent(new MouseEvent('click', {bubbles: true}));"
    )
    dom = dom_after(page_of(DENSE), poke, tmp_path)
    panel = re.search(r'<div id="rank-panel"[^>]*data-node="5">(.*?)</table></div>', dom)
    assert panel is not None, "the panel did not open"
    assert "Node 5 (" in panel.group(1) and "8 ranks: 40–47" in panel.group(1)
    assert "<th>tensor-parallel (TP)</th><td>1 group of 8 ranks, inside the node</td>" in (
        panel.group(1)
    )
