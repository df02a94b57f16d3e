"""The h100-sxm-hbm2e preset: the 96 GB HBM2e H100 SXM at 500 W of torchtitan's December 2024
benchmark (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md), issue 24."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planc.perf.compute import Device, work_time_s
from planc.perf.ops import OpCost, Work
from planc.presets import gpu_preset
from planc.presets.efficiency import for_gpu
from planc.vocab import DType

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
    # The nominal peak is the SXM5's, as the benchmark's own MFU takes it; its clock at 500 W
    # enters through the efficiency tables (below).
    assert gpu["bf16_tflops"] == gpu_preset("h100-sxm")["bf16_tflops"] == 989


# NVIDIA H100 datasheet (2023): H100 NVL, BF16 1,671 TFLOPS with sparsity (835 dense) at a
# 350-400 W limit; H100 SXM5, 989 dense at 700 W. torchtitan: "between SXM and NVL", 500 W.
NVL_TFLOPS, NVL_WATTS = 835.0, 400.0
SXM_TFLOPS, SXM_WATTS = 989.0, 700.0
LIMIT_WATTS = 500.0


def _clock_ratio() -> float:
    at_limit = NVL_TFLOPS + (SXM_TFLOPS - NVL_TFLOPS) * (LIMIT_WATTS - NVL_WATTS) / (
        SXM_WATTS - NVL_WATTS
    )
    return at_limit / SXM_TFLOPS


def test_the_clock_ratio_is_the_power_interpolation_between_nvl_and_sxm() -> None:
    ratio = _clock_ratio()
    # 886.3 TFLOPS at 500 W; the cube law of dynamic power (P ∝ f³) gives 884 from the SXM5 alone.
    assert abs(ratio * SXM_TFLOPS - 886.33) < 0.01
    assert abs(ratio - (LIMIT_WATTS / SXM_WATTS) ** (1 / 3)) < 0.005
    # both bounds the benchmark names hold
    assert NVL_TFLOPS < ratio * SXM_TFLOPS < SXM_TFLOPS


def test_its_tables_are_the_h100_fit_at_its_clock_with_hbm_scaled() -> None:
    mine, h100 = EFFICIENCY["h100-sxm-hbm2e"], EFFICIENCY["h100-sxm"]
    ratio = _clock_ratio()
    # Every tensor-core rate (the GEMM curves, the attention kernels) and the vector peak is the
    # H100 SXM's times the clock ratio, to the four digits efficiency.json keeps.
    pairs = [
        (mine["gemm"]["peak_fraction"], h100["gemm"]["peak_fraction"]),
        (
            mine["gemm_by_dtype"]["fp8"]["peak_fraction"],
            h100["gemm_by_dtype"]["fp8"]["peak_fraction"],
        ),
        *(
            (mine["flash_attention"][key], h100["flash_attention"][key])
            for key in h100["flash_attention"]
            if key != "source"
        ),
    ]
    for own, sxm in pairs:
        # both kept to four digits: each rounding moves its value by up to 5e-5
        assert abs(own - sxm * ratio) <= 5e-5 * (1 + ratio)
    assert abs(mine["vector"]["tflops"] - h100["vector"]["tflops"] * ratio) <= 0.05
    # The fixed time per kernel's bytes: half_bytes = 5 MB · 2,400/2,039 (the A100 80GB's 5 MB
    # at 2,039 GB/s, the same fixed 2.7 µs per kernel) = 5.885 MB.
    assert abs(mine["hbm"]["half_bytes"] - 5e6 * 2400 / 2039) < 0.01e6
    # Everything else is the H100 SXM's: shape terms, SMs, tiles, HBM efficiency, the links.
    rates = ("source", "half_bytes", "peak_fraction", "tflops", "flash_attention")
    assert _without(mine, rates) == _without(h100, rates)
    # Both curves say they are the H100 fit's times a ratio, which is how a refit moves them
    # (planc.fitting.tables_for, Efficiency.with_peak_fraction).
    assert "fit's peak_fraction times 0.8962" in mine["gemm"]["source"]
    assert "fit's peak_fraction times" in mine["gemm_by_dtype"]["fp8"]["source"]
    moved = for_gpu("h100-sxm-hbm2e").with_peak_fraction(0.5)
    fp8 = mine["gemm_by_dtype"]["fp8"]["peak_fraction"]
    assert moved.gemm_by_dtype[DType.FP8].peak_fraction == pytest.approx(
        fp8 * 0.5 / mine["gemm"]["peak_fraction"]
    )


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
