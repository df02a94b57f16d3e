"""planc report: SVG snapshots of the 8-GPU example, the page's structure, escaping, determinism,
sizes at 1k and 131k ranks, the CLI's exit codes, and the page rendered in headless Chromium
(no console errors, the charts in the DOM, a screenshot that is not blank)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
import subprocess
import sys
import zlib
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from syrupy.assertion import SnapshotAssertion

from planc.analysis import Analysis, analyse, estimate_step
from planc.cli.main import main
from planc.pipeline.schedule import build_schedule
from planc.pipeline.timeline import simulate
from planc.plannable import Plannable, plannable
from planc.report import build_report
from planc.report.comm import busiest_stage, ops_svg, step_svg
from planc.report.gantt import MAX_DRAWN_OPS, Gantt, drawn_microbatches, gantt_svg, simulate_drawn
from planc.report.memory import memory_svg
from planc.report.placement import FULL_GRID_NODES, node_types, placement_svg, rank_grid
from planc.report.svg import attrs, esc, num, rect
from planc.search.output import order_lines
from planc.spec.load import load_path, load_text

from conftest import CHROMIUM, CHROMIUM_FLAGS, EXAMPLES, needs_chromium, spec_text

SMALL = EXAMPLES / "llama3-8b-1node.yaml"
LARGE = EXAMPLES / "gpt3-175b-1024xa100.yaml"
MAX_PAGE_BYTES = 2 * 1024 * 1024

# Llama 3 405B on 16,384 nodes of 8 H100 (131,072 ranks), as benchmarks/bench_compile.py.
SPEC_131K = """\
version: 1
name: llama3-405b-16384x8
model: {preset: llama3-405b}
hardware:
  gpu: h100-sxm
  nodes: 16384
  gpus_per_node: 8
  hosts: "gpu-{00000..16383}"
parallelism:
  {tensor: 8, pipeline: 16, stage_layers: [7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7], sequence_parallel: true, zero_stage: 1}
training: {seq_len: 8192, micro_batch: 1, global_batch: 65536, recompute: selective, attention: flash}
"""


def plan_of(path: Path) -> Plannable:
    job = load_path(str(path)).job
    assert job is not None
    plan = plannable(job)
    assert not isinstance(plan, tuple), plan
    return plan


def analysed(path: Path) -> Analysis:
    return analyse(plan_of(path))


def page_of(path: Path) -> str:
    built = build_report(str(path))
    assert built.page is not None, built.result
    return built.page


def lines(svg: str) -> str:
    """One element per line, so that a snapshot diff points at the element that changed."""
    return svg.replace("><", ">\n<")


# The deepest pipeline a 128-layer model allows, at 131,072 ranks: the most rows per chart.
SPEC_DEEP = SPEC_131K.replace(
    "model: {preset: llama3-405b}", "model: {preset: llama3-405b, layers: 128}"
).replace(
    "pipeline: 16, stage_layers: [7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7]", "pipeline: 128"
)


@pytest.fixture(scope="module")
def spec_131k(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "llama3-405b-131k.yaml"
    path.write_text(SPEC_131K, encoding="utf-8")
    return path


# --- primitives ---------------------------------------------------------------------------


def test_primitives_escape_and_format() -> None:
    assert esc("<a href='x'>&</a>") == "&lt;a href=&#x27;x&#x27;&gt;&amp;&lt;/a&gt;"
    assert num(1.0) == "1" and num(-0.001) == "0" and num(2.345) == "2.35" and num(0.5) == "0.5"
    assert attrs(cls="a", data_stage=3, x=1.5, skip=None) == ' class="a" data-stage="3" x="1.5"'
    assert rect(0, 0, 1, 1, "c", 'tip "<b>"') == (
        '<rect x="0" y="0" width="1" height="1" class="c"><title>tip &quot;&lt;b&gt;&quot;</title></rect>'
    )


# --- golden SVG of the 8-GPU example ---------------------------------------------------------


def test_memory_svg_snapshot(snapshot: SnapshotAssertion) -> None:
    an = analysed(SMALL)
    assert lines(memory_svg(an.plan, an.memory)) == snapshot


def test_gantt_svg_snapshot(snapshot: SnapshotAssertion) -> None:
    assert lines(gantt_svg(simulate_drawn(analysed(SMALL)))) == snapshot


def test_placement_svg_snapshot(snapshot: SnapshotAssertion) -> None:
    assert lines(placement_svg(plan_of(SMALL))) == snapshot


def test_comm_svg_snapshot(snapshot: SnapshotAssertion) -> None:
    an = analysed(SMALL)
    assert lines(ops_svg(an, busiest_stage(an))) == snapshot
    assert lines(step_svg(estimate_step(an))) == snapshot


# --- what the charts show ---------------------------------------------------------------------


def test_memory_marks_the_heaviest_stage_and_hbm() -> None:
    an = analysed(LARGE)
    svg = memory_svg(an.plan, an.memory)
    peak = an.memory.peak.stage
    assert svg.count("bar-outline peak") == 1
    bars = re.findall(r'<g class="stage-bar" data-stage="(\d+)"[^>]*>', svg)
    assert bars == [str(s) for s in range(an.plan.layout.p)]
    peak_bar = svg.split(f'data-stage="{peak}" ', 1)[1].split("</g>", 1)[0]
    assert "bar-outline peak" in peak_bar and "▼" in peak_bar
    assert 'class="hbm"' in svg and 'class="usable"' in svg
    assert "HBM 80.00 GiB" in svg


def test_memory_over_hbm_is_outlined_as_over() -> None:
    an = analyse(plan_of(EXAMPLES / "invalid" / "PLC007" / "llama3-8b-1node.yaml"))
    assert an.memory.peak.memory.total > an.plan.cluster.gpu.memory_bytes * 0.9
    assert "bar-outline over peak" in memory_svg(an.plan, an.memory)


def test_drawn_microbatches_are_bounded() -> None:
    assert drawn_microbatches(1, 16, 1) == 8
    assert drawn_microbatches(8, 96, 1) == 24
    assert drawn_microbatches(4, 3, 1) == 3
    for p, m, v in [(16, 10**9, 1), (64, 10**6, 1), (8, 4096, 4), (100, 10**6, 2)]:
        shown = drawn_microbatches(p, m, v)
        assert 1 <= shown <= m
        assert v == 1 or shown % p == 0
        assert 2 * p * shown * v <= MAX_DRAWN_OPS or shown == p


def test_gantt_draws_every_op_with_its_bubble() -> None:
    """GPT-3 on 1,024 A100s: 2·p·m = 1,536 ops fit, so the whole step is drawn, every op."""
    an = analysed(LARGE)
    gantt = simulate_drawn(an)
    svg = gantt_svg(gantt)
    p, m = an.plan.layout.p, an.plan.m
    assert gantt.shown == m and gantt.compressed_s == 0
    assert svg.count('class="op-f"><title>') == p * m
    assert svg.count('class="op-b"><title>') == p * m
    assert svg.count('class="bubble"><title>') == p
    assert f"the whole step, {m} micro-batches" in svg


def test_a_long_step_is_drawn_whole_with_its_steady_state_left_out() -> None:
    """1F1B, p = 4, m = 2,000, t_f = 1, t_b = 2: the step's pipeline is (m + p − 1)(t_f + t_b)
    = 6,009 s. Drawn: the first 12 micro-batches ((12 + 3)·3 = 45 s), broken in the middle;
    the part after the break moved by 6,009 − 45 = 5,964 s and 1,988 micro-batches, so it
    ends at 6,009 s with micro-batch 1,999's backward on stage 0."""
    from planc.report.gantt import whole_step

    p, m, shown = 4, 2000, 12
    timeline = simulate(build_schedule(p, shown, 1), Fraction(1), Fraction(2), 0)
    assert timeline.makespan == 45
    gantt = Gantt(p, m, 1, shown, timeline, (0.0,) * p, 0.0, 6009.0)
    assert gantt.compressed_s == 5964
    stages, cut = whole_step(gantt)
    assert cut is not None and cut.at == 22.5 and cut.left_out_s == 5964
    last = stages[0][-1]
    assert (last.op.kind, last.op.microbatch, last.end) == ("B", 1999, 6009)
    assert all(s.end <= 22.5 or s.start >= 22.5 + 5964 for row in stages for s in row)
    svg = gantt_svg(gantt)
    assert "1,988 micro-batches" in svg and "of steady state left out" in svg


def test_gantt_merges_ops_narrower_than_a_pixel() -> None:
    p, m = 4, 2000
    timeline = simulate(build_schedule(p, m, 1), Fraction(1), Fraction(2), 0)
    svg = gantt_svg(Gantt(p, m, 1, m, timeline, (0.0,) * p, 0.0))
    assert 'class="op-f"><title>' not in svg
    assert 0 < svg.count('class="op-busy"><title>') <= p * 10


def test_placement_full_grid_and_summary(spec_131k: Path) -> None:
    small = plan_of(LARGE)
    assert small.cluster.nodes <= FULL_GRID_NODES
    svg = placement_svg(small)
    assert svg.count('class="gpu"') == small.world
    assert svg.count('class="tp"') == small.world // small.layout.t
    assert "dgx-001" in svg and "dgx-128" in svg

    big = plan_of(spec_131k)
    types = node_types(rank_grid(big))
    assert len(types) == big.layout.p  # pipeline slowest: one node type per stage
    assert sum(len(t.nodes) for t in types) == big.cluster.nodes
    svg = placement_svg(big)
    assert svg.count('class="gpu"') == big.layout.p * big.cluster.gpus_per_node
    assert "1,024 nodes · stage 15" in svg and "nodes 15,360–16,383" in svg


def test_placement_joins_groups_and_domains_larger_than_a_node() -> None:
    plan = plan_of(EXAMPLES / "gpt3-175b-gb200-nvl72.yaml")  # t = 24 on 4-GPU trays, NVL72
    svg = placement_svg(plan)
    assert svg.count('class="tp"') == plan.world // plan.layout.t  # 6 nodes per box
    assert svg.count('class="nvl"') == plan.world // plan.cluster.nvlink_domain


def test_placement_draws_a_strided_tp_group_cell_by_cell() -> None:
    text = spec_text({"parallelism": {"order": "dp-tp-cp-pp"}})
    job = load_text("strided.yaml", text).job
    assert job is not None
    plan = plannable(job)
    assert not isinstance(plan, tuple)
    grid = rank_grid(plan)
    assert grid.tp_group[0].tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    assert placement_svg(plan).count('class="tp"') == plan.world  # no two neighbours share a group


# --- the page ---------------------------------------------------------------------------------


def test_page_structure_and_offline() -> None:
    page = page_of(SMALL)
    for section in ("findings", "memory", "pipeline", "placement", "communication"):
        assert f"<section id='{section}'>" in page
    for chart in ("chart memory", "chart gantt", "chart placement", "chart comm", "chart step"):
        assert f'class="{chart}"' in page
    assert "prefers-color-scheme:dark" in page and "@media print" in page
    # Nothing fetched: no external resource, no link; the SVG namespace is a name, not a fetch.
    assert not re.search(r"\b(src|href)\s*=", page)
    assert "@import" not in page and "//cdn" not in page
    assert set(re.findall(r"https?://[^\s\"'<)]+", page)) == {"http://www.w3.org/2000/svg"}
    assert page.count("<script") == 2  # the embedded numbers and the highlighter


def test_page_is_deterministic() -> None:
    assert page_of(LARGE) == page_of(LARGE)


def test_user_strings_are_escaped(tmp_path: Path) -> None:
    name = "</title><script>alert(1)</script>&<b>"
    path = tmp_path / "evil.yaml"
    path.write_text(spec_text({"name": name}), encoding="utf-8")
    page = page_of(path)
    assert "<script>alert" not in page and "<b>" not in page
    assert "&lt;/title&gt;&lt;script&gt;alert(1)&lt;/script&gt;&amp;&lt;b&gt;" in page
    assert page.count("<script") == 2 and page.count("</script>") == 2
    data = page.split("id='planc-data'>", 1)[1].split("</script>", 1)[0]
    assert "<" not in data and "\\u003cscript\\u003e" in data


def test_findings_are_listed_with_their_location() -> None:
    path = EXAMPLES / "invalid" / "PLC007" / "llama3-8b-1node.yaml"
    page = page_of(path)
    built = build_report(str(path))
    finding = next(f for f in built.result.findings if f.rule == "PLC007")
    assert f"{path}:{finding.line}:{finding.column}" in page
    assert "<td class='mono'>PLC007</td>" in page
    assert "badge bad'>OOM<" in page or "badge warn'>TIGHT<" in page


def test_sizes_stay_under_2_mb(spec_131k: Path) -> None:
    assert len(page_of(LARGE).encode()) < MAX_PAGE_BYTES
    page = page_of(spec_131k)  # its time is benchmarks/bench_report.py's figure, not a test
    assert len(page.encode()) < MAX_PAGE_BYTES
    assert "131,072 × h100-sxm" in page
    deep = spec_131k.with_name("deep.yaml")
    deep.write_text(SPEC_DEEP, encoding="utf-8")
    assert plan_of(deep).layout.p == 128
    assert len(page_of(deep).encode()) < MAX_PAGE_BYTES


# --- the command ------------------------------------------------------------------------------


def test_cli_writes_the_page(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(SMALL), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8") == page_of(SMALL)
    assert f"wrote {out}" in result.output


def test_cli_tolerates_memory_and_bubble_only(tmp_path: Path) -> None:
    runner = CliRunner()
    for rule in ("PLC006", "PLC007"):
        out = tmp_path / f"{rule}.html"
        spec = next((EXAMPLES / "invalid" / rule).glob("*.yaml"))
        result = runner.invoke(main, ["report", str(spec), "-o", str(out)])
        assert result.exit_code == 0, result.output
        assert rule in out.read_text(encoding="utf-8")
    out = tmp_path / "PLC001.html"
    spec = next((EXAMPLES / "invalid" / "PLC001").glob("*.yaml"))
    result = runner.invoke(main, ["report", str(spec), "-o", str(out)])
    assert result.exit_code == 1
    assert "PLC001" in result.output and not out.exists()
    result = runner.invoke(main, ["report", str(tmp_path / "missing.yaml"), "-o", str(out)])
    assert result.exit_code == 2 and not out.exists()


def test_cli_refuses_a_job_with_no_layout(tmp_path: Path) -> None:
    """A precondition rule ignored by the spec still stops the report, with the refusal."""
    spec = tmp_path / "ignored.yaml"
    spec.write_text(
        spec_text({"parallelism": {"data": 8}, "rules": {"ignore": ["PLC001"]}}), encoding="utf-8"
    )
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(spec), "-o", str(out)])
    assert result.exit_code == 1
    assert "PLC001" in result.output and "cannot plan" in result.output
    assert not out.exists()


def test_report_help_snapshot(snapshot: SnapshotAssertion) -> None:
    result = CliRunner().invoke(main, ["report", "--help"], prog_name="planc", terminal_width=100)
    assert result.exit_code == 0
    assert result.output == snapshot


# --- planc search --report -------------------------------------------------------------------

SEARCH_SPEC = """\
version: 1
name: "llama3-8b <search> & co"
model: {preset: llama3-8b}
hardware: {gpu: h100-sxm, nodes: 1}
training: {seq_len: 8192, global_batch: 64, attention: flash}
"""
SEARCH_ALLOW = (
    "tensor=1,2,4",
    "pipeline=1,2",
    "context=1",
    "virtual_stages=1",
    "micro_batch=1,2",
    "recompute=selective,full",
    # The dense axes only (issue 28's axes at one value each), so that the top 200 holds
    # every feasible candidate.
    "precision=bf16",
    "order=tp-cp-dp-pp",
    "data_shard=all",
)


def searched(path: Path, top: int = 200) -> tuple[str, Any, Any]:
    """A search of `path` in the SEARCH_ALLOW space; top 200: every feasible candidate."""
    from planc.cli.search import Request, setup_of
    from planc.search.output import describe
    from planc.search.run import search

    loaded = load_path(str(path))
    assert loaded.job is not None
    setup = setup_of(loaded, Request(str(path), top, allow=SEARCH_ALLOW))
    return describe(loaded.job), setup, search(setup, top)


@pytest.fixture(scope="module")
def search_spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("search") / "search.yaml"
    path.write_text(SEARCH_SPEC, encoding="utf-8")
    return path


def test_explorer_embeds_every_ranked_candidate(search_spec: Path) -> None:
    from planc.report.explorer import explorer_page

    heading, setup, result = searched(search_spec)
    ranked = len(result.results)
    assert ranked == result.feasible > 12
    page = explorer_page(heading, setup, result)
    assert page == explorer_page(heading, setup, result)
    assert page.count("<section class='cand'") == ranked
    for axis in ("tensor", "pipeline", "zero_stage", "micro_batch", "recompute"):
        assert f"<select id='axis-{axis}'" in page
    assert "<select id='axis-context'" not in page  # one value: no control
    data = json.loads(page.split("id='planc-candidates'>", 1)[1].split("</script>", 1)[0])
    assert [c["place"] for c in data["candidates"]] == list(range(1, ranked + 1))
    best = result.results[0]
    assert data["candidates"][0]["step_time_s"] == best.metrics.step_time_s
    # the text report's order line, above the ranking table
    (line, _) = order_lines(result)
    assert line.startswith("order: ") and f"<h2>Ranking</h2><p class='note'>{esc(line)}</p>" in page
    assert "&lt;search&gt; &amp; co" in page and "<search>" not in page
    assert len(page.encode()) < MAX_PAGE_BYTES


def test_search_report_option(search_spec: Path, tmp_path: Path) -> None:
    out = tmp_path / "explore.html"
    allow = [arg for value in SEARCH_ALLOW for arg in ("--allow", value)]
    result = CliRunner().invoke(
        main, ["search", str(search_spec), *allow, "--top", "5", "--report", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert f"wrote the search report to {out}" in result.output
    assert out.read_text(encoding="utf-8").count("<section class='cand'") == 5


# --- headless Chromium ------------------------------------------------------------------------

PAGE_FLAGS = (*CHROMIUM_FLAGS, "--hide-scrollbars", "--enable-logging=stderr", "--v=0")


def chromium(page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    command = [CHROMIUM, *PAGE_FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def with_script(page: str, script: str) -> str:
    """`page` with `<script>script</script>` run last, its hash added to the page's
    Content-Security-Policy (which otherwise runs only the page's own scripts)."""
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    policy = "script-src &#x27;"
    assert page.count(policy) == 1
    page = page.replace(policy, f"{policy}sha256-{digest}&#x27; &#x27;", 1)
    return page.replace("</body>", f"<script>{script}</script></body>", 1)


def console_errors(stderr: str) -> list[str]:
    """Console messages and uncaught exceptions Chromium logged for the page."""
    return [line for line in stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]


def png_colours(path: Path, rows: int = 400) -> set[tuple[int, ...]]:
    """Distinct pixel colours of the first `rows` rows of an 8-bit RGB or RGBA PNG (zlib and
    struct only: the five PNG filters undone row by row)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour in (2, 6), (depth, colour)
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    previous = np.zeros(stride, dtype=np.int64)
    colours: set[tuple[int, ...]] = set()
    for y in range(min(rows, height)):
        kind = raw[y * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int64)
        if kind == 0:
            out = line
        elif kind == 2:
            out = (line + previous) % 256
        elif kind == 1:
            out = np.cumsum(line.reshape(-1, bpp), axis=0).reshape(-1) % 256
        else:
            row = line.tolist()
            up = previous.tolist()
            for i in range(stride):
                left = row[i - bpp] if i >= bpp else 0
                upper_left = up[i - bpp] if i >= bpp else 0
                if kind == 3:
                    row[i] = (row[i] + (left + up[i]) // 2) % 256
                else:
                    guess = left + up[i] - upper_left
                    pa, pb, pc = abs(guess - left), abs(guess - up[i]), abs(guess - upper_left)
                    pick = left if pa <= pb and pa <= pc else up[i] if pb <= pc else upper_left
                    row[i] = (row[i] + pick) % 256
            out = np.array(row, dtype=np.int64)
        colours.update(map(tuple, out.reshape(-1, bpp)[:, :3].tolist()))
        previous = out
    return colours


@needs_chromium
def test_console_errors_are_caught(tmp_path: Path) -> None:
    """The console check itself can fail: a page that throws is reported."""
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><p>x</p><script>throw new Error('planc-broken')</script>")
    done = chromium(page, tmp_path / "profile", "--dump-dom")
    assert any("planc-broken" in line for line in console_errors(done.stderr)), done.stderr


@needs_chromium
@pytest.mark.parametrize("spec", [SMALL, LARGE], ids=lambda p: p.stem)
def test_page_renders_in_chromium(spec: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(page_of(spec), encoding="utf-8")
    dom = chromium(page, tmp_path / "dom", "--dump-dom")
    assert dom.returncode == 0, dom.stderr
    assert console_errors(dom.stderr) == []
    for marker in ('id="memory"', 'id="pipeline"', 'id="placement"', 'class="chart gantt"'):
        assert marker in dom.stdout
    assert 'data-js="on"' in dom.stdout  # the script ran
    shot = tmp_path / "shot.png"
    done = chromium(page, tmp_path / "shot", f"--screenshot={shot}", "--window-size=1280,2000")
    assert done.returncode == 0 and shot.exists(), done.stderr
    assert console_errors(done.stderr) == []
    assert len(png_colours(shot)) > 16


def test_png_colours_reads_a_single_colour_image(tmp_path: Path) -> None:
    """The blank-screenshot check on a PNG made here: one colour is one colour."""
    width, height = 5, 3
    raw = b"".join(b"\x00" + b"\x10\x20\x30" * width for _ in range(height))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
    path = tmp_path / "one.png"
    path.write_bytes(png)
    assert png_colours(path) == {(16, 32, 48)}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


@needs_chromium
def test_explorer_controls_pick_a_candidate(search_spec: Path, tmp_path: Path) -> None:
    """Choosing a value shows the fastest candidate that has it (the script only picks)."""
    from planc.report.explorer import explorer_page, shown

    heading, setup, result = searched(search_spec)
    choose = "full"
    values = [{k: shown(v) for k, v in result.values(r).items()} for r in result.results]
    # The rule the script follows: among candidates with the chosen value, the most other
    # values as the controls show them (those of #1), then the best place.
    with_choice = [
        (place, v) for place, v in enumerate(values, start=1) if v["recompute"] == choose
    ]
    want = min(with_choice, key=lambda pv: (-sum(pv[1][a] == values[0][a] for a in pv[1]), pv[0]))[
        0
    ]
    poke = (
        "var s = document.getElementById('axis-recompute'); s.value = '"
        + choose
        + "'; s.dispatchEvent(new Event('change'));"
    )
    page = tmp_path / "explore.html"
    page.write_text(with_script(explorer_page(heading, setup, result), poke), "utf-8")
    dom = chromium(page, tmp_path / "profile", "--dump-dom")
    assert console_errors(dom.stderr) == []
    visible = re.findall(r'<section class="cand" id="cand-(\d+)">', dom.stdout)
    assert visible == [str(want)], visible


@needs_chromium
def test_hovering_a_stage_highlights_it_everywhere(tmp_path: Path) -> None:
    """The page's script: pointing at stage 1 in one chart marks stage 1 in every chart."""
    poke = (
        "document.querySelector('.stage-bar[data-stage=\"1\"] rect')"
        ".dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));"
    )
    page = tmp_path / "report.html"
    page.write_text(with_script(page_of(LARGE), poke), encoding="utf-8")
    dom = chromium(page, tmp_path / "profile", "--dump-dom")
    assert console_errors(dom.stderr) == []
    assert re.search(r"<body[^>]*class=\"focus\"", dom.stdout)
    marked = re.findall(
        r'data-stage="(\d+)"[^>]*class="[^"]*\bhl\b|class="[^"]*\bhl\b[^"]*"[^>]*data-stage="(\d+)"',
        dom.stdout,
    )
    stages = {a or b for a, b in marked}
    assert stages == {"1"}
    assert len(marked) > plan_of(LARGE).world // plan_of(LARGE).layout.p  # every GPU of stage 1
