"""The low-precision recipes of `planc/presets/fp8.json`: what each one keeps, moves and costs,
which GPU architectures and frameworks run it, and the reason given where one does not.

A recipe's numbers enter planc through `planc.dims.Numerics` (`Quantized`, built once per
job): memory (`planc.memory.fp8`), the communication schedule and the step model read them
there, never this table.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from functools import cache
from types import MappingProxyType
from typing import Any

from planc.record import record
from planc.vocab import DType, Fp8Recipe

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fp8.json")

# What a custom GPU is taken as, from the peaks it gives (fp8.json "architectures").
BLACKWELL, HOPPER, AMPERE = "blackwell", "hopper", "ampere"


@record
class SpeedupTable:
    """A measured speed-up of a whole quantized linear over its 16-bit GEMMs (fp8.json
    `linear_speedup`): `speedup[i][j][h]` at forward rows `m[i]`, inner `k[j]`, outputs `n[h]`."""

    m: tuple[int, ...]
    k: tuple[int, ...]
    n: tuple[int, ...]
    speedup: tuple[tuple[tuple[float, ...], ...], ...]
    source: str

    def at(self, m: float, k: float, n: float) -> float:
        """The speed-up at forward shape (m, k, n): trilinear in log2 of each dimension
        between the measured points, each dimension clamped to the table's range (outside it
        nothing was measured; the nearest edge stands for it)."""
        (i, a), (j, b), (h, c) = _bracket(self.m, m), _bracket(self.k, k), _bracket(self.n, n)
        total = 0.0
        for di, wi in ((0, 1 - a), (1, a)):
            for dj, wj in ((0, 1 - b), (1, b)):
                for dh, wh in ((0, 1 - c), (1, c)):
                    if wi and wj and wh:
                        total += wi * wj * wh * self.speedup[i + di][j + dj][h + dh]
        return total


def _bracket(points: tuple[int, ...], x: float) -> tuple[int, float]:
    """(i, t): `x` lies t of the way from points[i] to points[i + 1] in log2, clamped."""
    last = len(points) - 1
    if last == 0 or x <= points[0]:
        return 0, 0.0
    if x >= points[last]:
        return last - 1, 1.0
    i = max(j for j in range(last) if points[j] <= x)
    lo, hi = math.log2(points[i]), math.log2(points[i + 1])
    return i, (math.log2(x) - lo) / (hi - lo)


@record
class RecipeTable:
    """One recipe's row of fp8.json (see its `_about`)."""

    name: Fp8Recipe
    library: str  # transformer-engine | torchao
    gemm: DType  # fp8 | fp4: the data type its GEMMs run in
    data_bits: int
    scale_block: int  # elements per scale of an activation or gradient (0: one per tensor)
    weight_scale_block: int  # elements per scale of a weight (0: one per tensor)
    scale_bytes: int
    usages: Mapping[str, int]  # quantized copies of a tensor kept, by architecture
    reads: int  # high-precision reads per quantization
    saved_input: bool  # linear inputs saved quantized
    gather_fp8: tuple[str, ...]  # frameworks whose parameter all-gather moves FP8
    tp_gather_fp8: tuple[str, ...]  # frameworks whose SP all-gathers move quantized data
    norm_fused: bool
    wgrad_high_precision: bool
    amax_reduction: bool
    # The backward GEMMs' outputs rescaled in a kernel of their own (torchao's axiswise scales
    # with slow accumulation: cuBLAS's per-tensor GEMM at unit scales, then the output times the
    # outer product of the scales; fp8.json `rescaled_backward`).
    rescaled_backward: bool
    # Its GEMM kernels' rate against a per-tensor-scaled GEMM of the same data type, by
    # architecture (fp8.json `gemm_rate`; 1 where not measured).
    gemm_rate: Mapping[str, float]
    # A measured speed-up of a whole linear over its 16-bit GEMMs, by architecture (fp8.json
    # `linear_speedup`; none where not measured).
    linear_speedup: Mapping[str, SpeedupTable]
    divisor: int
    frameworks: tuple[str, ...]
    megatron: str | None  # --fp8-recipe / --fp4-recipe value
    torchtitan: str | None  # torchao recipe name in torchtitan's config
    refusals: Mapping[str, str]  # architecture → the reason it does not run there
    source: str

    def supports(self, architecture: str) -> bool:
        """Whether the recipe runs on GPUs of `architecture`."""
        return architecture in self.usages and architecture not in self.refusals


@cache
def _data() -> Mapping[str, Any]:
    with open(PATH, encoding="utf-8") as handle:
        data: dict[str, Any] = json.loads(handle.read())
    return MappingProxyType(data)


def _row(name: str, raw: Mapping[str, Any]) -> RecipeTable:
    return RecipeTable(
        name=Fp8Recipe(name),
        library=str(raw["library"]),
        gemm=DType(raw["gemm"]),
        data_bits=int(raw["data_bits"]),
        scale_block=int(raw["scale_block"]),
        weight_scale_block=int(raw["weight_scale_block"]),
        scale_bytes=int(raw["scale_bytes"]),
        usages=MappingProxyType({str(k): int(v) for k, v in raw["usages"].items()}),
        reads=int(raw["reads"]),
        saved_input=bool(raw["saved_input"]),
        gather_fp8=tuple(raw["gather_fp8"]),
        tp_gather_fp8=tuple(raw["tp_gather_fp8"]),
        norm_fused=bool(raw["norm_fused"]),
        wgrad_high_precision=bool(raw["wgrad_high_precision"]),
        amax_reduction=bool(raw["amax_reduction"]),
        rescaled_backward=bool(raw.get("rescaled_backward", False)),
        gemm_rate=MappingProxyType({str(k): float(v) for k, v in raw.get("gemm_rate", {}).items()}),
        linear_speedup=MappingProxyType(
            {str(k): _speedups(v) for k, v in raw.get("linear_speedup", {}).items()}
        ),
        divisor=int(raw["divisor"]),
        frameworks=tuple(raw["frameworks"]),
        megatron=raw["megatron"],
        torchtitan=raw["torchtitan"],
        refusals=MappingProxyType(dict(raw["refusals"])),
        source=str(raw["source"]),
    )


def _speedups(raw: Mapping[str, Any]) -> SpeedupTable:
    return SpeedupTable(
        m=tuple(int(x) for x in raw["m"]),
        k=tuple(int(x) for x in raw["k"]),
        n=tuple(int(x) for x in raw["n"]),
        speedup=tuple(
            tuple(tuple(float(x) for x in row) for row in plane) for plane in raw["speedup"]
        ),
        source=str(raw["source"]),
    )


@cache
def recipe_table(recipe: Fp8Recipe) -> RecipeTable:
    """The row of `recipe`."""
    return _row(recipe.value, _data()["recipes"][recipe.value])


def architecture(gpu_name: str, peaks: Mapping[DType, float]) -> str:
    """The GPU's architecture as fp8.json names it: the preset's, or for a custom GPU Blackwell
    when it gives an FP4 peak, Hopper when it gives an FP8 peak, else Ampere."""
    known: Mapping[str, str] = _data()["architectures"]
    if gpu_name in known and gpu_name != "source":
        return known[gpu_name]
    if DType.FP4 in peaks:
        return BLACKWELL
    return HOPPER if DType.FP8 in peaks else AMPERE


def architecture_source() -> str:
    """Where the architectures come from."""
    return str(_data()["architectures"]["source"])
