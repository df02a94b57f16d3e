"""Published benchmarks of Transformer Engine's casts, priced by the step model's own cast kernels.

A training step cannot tell how fast a recipe's quantization kernels run from how fast its
GEMMs do: both scale with the step, and the fitted GEMM curve absorbs whichever is wrong. A
benchmark that times the same GEMMs with and without their casts does. TE's GEMM profiling
tool times each shape twice in one process: as a `te.Linear` forward under autocast (the
input and the weight quantized, then the GEMM) and as the GEMM kernel alone on operands
quantized before the timed loop. The difference is the casts.

`validation/cast_benchmarks.json` holds such benchmarks with their sources. Per recipe and
phase (the four GEMMs of a layer's forward, data gradient or weight gradient, each timed as a
forward call of its own shape M×K×N) the casts take

    t_cast = t_autocast − t_prequantized · (t_autocast / t_prequantized of the control)

where the control is the 16-bit column of the same two runs, which quantizes nothing: the two
runs differ by its ratio (about 3 % on TE's B300 tables) in the GEMMs alone. planc prices the
same calls with `planc.perf.ops.cast_kernels`, the kernels the step model charges a layer:
the input cast with every copy the recipe's GEMMs need on this architecture (the weight
requires a gradient, so a columnwise copy is made where the recipe keeps one) and the weight
rowwise (the benchmark's input requires none), each through the `te-cast` engine on the GPU's
tables (`planc.perf.compute.work_time_s`). `planc.fitting.fit_te_casts` finds the efficiency
at which the two agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from planc.bounded import InputError, named_entries
from planc.dims import Quantized, quantized_formats
from planc.perf.compute import Device, work_time_s
from planc.perf.ops import NOTHING, OpCost, cast_kernels
from planc.presets.efficiency import Efficiency
from planc.record import record
from planc.spec.job import Gpu, Training, preset_gpu
from planc.vocab import DType, Fp8Recipe, Framework

TABLES_LIMIT = 256 * 1024  # bytes: a benchmark of a few dozen rows is a few kilobytes
TABLES_DEPTH = 6  # {name: {shapes: {phase: [[m, k, n]]}}}
TABLE_FIELDS = frozenset(
    ("gpu", "source", "shapes", "control", "gemm_from", "fit", "held_out", "rows")
)
ROW_FIELDS = frozenset(("recipe", "phase", "autocast_ms", "prequantized_ms"))
PHASES = ("fprop", "dgrad", "wgrad")
CONTROL = "bf16"  # the control column: 16-bit GEMMs, nothing quantized
BETA = 2  # bytes per element of the 16-bit tensors the casts read (the benchmark's bf16)


class CastTableError(ValueError):
    """A cast benchmark that cannot be used; the message names the benchmark and the row."""


@record
class CastRow:
    """One recipe's phase: its GEMMs' summed milliseconds with and without their casts."""

    recipe: str  # a recipe of training.fp8.recipe, or the control's bf16
    phase: str  # fprop | dgrad | wgrad
    autocast_ms: float
    prequantized_ms: float


@record
class CastTable:
    """One published benchmark: where it ran, its shapes and its rows."""

    name: str
    gpu: str  # the planc GPU preset it ran on
    source: str
    shapes: Mapping[str, tuple[tuple[int, int, int], ...]]  # phase -> (M, K, N) of each call
    # recipe -> the recipe whose pre-quantized column holds its GEMMs alone, where its own does
    # not (TE's FP8 delayed scaling runs autocast in both columns: current scaling's kernel)
    gemm_from: Mapping[Fp8Recipe, Fp8Recipe]
    fit: tuple[Fp8Recipe, ...]  # the recipes a fit reads
    held_out: tuple[Fp8Recipe, ...]  # those it must not read
    rows: tuple[CastRow, ...]

    def row(self, recipe: str, phase: str) -> CastRow:
        """The row of `recipe` and `phase`; KeyError when the benchmark has none."""
        for row in self.rows:
            if (row.recipe, row.phase) == (recipe, phase):
                return row
        raise KeyError(f"{self.name}: no row for {recipe} {phase}")


def read_cast_tables(path: str) -> Mapping[str, CastTable]:
    """The benchmarks of `path` by name; CastTableError when the file or one cannot be used."""
    try:
        entries = named_entries(path, TABLES_LIMIT, TABLES_DEPTH)
    except InputError as error:
        raise CastTableError(str(error)) from None
    return MappingProxyType({name: _table(name, item) for name, item in entries.items()})


def _table(name: str, item: Any) -> CastTable:
    if not isinstance(item, dict):
        raise CastTableError(f"benchmark {name}: must be an object")
    unknown, missing = sorted(set(item) - TABLE_FIELDS), sorted(TABLE_FIELDS - set(item))
    if unknown or missing:
        raise CastTableError(f"benchmark {name}: unknown {unknown} or missing {missing} field(s)")
    if not isinstance(item["gpu"], str) or not isinstance(item["source"], str):
        raise CastTableError(f"benchmark {name}: gpu and source must be strings")
    if item["control"] != CONTROL:
        raise CastTableError(f"benchmark {name}: control must be {CONTROL!r}")
    rows = item["rows"]
    if not isinstance(rows, list) or not rows:
        raise CastTableError(f"benchmark {name}: rows must be a non-empty list")
    table = CastTable(
        name=name,
        gpu=item["gpu"],
        source=item["source"],
        shapes=_shapes(name, item["shapes"]),
        gemm_from=_gemm_from(name, item["gemm_from"]),
        fit=_recipes(name, "fit", item["fit"]),
        held_out=_recipes(name, "held_out", item["held_out"]),
        rows=tuple(_row(name, i, row) for i, row in enumerate(rows)),
    )
    named = (*table.fit, *table.held_out, *table.gemm_from.values())
    for recipe in (CONTROL, *(r.value for r in named)):
        for phase in PHASES:
            try:
                table.row(recipe, phase)
            except KeyError as error:
                raise CastTableError(f"benchmark {error.args[0]}") from None
    if set(table.fit) & set(table.held_out):
        raise CastTableError(f"benchmark {name}: a recipe both fitted and held out")
    return table


def _shapes(name: str, shapes: Any) -> Mapping[str, tuple[tuple[int, int, int], ...]]:
    if not isinstance(shapes, dict) or set(shapes) != set(PHASES):
        raise CastTableError(f"benchmark {name}: shapes must have exactly {', '.join(PHASES)}")
    out = {}
    for phase in PHASES:
        calls = shapes[phase]
        if not isinstance(calls, list) or not calls:
            raise CastTableError(f"benchmark {name}: shapes.{phase} must be a non-empty list")
        out[phase] = tuple(_shape(f"{name} shapes.{phase}[{i}]", c) for i, c in enumerate(calls))
    return MappingProxyType(out)


def _shape(where: str, value: Any) -> tuple[int, int, int]:
    if not isinstance(value, list) or len(value) != 3:
        raise CastTableError(f"benchmark {where}: must be [M, K, N]")
    m, k, n = (_count(where, axis, x) for axis, x in zip("MKN", value, strict=True))
    return m, k, n


def _gemm_from(name: str, value: Any) -> Mapping[Fp8Recipe, Fp8Recipe]:
    if not isinstance(value, dict):
        raise CastTableError(f"benchmark {name}: gemm_from must be an object of recipes")
    keys = _recipes(name, "gemm_from", list(value))
    values = _recipes(name, "gemm_from", list(value.values()))
    return MappingProxyType(dict(zip(keys, values, strict=True)))


def _recipes(name: str, key: str, value: Any) -> tuple[Fp8Recipe, ...]:
    if not isinstance(value, list):
        raise CastTableError(f"benchmark {name}: {key} must be a list of recipes")
    try:
        return tuple(Fp8Recipe(r) for r in value)
    except ValueError:
        raise CastTableError(f"benchmark {name}: {key} names an unknown recipe") from None


def _row(name: str, position: int, row: Any) -> CastRow:
    where = f"{name} row {position}"
    if not isinstance(row, dict) or set(row) != ROW_FIELDS:
        raise CastTableError(
            f"benchmark {where}: must have exactly {', '.join(sorted(ROW_FIELDS))}"
        )
    if row["phase"] not in PHASES or not isinstance(row["recipe"], str):
        raise CastTableError(f"benchmark {where}: phase must be one of {', '.join(PHASES)}")
    return CastRow(
        recipe=row["recipe"],
        phase=row["phase"],
        autocast_ms=_positive(where, "autocast_ms", row["autocast_ms"]),
        prequantized_ms=_positive(where, "prequantized_ms", row["prequantized_ms"]),
    )


def _count(where: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10**7:
        raise CastTableError(f"benchmark {where}: {key} must be an integer in [1, 10^7]")
    return value


def _positive(where: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1e6:
        raise CastTableError(f"benchmark {where}: {key} must be a positive number of ms")
    return float(value)


def measured_cast_s(table: CastTable, recipe: Fp8Recipe, phase: str) -> float:
    """Seconds of the casts of `recipe`'s `phase`: its autocast time less its GEMMs' alone
    (its pre-quantized time, or that of the recipe `gemm_from` names) at the control's ratio of
    the two runs (module docstring)."""
    control = table.row(CONTROL, phase)
    gemms = table.row(table.gemm_from.get(recipe, recipe).value, phase)
    drift = control.autocast_ms / control.prequantized_ms
    return (table.row(recipe.value, phase).autocast_ms - gemms.prequantized_ms * drift) / 1e3


def recipe_formats(recipe: Fp8Recipe, gpu: Gpu, framework: Framework = "megatron") -> Quantized:
    """What `recipe` quantizes on `gpu` (planc/presets/fp8.json), as the step model takes it
    for a run of `framework` (Megatron-Core's: Transformer Engine's kernels)."""
    training = Training(
        s=1,
        b=1,
        B=1,
        precision="fp4" if recipe is Fp8Recipe.NVFP4 else "fp8",
        optimizer="adam",
        grad_accum_fp32=False,
        recompute="none",
        attention="flash",
        fp8_recipe=recipe,
        framework=framework,
    )
    return quantized_formats(training, recipe, gpu)


def call_casts(m: int, k: int, n: int, q: Quantized) -> tuple[OpCost, ...]:
    """The casts of one benchmark call, a `te.Linear` forward of x [M, K] by W [K, N] under
    autocast: x with every copy `q`'s GEMMs need (the weight requires a gradient), W rowwise
    only (x requires none), each read `q.reads` times (TE's linear.py `_Linear.forward`:
    input_quantizer.set_usage(rowwise=True, columnwise=backward_needs_input), weight
    columnwise_usage = inp.requires_grad)."""
    kernels = [
        *cast_kernels(float(m * k), q, BETA, q.reads, q.usages, 1.0),
        *cast_kernels(float(k * n), q, BETA, q.reads, 1, 1.0),
    ]
    return tuple(OpCost("benchmark cast", "te-cast", work, NOTHING) for work in kernels)


def predicted_cast_s(table: CastTable, recipe: Fp8Recipe, phase: str, eff: Efficiency) -> float:
    """planc's seconds for the casts of `recipe`'s `phase` of `table` under the tables `eff`."""
    gpu = preset_gpu(table.gpu)
    q = recipe_formats(recipe, gpu)
    device = Device.of(gpu.peaks[DType.BF16], gpu.memory_bandwidth_gbs)
    return sum(
        work_time_s(op, op.forward, device, eff)
        for m, k, n in table.shapes[phase]
        for op in call_casts(m, k, n, q)
    )
