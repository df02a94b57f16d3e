"""The h100-sxm-hbm2e preset: the 96 GB HBM2e H100 SXM at 500 W of torchtitan's December 2024
benchmark (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md), issue 24."""

from __future__ import annotations

import json
from pathlib import Path

from planc.perf.compute import Device, work_time_s
from planc.perf.ops import OpCost, Work
from planc.presets import gpu_preset
from planc.presets.efficiency import for_gpu

ROOT = Path(__file__).resolve().parent.parent
EFFICIENCY = json.loads((ROOT / "planc/presets/efficiency.json").read_text("utf-8"))


def _without(value: object, keys: tuple[str, ...]) -> object:
    if isinstance(value, dict):
        return {k: _without(v, keys) for k, v in value.items() if k not in keys}
    return value


def test_the_preset_is_what_the_benchmark_states() -> None:
    gpu = gpu_preset("h100-sxm-hbm2e")
    # The benchmark: "96GB HBM2e with 2.4 TB/sec peak memory bandwidth", 8 per host on NVLink,
    # 400 Gb/s RDMA per GPU (50 GB/s).
    assert (gpu["memory_gib"], gpu["memory_bandwidth_gbs"]) == (96, 2400)
    assert gpu["inter_node"]["bandwidth_gbs"] == 400 / 8
    assert gpu["gpus_per_node"] == 8
    # Its peak is not known ("between SXM and NVL"): the SXM5's, an upper bound.
    assert gpu["bf16_tflops"] == gpu_preset("h100-sxm")["bf16_tflops"] == 989


def test_its_tables_are_the_h100_fit_with_hbm_scaled() -> None:
    mine, h100 = EFFICIENCY["h100-sxm-hbm2e"], EFFICIENCY["h100-sxm"]
    # Only the fixed time per kernel's bytes differ: half_bytes = 5 MB · 2,400/2,039 (the A100
    # 80GB's 5 MB at 2,039 GB/s, the same fixed 2.7 µs per kernel) = 5.885 MB.
    assert _without(mine, ("source", "half_bytes")) == _without(h100, ("source", "half_bytes"))
    assert abs(mine["hbm"]["half_bytes"] - 5e6 * 2400 / 2039) < 0.01e6
    assert "no published measurement" in mine["gemm"]["source"]


def test_a_memory_bound_kernel_takes_the_bandwidth_ratio_longer() -> None:
    # A 2 GB copy, far above half_bytes: t = B/(HBM·0.9·B/(B + B½)).
    moved = 2e9
    op = OpCost("copy", "vector", Work(0.0, moved), Work(0.0, 0.0))
    times = {}
    for name, hbm in (("h100-sxm", 3350e9), ("h100-sxm-hbm2e", 2400e9)):
        device = Device(989e12, hbm)
        half = {"h100-sxm": 8.21e6, "h100-sxm-hbm2e": 5.89e6}[name]
        expected = (moved + half) / (hbm * 0.9)
        times[name] = work_time_s(op, op.forward, device, for_gpu(name))
        assert abs(times[name] - expected) < 1e-9
    # the fixed time per kernel is about the same 2.7 µs on both (half_bytes rounded to three
    # figures), so the ratio is the bandwidths' to within 0.2 %
    assert abs(times["h100-sxm-hbm2e"] / times["h100-sxm"] / (3350 / 2400) - 1) < 2e-3
