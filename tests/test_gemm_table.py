"""Published GEMM tables (validation/gemm_tables.json) and the shape term measured on them.

What a user relies on: the H100 curve's d½ (and that of every GPU derived from it, FP8 curves
included) is what a fit of planc's own GEMM time to DeepGEMM's published H800 table gives, not a
number of its own; the Blackwell curves, which hold it, are within 4 % of what OpenXLA's B200
table gives; a row is priced exactly as a layer's matmul; the fits recover a curve that
generated a table; a malformed table is refused with the table and row named.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planc.fitting import FITTED, fit_gemm_table, fit_gemm_table_timed, shape_half_dim
from planc.perf.gemm_table import (
    GemmRow,
    GemmTable,
    TableError,
    read_tables,
    row_seconds,
)
from planc.presets.efficiency import for_gpu
from planc.vocab import DType

ROOT = Path(__file__).resolve().parent.parent
TABLES = ROOT / "validation" / "gemm_tables.json"


def _table(rows: tuple[GemmRow, ...], hbm_gbs: float = 3350.0) -> GemmTable:
    return GemmTable("t", "h800", DType.FP8, 1979.0, hbm_gbs, 1, 2, "by hand", rows)


# A memory so fast (10^9 GB/s) that every row is bound by its math: the HBM time, fixed cost
# per kernel included, is (B + B½)/(0.9 · 10^18 B/s), picoseconds.
FAST = 1e9


def test_the_committed_tables_read() -> None:
    tables = read_tables(str(TABLES))
    deepgemm = tables["deepgemm-h800-fp8"]
    # DeepGEMM's README (327ec92): 18 normal, 4 contiguous and 6 masked grouped rows.
    assert len(deepgemm.rows) == 28
    assert deepgemm.rows[15] == GemmRow(4096, 7168, 16384, 1, 1520.0)
    assert deepgemm.dtype is DType.FP8 and deepgemm.gpu == "h800"


def test_the_xla_tables_read_as_published() -> None:
    # OpenXLA's default_matmul_perf_table.txtpb (336bb15c): the whole grid of each key, and the
    # largest shape's rate, 2·4·4096³ FLOP over its kernel time.
    tables = read_tables(str(TABLES))
    for name, gpu, best in (
        ("xla-b200-bf16", "b200", 1670.4673),
        ("xla-gh100-bf16", "h100-sxm", 788.6994),
    ):
        table = tables[name]
        assert (len(table.rows), table.gpu, table.dtype) == (375, gpu, DType.BF16)
        assert {(r.groups, r.m, r.n, r.k) for r in table.rows} == {
            (b, m, n, k) for b in (1, 2, 4) for m in SIDES for n in SIDES for k in SIDES
        }
        assert table.rows[-1] == GemmRow(4096, 4096, 4096, 4, best)


SIDES = (256, 512, 1024, 2048, 4096)


def test_a_compute_bound_row_is_priced_on_the_curve() -> None:
    # M = 256 and N = 16,896 make 1 x 132 output tiles of 256 x 128: one full wave on the
    # H800's 132 SMs (q_wave = 1); M is the smallest dimension. By hand, with the preset's FP8
    # curve: rate = 1979e12 · e · 256/(256 + d½). At the H800's own 3,350 GB/s the row is
    # bound by its math too (290 MB move in 0.10 ms, the math takes about 0.2 ms).
    curve = for_gpu("h800").gemm_for(DType.FP8)
    row = GemmRow(256, 16896, 16384, 1, 1.0)
    rate = 1979e12 * curve.peak_fraction * 256 / (256 + curve.half_dim)
    expected = 2 * 256 * 16896 * 16384 / rate
    assert row_seconds(_table((row,)), row, for_gpu("h800")) == pytest.approx(expected)


def test_a_memory_bound_row_is_priced_at_its_hbm_time() -> None:
    # M = 8: bytes (8·7168 + 7168·4096)·1 + 8·4096·2 = 29,483,008; at 3350 GB/s · 0.9 ·
    # B/(B + B½) with the H800's B½ from the preset.
    hbm = for_gpu("h800").hbm
    moved = (8 * 7168 + 7168 * 4096) * 1 + 8 * 4096 * 2
    expected = moved / (3350e9 * 0.9 * moved / (moved + hbm.half_bytes))
    row = GemmRow(8, 4096, 7168, 1, 1.0)
    assert hbm.efficiency == 0.9
    assert row_seconds(_table((row,)), row, for_gpu("h800")) == pytest.approx(expected)


def test_the_fit_recovers_the_curve_that_made_the_table() -> None:
    # Rows measured on a curve e = 0.7, d½ = 100, all one full wave (12 x 11 = 132 tiles of
    # 256 x 128) and bound by their math (`FAST`), the smallest dimension K from 64 to 1024:
    # TFLOPS = 1979 · 0.7 · K/(K + 100), by hand.
    rows = tuple(
        GemmRow(3072, 1408, k, 1, 1979 * 0.7 * k / (k + 100)) for k in (64, 128, 256, 512, 1024)
    )
    found = fit_gemm_table(_table(rows, FAST))
    assert found.values[0] == pytest.approx(0.7, rel=1e-3)
    assert found.values[1] == pytest.approx(100.0, rel=1e-3)


def test_the_timed_fit_recovers_a_table_with_a_fixed_time_per_kernel() -> None:
    # Rows made by the curve e = 0.7, d½ = 100 plus 4 µs per kernel, each one full wave of
    # 132 tiles of 256 x 128 and bound by its math (`FAST`), the smallest dimension M from 64
    # to 1,024 at two K: the 4 µs, the same for every row, is not read as a shape loss.
    def tflops(m: int, n: int, k: int) -> float:
        flops = 2 * m * n * k
        return flops / (4e-6 + flops / (1979e12 * 0.7 * m / (m + 100))) / 1e12

    shapes = ((64, 16896), (128, 16896), (256, 16896), (512, 8448), (1024, 4224))
    rows = tuple(GemmRow(m, n, k, 1, tflops(m, n, k)) for m, n in shapes for k in (2048, 8192))
    found = fit_gemm_table_timed(_table(rows, FAST))
    assert found.peak_fraction == pytest.approx(0.7, rel=1e-3)
    assert found.half_dim == pytest.approx(100.0, rel=1e-3)
    assert found.fixed_s == pytest.approx(4e-6, rel=1e-3)
    assert found.rms < 1e-6
    # Without t0 the same rows read as a larger d½: what a table of tiny kernels does to it.
    assert fit_gemm_table(_table(rows, FAST)).values[1] > 110


def test_blackwell_holds_the_half_dim_xlas_b200_table_measures() -> None:
    """The Blackwell curves hold Hopper's measured d½; OpenXLA's B200 BF16 table, fitted with
    planc's GEMM time plus a fixed time per kernel (the grid's smallest kernels take 5 µs),
    gives it within 10 % (128.2 against 123.5)."""
    fitted = fit_gemm_table_timed(read_tables(str(TABLES))["xla-b200-bf16"])
    assert 2e-6 < fitted.fixed_s < 6e-6 and fitted.rms < 0.13
    for gpu in ("b200", "b300", "gb200-nvl72", "gb300-nvl72"):
        for dtype in (DType.BF16, DType.FP8, DType.FP4):
            held = for_gpu(gpu).gemm_for(dtype).half_dim
            assert held == pytest.approx(fitted.half_dim, rel=0.10), (gpu, dtype)


def test_two_hopper_tables_agree_to_their_kernels_spread() -> None:
    # The same fit on the same die: XLA's BF16 GEMMs (cuBLAS) and DeepGEMM's FP8 ones differ by
    # a third in d½ (89.8 and 120.5), the precision the Blackwell check above is read against.
    tables = read_tables(str(TABLES))
    xla = fit_gemm_table_timed(tables["xla-gh100-bf16"]).half_dim
    deepgemm = fit_gemm_table_timed(tables["deepgemm-h800-fp8"]).half_dim
    assert 1 < deepgemm / xla < 1.5


def test_hopper_and_blackwell_half_dim_is_the_deepgemm_fit() -> None:
    # efficiency.json holds the fit, every curve the H100's fit reaches carries it (the 16-bit
    # and the FP8 curve), and the A100's stays its own step-time fit.
    hopper = next(curve for curve in FITTED if curve.gpu == "h100-sxm")
    table = read_tables(str(TABLES))[hopper.shape_table]
    measured = shape_half_dim(table)
    for gpu in (hopper.gpu, *hopper.derived):
        tables = for_gpu(gpu)
        assert tables.gemm.half_dim == measured, gpu
        assert tables.gemm_for(DType.FP8).half_dim == measured, gpu
    assert for_gpu("a100-80gb").gemm.half_dim != measured


def test_the_table_fit_e_max_matches_the_measured_fp8_ceiling() -> None:
    # The single-kernel e_max the table gives (not used by planc) against an independent
    # measurement: the H100's FP8 matmul ceiling, 1402.6 of 1979 TFLOPS = 70.9 % (Bekman,
    # ml-engineering). Within two points: the table and the ceiling measure the same kernels'
    # regime, which a training step's e_max (0.547 for FP8) is not.
    table = read_tables(str(TABLES))["deepgemm-h800-fp8"]
    assert fit_gemm_table(table).values[0] == pytest.approx(0.709, abs=0.02)


def _write(tmp_path: Path, data: Any) -> str:
    path = tmp_path / "tables.json"
    path.write_text(json.dumps(data))
    return str(path)


GOOD: dict[str, Any] = {
    "gpu": "h800",
    "dtype": "fp8",
    "peak_tflops": 1979,
    "hbm_gbs": 3350,
    "input_bytes": 1,
    "output_bytes": 2,
    "source": "s",
    "rows": [{"m": 64, "n": 64, "k": 64, "groups": 1, "tflops": 1.0}],
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"extra": 1}, "table x: unknown ['extra']"),
        ({"dtype": "fp7"}, "dtype 'fp7' is not a data type"),
        ({"rows": []}, "rows must be a non-empty list"),
        ({"peak_tflops": True}, "peak_tflops must be a positive number"),
        ({"rows": [{"m": 0, "n": 1, "k": 1, "groups": 1, "tflops": 1}]}, "x row 0: m must be"),
        ({"rows": [{"m": 1, "n": 1, "k": 1, "tflops": 1}]}, "x row 0: must have exactly"),
        ({"rows": [{"m": 1, "n": 1, "k": 1, "groups": 1, "tflops": -2}]}, "tflops must be"),
    ],
)
def test_a_bad_table_is_refused_by_name(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    with pytest.raises(TableError, match=message.replace("[", r"\[").replace("]", r"\]")):
        read_tables(_write(tmp_path, {"x": {**GOOD, **change}}))


def test_a_file_that_is_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tables.json"
    path.write_text("{not json")
    with pytest.raises(TableError, match=str(path)):
        read_tables(str(path))
