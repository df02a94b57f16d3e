"""Benchmark `planc compile` of DeepSeek-V3 at its published layout (2,048 H800, PP 16 × EP 64).

Usage: ``python benchmarks/bench_deepseek.py [--repeat K]``

The spec is examples/deepseek-v3-2048xh800.yaml. Two measurements, each the median of K runs:

* the command as a user runs it, `python -m planc compile SPEC -o DIR`, in a fresh process
  (start-up, loading, analysis, compile, rendering and writing every file);
* the phases in this process, after the imports: load (YAML, spec, job), analyse (memory,
  communication schedule, step estimate inputs), compile (ranks, groups, plan), render and write.

Target (issue 14): the command under 2 s. Targets are figures here, never timed assertions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Runnable as a script from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planc.analysis import analyse
from planc.compile import compile_job
from planc.compile.write import render_files, write_files
from planc.plannable import Plannable, plannable
from planc.spec.load import load_text

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "examples" / "deepseek-v3-2048xh800.yaml"
TARGET_S = 2.0


def command_s(repeat: int) -> float:
    """Median wall seconds of `python -m planc compile SPEC -o DIR` in a fresh process."""
    times = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "planc", "compile", str(SPEC), "-o", out],
                check=True,
                stdout=subprocess.DEVNULL,
                cwd=ROOT,
            )
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def _timed(step: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    value = step()
    return value, time.perf_counter() - start


def phases_s() -> dict[str, float]:
    """Seconds of each phase of one compile in this process."""
    text = SPEC.read_text(encoding="utf-8")
    loaded, load_s = _timed(lambda: load_text(str(SPEC), text))
    assert loaded.job is not None, loaded.findings
    plan = plannable(loaded.job)
    assert isinstance(plan, Plannable), plan
    analysis, analyse_s = _timed(lambda: analyse(plan))
    compiled, compile_s = _timed(lambda: compile_job(analysis))
    files, render_s = _timed(lambda: render_files(compiled))
    with tempfile.TemporaryDirectory() as out:
        _, write_s = _timed(lambda: write_files(files, Path(out)))
    return {
        "load": load_s,
        "analyse": analyse_s,
        "compile": compile_s,
        "render": render_s,
        "write": write_s,
        "files": float(len(files)),
    }


def run(repeat: int = 5) -> dict[str, Any]:
    runs = [phases_s() for _ in range(repeat)]
    phases = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    total = command_s(repeat)
    return {
        "spec": str(SPEC.relative_to(ROOT)),
        "ranks": 2048,
        "command_s": round(total, 3),
        "target_s": TARGET_S,
        "within_target": total < TARGET_S,
        "phases_s": {k: round(v, 4) for k, v in phases.items() if k != "files"},
        "files": int(phases["files"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (median)")
    args = parser.parse_args()
    print(json.dumps(run(args.repeat), indent=2))


if __name__ == "__main__":
    main()
