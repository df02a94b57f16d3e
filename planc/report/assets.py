"""The page's stylesheet and script, inlined into every report (the page fetches nothing).

Colours are CSS variables with a light and a dark set (`prefers-color-scheme`); print uses the
light set. The script only highlights one pipeline stage across the charts while the pointer is
over it: it computes nothing, and without it the page reads the same.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence

from planc.report.svg import Html, markup

CSS = """
:root{color-scheme:light dark;
--bg:#fbfbfa;--panel:#ffffff;--fg:#1d232a;--muted:#5d6873;--rule:#d9dee3;--grid:#e6e9ec;
--ok:#1f8a4c;--warn:#c77700;--bad:#c62828;--info:#2f6fb0;
--c-weights:#4e79a7;--c-gradients:#f28e2b;--c-optimizer:#e15759;--c-activations:#76b7b2;
--c-buffers:#59a14f;--c-reserve:#b8b0aa;
--c-fwd:#3f7cc0;--c-fwd2:#79a7da;--c-bwd:#2e9a6b;--c-bwd2:#73c39e;--c-rec:#1b5e40;--c-busy:#6d8fb0;
--idle:#f3e6d0;--idle-line:#e2c79a;--nvl:#eef1f5;--nvl-line:#b7c2cf;--tp:#1d232a;
--nvlink:#7b61c4;--network:#d9822b;--t-compute:#3f7cc0;--t-comm:#d9822b;--t-bubble:#e2c79a;--t-other:#9aa5b1;
--t-tp:#9467bd;--t-cp:#17a3a3;--t-ep:#d6456f;--t-host:#8c564b;--t-dp:#e8841a;--t-opt:#5c9e3f;--t-flush:#a6a31f}
@media (prefers-color-scheme:dark){:root{
--bg:#121519;--panel:#1a1f25;--fg:#e4e8ec;--muted:#9aa6b2;--rule:#2c343d;--grid:#262d35;
--ok:#4cc27e;--warn:#f0a33a;--bad:#ff6b6b;--info:#6aa8ec;
--c-weights:#6b96c8;--c-gradients:#f5a25a;--c-optimizer:#ee7a7c;--c-activations:#8fd0cb;
--c-buffers:#7cc06f;--c-reserve:#8d8580;
--c-fwd:#5b95d6;--c-fwd2:#8db8e6;--c-bwd:#3db383;--c-bwd2:#82d2ad;--c-rec:#1f7a52;--c-busy:#6d8fb0;
--idle:#3a3122;--idle-line:#5e4d2f;--nvl:#222a33;--nvl-line:#4a5663;--tp:#e4e8ec;
--nvlink:#9d86e0;--network:#f0a33a;--t-compute:#5b95d6;--t-comm:#f0a33a;--t-bubble:#8a7449;--t-other:#6b7682;
--t-tp:#b495dc;--t-cp:#3cc4c4;--t-ep:#ef6f93;--t-host:#c49c94;--t-dp:#f0a33a;--t-opt:#7cc06f;--t-flush:#d4d15a}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1040px;margin:0 auto;padding:24px 20px 48px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:0 0 6px}h3{font-size:15px;margin:14px 0 6px}
p{margin:6px 0}.muted{color:var(--muted)}code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
section{background:var(--panel);border:1px solid var(--rule);border-radius:10px;padding:16px 18px;margin:16px 0}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(180px,1fr));gap:10px;margin:14px 0}
.card{background:var(--panel);border:1px solid var(--rule);border-radius:10px;padding:10px 12px}
.card .k{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.04em}
.card .v{font-size:22px;font-weight:650}.card .s{font-size:12px;color:var(--muted)}
.badge{display:inline-block;padding:1px 8px;border-radius:999px;font-size:12px;font-weight:650;color:#fff}
.badge.ok{background:var(--ok)}.badge.warn{background:var(--warn)}.badge.bad{background:var(--bad)}.badge.info{background:var(--info)}
.gauge{height:10px;border-radius:5px;background:var(--grid);position:relative;margin-top:6px;overflow:hidden}
.gauge span{position:absolute;left:0;top:0;bottom:0;border-radius:5px}
.gauge .ok{background:var(--ok)}.gauge .warn{background:var(--warn)}.gauge .bad{background:var(--bad)}
.gauge i{position:absolute;top:0;bottom:0;width:2px;background:var(--fg)}
table{border-collapse:collapse;width:100%;margin:8px 0;font-size:13px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid var(--rule);vertical-align:top}
th{font-weight:600;color:var(--muted)}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.src{color:var(--muted);font-size:12px}
.swatch{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:6px;vertical-align:-1px}
.stage-legend,.legend{list-style:none;padding:0;margin:8px 0;display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12.5px}
svg.chart{width:100%;height:auto;display:block;margin:8px 0;font-family:inherit}
svg text{fill:var(--fg);font-size:12px}svg .axis,svg .legend{fill:var(--muted);font-size:11.5px}
svg .grid{stroke:var(--grid);stroke-width:1}svg .tick{stroke:var(--muted)}
.m-weights{fill:var(--c-weights);background:var(--c-weights)}.m-gradients{fill:var(--c-gradients);background:var(--c-gradients)}
.m-optimizer{fill:var(--c-optimizer);background:var(--c-optimizer)}.m-activations{fill:var(--c-activations);background:var(--c-activations)}
.m-buffers{fill:var(--c-buffers);background:var(--c-buffers)}.m-reserve{fill:var(--c-reserve);background:var(--c-reserve)}
svg .headroom{fill:var(--warn);fill-opacity:.13}
svg .hbm{stroke:var(--bad);stroke-width:2}svg .usable{stroke:var(--warn);stroke-width:1.5;stroke-dasharray:6 4}
svg .hbm-label{fill:var(--bad);font-weight:650}svg .usable-label{fill:var(--warn)}
svg .bar-outline{fill:none;stroke:var(--fg);stroke-opacity:.25}
svg .bar-outline.peak{stroke-opacity:1;stroke-width:2.5}svg .bar-outline.over{stroke:var(--bad);stroke-opacity:1}
svg .bar-label{font-size:11px;fill:var(--muted)}svg .peak-label{fill:var(--fg);font-weight:700;font-size:12px}
svg .bubble{fill:url(#planc-hatch)}svg .hatch-bg{fill:var(--idle)}svg .hatch-line{stroke:var(--idle-line);stroke-width:3}
svg .op-f{fill:var(--c-fwd)}svg .op-f.odd{fill:var(--c-fwd2)}svg .op-b{fill:var(--c-bwd)}svg .op-b.odd{fill:var(--c-bwd2)}
svg .op-r{fill:var(--c-rec)}svg .op-busy{fill:var(--c-busy)}svg .op-f,svg .op-b,svg .op-r{stroke:var(--panel);stroke-width:.6}
svg .op-label{fill:#fff;font-size:10px;pointer-events:none}
svg .nvl{fill:var(--nvl);stroke:var(--nvl-line);stroke-width:1}svg .tp{fill:none;stroke:var(--tp);stroke-width:2}
svg .host{fill:var(--muted);font-size:11px;font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
svg .gpu-label{fill:#fff;font-size:11px;font-weight:600;pointer-events:none}
.link-nvlink{fill:var(--nvlink);background:var(--nvlink)}.link-network{fill:var(--network);background:var(--network)}
svg .op-name{font-size:12px}svg .op-value{fill:var(--muted);font-size:12px}
.t-compute{fill:var(--t-compute);background:var(--t-compute)}.t-comm{fill:var(--t-comm);background:var(--t-comm)}
.t-bubble{fill:var(--t-bubble);background:var(--t-bubble)}.t-other{fill:var(--t-other);background:var(--t-other)}
.t-tp{fill:var(--t-tp);background:var(--t-tp)}.t-cp{fill:var(--t-cp);background:var(--t-cp)}.t-ep{fill:var(--t-ep);background:var(--t-ep)}
.t-host{fill:var(--t-host);background:var(--t-host)}
.t-dp{fill:var(--t-dp);background:var(--t-dp)}.t-opt{fill:var(--t-opt);background:var(--t-opt)}
.t-flush{fill:var(--t-flush);background:var(--t-flush)}
svg .step-label{fill:#fff;font-weight:650;font-size:12.5px}
.findings td.loc{width:34%;overflow-wrap:anywhere}.findings .fix{color:var(--muted)}
.note{font-size:12.5px;color:var(--muted)}
.focus [data-stage]:not(.hl){opacity:.35}
.side-old{fill:var(--c-fwd2);background:var(--c-fwd2)}.side-new{fill:var(--c-fwd);background:var(--c-fwd)}
table.diff td:first-child{white-space:pre}.diff-findings{margin:4px 0;padding-left:18px;font-size:13px}
.g-op-f{background:var(--c-fwd)}.g-op-f-odd{background:var(--c-fwd2)}.g-op-b{background:var(--c-bwd)}
.g-op-b-odd{background:var(--c-bwd2)}.g-op-r{background:var(--c-rec)}
.g-bubble{background:repeating-linear-gradient(45deg,var(--idle) 0 3px,var(--idle-line) 3px 5px)}
svg .cut{fill:var(--panel)}svg .cut-edge{stroke:var(--muted);stroke-dasharray:3 3}
svg .ep{fill:none;stroke:var(--t-ep);stroke-width:2;stroke-dasharray:4 3}
svg rect.gpu,svg text.host[data-node]{cursor:pointer}svg rect.gpu.picked{stroke:var(--fg);stroke-width:3}
svg rect.gpu:focus-visible,svg text.host[data-node]:focus-visible{outline:2px solid var(--fg);outline-offset:1px}
.js-only{display:none}html[data-js=on] .js-only{display:block}
.drill{border:1px solid var(--rule);border-radius:8px;padding:8px 12px;margin:8px 0;background:var(--bg)}
.drill h3{margin:2px 0 6px}.drill table{margin:0}.drill th{white-space:nowrap;width:1%}
.tip{position:fixed;z-index:10;pointer-events:none;max-width:420px;padding:6px 9px;border-radius:6px;
background:var(--panel);color:var(--fg);border:1px solid var(--rule);box-shadow:0 4px 14px rgba(0,0,0,.18);
font-size:12px;line-height:1.4;white-space:pre-line}
details>summary{cursor:pointer;color:var(--muted);margin:8px 0}
footer{font-size:12px;color:var(--muted);text-align:center;margin-top:24px}
@media print{:root{--bg:#fff;--panel:#fff;--fg:#000;--muted:#444;--rule:#bbb;--grid:#ddd;--idle:#f3e6d0;--idle-line:#e2c79a;--nvl:#eef1f5;--nvl-line:#b7c2cf;--tp:#000}
body{background:#fff}main{max-width:none;padding:0}section{break-inside:avoid;border-color:#bbb}
.focus [data-stage]:not(.hl){opacity:1}}
"""

# Highlight the stage under the pointer in every chart (data-stage attributes); nothing else.
JS = """
(function () {
  "use strict";
  var current = null;
  function mark(stage) {
    if (stage === current) { return; }
    current = stage;
    var marked = document.querySelectorAll("[data-stage]");
    for (var i = 0; i < marked.length; i++) {
      marked[i].classList.toggle("hl", marked[i].getAttribute("data-stage") === stage);
    }
    document.body.classList.toggle("focus", stage !== null);
  }
  document.addEventListener("mouseover", function (event) {
    var target = event.target && event.target.closest ? event.target.closest("[data-stage]") : null;
    mark(target ? target.getAttribute("data-stage") : null);
  });
  // Styled tooltips: each SVG <title> (what a page without scripts shows) becomes the text of
  // one floating box; the element keeps it as its accessible name.
  var tip = document.createElement("div");
  tip.className = "tip";
  tip.setAttribute("role", "tooltip");
  tip.hidden = true;
  document.body.appendChild(tip);
  var titles = document.querySelectorAll("svg title");
  for (var t = 0; t < titles.length; t++) {
    var owner = titles[t].parentNode;
    if (owner.tagName.toLowerCase() === "svg") { continue; }
    owner.setAttribute("data-tip", titles[t].textContent);
    owner.setAttribute("aria-label", titles[t].textContent);
    owner.removeChild(titles[t]);
  }
  function place(event) {
    var x = event.clientX + 14, y = event.clientY + 16;
    var width = tip.offsetWidth, height = tip.offsetHeight;
    if (x + width > window.innerWidth - 8) { x = Math.max(8, event.clientX - width - 14); }
    if (y + height > window.innerHeight - 8) { y = Math.max(8, event.clientY - height - 12); }
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }
  document.addEventListener("mouseover", function (event) {
    var owner = event.target && event.target.closest ? event.target.closest("[data-tip]") : null;
    if (!owner) { tip.hidden = true; return; }
    tip.textContent = owner.getAttribute("data-tip");
    tip.hidden = false;
    place(event);
  });
  document.addEventListener("mousemove", function (event) { if (!tip.hidden) { place(event); } });
  document.addEventListener("mouseleave", function () { tip.hidden = true; });
  document.documentElement.setAttribute("data-js", "on");
})();
"""

# The placement drill-down: a click on a GPU puts its rank's text (written by planc into the
# page's JSON) into the panel; nothing is computed here.
DRILL_JS = """
(function () {
  "use strict";
  var panel = document.getElementById("rank-panel");
  if (!panel) { return; }
  var data = JSON.parse(document.getElementById("planc-data").textContent).drill;
  var heading = document.getElementById("rank-title");
  var facts = document.getElementById("rank-facts");
  function fact(term, detail) {
    var row = document.createElement("tr");
    var th = document.createElement("th"), td = document.createElement("td");
    th.textContent = term;
    td.textContent = detail;
    row.appendChild(th);
    row.appendChild(td);
    facts.appendChild(row);
  }
  function pick(gpu) {
    var rank = gpu.getAttribute("data-rank"), r = data.ranks[rank];
    if (!r) { return; }
    var picked = document.querySelectorAll("rect.gpu.picked");
    for (var i = 0; i < picked.length; i++) { picked[i].classList.remove("picked"); }
    gpu.classList.add("picked");
    heading.textContent = "Rank " + rank + ": node " + r.node + " (" + r.host + "), GPU " +
      r.gpu + ", stage " + r.stage;
    panel.setAttribute("data-rank", rank);
    panel.removeAttribute("data-node");
    while (facts.firstChild) { facts.removeChild(facts.firstChild); }
    r.groups.forEach(function (g) { fact(g[0], g[1]); });
    fact("memory (stage " + r.stage + ")", data.stages[r.stage].memory);
    fact("traffic (stage " + r.stage + ")", data.stages[r.stage].traffic);
    panel.hidden = false;
  }
  function node(label) {
    var n = label.getAttribute("data-node"), r = data.nodes[n];
    if (!r) { return; }
    var picked = document.querySelectorAll("rect.gpu.picked");
    for (var i = 0; i < picked.length; i++) { picked[i].classList.remove("picked"); }
    heading.textContent = "Node " + n + " (" + r.host + "): " + r.ranks + ", stage " + r.stages;
    panel.setAttribute("data-rank", "");
    panel.setAttribute("data-node", n);
    while (facts.firstChild) { facts.removeChild(facts.firstChild); }
    fact("drawn for", r.what);
    r.groups.forEach(function (g) { fact(g[0], g[1]); });
    panel.hidden = false;
  }
  function choose(event) {
    var at = event.target && event.target.closest ? event.target : null;
    var gpu = at ? at.closest("rect[data-rank]") : null;
    var label = at ? at.closest("text[data-node]") : null;
    if (gpu) { pick(gpu); } else if (label) { node(label); }
    return Boolean(gpu || label);
  }
  document.addEventListener("click", choose);
  // A focused GPU or node name (tabindex 0, role button) picks with Enter or Space, as a button.
  document.addEventListener("keydown", function (event) {
    if ((event.key === "Enter" || event.key === " ") && choose(event)) { event.preventDefault(); }
  });
})();
"""


def _source(text: str) -> str:
    """A CSP source allowing exactly the inline element whose content is `text`."""
    digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")
    return f"'sha256-{digest}'"


def csp_meta(styles: Sequence[str], scripts: Sequence[str]) -> Html:
    """The page's Content-Security-Policy: nothing is fetched (default-src 'none', no base URL,
    no form target); the only stylesheets and scripts that run are the page's own `<style>` and
    `<script>` elements, each allowed by the hash of its content; style attributes (bar widths,
    stage colours) are allowed, and with nothing fetchable they cannot load anything. No inline
    event handler runs: the page's script attaches its listeners itself."""
    policy = (
        "default-src 'none'; base-uri 'none'; form-action 'none'; "
        f"style-src {' '.join(_source(s) for s in styles)}; "
        f"style-src-elem {' '.join(_source(s) for s in styles)}; "
        "style-src-attr 'unsafe-inline'; "
        f"script-src {' '.join(_source(s) for s in scripts)}"
    )
    return markup("<meta http-equiv='Content-Security-Policy' content=\"{}\">", policy)
