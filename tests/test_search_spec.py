"""`planc check` on a search spec (a `search:` section, no `parallelism:`): the input of `planc
search`, checked as such (issue 31). It used to fail PLC007 at degrees of 1, so a repository
keeping search specs failed its hook. Now: the input rules, and PLC069, whether a layout of
the search space fits in memory; the layout rules are left to planc search."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from planc.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "examples" / "llama3-70b-8x8.yaml"
GIB = 2**30


def search_spec(tmp_path: Path, name: str = "search.yaml", **changes: Any) -> Path:
    """Llama 3 70B on 8 × 8 H100 without its parallelism section, micro_batch and recompute
    left to the search, tensor narrowed to 4 or 8."""
    data: dict[str, Any] = yaml.safe_load(BASE.read_text("utf-8"))
    del data["parallelism"]
    for key in ("micro_batch", "recompute"):
        del data["training"][key]
    data["search"] = {"tensor": [4, 8]}
    for section, fields in changes.items():
        if fields is None:
            data.pop(section, None)
        else:
            data[section] = {**data.get(section, {}), **fields}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), "utf-8")
    return path


def check(*args: str) -> tuple[int, list[dict[str, Any]]]:
    result = CliRunner().invoke(main, ["check", "--format", "json", *args])
    return result.exit_code, json.loads(result.stdout)["files"][0]["findings"]


def test_a_search_spec_that_fits_passes_with_a_note(tmp_path: Path) -> None:
    spec = search_spec(tmp_path)
    code, findings = check(str(spec))
    assert code == 0
    (note,) = findings  # no PLC007 at degrees of 1, no layout rule at all
    assert (note["rule"], note["severity"], note["field"]) == ("PLC069", "info", "search")
    assert note["line"] == spec.read_text("utf-8").splitlines().index("search:") + 1
    assert "layout rules are checked by planc search" in note["message"]
    # The most parallel layout of the space, by hand: tensor ≤ 8 (search: [4, 8]), the world
    # 64 = 8 · 8 · 1 with pipeline 8 dividing the 80 layers; every saving on.
    named = "tensor 8, pipeline 8, context 1, ZeRO-3, recompute full, micro_batch 1"
    assert named in note["message"]
    # That layout, written out as a spec, passes planc's memory rule as any spec would.
    layout = search_spec(
        tmp_path,
        "layout.yaml",
        search=None,
        parallelism={"tensor": 8, "pipeline": 8, "sequence_parallel": True, "zero_stage": 3},
        training={"micro_batch": 1, "recompute": "full"},
    )
    assert "PLC007" not in {f["rule"] for f in check(str(layout))[1]}


def test_a_search_spec_no_layout_can_fit_is_an_error(tmp_path: Path) -> None:
    # Llama 3.1 405B on one node of 8 H100: its model states alone, 16 bytes a parameter (bf16
    # weights and gradients, fp32 master weights and two Adam moments), spread over all 8 GPUs
    # are 405.85e9 · 16 / 8 bytes = 755.9 GiB, ten times the 72 GiB usable; no layout fits.
    spec = search_spec(
        tmp_path,
        model={"preset": "llama3-405b"},
        hardware={"nodes": 1, "hosts": "gpu-{000..000}"},
    )
    code, findings = check(str(spec))
    assert code == 1
    (error,) = findings
    assert (error["rule"], error["severity"]) == ("PLC069", "error")
    assert error["message"].startswith("no layout of this search space fits in memory")
    found = re.search(r"need at least ([\d.]+) GiB", error["message"])
    assert found is not None
    assert float(found.group(1)) >= 405.85e9 * 16 / 8 / GIB
    assert "above 71.68 GiB usable" in error["message"]  # 90 % of the H100's 79.65 GiB


def test_plc069_can_be_ignored_and_input_rules_still_run(tmp_path: Path) -> None:
    spec = search_spec(tmp_path, rules={"ignore": ["PLC069"]})
    assert check(str(spec)) == (0, [])
    broken = search_spec(tmp_path, "typo.yaml", training={"seq_lenn": 8192})
    code, findings = check(str(broken))
    assert code == 1 and [f["rule"] for f in findings] == ["PLC108"]


def test_a_pin_outside_the_search_values_is_an_error(tmp_path: Path) -> None:
    spec = search_spec(tmp_path, training={"micro_batch": 2}, search={"micro_batch": [1, 4]})
    code, findings = check(str(spec))
    assert code == 1
    (error,) = findings
    assert error["rule"] == "PLC069" and "planc search cannot search it" in error["message"]
    assert "training.micro_batch is pinned to 2" in error["message"]


def test_a_spec_with_a_layout_and_a_search_section_is_checked_as_a_layout(
    tmp_path: Path,
) -> None:
    # parallelism: written: the layout rules judge it, search: or not.
    data: dict[str, Any] = yaml.safe_load(BASE.read_text("utf-8"))
    data["training"]["global_batch"] = 16  # PLC006: bubble 27 % at m = 8
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(data, sort_keys=False), "utf-8")
    data["search"] = {"tensor": [4, 8]}
    searched = tmp_path / "searched.yaml"
    searched.write_text(yaml.safe_dump(data, sort_keys=False), "utf-8")
    rules = [f["rule"] for f in check(str(searched))[1]]
    assert "PLC006" in rules and "PLC069" not in rules
    assert rules == [f["rule"] for f in check(str(plain))[1]]
