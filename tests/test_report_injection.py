"""The HTML report shows a stranger's spec without running it (issue 30 item 1): every string a
spec, a preset override, a hf_config file, a calibration file or a file name carries reaches the
page as text, never as markup, and the page's Content-Security-Policy lets nothing else run or
load. The page is read back with the standard library's HTML parser (and, in the last tests,
with headless Chromium), not with planc's own escaping."""

from __future__ import annotations

import base64
import hashlib
import html
import http.server
import json
import re
import subprocess
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml

from planc.presets.efficiency import for_gpu, to_json
from planc.report import build_report

from conftest import CHROMIUM, CHROMIUM_FLAGS, example_data, needs_chromium

ROOT = Path(__file__).resolve().parent.parent
HF = ROOT / "tests" / "data" / "hf"

# Each would be live markup if printed as it is: an element with a handler, a fetch, the end of
# an attribute followed by a script, a quote that ends a single-quoted attribute.
PAYLOADS = (
    "<svg onload=\"document.title='PWNED'\">",
    "<img src=http://127.0.0.1:9/p.png>",
    "\"><script>document.title='PWNED'</script>",
    "' onmouseover='document.title=1' x='",
)
# A file name cannot hold '/': the same attacks without it.
FILE_PAYLOADS = (
    "<svg onload=\"document.title='PWNED'\">",
    "<img src=x onerror=\"document.title='PWNED'\">",
    "'><script>document.title='PWNED'<\\script>",
)

CUSTOM_GPU = {
    "hardware": {
        "gpu": {"name": "probe-gpu", "memory_gb": 80, "bf16_tflops": 989},
        "intra_node": {"bandwidth_gbs": 450, "latency_us": 2},
        "inter_node": {"bandwidth_gbs": 50, "latency_us": 5},
    }
}


class Page(HTMLParser):
    """The elements, attributes and text of a page, as a browser's tokenizer sees them."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str]] = []
        self.text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes += [(name, value or "") for name, value in attrs]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in overlay.items():
        out[key] = (
            merge(out[key], value)
            if isinstance(value, dict) and isinstance(out.get(key), dict)
            else value
        )
    return out


def write_spec(folder: Path, overlay: dict[str, Any], name: str = "spec.yaml") -> Path:
    data = merge(example_data("llama3-8b-1node.yaml"), merge(CUSTOM_GPU, overlay))
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def strings(data: Any) -> list[str]:
    """Every string value in decoded JSON."""
    if isinstance(data, str):
        return [data]
    if isinstance(data, dict):
        return [s for value in data.values() for s in strings(value)]
    if isinstance(data, list):
        return [s for value in data for s in strings(value)]
    return []


def page_of(spec: Path) -> str:
    built = build_report(str(spec))
    assert built.page is not None, built.result.findings
    return built.page


def assert_inert(page: str, payload: str, shown: bool = True) -> None:
    """No element, attribute or script of the payload in the page; the payload as text where
    the page shows it (`shown`)."""
    parsed = Page(page)
    assert set(parsed.tags) <= {
        "html",
        "head",
        "meta",
        "title",
        "style",
        "body",
        "main",
        "header",
        "h1",
        "h2",
        "h3",
        "p",
        "span",
        "strong",
        "code",
        "div",
        "i",
        "section",
        "table",
        "thead",
        "tbody",
        "tfoot",
        "tr",
        "th",
        "td",
        "details",
        "summary",
        "ul",
        "li",
        "footer",
        "script",
        "svg",
        "g",
        "rect",
        "line",
        "text",
        "defs",
        "pattern",
    }, set(parsed.tags)
    assert parsed.tags.count("script") == 2  # the embedded numbers and the page's own script
    names = {name for name, _ in parsed.attributes}
    assert not any(name.startswith("on") for name in names), names
    assert not names & {"src", "href", "srcdoc", "action", "formaction"}, names
    visible = "".join(parsed.text) + "".join(value for _, value in parsed.attributes)
    if shown:
        assert payload in visible


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize(
    "field",
    ["name", "gpu name"],
)
def test_a_payload_in_a_spec_string_is_text(tmp_path: Path, field: str, payload: str) -> None:
    overlay: dict[str, Any] = (
        {"name": payload} if field == "name" else {"hardware": {"gpu": {"name": payload}}}
    )
    page = page_of(write_spec(tmp_path, overlay))
    assert_inert(page, payload)
    # The numbers read back unchanged: the payload is in the JSON as the spec wrote it.
    data = json.loads(re.search(r"id='planc-data'>(.*?)</script>", page, re.S).group(1))  # type: ignore[union-attr]
    assert any(payload in text for text in strings(data))


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_payload_in_a_host_name_draws_no_page(tmp_path: Path, payload: str) -> None:
    """Host names go into hostfiles, so PLC014 refuses markup in one before any page exists."""
    built = build_report(str(write_spec(tmp_path, {"hardware": {"hosts": [payload]}})))
    assert built.page is None
    assert "PLC014" in {f.rule for f in built.result.findings}


@pytest.mark.parametrize("payload", FILE_PAYLOADS)
def test_a_payload_in_the_spec_file_name_is_text(tmp_path: Path, payload: str) -> None:
    spec = write_spec(tmp_path, {}, name=payload + ".yaml")
    assert_inert(page_of(spec), payload + ".yaml")


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_payload_in_every_string_of_a_hf_config_is_text(tmp_path: Path, payload: str) -> None:
    config: dict[str, Any] = json.loads((HF / "llama3-8b" / "config.json").read_text("utf-8"))
    strings = {key: payload for key, value in config.items() if isinstance(value, str)}
    strings.pop("model_type")  # the one string planc needs: an unknown type is refused
    config.update(strings, architectures=[payload], **{payload: payload})
    folder = tmp_path / FILE_PAYLOADS[0]
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    overlay = {"model": {"hf_config": f"{FILE_PAYLOADS[0]}/config.json", "mlp": "swiglu"}}
    spec = write_spec(tmp_path, overlay)
    data = yaml.safe_load(spec.read_text("utf-8"))
    data["model"].pop("preset")
    spec.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    page = page_of(spec)
    assert_inert(page, payload)  # the unknown key is named in an info finding
    assert_inert(page, FILE_PAYLOADS[0], shown=False)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_payload_in_a_calibration_source_is_text(tmp_path: Path, payload: str) -> None:
    (tmp_path / FILE_PAYLOADS[0]).mkdir()
    calibration = tmp_path / FILE_PAYLOADS[0] / "cal.json"
    calibration.write_text(json.dumps(to_json(for_gpu("h100-sxm"), source=payload)), "utf-8")
    overlay = {"hardware": {"calibration": f"{FILE_PAYLOADS[0]}/cal.json"}}
    page = page_of(write_spec(tmp_path, overlay))
    assert_inert(page, payload, shown=False)


def test_the_page_allows_only_its_own_style_and_script(tmp_path: Path) -> None:
    """The policy: nothing fetched, no base URL or form target, scripts and stylesheets only by
    the hash of the page's own (recomputed here from the page's elements with hashlib)."""
    page = page_of(write_spec(tmp_path, {}))
    policy = html.unescape(
        re.search(r"<meta http-equiv='Content-Security-Policy' content=\"([^\"]*)\">", page).group(
            1
        )  # type: ignore[union-attr]
    )
    directives = {d.split()[0]: d.split()[1:] for d in policy.split("; ")}
    assert directives["default-src"] == ["'none'"]
    assert directives["base-uri"] == ["'none'"] and directives["form-action"] == ["'none'"]

    def hashed(text: str) -> str:
        return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"

    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    styles = re.findall(r"<style>(.*?)</style>", page, re.S)
    assert directives["script-src"] == [hashed(s) for s in scripts] and len(scripts) == 1
    assert directives["style-src"] == directives["style-src-elem"] == [hashed(s) for s in styles]
    assert directives["style-src-attr"] == ["'unsafe-inline'"]
    assert page.index("Content-Security-Policy") < page.index("<title>")
    assert not re.search(r"\son[a-z]+\s*=", page)  # no inline handler of the page's own


# ------------------------------------------------------------------------- headless Chromium

FLAGS = (*CHROMIUM_FLAGS, "--dump-dom")


class Listener:
    """An HTTP server on 127.0.0.1 that answers 404 and counts the requests made to it."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        seen = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.path)
                self.send_error(404)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port: int = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


def dom(page: str, folder: Path) -> str:
    """The DOM after load, as headless Chromium leaves it, of `page` opened from file://."""
    assert CHROMIUM is not None
    path = folder / "report.html"
    path.write_text(page, encoding="utf-8")
    command = [CHROMIUM, *FLAGS, f"--user-data-dir={folder / 'profile'}", path.as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    return done.stdout


def title_of(text: str) -> str:
    match = re.search(r"<title>(.*?)</title>", text, re.S)
    assert match is not None, text[:2000]
    return html.unescape(match.group(1))


def live(port: int) -> str:
    """Markup that sets document.title three ways and fetches from `port` twice."""
    return (
        "<svg onload=\"document.title='PWNED-SVG'\"></svg>"
        f"<img src='http://127.0.0.1:{port}/img.png'>"
        "<script>document.title='PWNED-SCRIPT'</script>"
        f"<img src=x onerror=\"fetch('http://127.0.0.1:{port}/fetch'); document.title='PWNED-IMG'\">"
    )


@needs_chromium
def test_chromium_runs_no_payload_of_the_spec(tmp_path: Path, listener: Listener) -> None:
    payload = live(listener.port)
    page = page_of(write_spec(tmp_path, {"name": payload[:200]}))
    gpu = page_of(write_spec(tmp_path, {"hardware": {"gpu": {"name": payload[:64]}}}))
    for text in (page, gpu):
        after = dom(text, tmp_path)
        assert title_of(after) == title_of(text)  # a payload run sets it to PWNED-...
    assert listener.requests == []


@needs_chromium
def test_chromium_the_policy_stops_markup_that_escaped_escaping(
    tmp_path: Path, listener: Listener
) -> None:
    """Even markup that reached the page unescaped (a future bug) neither runs nor fetches: the
    Content-Security-Policy forbids it. Without the policy the same page does both, which is
    how this test knows it can see a title change and a request."""
    page = page_of(write_spec(tmp_path, {}))
    injected = page.replace("<main>", "<main>" + live(listener.port), 1)
    after = dom(injected, tmp_path)
    assert "PWNED" not in title_of(after)
    assert listener.requests == []
    bare = re.sub(r"<meta http-equiv='Content-Security-Policy'[^>]*>", "", injected, count=1)
    assert title_of(dom(bare, tmp_path)).startswith("PWNED")
    assert listener.requests


def test_markup_is_made_only_by_the_escaping_function_and_the_page_templates() -> None:
    """Html (markup the page holds as it is) is constructed only in planc/report/svg.py (`esc`,
    `markup`, `join`) and, for the page's own stylesheet, scripts and JSON, in page.py: any
    other part of planc builds markup through `markup`, which escapes every plain str."""
    makers = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "planc").rglob("*.py")
        if re.search(r"\bHtml\(", path.read_text("utf-8"))
    )
    assert makers == ["planc/report/page.py", "planc/report/svg.py"]
