"""Strings from input cannot forge lines or markup (issue 30 item 11): a line break in a key of
a downloaded config.json, a rope_scaling type, a file name or a GPU name writes no line of its
own into text output (none that GitHub Actions would take for a `::error` workflow command),
and `diff --format markdown` shows file and GPU names as text, not as links, images, HTML,
code or @mentions. Expected outputs are written out by hand from GitHub's and CommonMark's
rules."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from planc.cli.main import main
from planc.outputs import escape

from conftest import example_data

ROOT = Path(__file__).resolve().parent.parent
HF = ROOT / "tests" / "data" / "hf"
PLAIN = {"NO_COLOR": "1", "GITHUB_ACTIONS": ""}
FORGED = "\n::error file=forged.yaml,line=1::forged"
WJ = "\u2060"  # word joiner


def planc(folder: Path, *args: str) -> tuple[int, str]:
    here = os.getcwd()
    os.chdir(folder)
    try:
        result = CliRunner().invoke(main, list(args), env=PLAIN)
    finally:
        os.chdir(here)
    return result.exit_code, result.output


def write_spec(folder: Path, data: dict[str, Any], name: str = "spec.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def hf_spec(folder: Path, config: dict[str, Any]) -> Path:
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    data = example_data("llama3-8b-1node.yaml")
    data["model"] = {"hf_config": "config.json"}
    return write_spec(folder, data)


def llama_config() -> dict[str, Any]:
    config: dict[str, Any] = json.loads((HF / "llama3-8b" / "config.json").read_text("utf-8"))
    return config


def custom_gpu(name: str) -> dict[str, Any]:
    data = example_data("llama3-8b-1node.yaml")
    data["hardware"] = {
        "gpu": {"name": name, "memory_gb": 80, "bf16_tflops": 989},
        "nodes": 1,
        "intra_node": {"bandwidth_gbs": 450, "latency_us": 2},
        "inter_node": {"bandwidth_gbs": 50, "latency_us": 5},
    }
    return data


def assert_no_forged_line(out: str) -> None:
    assert not [line for line in out.splitlines() if line.startswith("::error file=forged")], out


# ----------------------------------------------------------------------------- text and github


@pytest.mark.parametrize(
    "where",
    ["a key", "a rope_scaling type"],
)
def test_a_line_break_in_a_hf_config_stays_in_its_finding(tmp_path: Path, where: str) -> None:
    config = llama_config()
    if where == "a key":
        config["x" + FORGED] = 1
    else:
        config["rope_scaling"] = {"rope_type": "y" + FORGED, "factor": 8.0}
    spec = hf_spec(tmp_path, config)
    code, text = planc(tmp_path, "check", "spec.yaml")
    assert code == 0
    (line,) = [line for line in text.splitlines() if "forged" in line]
    assert line.startswith("spec.yaml:") and line.count(":") >= 4
    assert "\\n::error file=forged.yaml,line=1::forged" in line
    code, github = planc(tmp_path, "check", "--format", "github", str(spec.name))
    (annotation,) = [line for line in github.splitlines() if "forged" in line]
    # GitHub's escaping of workflow command data: LF as %0A (actions/toolkit escapeData).
    assert annotation.startswith("::notice file=spec.yaml,line=")
    assert "%0A::error file=forged.yaml,line=1::forged" in annotation
    assert_no_forged_line(text + github)


def test_a_line_break_in_a_file_name_stays_on_its_line(tmp_path: Path) -> None:
    data = example_data("llama3-8b-1node.yaml")
    data["parallelism"]["tensor"] = 3  # PLC001 and more: findings that name the file
    name = "bad" + FORGED + ".yaml"
    write_spec(tmp_path, data, name)
    code, text = planc(tmp_path, "check", name)
    assert code == 1
    heads = [line for line in text.splitlines() if " error PLC" in line]
    assert heads and all(
        line.startswith("bad\\n::error file=forged.yaml,line=1::forged.yaml:") for line in heads
    )
    code, github = planc(tmp_path, "check", "--format", "github", name)
    # In a property, also ':' as %3A and ',' as %2C (actions/toolkit escapeProperty).
    prop = "file=bad%0A%3A%3Aerror file=forged.yaml%2Cline=1%3A%3Aforged.yaml,line="
    annotations = [line for line in github.splitlines() if line.startswith("::error ")]
    assert annotations and all(line.startswith(f"::error {prop}") for line in annotations)
    code, diffed = planc(tmp_path, "diff", name, name)
    assert diffed.splitlines()[0] == (
        "planc diff bad\\n::error file=forged.yaml,line=1::forged.yaml → "
        "bad\\n::error file=forged.yaml,line=1::forged.yaml"
    )
    assert_no_forged_line(text + github + diffed)


def test_a_line_break_in_a_gpu_name_is_refused_on_one_line(tmp_path: Path) -> None:
    write_spec(tmp_path, custom_gpu("g" + FORGED))
    code, text = planc(tmp_path, "check", "spec.yaml")
    assert code == 1
    (head,) = [line for line in text.splitlines() if "PLC110" in line]
    assert "hardware.gpu.name" in head
    code, github = planc(tmp_path, "check", "--format", "github", "spec.yaml")
    code, diffed = planc(tmp_path, "diff", "spec.yaml", "spec.yaml")
    assert_no_forged_line(text + github + diffed)


def test_an_error_line_is_one_line(tmp_path: Path) -> None:
    code, out = planc(tmp_path, "diff", "missing" + FORGED + ".yaml", "other.yaml")
    assert code == 2
    assert out.count("\n") == 1 and out.startswith("planc diff: error: ")
    assert "missing\\n::error file=forged.yaml" in out


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("a\nb", "a\\nb"),
        ("a\r\nb", "a\\r\\nb"),
        ("a\tb", "a\\tb"),
        ("a\u2028b\u2029c\x85d\x0be\x0cf", "a\\u2028b\\u2029c\\u0085d\\u000be\\u000cf"),
        ("\x1b[2J\u202e", "\ufffd[2J\ufffd"),
        ("h100-sxm, 80.00 GiB", "h100-sxm, 80.00 GiB"),
    ],
)
def test_text_shows_every_line_break_as_an_escape(raw: str, shown: str) -> None:
    assert escape.line(raw) == shown
    assert len(escape.line(raw).splitlines()) == 1


# ----------------------------------------------------------------------------- markdown

GPU_PAYLOAD = "`x`[l](http://e.io)![i](e.png)@octocat<b>b</b>"
# CommonMark: a backslash before ASCII punctuation makes it literal; [ ] < > ` | are the ones
# that open links, images, HTML, code and cells. A word joiner (U+2060) after '@' and inside
# '://' keeps GitHub from mentioning or autolinking.
GPU_SHOWN = "\\`x\\`\\[l\\](http:" + WJ + "//e.io)!\\[i\\](e.png)@" + WJ + "octocat\\<b\\>b\\</b\\>"


def test_markdown_diff_shows_a_gpu_name_as_text(tmp_path: Path) -> None:
    write_spec(tmp_path, custom_gpu(GPU_PAYLOAD), "new.yaml")
    write_spec(tmp_path, example_data("llama3-8b-1node.yaml"), "old.yaml")
    code, out = planc(tmp_path, "diff", "--format", "markdown", "old.yaml", "new.yaml")
    assert code == 0, out
    (row,) = [line for line in out.splitlines() if line.startswith("| GPU |")]
    assert row == f"| GPU | h100-sxm, 79.65 GiB | {GPU_SHOWN}, 74.51 GiB |  |"
    assert "@octocat" not in out and "](" not in out.replace("\\](", "")
    assert "<b>" not in out and "http://" not in out


@pytest.mark.parametrize(
    ("name", "span"),
    [
        ("plain.yaml", "`plain.yaml`"),
        ("a`b.yaml", "``a`b.yaml``"),
        ("`[x](e.io)`.yaml", "`` `[x](e.io)`.yaml ``"),
    ],
)
def test_markdown_diff_shows_a_file_name_as_code(tmp_path: Path, name: str, span: str) -> None:
    write_spec(tmp_path, example_data("llama3-8b-1node.yaml"), name)
    code, out = planc(tmp_path, "diff", "--format", "markdown", name, name)
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == f"### planc diff: {span}"
    assert lines[2] == f"{span} → {span}: no new errors"


def test_markdown_escapes_mentions_links_and_html() -> None:
    assert escape.markdown("@team see www.x.io, <img src=x> | [a](b)") == (
        "@" + WJ + "team see www" + WJ + ".x.io, \\<img src=x\\> \\| \\[a\\](b)"
    )
    assert escape.markdown("stage 0 (1,024 GPUs) 12.5%") == "stage 0 (1,024 GPUs) 12.5%"
