"""Blackwell Ultra presets (`b300`, `gb300-nvl72`): the datasheets' capacities and peaks, and
efficiencies that are the B200's and GB200's (no measurement of Blackwell Ultra is published).

Expected values are the vendor numbers typed here from the datasheets (GB300 NVL72 rack: 20 TB
HBM3e and 1,080 / 360 / 180 PFLOPS dense FP4 / FP8 / BF16 over 72 GPUs; HGX B300: 108 PFLOPS
dense FP4 over 8 GPUs), not read back from gpus.json.
"""

from __future__ import annotations

from typing import Any

import pytest

from planc.perf.compute import work_time_s
from planc.perf.inputs import device_of, efficiency_of, ep_processor_usage, quantized_device
from planc.perf.ops import OpCost, cast_kernels
from planc.plannable import Plannable
from planc.presets import gpu_preset
from planc.presets.efficiency import for_gpu, to_json
from planc.vocab import DType

from conftest import hybridep_job


def _job(gpu: str, nodes: int, **training: Any) -> Plannable:
    """Qwen3-30B-A3B with HybridEP over EP 8 on `gpu`, its all-to-all overlapped (combined 1F1B)."""
    return hybridep_job(8, nodes, "combined-1f1b", gpu, **training)


@pytest.mark.parametrize(
    ("gpu", "nodes", "hbm_bytes", "per_node", "domain"),
    # The capacity each device reports (nvidia-smi memory.total, MiB): 284,208 on a GB300,
    # 275,040 on a B300 SXM6 AC.
    [("gb300-nvl72", 2, 284_208 * 2**20, 4, 72), ("b300", 1, 275_040 * 2**20, 8, 8)],
)
def test_capacity_is_the_devices_and_layout_the_datasheets(
    gpu: str, nodes: int, hbm_bytes: int, per_node: int, domain: int
) -> None:
    hw = _job(gpu, nodes).cluster
    assert hw.gpu.memory_bytes == hbm_bytes
    assert hw.gpus_per_node == per_node
    assert hw.nvlink_domain == domain  # the preset's domain, whatever the job's size


def test_peaks_are_the_datasheets() -> None:
    gb300 = _job("gb300-nvl72", 2).cluster.gpu.peaks
    assert [gb300[d] for d in (DType.BF16, DType.FP8, DType.FP4)] == [
        180e3 / 72, 360e3 / 72, 1080e3 / 72
    ]
    b300 = _job("b300", 1).cluster.gpu.peaks
    assert b300[DType.FP4] == 108e3 / 8
    # As the B200's: Blackwell Ultra adds FP4 throughput only.
    assert (b300[DType.BF16], b300[DType.FP8]) == (2250, 4500)


@pytest.mark.parametrize(
    ("ultra", "base", "fitted"),
    [("gb300-nvl72", "gb200-nvl72", True), ("b300", "b200", False)],
)
def test_what_blackwell_ultra_takes_from_blackwell(ultra: str, base: str, fitted: bool) -> None:
    # Vector, flash-attn's attention and links are the base GPU's; the 16-bit e_max is the
    # base's for the B300 (derived) and its own fit for the GB300 (validation/runs.json declares
    # one run).
    # FP8 attention is Blackwell Ultra's own measurement (cudnn-frontend's GB300 rows): with the
    # matmuls in FP8 its faster softmax exponent shows, 1.39-1.49x BF16 forward at 4k-32k
    # against the GB200's 1.22-1.36x.
    own = ("source", "cudnn_fp8_by_seq", "cudnn_mxfp8_by_seq")
    own += ("cudnn_fp8_d192_by_seq", "cudnn_mxfp8_d192_by_seq")
    # and cuDNN's BF16 kernel, measured on a GB300 (efficiency.json gb300-nvl72's source), at
    # head dimension 128 and 64 (cudnn-frontend's gpt_oss rows)
    own += ("cudnn_by_seq", "cudnn_forward", "cudnn_backward", "cudnn_d64_by_seq")
    own += ("cudnn_d64_w128_by_seq",)
    mine, theirs = to_json(for_gpu(ultra)), to_json(for_gpu(base))
    for section in ("vector", "flash_attention"):
        assert {k: v for k, v in mine[section].items() if k not in own} == {
            k: v for k, v in theirs[section].items() if k not in own
        }
    # HBM: Blackwell Ultra's own measured efficiency (a BF16 Triton triad on a GB300, 7,140 GB/s
    # of 8,000, meta-pytorch/KernelAgent oink/benchmarks) against the B200's 0.90 (NVIDIA's CUB
    # transform benchmarks), and the same fixed time per kernel, B½ over the part's own
    # bandwidth (the B200's bus is narrower than the B300's: gpus.json's sources)
    assert mine["hbm"]["efficiency"] == round(7140 / 8000, 2)
    assert theirs["hbm"]["efficiency"] == 0.9
    fixed = [
        j["hbm"]["half_bytes"] / gpu_preset(g)["memory_bandwidth_gbs"]
        for j, g in ((mine, ultra), (theirs, base))
    ]
    assert fixed[0] == pytest.approx(fixed[1], rel=1e-3)
    ultra_fp8 = mine["flash_attention"]["cudnn_fp8_by_seq"]["forward"]
    base_fp8 = theirs["flash_attention"]["cudnn_fp8_by_seq"]["forward"]
    assert all(u > b for u, b in zip(ultra_fp8[1:], base_fp8[1:], strict=True))
    assert mine["gemm"]["half_dim"] == theirs["gemm"]["half_dim"]
    assert (mine["gemm"]["peak_fraction"] != theirs["gemm"]["peak_fraction"]) is fitted
    assert mine["gemm"]["sms"] == 160
    for link in ("nvlink", "network"):
        assert mine["network"][link]["efficiency"] == theirs["network"][link]["efficiency"]


# TE's GEMM benchmark on a B300 (docs/examples/gemm_profiling, pre-quantized, kernels only): the
# 12 GEMMs of a hidden-4096, intermediate-16,384 layer at M = 15,872 tokens, milliseconds per
# layer for fprop, dgrad and wgrad together.
TE_B300_MS = {"fp8_current": 6.812, "mxfp8": 7.161, "nvfp4": 3.764}
TE_FLOP = 3 * 2 * 15_872 * (4096 * 12_288 + 4096 * 4096 + 2 * 4096 * 16_384)


@pytest.mark.parametrize("gpu", ["b300", "gb300-nvl72"])
def test_nvfp4_reaches_the_fraction_of_its_peak_te_measured_against_fp8(gpu: str) -> None:
    # Fractions of the B300's FP4 (13.5 PFLOPS) and FP8 (4.5) peaks the kernels reached.
    fp4 = TE_FLOP / (TE_B300_MS["nvfp4"] * 1e-3) / 13_500e12
    fp8 = TE_FLOP / (TE_B300_MS["fp8_current"] * 1e-3) / 4_500e12
    curves = for_gpu(gpu).gemm_by_dtype
    assert curves[DType.FP4].peak_fraction / curves[DType.FP8].peak_fraction == pytest.approx(
        fp4 / fp8, abs=1e-3
    )


# The datasheets' dense FP4 and FP8 peaks of each Blackwell part, PFLOPS (B200 HGX 72/36 over 8
# GPUs; GB200 NVL72 720/360 over 72; B300 HGX 108/36 over 8; GB300 NVL72 1,080/360 over 72).
FP4_FP8_PEAKS = {
    "b200": (9.0, 4.5),
    "gb200-nvl72": (10.0, 5.0),
    "b300": (13.5, 4.5),
    "gb300-nvl72": (15.0, 5.0),
}


def _fp4_over_fp8(gpu: str) -> float:
    """How many times as fast as its per-tensor FP8 GEMMs planc runs `gpu`'s NVFP4 ones."""
    fp4, fp8 = FP4_FP8_PEAKS[gpu]
    curves = for_gpu(gpu).gemm_by_dtype
    return curves[DType.FP4].peak_fraction * fp4 / (curves[DType.FP8].peak_fraction * fp8)


@pytest.mark.parametrize("gpu", ["b200", "gb200-nvl72"])
def test_blackwell_nvfp4_gains_what_te_measured_on_blackwell_ultra(gpu: str) -> None:
    # Blackwell Ultra has 1.5 times Blackwell's FP4 rate per SM and clock and the same FP8 rate:
    # a Blackwell NVFP4 GEMM gains at most the 6.812/3.764 TE measured on a B300, and planc
    # takes that bound. Priced at the 16-bit curve's fraction of its 2x peak, it had gained 2.0.
    measured = TE_B300_MS["fp8_current"] / TE_B300_MS["nvfp4"]
    assert _fp4_over_fp8(gpu) == pytest.approx(measured, rel=2e-3)


def test_no_blackwell_part_gains_more_from_nvfp4_than_blackwell_ultra() -> None:
    ultra = TE_B300_MS["fp8_current"] / TE_B300_MS["nvfp4"]
    for gpu in FP4_FP8_PEAKS:
        assert _fp4_over_fp8(gpu) <= ultra * (1 + 2e-3), gpu


def test_mxfp8_gemms_run_at_te_s_measured_rate_of_per_tensor_ones_on_blackwell() -> None:
    # The quantized GEMMs' peak is the FP8 peak times the recipe's kernel rate: MXFP8's
    # block-scaled MMA at 6.812/7.161 of a per-tensor-scaled GEMM's, on every Blackwell GPU.
    rate = TE_B300_MS["fp8_current"] / TE_B300_MS["mxfp8"]
    for gpu in ("b200", "gb200-nvl72", "b300", "gb300-nvl72"):
        mx = quantized_device(_job(gpu, 2 if "nvl72" in gpu else 1, precision="fp8",
                                   fp8={"recipe": "mxfp8"}))
        cs = quantized_device(_job(gpu, 2 if "nvl72" in gpu else 1, precision="fp8",
                                   fp8={"recipe": "current"}))
        assert mx is not None and cs is not None
        assert mx.matrix_flops / cs.matrix_flops == pytest.approx(rate, abs=1e-3)


def test_a_fit_of_e_max_moves_the_quantized_curves_with_it() -> None:
    tables = for_gpu("gb300-nvl72")
    moved = tables.with_peak_fraction(tables.gemm.peak_fraction * 0.9)
    for dtype, curve in tables.gemm_by_dtype.items():
        assert moved.gemm_by_dtype[dtype].peak_fraction == pytest.approx(0.9 * curve.peak_fraction)


def test_hybridep_on_gb300_holds_32_of_its_160_sms() -> None:
    job = _job("gb300-nvl72", 2)
    assert ep_processor_usage(job, efficiency_of(job)) == pytest.approx(32 / 160)


# The same benchmark in autocast mode (te.Linear forwards: the input quantized for the GEMM and
# for a weight gradient, the weight for the GEMM, then the GEMM), per layer: its time minus the
# pre-quantized one is what the casts cost there.
TE_B300_AUTOCAST_MS = {"current": 9.147, "mxfp8": 8.984, "nvfp4": 6.453}
TE_B300_PREQUANT_MS = {"current": 6.812, "mxfp8": 7.161, "nvfp4": 3.764}
TE_M, TE_H, TE_I = 15_872, 4_096, 16_384
# (M, K, N) of the 12 GEMMs as the benchmark derives them: fprop, dgrad (K and N swap) and wgrad
# (M the contraction), each run as a te.Linear(K, N) forward on an M × K input.
TE_SHAPES = [
    (TE_M, TE_H, 3 * TE_H), (TE_M, TE_H, TE_H), (TE_M, TE_H, TE_I), (TE_M, TE_I, TE_H),
    (TE_M, 3 * TE_H, TE_H), (TE_M, TE_H, TE_H), (TE_M, TE_I, TE_H), (TE_M, TE_H, TE_I),
    (TE_H, TE_M, 3 * TE_H), (TE_H, TE_M, TE_H), (TE_H, TE_M, TE_I), (TE_I, TE_M, TE_H),
]


@pytest.mark.parametrize(
    ("recipe", "low", "high"),
    # planc prices the casts below TE's measured overhead; the bounds hold today's ratios
    # (0.79, 0.73, 0.68) with room, and fail if the cast model moves far either way. Part of
    # the gap may be te.Linear's host time (the smallest shape's CS autocast, 0.317 ms, is
    # slower than its BF16 GEMM), which planc does not price.
    [("current", 0.7, 1.0), ("mxfp8", 0.65, 1.0), ("nvfp4", 0.6, 1.0)],
)
def test_the_casts_cost_about_what_te_s_autocast_benchmark_adds(
    recipe: str, low: float, high: float
) -> None:
    precision = "fp4" if recipe == "nvfp4" else "fp8"
    job = _job("b300", 1, precision=precision, fp8={"recipe": recipe})
    q, eff, device = job.numerics.quantized, efficiency_of(job), device_of(job)
    assert q is not None
    seconds = 0.0
    for m, k, n in TE_SHAPES:
        # the input for the GEMM and the weight gradient (the recipe's usages), the weight once
        casts = [
            *cast_kernels(m * k, q, 2, q.reads, q.usages, 1.0),
            *cast_kernels(k * n, q, 2, q.reads, 1, 1.0),
        ]
        seconds += sum(work_time_s(OpCost("cast", "vector", w, w), w, device, eff) for w in casts)
    measured = (TE_B300_AUTOCAST_MS[recipe] - TE_B300_PREQUANT_MS[recipe]) * 1e-3
    assert low <= seconds / measured <= high
