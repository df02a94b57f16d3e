"""Achieved fractions of peak, as data: GEMM, HBM, vector units and the network, per GPU.

The numbers live in `planc/presets/efficiency.json`, one entry per GPU preset of
`planc/presets/gpus.json`; each entry says where its numbers come from. A user's own fit
(`planc calibrate`) is a file with one such entry, read by :func:`load_calibration`.

The curves (each a smooth saturating function, where Calculon uses step tables):

* GEMM:  eff = e_max · d/(d + d½) · q_wave, d the op's smallest matrix dimension and q_wave the
  wave quantization of its output tiles over the GPU's SMs: with T = ⌈M/t_m⌉·⌈N/t_n⌉·batch
  tiles of t_m × t_n, q_wave = T/(⌈T/SMs⌉·SMs) (NVIDIA, "Matrix Multiplication Background User's
  Guide", tile and wave quantization). d/(d + d½) is the loss of data reuse when one of M, N, K
  is small (the attention matmuls' K = k = 64…160, Calculon's measured 0.29–0.43 on them).
  A GEMM's time is the roofline max of its math at that rate and its HBM time (below), so a
  skinny GEMM (a router's N = E) is priced at its memory time, never far above its roofline.
  e_max is where each generation differs most: the largest fraction of the dense peak a matmul
  reaches (Bekman's Maximum Achievable Matmul FLOPS, ml-engineering).
* HBM:   eff(B) = e_hbm · B/(B + B½) for a kernel moving B bytes: B½ = τ·e_hbm·bandwidth is a
  fixed τ per kernel (launch and tail), the floor every op pays.
* Vector units: a constant fraction of the non-tensor peak (element-wise ops are memory bound).
* Fused attention: a constant fraction of the matrix peak on the FLOPs the kernel executes,
  forward and backward, from the kernel's published benchmarks: the flash-attn package
  (FlashAttention-2), cuDNN's fused attention, and PyTorch's SDPA flash backend.
* Network: per link class (nvlink, network) and per collective, a bus-bandwidth efficiency and a
  latency per ring step: T = steps·α + wire_bytes/(β·e) (NCCL bus bandwidth, nccl-tests
  `doc/PERFORMANCE.md`), and `processor_usage`, the share of the SMs a running collective takes
  from overlapped compute (Calculon's `processor_usage`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, field, replace
from functools import cache
from itertools import pairwise
from types import MappingProxyType
from typing import Any, cast

from planc.bounded import read_text, strict_json
from planc.presets import releases
from planc.record import record
from planc.vocab import DType

# A plain path beside this module: pathlib costs an import at `planc check` start-up.
PRESETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "efficiency.json")
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "send_recv", "all_to_all")
# The expert-dispatch kernels whose own throughput a link entry may cap (`LinkEfficiency.kernels`).
EXPERT_KERNELS = ("deepep_dispatch", "deepep_combine", "hybridep_dispatch", "hybridep_combine")
LINKS = ("nvlink", "network")


@record
class GemmCurve:
    """eff = peak_fraction · d/(d + half_dim) · q_wave (module docstring): the achieved fraction
    of the matrix peak of a GEMM whose smallest dimension is d and whose output is `tiles` tiles
    of tile_m × tile_n, over `sms` streaming multiprocessors."""

    peak_fraction: float
    half_dim: float
    sms: int  # streaming multiprocessors (compute units) that run the output tiles
    tile_m: int  # output tile rows of the GEMM kernels (cuBLAS's large-GEMM tiles)
    tile_n: int  # output tile columns

    def efficiency(self, smallest: int, rows: int = 0, cols: int = 0, batch: int = 1) -> float:
        """Achieved fraction of the matrix peak for a matmul with smallest dimension `smallest`
        and a [rows × cols] output (times `batch`); no wave term when rows or cols is 0."""
        shape = smallest / (smallest + self.half_dim) if smallest > 0 else 1.0
        return self.peak_fraction * shape * self.wave(rows, cols, batch)

    def wave(self, rows: int, cols: int, batch: int = 1) -> float:
        """q_wave = T'/(⌈T'/SMs⌉·SMs), the share of the last wave's SMs that have a tile, for
        T = ⌈rows/tile_m⌉·⌈cols/tile_n⌉·batch output tiles; a GEMM with fewer tiles than SMs is
        split along K into ⌊SMs/T⌋ parts (cuBLAS's split-K), T' = T·⌊SMs/T⌋. 1 when rows or
        cols is 0, or no SMs are known."""
        if rows <= 0 or cols <= 0 or self.sms <= 0:
            return 1.0
        tiles = -(-rows // self.tile_m) * -(-cols // self.tile_n) * max(batch, 1)
        tiles *= max(1, self.sms // tiles)
        waves = -(-tiles // self.sms)
        return tiles / (waves * self.sms)


@record
class MemoryCurve:
    """eff(B) = efficiency · B/(B + half_bytes)."""

    efficiency: float
    half_bytes: float

    def at(self, moved: float) -> float:
        """Achieved fraction of the HBM bandwidth for a kernel moving `moved` bytes."""
        if moved <= 0:
            return self.efficiency
        return self.efficiency * moved / (moved + self.half_bytes)


@record
class KernelRate:
    """A flex-dispatch kernel's measured throughput on one link: GB/s of token rows per
    destination counting the own (DeepEP's and HybridEP's benchmarks count them so), at the
    group sizes n it was measured at, and the SMs it ran on.

    Between two measured sizes the rate is linear in n; beyond the measured ones it is the
    nearest measurement's (a benchmark that stops at 36 ranks prices 64 at its 36-rank rate)."""

    points: tuple[tuple[int, float], ...]  # (group size n, GB/s), n ascending, at least one
    sms: int | None = None  # SMs the kernel occupies while it runs; None: not stated

    def at(self, n: int) -> float:
        """GB/s at group size `n` (linear between measured sizes, the nearest end beyond)."""
        first, last = self.points[0], self.points[-1]
        if n <= first[0]:
            return first[1]
        if n >= last[0]:
            return last[1]
        for (n0, r0), (n1, r1) in zip(self.points, self.points[1:], strict=False):
            if n0 <= n <= n1:
                return r0 + (r1 - r0) * (n - n0) / (n1 - n0)
        raise AssertionError("unreachable: n lies between the first and the last point")


@record
class LinkEfficiency:
    """One link class: latency per ring step, bus-bandwidth efficiency per collective."""

    latency_us: float
    all_reduce: float
    reduce_scatter: float
    all_gather: float
    send_recv: float
    processor_usage: float  # fraction of compute lost while a collective overlaps it
    all_to_all: float
    # Measured throughput of the flex dispatcher's kernels on this link (`KernelRate`);
    # absent: only the link's all-to-all efficiency bounds them.
    kernels: Mapping[str, KernelRate] = field(default_factory=lambda: MappingProxyType({}))

    def of(self, op: str) -> float:
        """The efficiency of collective `op` (all_reduce, reduce_scatter, all_gather, send_recv,
        all_to_all)."""
        if op not in COLLECTIVES:
            raise ValueError(f"unknown collective {op!r}")
        value: float = getattr(self, op)
        return value


@record
class Efficiency:
    """Everything the per-operation model needs besides the GPU's peak numbers."""

    gemm: GemmCurve
    hbm: MemoryCurve
    vector_tflops: float
    vector_efficiency: float
    flash_forward: float
    flash_backward: float
    nvlink: LinkEfficiency
    network: LinkEfficiency
    # PyTorch's scaled_dot_product_attention flash backend (FlashAttention-2), what eager
    # PyTorch (`training.kernels: unfused`) runs, as a fraction of the matrix peak.
    sdpa_forward: float
    sdpa_backward: float
    # cuDNN's fused attention (Transformer Engine's FusedAttention, Megatron --attention-backend
    # fused, and auto on Hopper and newer), as a fraction of the matrix peak.
    cudnn_forward: float
    cudnn_backward: float
    source: str = ""
    # cuDNN's fused attention measured by sequence length (causal, s_q = s_kv), ascending:
    # (s, forward fraction, backward fraction); empty: cudnn_forward/backward at every length.
    cudnn_by_seq: tuple[tuple[int, float, float], ...] = ()
    # cuDNN's FP8 fused attention (training.fp8.attention: delayed or current; mxfp8) by
    # sequence length: (s, forward, backward) speed-ups over the 16-bit kernel of the same
    # benchmark run, BF16 time / FP8 time; empty: no speed-up measured, priced as 16-bit.
    cudnn_fp8_by_seq: tuple[tuple[int, float, float], ...] = ()
    cudnn_mxfp8_by_seq: tuple[tuple[int, float, float], ...] = ()
    # the same measured at a query/key head dimension of 192 (DeepSeek-V3's latent attention:
    # 128 heads, values of 128); the tables above are at 128 (Llama 3.1's GQA)
    cudnn_fp8_d192_by_seq: tuple[tuple[int, float, float], ...] = ()
    cudnn_mxfp8_d192_by_seq: tuple[tuple[int, float, float], ...] = ()
    # cuDNN's 16-bit kernel at a query/key head dimension of 64 (GPT-OSS's) by sequence length,
    # fractions of the matrix peak as cudnn_by_seq's (which is measured at 128); empty: priced
    # as at 128. FP8 attention at 64 takes the 128 speed-ups above.
    cudnn_d64_by_seq: tuple[tuple[int, float, float], ...] = ()
    # the same kernel at 64 under a 128-token sliding window, keyed alike at the equivalent
    # square √(s·w); empty: a short window is priced by cudnn_d64_by_seq (measured at 1,024)
    cudnn_d64_w128_by_seq: tuple[tuple[int, float, float], ...] = ()
    # GEMM curves of other data types where an entry measures them (`gemm_by_dtype`); a data
    # type without one reaches the 16-bit curve's fractions of its own peak.
    gemm_by_dtype: Mapping[DType, GemmCurve] = field(default_factory=lambda: MappingProxyType({}))
    # τ_e by (software release, recipe of the expert GEMMs): seconds per local expert per MoE
    # layer and micro-batch (`planc.perf.expert_host`). Every GPU's tables and every calibration
    # take planc/presets/releases.json's (`planc.presets.releases.table`); a fit replaces it.
    expert_host: Mapping[tuple[str, str], float] = field(
        default_factory=lambda: MappingProxyType({})
    )
    # The fraction of the HBM peak Transformer Engine's quantization kernels reach (efficiency.
    # json `te_casts`, measured); None: they are priced on the HBM curve as any other kernel.
    te_cast_efficiency: float | None = None

    @property
    def te_cast_hbm(self) -> MemoryCurve:
        """The HBM curve of Transformer Engine's casts (the `te-cast` engine): the GPU's curve,
        its fixed time per kernel kept, at the casts' measured efficiency where one is given."""
        if self.te_cast_efficiency is None:
            return self.hbm
        return replace(self.hbm, efficiency=self.te_cast_efficiency)

    def gemm_for(self, dtype: DType) -> GemmCurve:
        """The GEMM curve of `dtype`: its own, else the 16-bit (bf16/fp16) curve `gemm`."""
        return self.gemm_by_dtype.get(dtype, self.gemm)

    def link(self, name: str) -> LinkEfficiency:
        """nvlink or network."""
        if name not in LINKS:
            raise ValueError(f"unknown link class {name!r}")
        return self.nvlink if name == "nvlink" else self.network

    def with_gemm(self, **changes: Any) -> Efficiency:  # floats, and ints for sms and tiles
        return replace(self, gemm=replace(self.gemm, **changes))

    def with_peak_fraction(self, peak_fraction: float) -> Efficiency:
        """The tables with the 16-bit curve's e_max `peak_fraction` and every other data type's
        curve moved by the same ratio (each is the 16-bit e_max times a measured ratio of
        ceilings, efficiency.json's sources), each at most 1: what a fit of e_max changes."""
        ratio = peak_fraction / self.gemm.peak_fraction
        curves = {
            dtype: replace(curve, peak_fraction=min(1.0, curve.peak_fraction * ratio))
            for dtype, curve in self.gemm_by_dtype.items()
        }
        scaled = replace(self, gemm_by_dtype=MappingProxyType(curves))
        return scaled.with_gemm(peak_fraction=peak_fraction)

    def with_link(self, name: str, **changes: float) -> Efficiency:
        # Only the float fields: a link's kernel table is not a calibrated number.
        link: LinkEfficiency = replace(self.link(name), **cast(dict[str, Any], changes))
        return replace(self, nvlink=link) if name == "nvlink" else replace(self, network=link)


# The ranges a table's numbers may take (the calibration file is checked as strictly as a spec):
# a fraction of a peak is in (0, 1]; a share of the SMs in [0, 1]; the half-points of the
# curves are non-negative and bounded by sizes no kernel reaches; every number is finite, an
# int or a float but never a boolean.
_FRACTION = (0.0, 1.0, False)  # (low, high, low included)
_SHARE = (0.0, 1.0, True)
_SMS = 100_000  # streaming multiprocessors of one GPU: a hundred times today's largest
_TILE = 4096  # rows or columns of a GEMM kernel's output tile
_HALF_DIM = (0.0, 1e7, True)  # a matrix dimension, bounded as model dimensions are
_HALF_BYTES = (0.0, 1e15, True)  # bytes: a petabyte
_TFLOPS = (0.0, 1e6, False)  # a GPU's vector peak: an exaFLOP per second
_LATENCY_US = (0.0, 1e7, True)  # microseconds per ring step: ten seconds
_GBS = (0.0, 1e6, False)  # a kernel's throughput, GB/s: a petabyte per second
_GROUP = 1_048_576  # ranks of a group a kernel's rate is measured at: planc's largest world
_KERNEL_SMS = (1.0, 100_000.0, True)  # SMs a dispatch kernel occupies
_MAX_SOURCE = 10_000  # characters of a `source` note


def _number(
    data: Mapping[str, Any], key: str, where: str, bounds: tuple[float, float, bool]
) -> float:
    """`data[key]`: an int or float (not a boolean) inside `bounds`, else ValueError."""
    low, high, closed = bounds
    value = data.get(key)
    opening = "[" if closed else "("
    if value is None:
        raise ValueError(f"{where}.{key} is missing: a number in {opening}{low:g}, {high:g}]")
    if isinstance(value, bool) or not isinstance(value, int | float):
        got = "a boolean" if isinstance(value, bool) else f"a {type(value).__name__}"
        raise ValueError(
            f"{where}.{key} must be a number in {opening}{low:g}, {high:g}], got {got}"
        )
    if isinstance(value, int) and abs(value) > high:  # before float(): 10**400 overflows
        raise ValueError(f"{where}.{key} must be at most {high:g}, got an integer that large")
    number = float(value)
    if not math.isfinite(number) or number > high or number < low or (number == low and not closed):
        raise ValueError(
            f"{where}.{key} must be a number in {opening}{low:g}, {high:g}], got {number!r}"
        )
    return number


def _section(
    data: Mapping[str, Any], key: str, where: str, keys: tuple[str, ...]
) -> Mapping[str, Any]:
    """`data[key]`: an object with only `keys` (and a `source` note) in it, else ValueError."""
    value = data.get(key)
    if not isinstance(value, Mapping):
        got = "missing" if value is None else f"a {type(value).__name__}"
        raise ValueError(f"{where}.{key} must be an object, got {got}")
    _only(value, f"{where}.{key}", keys)
    return value


def _only(data: Mapping[str, Any], where: str, keys: tuple[str, ...]) -> None:
    """Refuse a key outside `keys` and `source`, and a `source` that is not a short string."""
    unknown = sorted(str(k) for k in data if k not in keys and k != "source")
    if unknown:
        raise ValueError(
            f"{where}: unknown key {unknown[0][:40]!r}; it takes {', '.join((*keys, 'source'))}"
        )
    source = data.get("source", "")
    if not isinstance(source, str) or len(source) > _MAX_SOURCE:
        raise ValueError(f"{where}.source must be a string of at most {_MAX_SOURCE:,} characters")


def _kernels(link: Mapping[str, Any], where: str) -> Mapping[str, KernelRate]:
    """A link's optional `kernels`: per expert-dispatch kernel (EXPERT_KERNELS) a number, GB/s
    at every group size, or {"gbs": {n: GB/s, ...}, "sms": SMs} as measured."""
    if "kernels" not in link:
        return MappingProxyType({})
    given = _section(link, "kernels", where, EXPERT_KERNELS)
    where = f"{where}.kernels"
    return MappingProxyType(
        {name: _kernel_rate(given, name, where) for name in EXPERT_KERNELS if name in given}
    )


def _kernel_rate(given: Mapping[str, Any], name: str, where: str) -> KernelRate:
    """One kernel's entry: a number, or an object of a `gbs` table by group size and `sms`."""
    if not isinstance(given[name], Mapping):
        return KernelRate(points=((1, _number(given, name, where, _GBS)),))
    entry = _section(given, name, where, ("gbs", "sms"))
    where = f"{where}.{name}"
    table = entry.get("gbs")
    if not isinstance(table, Mapping):
        got = "missing" if table is None else f"a {type(table).__name__}"
        raise ValueError(f"{where}.gbs must be an object of GB/s by group size, got {got}")
    sizes = []
    for key in table:
        if not (isinstance(key, str) and 0 < len(key) <= 7 and key.isdecimal() and 1 <= int(key) <= _GROUP):
            raise ValueError(
                f"{where}.gbs: key {str(key)[:40]!r} must be a group size, an integer from 1 to "
                f"{_GROUP:,}"
            )
        sizes.append(int(key))
    if not sizes:
        raise ValueError(f"{where}.gbs must give the rate at one group size at least")
    points = tuple((n, _number(table, str(n), f"{where}.gbs", _GBS)) for n in sorted(sizes))
    sms = None
    if "sms" in entry:
        sms = int(_number(entry, "sms", where, _KERNEL_SMS))
        if sms != entry["sms"]:
            raise ValueError(f"{where}.sms must be a whole number of SMs, got {entry['sms']!r}")
    return KernelRate(points=points, sms=sms)


def _link(data: Mapping[str, Any], key: str, where: str) -> LinkEfficiency:
    link = _section(data, key, where, ("latency_us", "processor_usage", "efficiency", "kernels"))
    where = f"{where}.{key}"
    # NCCL runs an all-to-all as grouped point-to-point sends, one to each peer (nccl-tests
    # src/alltoall.cu), so a calibration file written before planc priced all-to-alls takes
    # its send_recv efficiency for them.
    eff = _section(link, "efficiency", where, COLLECTIVES)
    given = {"all_to_all": eff.get("send_recv"), **eff}
    return LinkEfficiency(
        latency_us=_number(link, "latency_us", where, _LATENCY_US),
        processor_usage=_number(link, "processor_usage", where, _SHARE),
        **{op: _number(given, op, f"{where}.efficiency", _FRACTION) for op in COLLECTIVES},
        kernels=_kernels(link, where),
    )


_TOP = (
    "gemm",
    "hbm",
    "vector",
    "flash_attention",
    "network",
    "gemm_by_dtype",
    "accuracy",
    "expert_host",
    "te_casts",
)
_HOST_S = (0.0, 1.0, True)  # τ_e: seconds per expert, layer and micro-batch, at most a second
_MAX_RUNS = 100_000  # runs a calibration's accuracy may count
_ERROR = (-1e3, 1e3, True)  # a relative error: a thousandfold either way


def _kernel_fraction(flash: Mapping[str, Any], key: str, default: str, where: str) -> float:
    """flash_attention's fraction for one attention kernel (`key`, e.g. cudnn_forward), that of
    the entry's `default` pass (forward or backward) where the entry does not measure it."""
    return _number({key: flash[default], **flash}, key, f"{where}.flash_attention", _FRACTION)


def from_json(data: Mapping[str, Any], where: str = "efficiency") -> Efficiency:
    """One GPU's entry of efficiency.json (or a calibration file) as an :class:`Efficiency`.

    Checked as strictly as a spec: every section an object with only its own keys, every
    number finite, of the right type and in its range (`_FRACTION` and the others above);
    ValueError names the first field that is not.
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"{where} must be a JSON object, got a {type(data).__name__}")
    _only(data, where, _TOP)
    if not all(isinstance(data.get(k), Mapping) for k in _TOP[:5]):
        raise ValueError(
            f"{where} needs gemm, hbm, vector, flash_attention and network sections (objects)"
        )
    hbm = _section(data, "hbm", where, ("efficiency", "half_bytes"))
    vector = _section(data, "vector", where, ("tflops", "efficiency"))
    flash = _section(
        data,
        "flash_attention",
        where,
        (
            "forward",
            "backward",
            "sdpa_forward",
            "sdpa_backward",
            "cudnn_forward",
            "cudnn_backward",
            "cudnn_by_seq",
            "cudnn_d64_by_seq",
            "cudnn_d64_w128_by_seq",
            *SPEEDUP_TABLES,
        ),
    )
    net = _section(data, "network", where, LINKS)
    if "accuracy" in data:
        _accuracy(data, where)
    return Efficiency(
        gemm=_curve(_section(data, "gemm", where, _CURVE), f"{where}.gemm"),
        hbm=MemoryCurve(
            _number(hbm, "efficiency", f"{where}.hbm", _FRACTION),
            _number(hbm, "half_bytes", f"{where}.hbm", _HALF_BYTES),
        ),
        vector_tflops=_number(vector, "tflops", f"{where}.vector", _TFLOPS),
        vector_efficiency=_number(vector, "efficiency", f"{where}.vector", _FRACTION),
        flash_forward=_number(flash, "forward", f"{where}.flash_attention", _FRACTION),
        flash_backward=_number(flash, "backward", f"{where}.flash_attention", _FRACTION),
        # PyTorch's SDPA flash backend where the entry measures it; else the fused kernel's.
        sdpa_forward=_kernel_fraction(flash, "sdpa_forward", "forward", where),
        sdpa_backward=_kernel_fraction(flash, "sdpa_backward", "backward", where),
        # cuDNN's fused attention where the entry measures it; else the flash kernel's.
        cudnn_forward=_kernel_fraction(flash, "cudnn_forward", "forward", where),
        cudnn_backward=_kernel_fraction(flash, "cudnn_backward", "backward", where),
        cudnn_by_seq=_by_seq(flash, f"{where}.flash_attention"),
        cudnn_d64_by_seq=_by_seq(flash, f"{where}.flash_attention", "cudnn_d64_by_seq"),
        cudnn_d64_w128_by_seq=_by_seq(
            flash, f"{where}.flash_attention", "cudnn_d64_w128_by_seq"
        ),
        **{
            key: _by_seq(flash, f"{where}.flash_attention", key, _SPEEDUP)
            for key in SPEEDUP_TABLES
        },
        nvlink=_link(net, "nvlink", f"{where}.network"),
        network=_link(net, "network", f"{where}.network"),
        source=str(data.get("source", "")),
        gemm_by_dtype=_gemm_by_dtype(data.get("gemm_by_dtype", {}), f"{where}.gemm_by_dtype"),
        expert_host=_expert_host(data, where),
        te_cast_efficiency=_te_casts(data, where),
    )


def _te_casts(data: Mapping[str, Any], where: str) -> float | None:
    """The optional `te_casts` section's efficiency (a fraction of the HBM peak)."""
    if "te_casts" not in data:
        return None
    section = _section(data, "te_casts", where, ("efficiency",))
    return _number(section, "efficiency", f"{where}.te_casts", _FRACTION)


_SEQ = (1, 1 << 24, True)  # a sequence length of a measured attention kernel
_SPEEDUP = (0.0, 8.0, False)  # an FP8 kernel's speed over the 16-bit one, either way
# flash_attention's FP8 speed-up tables, each an Efficiency field of the same name
SPEEDUP_TABLES = (
    "cudnn_fp8_by_seq",
    "cudnn_mxfp8_by_seq",
    "cudnn_fp8_d192_by_seq",
    "cudnn_mxfp8_d192_by_seq",
)


def _by_seq(
    flash: Mapping[str, Any],
    where: str,
    key: str = "cudnn_by_seq",
    bounds: tuple[float, float, bool] = _FRACTION,
) -> tuple[tuple[int, float, float], ...]:
    """flash_attention.`key` (cudnn_by_seq, or an FP8 kernel's speed-ups), {seq: [...],
    forward: [...], backward: [...]}: equal lengths, at least two points, sequences strictly
    ascending, each value within `bounds` (fractions in (0, 1]); () when the entry has none."""
    if key not in flash:
        return ()
    table = _section(flash, key, where, ("seq", "forward", "backward"))
    at = f"{where}.{key}"
    columns = [table.get(key) for key in ("seq", "forward", "backward")]
    lists = [c for c in columns if isinstance(c, list)]
    if len(lists) != 3 or len({len(c) for c in lists}) != 1:
        raise ValueError(f"{at} needs seq, forward and backward lists of one length")
    seq, forward, backward = lists
    if len(seq) < 2:
        raise ValueError(f"{at} needs at least two sequence lengths")
    rows = tuple(
        (
            int(_number({"seq": s}, "seq", at, _SEQ)),
            _number({"forward": f}, "forward", at, bounds),
            _number({"backward": b}, "backward", at, bounds),
        )
        for s, f, b in zip(seq, forward, backward, strict=True)
    )
    if any(isinstance(s, float) for s in seq) or any(
        a[0] >= b[0] for a, b in pairwise(rows)
    ):
        raise ValueError(f"{at}.seq must be whole numbers in strictly ascending order")
    return rows


def _expert_host(data: Mapping[str, Any], where: str) -> Mapping[tuple[str, str], float]:
    """releases.json's τ_e, with an entry's (a calibration's) optional `expert_host` over it:
    {release: {recipe: seconds}}, each release and recipe one planc knows."""
    table = dict(releases.table())
    if "expert_host" not in data:
        return MappingProxyType(table)
    given = _section(data, "expert_host", where, releases.RELEASE_NAMES)
    for release in releases.RELEASE_NAMES:
        if release not in given:
            continue
        inner = _section(given, release, f"{where}.expert_host", releases.RECIPE_NAMES)
        for recipe in releases.RECIPE_NAMES:
            if recipe in inner:
                at = f"{where}.expert_host.{release}"
                table[(release, recipe)] = _number(inner, recipe, at, _HOST_S)
    return MappingProxyType(table)


def _accuracy(data: Mapping[str, Any], where: str) -> None:
    """A calibration's `accuracy` (written by `planc calibrate`): its leave-one-out error on
    the runs it was fitted to, `runs`, `mean_abs_error` and `worst_error`; ValueError if not."""
    own = _section(data, "accuracy", where, ("runs", "mean_abs_error", "worst_error"))
    _count(own, "runs", f"{where}.accuracy", _MAX_RUNS)
    _number(own, "mean_abs_error", f"{where}.accuracy", (0.0, 1e3, True))
    _number(own, "worst_error", f"{where}.accuracy", _ERROR)


_CURVE = ("peak_fraction", "half_dim", "sms", "tile_m", "tile_n")


def _curve(data: Mapping[str, Any], where: str) -> GemmCurve:
    if "half_flops" in data:
        # The curve of planc 0.2 multiplied a size factor F/(F + half_flops) into every GEMM,
        # which priced a router's skinny GEMM at 200× its roofline; sizes are now wave
        # quantization and the fixed cost per kernel is hbm.half_bytes.
        raise ValueError(
            f"{where}.half_flops is no longer read (the GEMM curve is now peak_fraction, "
            "half_dim and wave quantization over sms, tile_m, tile_n); re-run planc calibrate"
        )
    _only(data, where, _CURVE)
    return GemmCurve(
        _number(data, "peak_fraction", where, _FRACTION),
        _number(data, "half_dim", where, _HALF_DIM),
        _count(data, "sms", where, _SMS),
        _count(data, "tile_m", where, _TILE),
        _count(data, "tile_n", where, _TILE),
    )


def _count(data: Mapping[str, Any], key: str, where: str, high: int) -> int:
    """`data[key]`: an integer in [1, high] (not a boolean), else ValueError."""
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise ValueError(f"{where}.{key} must be an integer in [1, {high:,}], got {value!r}"[:200])
    return value


def _gemm_by_dtype(data: Any, where: str) -> Mapping[DType, GemmCurve]:
    """`gemm_by_dtype`: a GEMM curve per data type name (fp32, fp8, fp4; bf16 and fp16 are
    `gemm`)."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where} must be a mapping of data type to a GEMM curve")
    curves: dict[DType, GemmCurve] = {}
    for name, curve in data.items():
        try:
            dtype = DType(name)
        except ValueError:
            shown = str(name)[:40]
            raise ValueError(
                f"{where}: {shown!r} is not a data type ({', '.join(DType)})"
            ) from None
        if dtype in (DType.BF16, DType.FP16) or not isinstance(curve, Mapping):
            raise ValueError(f"{where}.{name} must be a GEMM curve of fp32, fp8 or fp4")
        curves[dtype] = _curve(curve, f"{where}.{name}")
    return MappingProxyType(curves)


def _rate_json(rate: KernelRate) -> float | dict[str, Any]:
    """A `KernelRate` as `_kernel_rate` reads it: a number where one rate holds at every size."""
    if len(rate.points) == 1 and rate.sms is None:
        return rate.points[0][1]
    out: dict[str, Any] = {"gbs": {str(n): gbs for n, gbs in rate.points}}
    if rate.sms is not None:
        out["sms"] = rate.sms
    return out


def to_json(eff: Efficiency, source: str = "") -> dict[str, Any]:
    """The inverse of :func:`from_json` (what `planc calibrate` writes)."""

    def link(value: LinkEfficiency) -> dict[str, Any]:
        out: dict[str, Any] = {
            "latency_us": value.latency_us,
            "processor_usage": value.processor_usage,
            "efficiency": {op: value.of(op) for op in COLLECTIVES},
        }
        if value.kernels:
            out["kernels"] = {name: _rate_json(rate) for name, rate in value.kernels.items()}
        return out

    return {
        "source": source or eff.source,
        "gemm": asdict(eff.gemm),
        "hbm": asdict(eff.hbm),
        "vector": {"tflops": eff.vector_tflops, "efficiency": eff.vector_efficiency},
        "flash_attention": {
            "forward": eff.flash_forward,
            "backward": eff.flash_backward,
            "sdpa_forward": eff.sdpa_forward,
            "sdpa_backward": eff.sdpa_backward,
            "cudnn_forward": eff.cudnn_forward,
            "cudnn_backward": eff.cudnn_backward,
            **_seq_json("cudnn_by_seq", eff.cudnn_by_seq),
            **_seq_json("cudnn_d64_by_seq", eff.cudnn_d64_by_seq),
            **_seq_json("cudnn_d64_w128_by_seq", eff.cudnn_d64_w128_by_seq),
            **{k: v for key in SPEEDUP_TABLES for k, v in _seq_json(key, getattr(eff, key)).items()},
        },
        "network": {"nvlink": link(eff.nvlink), "network": link(eff.network)},
        **(
            {"gemm_by_dtype": {str(d): asdict(c) for d, c in eff.gemm_by_dtype.items()}}
            if eff.gemm_by_dtype
            else {}
        ),
        **_host_json(eff),
        **(
            {"te_casts": {"efficiency": eff.te_cast_efficiency}}
            if eff.te_cast_efficiency is not None
            else {}
        ),
    }


def _host_json(eff: Efficiency) -> dict[str, Any]:
    """The τ_e that differ from releases.json's (a calibration's), as `_expert_host` reads them."""
    preset = releases.table()
    own: dict[str, dict[str, float]] = {}
    for (release, recipe), seconds in sorted(eff.expert_host.items()):
        if preset.get((release, recipe)) != seconds:
            own.setdefault(release, {})[recipe] = seconds
    return {"expert_host": own} if own else {}


@cache
def _presets() -> Mapping[str, Any]:
    with open(PRESETS, encoding="utf-8") as handle:
        data: dict[str, Any] = json.loads(handle.read())
    return data


def preset_names() -> tuple[str, ...]:
    return tuple(name for name in _presets() if not name.startswith("_"))


# The fitted entry, and its peaks, from which the other entries and custom GPUs are derived.
REFERENCE = "a100-80gb"
REFERENCE_TFLOPS = 312.0
REFERENCE_HBM_GBS = 2039.0


def for_gpu(name: str, memory_bandwidth_gbs: float | None = None) -> Efficiency:
    """The efficiency entry of GPU preset `name`.

    A GPU without an entry (a custom GPU in the spec) gets the A100 entry: the same fractions of
    its own peaks, its SMs and tiles, and half_bytes scaled by its HBM bandwidth (the same fixed
    time per kernel) when that is given.
    """
    presets = _presets()
    if name in presets and not name.startswith("_"):
        return from_json(presets[name], f"efficiency.json[{name}]")
    base = from_json(presets[REFERENCE], f"efficiency.json[{REFERENCE}]")
    hbm = (memory_bandwidth_gbs or REFERENCE_HBM_GBS) / REFERENCE_HBM_GBS
    return replace(
        base,
        hbm=replace(base.hbm, half_bytes=base.hbm.half_bytes * hbm),
        source=f"derived from {REFERENCE} for a GPU without an entry (scaled by its peaks)",
    )


# A calibration file is a few KB and nests four levels (network.nvlink.efficiency.all_reduce).
CALIBRATION_MAX_BYTES = 1024 * 1024
CALIBRATION_MAX_DEPTH = 8


def read_calibration(path: str | os.PathLike[str]) -> tuple[Mapping[str, Any], Efficiency]:
    """A calibration file written by `planc calibrate` (one GPU's entry of efficiency.json) as
    its data and its tables: a regular file of at most `CALIBRATION_MAX_BYTES`, strict JSON
    (`planc.bounded`), checked by :func:`from_json`. ValueError says why not, in one line."""
    name = os.fspath(path)
    data = strict_json(read_text(name, CALIBRATION_MAX_BYTES), CALIBRATION_MAX_DEPTH)
    if not isinstance(data, dict):
        raise ValueError(f"a calibration file is one JSON object, not a {type(data).__name__}")
    return MappingProxyType(data), from_json(data, "calibration")


def load_calibration(path: str | os.PathLike[str]) -> Efficiency:
    """The tables of a calibration file (:func:`read_calibration`)."""
    return read_calibration(path)[1]


def _seq_json(key: str, rows: tuple[tuple[int, float, float], ...]) -> dict[str, Any]:
    """A by-sequence table as efficiency.json writes it ({} when empty)."""
    if not rows:
        return {}
    columns = {"seq": 0, "forward": 1, "backward": 2}
    return {key: {name: [row[i] for row in rows] for name, i in columns.items()}}
