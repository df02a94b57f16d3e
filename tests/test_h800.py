"""The H800 preset: an H100 SXM5 with NVLink cut to 400 GB/s bidirectional (issue 14)."""

from __future__ import annotations

import json
from pathlib import Path

from planc.presets import gpu_preset

EFFICIENCY = json.loads(
    (Path(__file__).resolve().parent.parent / "planc/presets/efficiency.json").read_text("utf-8")
)


def _without_sources(value: object) -> object:
    if isinstance(value, dict):
        return {k: _without_sources(v) for k, v in value.items() if k != "source"}
    return value


def test_h800_is_an_h100_with_slower_nvlink() -> None:
    h800, h100 = gpu_preset("h800"), gpu_preset("h100-sxm")
    # NVIDIA: 400 GB/s bidirectional NVLink per H800, 200 each way; the H100 SXM5 has 900.
    assert h800["intra_node"]["bandwidth_gbs"] == 400 / 2
    assert h100["intra_node"]["bandwidth_gbs"] == 900 / 2
    same = ("memory_gib", "bf16_tflops", "memory_bandwidth_gbs", "gpus_per_node", "inter_node")
    assert {key: h800[key] for key in same} == {key: h100[key] for key in same}
    # The H100 SXM's 81,559 MiB as the device reports it, and the datasheet's 3.35 TB/s.
    assert (h800["memory_gib"] * 1024, h800["memory_bandwidth_gbs"]) == (81_559, 3350)


def test_h800_efficiency_is_derived_from_h100() -> None:
    assert _without_sources(EFFICIENCY["h800"]) == _without_sources(EFFICIENCY["h100-sxm"])
    assert "DERIVED from h100-sxm" in EFFICIENCY["h800"]["source"]
