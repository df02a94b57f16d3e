"""Screenshots of planc report's pages for docs/report.md: `python scripts/report_screenshots.py`
(from the repository root, with Debian's `chromium` on the PATH) rewrites docs/report-*.png.

Each page is built by planc from a shipped example (the search explorer from the Llama 3 70B
example with its parallelism left to the search), opened headless from file://, and, where a
shot shows one part of a page or a click, a small script (allowed by its hash in the page's
Content-Security-Policy) hides the other sections or clicks first.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
DOCS = ROOT / "docs"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
WIDTH = 1100


def with_script(page: str, script: str) -> str:
    """`page` with `script` run last, its hash added to the page's policy."""
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    policy = "script-src &#x27;"
    page = page.replace(policy, f"{policy}sha256-{digest}&#x27; &#x27;", 1)
    return page.replace("</body>", f"<script>{script}</script></body>", 1)


def only(*sections: str) -> str:
    """A script that hides every part of the page but `sections` (ids)."""
    keep = ",".join(f"'{s}'" for s in sections)
    return (
        f"var keep = [{keep}]; document.querySelectorAll('main > *').forEach(function (e) {{"
        " if (keep.indexOf(e.id) < 0) { e.style.display = 'none'; } });"
    )


def shoot(page: str, name: str, height: int, work: Path, *extra: str) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium is not installed (apt-get install -y chromium)")
    path = work / f"{name}.html"
    path.write_text(page, encoding="utf-8")
    out = DOCS / f"{name}.png"
    command = [
        chromium,
        *FLAGS,
        *extra,
        f"--user-data-dir={work / ('profile-' + name)}",
        f"--screenshot={out}",
        f"--window-size={WIDTH},{height}",
        path.as_uri(),
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=180)
    print(f"wrote {out.relative_to(ROOT)}")


def report(spec: str, compare: str | None = None) -> str:
    from planc.report import build_report

    built = build_report(str(EXAMPLES / spec), None if compare is None else str(EXAMPLES / compare))
    if built.page is None:
        sys.exit(f"{spec}: no page")
    return built.page.replace(str(EXAMPLES), "examples")


def explorer(work: Path) -> str:
    """The search explorer of the Llama 3 70B example, its parallelism left to the search."""
    from planc.cli.search import Request, setup_of
    from planc.report.explorer import explorer_page
    from planc.search.output import describe
    from planc.search.run import search
    from planc.spec.load import load_path

    data = yaml.safe_load((EXAMPLES / "llama3-70b-8x8.yaml").read_text(encoding="utf-8"))
    data.pop("parallelism")
    spec = work / "llama3-70b-search.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    loaded = load_path(str(spec))
    assert loaded.job is not None
    setup = setup_of(loaded, Request(str(spec), 200))
    return explorer_page(describe(loaded.job), setup, search(setup, 200))


def main() -> None:
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        shoot(report("gpt3-175b-1024xa100.yaml"), "report-gpt3-175b-1024xa100", 2000, work)
        shoot(
            report("gpt3-175b-gb200-nvl72.yaml"),
            "report-gpt3-175b-nvl72-dark",
            1400,
            work,
            "--blink-settings=preferredColorScheme=0",
        )
        shoot(
            with_script(report("invalid/PLC007/llama3-8b-1node.yaml"), only("memory")),
            "report-llama3-8b-oom",
            720,
            work,
        )
        click = (
            "document.querySelector('rect[data-rank=\"9\"]')"
            ".dispatchEvent(new MouseEvent('click', {bubbles: true}));"
        )
        shoot(
            with_script(report("mixtral-8x7b-64xh100.yaml"), only("placement") + click),
            "report-drill-down",
            900,
            work,
        )
        shoot(
            with_script(report("deepseek-v3-2048xh800.yaml"), only("pipeline", "communication")),
            "report-pipeline-whole-step",
            1100,
            work,
        )
        shoot(
            with_script(
                report("llama3-70b-8x8.yaml", "llama3-70b-64xh100-fp8.yaml"), only("compare")
            ),
            "report-compare",
            1300,
            work,
        )
        shoot(explorer(work), "report-search-explorer", 1100, work)


if __name__ == "__main__":
    main()
