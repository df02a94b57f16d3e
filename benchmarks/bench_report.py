"""Benchmark `planc report` at 1k, 16k and 131k ranks: time by phase and page size.

Usage: ``python benchmarks/bench_report.py [--quick] [--repeat K]`` (quick: 1k and 131k, once)

The spec is bench_compile.py's Llama 3 405B on H100 nodes (t=8, p=16, 64 micro-batches per
data-parallel rank), whose memory does not fit (PLC007) — the case a report is drawn for. Phases:
load and check the spec, analyse and estimate the step, draw the page; `cli` runs the installed
``planc report`` end to end in a fresh process (start-up and the atomic write included). Times
are the best of --repeat runs. Targets: under 5 s and under 2 MB at 131,072 ranks.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Runnable as a script from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_compile import NODES, spec_text

from planc.analysis import analyse, estimate_step
from planc.check import check_loaded
from planc.plannable import plannable
from planc.report import render_page
from planc.spec.load import load_path

TARGET_S = 5.0
TARGET_BYTES = 2 * 1024 * 1024
QUICK = ("1k", "131k")


def _once(path: Path) -> dict[str, Any]:
    start = time.perf_counter()
    loaded = load_path(str(path))
    result = check_loaded(loaded)
    checked = time.perf_counter()
    if loaded.job is None:
        raise SystemExit("the benchmark spec does not resolve")
    plan = plannable(loaded.job)
    if isinstance(plan, tuple):
        raise SystemExit(f"the benchmark spec cannot be planned: {plan}")
    analysis = analyse(plan)
    step = estimate_step(analysis)
    analysed = time.perf_counter()
    page = render_page(result, analysis, step)
    drawn = time.perf_counter()
    return {
        "ranks": plan.world,
        "check_s": checked - start,
        "analyse_s": analysed - checked,
        "draw_s": drawn - analysed,
        "total_s": drawn - start,
        "page_bytes": len(page.encode()),
    }


def _cli(path: Path, out: Path) -> float:
    start = time.perf_counter()
    subprocess.run(["planc", "report", str(path), "-o", str(out)], check=True, capture_output=True)
    return time.perf_counter() - start


def measure(size: str, repeat: int, folder: Path) -> dict[str, Any]:
    path = folder / f"llama3-405b-{size}.yaml"
    path.write_text(spec_text(NODES[size]), encoding="utf-8")
    runs = [_once(path) for _ in range(repeat)]
    best = {key: min(run[key] for run in runs) for key in runs[0]}
    best["cli_s"] = min(_cli(path, folder / f"{size}.html") for _ in range(repeat))
    best["file_bytes"] = (folder / f"{size}.html").stat().st_size
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = QUICK if args.quick else tuple(NODES)
    repeat = 1 if args.quick else args.repeat
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            results[size] = measure(size, repeat, Path(tmp))
            row = results[size]
            print(
                f"{size:>5}: {row['ranks']:>7,} ranks  check {row['check_s']:.3f} s  analyse "
                f"{row['analyse_s']:.3f} s  draw {row['draw_s']:.3f} s  in-process "
                f"{row['total_s']:.3f} s  planc report {row['cli_s']:.3f} s  "
                f"{row['file_bytes'] / 1e6:.2f} MB",
                file=sys.stderr,
            )
    big = results[sizes[-1]]
    met = big["cli_s"] < TARGET_S and big["file_bytes"] < TARGET_BYTES
    print(
        f"target at {big['ranks']:,} ranks: under {TARGET_S:g} s and {TARGET_BYTES / 2**20:g} MiB: "
        + ("met" if met else "MISSED"),
        file=sys.stderr,
    )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
