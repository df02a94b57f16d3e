"""Published GEMM benchmark tables, priced by the step model's own GEMM time (issue 24).

A whole training step cannot tell the GEMM curve's shape term from its e_max: every run of the
corpus has GEMMs whose smallest dimension is in the thousands, where d/(d + d½) moves by a few
per cent for any d½ in 0–500 and e_max absorbs it (docs/validation.md). A table of one GPU's
achieved TFLOPS per (M, N, K) does: `validation/gemm_tables.json` holds such tables, each with
its source, and :func:`row_seconds` prices a row exactly as `planc.perf.compute.work_time_s`
prices a layer's matmul (the roofline max of its math on the GEMM curve and its HBM time), so
`planc.fitting.fit_gemm_table` measures d½ with the same formula the step model uses.

A row's work: F = 2·M·N·K·g FLOPs and B = (M·K + K·N)·g·b_in + M·N·g·b_out bytes (A and B read
once, C written once; g equal groups of a grouped GEMM), its seconds F/(TFLOPS·10¹²).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from planc.bounded import InputError, named_entries
from planc.perf.compute import Device, work_time_s
from planc.perf.ops import NOTHING, GemmShape, OpCost, Work
from planc.presets.efficiency import Efficiency
from planc.record import record
from planc.vocab import DType

TABLES_LIMIT = 1024 * 1024  # bytes: a table of a few hundred rows is tens of kilobytes
TABLES_DEPTH = 5  # {name: {rows: [{m: ...}]}}
TABLE_FIELDS = frozenset(
    ("gpu", "dtype", "peak_tflops", "hbm_gbs", "input_bytes", "output_bytes", "source", "rows")
)
ROW_FIELDS = frozenset(("m", "n", "k", "groups", "tflops"))


class TableError(ValueError):
    """A GEMM table that cannot be used; the message names the table and the row."""


@record
class GemmRow:
    """One measured GEMM: (M×K)·(K×N), `groups` times, at `tflops` achieved."""

    m: int
    n: int
    k: int
    groups: int
    tflops: float

    @property
    def flops(self) -> float:
        """2·M·N·K·g."""
        return 2.0 * self.m * self.n * self.k * self.groups

    @property
    def measured_s(self) -> float:
        """The row's seconds: its FLOPs at the TFLOPS the source states."""
        return self.flops / (self.tflops * 1e12)


@record
class GemmTable:
    """One published table: where it was measured and its rows."""

    name: str
    gpu: str  # the planc GPU preset it was measured on
    dtype: DType  # the GEMMs' input data type
    peak_tflops: float  # the dense peak of that data type the rows run against
    hbm_gbs: float
    input_bytes: int  # bytes per element of A and B
    output_bytes: int  # bytes per element of C
    source: str
    rows: tuple[GemmRow, ...]

    @property
    def device(self) -> Device:
        return Device.of(self.peak_tflops, self.hbm_gbs, self.dtype)


def read_tables(path: str) -> Mapping[str, GemmTable]:
    """The tables of `path` by name; TableError when the file or a table cannot be used."""
    try:
        entries = named_entries(path, TABLES_LIMIT, TABLES_DEPTH)
    except InputError as error:
        raise TableError(str(error)) from None
    return MappingProxyType({name: _table(name, item) for name, item in entries.items()})


def _table(name: str, item: Any) -> GemmTable:
    if not isinstance(item, dict):
        raise TableError(f"table {name}: must be an object")
    unknown = sorted(set(item) - TABLE_FIELDS)
    missing = sorted(TABLE_FIELDS - set(item))
    if unknown or missing:
        raise TableError(f"table {name}: unknown {unknown} or missing {missing} field(s)")
    try:
        dtype = DType(item["dtype"])
    except ValueError:
        raise TableError(f"table {name}: dtype {item['dtype']!r} is not a data type") from None
    rows = item["rows"]
    if not isinstance(rows, list) or not rows:
        raise TableError(f"table {name}: rows must be a non-empty list")
    if not isinstance(item["gpu"], str) or not isinstance(item["source"], str):
        raise TableError(f"table {name}: gpu and source must be strings")
    return GemmTable(
        name=name,
        gpu=item["gpu"],
        dtype=dtype,
        peak_tflops=_positive(name, "peak_tflops", item["peak_tflops"]),
        hbm_gbs=_positive(name, "hbm_gbs", item["hbm_gbs"]),
        input_bytes=_count(name, "input_bytes", item["input_bytes"]),
        output_bytes=_count(name, "output_bytes", item["output_bytes"]),
        source=item["source"],
        rows=tuple(_row(name, i, row) for i, row in enumerate(rows)),
    )


def _row(name: str, position: int, row: Any) -> GemmRow:
    where = f"{name} row {position}"
    if not isinstance(row, dict) or set(row) != ROW_FIELDS:
        raise TableError(f"table {where}: must have exactly {', '.join(sorted(ROW_FIELDS))}")
    return GemmRow(
        m=_count(where, "m", row["m"]),
        n=_count(where, "n", row["n"]),
        k=_count(where, "k", row["k"]),
        groups=_count(where, "groups", row["groups"]),
        tflops=_positive(where, "tflops", row["tflops"]),
    )


def _count(where: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10**7:
        raise TableError(f"table {where}: {key} must be an integer in [1, 10^7], got {value!r}")
    return value


def _positive(where: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1e9:
        raise TableError(f"table {where}: {key} must be a positive number, got {value!r}")
    return float(value)


def row_work(table: GemmTable, row: GemmRow) -> OpCost:
    """The row as one matmul op: its FLOPs, its bytes (module docstring) and its shape."""
    moved = (row.m * row.k + row.k * row.n) * row.groups * table.input_bytes
    moved += row.m * row.n * row.groups * table.output_bytes
    work = Work(row.flops, float(moved))
    shape = GemmShape(row.m, row.n, row.k, row.groups)
    return OpCost(f"{table.name} {row.m}x{row.n}x{row.k}", "matrix", work, NOTHING, NOTHING, shape)


def row_seconds(table: GemmTable, row: GemmRow, eff: Efficiency) -> float:
    """The step model's seconds for the row on the table's device with the tables `eff` (the
    curve of the table's data type, `Efficiency.gemm_for`)."""
    op = row_work(table, row)
    return work_time_s(op, op.forward, table.device, eff)
