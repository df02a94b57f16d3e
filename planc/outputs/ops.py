"""`planc explain --ops`: the step model's ops per kind of layer, as text and as JSON
(`planc.perf.op_table`)."""

from __future__ import annotations

from typing import Any

from planc.outputs import escape
from planc.perf.compute import OpTime
from planc.perf.op_table import OpTable

HEADER = f"    {'op':<40} {'engine':<12} {'GFLOP':>10} {'MB':>9} {'forward':>9} {'bwd data':>9} {'bwd weight':>10}"


def _row(name: str, engine: str, flops: float, moved: float, times: tuple[float, ...]) -> str:
    ms = " ".join(f"{t * 1e3:9.3f}" for t in times[:2]) + f" {times[2] * 1e3:10.3f}"
    return f"    {escape.line(name):<40} {engine:<12} {flops / 1e9:10.2f} {moved / 1e6:9.1f} {ms}"


def _label(t: OpTime) -> str:
    """The op's name, with the measured speed-up its 16-bit time is divided by where it has one
    (`planc.perf.ops.measured_linear`), and how rarely it runs where it runs less than once a
    micro-batch (`OpCost.calls`: a weight cast once per step)."""
    name = t.op.name if t.op.speedup == 1.0 else f"{t.op.name} (16-bit ÷ {t.op.speedup:.2f})"
    return name if t.op.calls == 1.0 else f"{name} (once per {round(1 / t.op.calls)})"


def _section(title: str, ops: tuple[OpTime, ...]) -> list[str]:
    lines = [f"  {title}", HEADER]
    for t in ops:
        w = t.op.forward
        lines.append(
            _row(
                _label(t),
                t.op.engine,
                w.flops * t.op.calls,
                w.bytes * t.op.calls,
                (t.forward_s, t.backward_data_s, t.backward_weight_s),
            )
        )
    total = tuple(
        sum(getattr(t, k) for t in ops)
        for k in ("forward_s", "backward_data_s", "backward_weight_s")
    )
    flops = sum(t.op.forward.flops * t.op.calls for t in ops)
    moved = sum(t.op.forward.bytes * t.op.calls for t in ops)
    lines.append(_row("total", "", flops, moved, total))
    return lines


def op_lines(table: OpTable) -> list[str]:
    """The table as text: one section per kind of layer, then the two ends; FLOPs and bytes of
    the forward pass, milliseconds of each pass."""
    lines = [
        "ops per micro-batch on one rank (the step model's; GFLOP and MB = 10^6 bytes of the "
        "forward, ms of each pass, before recompute):"
    ]
    for kind in table.kinds:
        lines += _section(f"{kind.label} ({kind.layers} of the model's layers)", kind.ops)
    lines += _section("embedding (first stage)", table.embedding)
    lines += _section("final norm, LM head and loss (last stage)", table.head)
    return lines


def _ops_json(ops: tuple[OpTime, ...]) -> list[dict[str, Any]]:
    return [
        {
            "name": t.op.name,
            "engine": t.op.engine,
            "speedup": t.op.speedup,
            "calls": t.op.calls,
            "forward_flops": t.op.forward.flops * t.op.calls,
            "forward_bytes": t.op.forward.bytes * t.op.calls,
            "forward_s": t.forward_s,
            "backward_data_s": t.backward_data_s,
            "backward_weight_s": t.backward_weight_s,
        }
        for t in ops
    ]


def op_json(table: OpTable) -> dict[str, Any]:
    """The table as plain data: per kind its label, its layers and its ops; the two ends."""
    return {
        "kinds": [
            {"label": k.label, "layers": k.layers, "ops": _ops_json(k.ops)} for k in table.kinds
        ],
        "embedding": _ops_json(table.embedding),
        "head": _ops_json(table.head),
    }
