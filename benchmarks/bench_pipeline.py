"""Benchmark the pipeline simulation: build, compile and time a schedule, per op.

Usage: ``python benchmarks/bench_pipeline.py [--quick] [--repeat K] [--json out.json]``

For every registered schedule at p = 8, m = 64 (v = 4 for the interleaved ones, 2 for the V
ones) and the largest shape the validation table times (interleaved 1F1B, p = 35, m = 210,
v = 3: 44,100 ops), in CPU microseconds an op, best of K:

- build: the registered builder's op lists (`planc.pipeline.registry.build`);
- compile: `compile_schedule`, the order and the waits, once per shape;
- time: `stage_ends` on the compiled program, what every further step estimate of the shape
  pays (`planc.pipeline.bounded` keeps the compiled programs);
- simulate: `simulate`, validation, compile, timing and the timeline with spans and messages.

The baseline, in the same run, is the floor of any per-op Python loop: one pass over the
program's three per-op tuples that adds an int an op. `time / floor` says how far the timing is
from it; `(build + compile) / time` how many timings a cache miss costs.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Runnable as a script from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planc.pipeline import registry
from planc.pipeline.timeline import Program, compile_schedule, simulate, stage_ends
from planc.vocab import ScheduleKind

TWO_CHUNKS = (ScheduleKind.DUALPIPE_V, ScheduleKind.ZB_V)
LARGEST = (ScheduleKind.INTERLEAVED_1F1B, 35, 210, 3)


def shapes(quick: bool) -> list[tuple[ScheduleKind, int, int, int]]:
    """(kind, p, m, v) of every registered schedule, and the largest shape when not quick."""
    out = []
    for kind in registry.SCHEDULES:
        v = 2 if kind in TWO_CHUNKS else 4 if registry.unmet(kind, 8, 64, 1) else 1
        out.append((kind, 8, 16 if quick else 64, v))
    return out if quick else [*out, LARGEST]


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def _floor(program: Program) -> int:
    """The least a loop over the program's ops can cost: read each op, add an int."""
    total = 0
    for stage, slot, waits in zip(program.stage, program.slot, program.waits, strict=True):
        total += stage + slot + len(waits)
    return total


def measure(kind: ScheduleKind, p: int, m: int, v: int, repeat: int) -> dict[str, Any]:
    schedule = registry.build(kind, p, m, v)
    program = compile_schedule(schedule)
    ops = len(program.stage)
    rng = random.Random(0)  # uneven stages, float times: the step estimate's inputs
    t_f = [rng.uniform(1e-3, 1e-2) for _ in range(p * v)]
    t_b = [2 * t for t in t_f]
    t_w = t_f if registry.definition(kind).splits_backward else None
    hop = 3.3e-5
    per_op = {
        "build": _best(lambda: registry.build(kind, p, m, v), repeat),
        "compile": _best(lambda: compile_schedule(schedule), repeat),
        "time": _best(lambda: stage_ends(program, t_f, t_b, hop, t_w), repeat),
        "simulate": _best(lambda: simulate(schedule, t_f, t_b, hop, t_w), repeat),
        "floor": _best(lambda: _floor(program), repeat),
    }
    us = {name: 1e6 * seconds / ops for name, seconds in per_op.items()}
    return {
        "schedule": kind.value,
        "p": p,
        "m": m,
        "v": v,
        "ops": ops,
        "us_per_op": us,
        "time_over_floor": us["time"] / us["floor"],
        "miss_over_time": (us["build"] + us["compile"]) / us["time"],
    }


def run(quick: bool = False, repeat: int | None = None) -> dict[str, Any]:
    """Every shape's figures (CPU microseconds an op), and the totals over all their ops."""
    k = repeat if repeat is not None else (3 if quick else 5)
    rows = [measure(*shape, repeat=k) for shape in shapes(quick)]
    ops = sum(row["ops"] for row in rows)
    total = {
        name: sum(row["us_per_op"][name] * row["ops"] for row in rows) / ops
        for name in rows[0]["us_per_op"]
    }
    return {"repeat": k, "shapes": rows, "all_us_per_op": total}


def _print_report(result: dict[str, Any]) -> None:
    names = ("build", "compile", "time", "simulate", "floor")
    print(f"pipeline simulation, CPU us an op (best of {result['repeat']}):")
    head = f"  {'schedule':<18} {'p':>3} {'m':>4} {'v':>2} {'ops':>6}"
    print(
        head + "".join(f" {name:>8}" for name in names) + f"  {'time/floor':>10} {'miss/time':>9}"
    )
    for row in result["shapes"]:
        shape = f"  {row['schedule']:<18} {row['p']:>3} {row['m']:>4} {row['v']:>2} {row['ops']:>6}"
        figures = "".join(f" {row['us_per_op'][name]:8.3f}" for name in names)
        print(f"{shape}{figures}  {row['time_over_floor']:10.1f} {row['miss_over_time']:9.1f}")
    total = result["all_us_per_op"]
    print(f"  {'all':<37}" + "".join(f" {total[name]:8.3f}" for name in names))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="m = 16, no largest shape")
    parser.add_argument("--repeat", type=int, default=None, help="best of K runs")
    parser.add_argument("--json", type=Path, help="also write the numbers to this file")
    args = parser.parse_args(argv)
    result = run(quick=args.quick, repeat=args.repeat)
    _print_report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
