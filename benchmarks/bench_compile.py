"""Benchmark `planc compile` at 1k, 16k and 131k ranks: time, peak memory and output size.

Usage: ``python benchmarks/bench_compile.py [--quick] [--repeat K]`` (quick: 1k and 16k, once)

The spec is Llama 3 405B on H100 nodes: t=8, p=16 with its 126 layers split 7, 8 × 14, 7 (the
end stages also hold the embedding and the LM head), the data degree derived from the world, ZeRO-1, 64 micro-batches per data-parallel rank. Each size runs
in a fresh subprocess so that peak RSS (``ru_maxrss``) belongs to that size alone; times are
the best of --repeat runs (the write phase is file-system bound and noisy: ~33k files at 131k
ranks, one torchrun script and env file per node; set TMPDIR to choose the disk). The
baseline is the RSS after imports and loading the spec, so the delta is what compiling,
rendering and writing cost. The ratios column compares each size with the previous one: with
time and memory linear in ranks they follow the rank ratio (16x, then 8x).
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

# Runnable as a script from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planc.analysis import analyse
from planc.compile import compile_job
from planc.compile.write import render_files, write_files
from planc.plannable import Plannable, plannable
from planc.spec.load import load_text

GPUS_PER_NODE = 8
NODES = {"1k": 128, "16k": 2048, "131k": 16384}
QUICK = ("1k", "16k")

SPEC = """\
version: 1
name: llama3-405b-{nodes}x8
model: {{preset: llama3-405b}}
hardware:
  gpu: h100-sxm
  nodes: {nodes}
  gpus_per_node: 8
  hosts: "gpu-{{00000..{last:05d}}}"
parallelism:
  {{tensor: 8, pipeline: 16, stage_layers: [7{middle}, 7], sequence_parallel: true, zero_stage: 1}}
training: {{seq_len: 8192, micro_batch: 1, global_batch: {batch}, recompute: selective, attention: flash}}
"""


def spec_text(nodes: int) -> str:
    data = nodes * GPUS_PER_NODE // (8 * 16)
    return SPEC.format(nodes=nodes, last=nodes - 1, batch=64 * data, middle=", 8" * 14)


def _rss_bytes() -> int:
    # ru_maxrss is KiB on Linux, bytes on macOS.
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def _timed_once(job: Plannable) -> dict[str, Any]:
    start = time.perf_counter()
    plan = compile_job(analyse(job))
    compiled = time.perf_counter()
    files = render_files(plan)
    rendered = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_files(files, Path(tmp) / "plan")
        written = time.perf_counter()
        sizes = {path.name: path.stat().st_size for path in paths}
        output_bytes = sum(path.stat().st_size for path in paths)
    return {
        "ranks": plan.world,
        "compile_s": compiled - start,
        "render_s": rendered - compiled,
        "write_s": written - rendered,
        "total_s": written - start,
        "plan_json_bytes": sizes["plan.json"],
        "files": len(paths),
        "output_bytes": output_bytes,
    }


def measure(nodes: int, repeat: int) -> dict[str, Any]:
    """One size, in this process: best-of-`repeat` phase times, peak RSS and bytes written."""
    resolved = load_text("bench.yaml", spec_text(nodes)).job
    job = plannable(resolved) if resolved is not None else None
    if job is None or isinstance(job, tuple):
        raise SystemExit("the benchmark spec does not resolve to a plannable job")
    baseline = _rss_bytes()
    runs = [_timed_once(job) for _ in range(repeat)]
    peak = _rss_bytes()
    best = {key: min(run[key] for run in runs) for key in runs[0]}
    # RSS is a high-water mark that the set-up may already have reached at small sizes;
    # tracemalloc (numpy reports its buffers to it) gives the compile's own peak.
    tracemalloc.start()
    _timed_once(job)
    traced_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {
        **best,
        "rss_peak_bytes": peak,
        "rss_delta_bytes": peak - baseline,
        "traced_peak_bytes": traced_peak,
    }


def _child(size: str, repeat: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", size, "--repeat", str(repeat)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"benchmark size {size} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def run(quick: bool = False, repeat: int = 3) -> dict[str, Any]:
    """Every size in its own subprocess, plus growth ratios between consecutive sizes."""
    sizes = QUICK if quick else tuple(NODES)
    results = {size: _child(size, 1 if quick else repeat) for size in sizes}
    ratios = {}
    for small, large in itertools.pairwise(sizes):
        a, b = results[small], results[large]
        ratios[f"{large}/{small}"] = {
            key: b[key] / a[key] if a[key] else None
            for key in ("ranks", "total_s", "traced_peak_bytes", "plan_json_bytes")
        }
    return {"results": results, "ratios": ratios}


def _table(report: dict[str, Any]) -> str:
    rows = [
        f"{'size':>5} {'ranks':>8} {'compile s':>9} {'render s':>8} {'write s':>8} {'total s':>8} "
        f"{'peak RSS MB':>11} {'traced MB':>9} {'plan.json MB':>12} {'B/rank':>7} {'files':>6}"
    ]
    for size, r in report["results"].items():
        rows.append(
            f"{size:>5} {r['ranks']:>8} {r['compile_s']:>9.3f} {r['render_s']:>8.3f} "
            f"{r['write_s']:>8.3f} {r['total_s']:>8.3f} {r['rss_peak_bytes'] / 1e6:>11.1f} "
            f"{r['traced_peak_bytes'] / 1e6:>9.1f} {r['plan_json_bytes'] / 1e6:>12.2f} "
            f"{r['plan_json_bytes'] / r['ranks']:>7.0f} {r['files']:>6}"
        )
    rows.append("")
    for name, ratio in report["ratios"].items():
        parts = ", ".join(
            f"{key} ×{value:.1f}" for key, value in ratio.items() if value is not None
        )
        rows.append(f"growth {name}: {parts}")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1k and 16k ranks only")
    parser.add_argument("--repeat", type=int, default=3, help="best of K runs per size (default 3)")
    parser.add_argument("--child", choices=tuple(NODES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(NODES[args.child], args.repeat)))
        return
    print(_table(run(args.quick, args.repeat)))


if __name__ == "__main__":
    main()
