"""planc's benchmark suite: one command, ratios against baselines measured in the same run.

    python benchmarks/run.py [--quick] [--json out.json] [--install] [--venv DIR]

- start-up: `planc check` on one example against `check-jsonschema` validating the same file
  against schemas/spec.schema.json, and against `yamllint`, round-robin, medians and minimums.
  Measure it from a regular install: `--install` creates a venv with `pip install .` and both
  baselines (`--venv DIR` to keep or reuse it); an editable install (`pip install -e '.[bench]'`)
  adds an import hook to every start-up. A missing tool is reported as such, not guessed;
- check latency for 1 and 1,000 files in one call (pre-commit passes hundreds at once);
- compile time, peak memory and plan size at 1k, 16k and 131k ranks (bench_compile.py);
- `planc compile` of DeepSeek-V3 at its published 2,048-GPU layout, target < 2 s
  (bench_deepseek.py);
- verify time for the largest group shapes of the shipped examples;
- the simulated ring all-reduce against np.sum (bench_sim.py);
- the pipeline simulation per op: build, compile and time a schedule, against the floor of a
  per-op Python loop (bench_pipeline.py).

Targets are figures here, never timed assertions in tests.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "llama3-8b-1node.yaml"
SCHEMA = ROOT / "schemas" / "spec.schema.json"
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _tool(name: str) -> str | None:
    """The tool next to this Python first (a venv), then on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


def wall(command: list[str], repeat: int) -> float:
    """Median wall time of a command in seconds (fresh process each time: start-up included)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def install_venv(target: Path) -> Path:
    """A fresh venv at `target` with planc installed the way users get it (`pip install .`, not
    editable: an editable install adds an import hook to every start-up) and the baselines."""
    import venv

    venv.create(target, with_pip=True)
    python = target / ("Scripts" if sys.platform == "win32" else "bin") / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(ROOT), "yamllint", "check-jsonschema"],
        check=True,
    )
    return python.parent


def _timed(command: list[str], cwd: str) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one run of `command`. CPU time hardly
    moves when other processes load the machine; wall time is what a user waits."""
    start = time.perf_counter()
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd
    )
    if hasattr(os, "wait4"):
        _, _, usage = os.wait4(process.pid, 0)
        process.returncode = 0  # reaped here; keep Popen from waiting again
        return time.perf_counter() - start, usage.ru_utime + usage.ru_stime
    process.wait()
    return time.perf_counter() - start, float("nan")


def startup(repeat: int, bin_dir: Path | None = None) -> dict[str, Any]:
    """Start-up of `planc check` on one spec against yamllint and check-jsonschema on the same
    file, every tool from the same venv (`bin_dir`; default: next to this Python, then PATH).

    The commands run round-robin, `repeat` rounds, so load from other processes falls on all of
    them alike; medians and minimums of wall time, and medians of CPU time, are reported (the
    minimum is the least disturbed run; CPU time is the steadiest figure on a loaded machine).
    """

    def tool(name: str) -> str | None:
        if bin_dir is not None:
            found = bin_dir / name
            return str(found) if found.exists() else None
        return _tool(name)

    python = str(bin_dir / "python") if bin_dir is not None else sys.executable
    planc, cjs, yl = tool("planc"), tool("check-jsonschema"), tool("yamllint")
    commands = {
        "planc check": [planc, "check", str(EXAMPLE)] if planc else None,
        "check-jsonschema": [cjs, "--schemafile", str(SCHEMA), str(EXAMPLE)] if cjs else None,
        "yamllint": [yl, str(EXAMPLE)] if yl else None,
        "python -c pass": [python, "-c", "pass"],
    }
    runs: dict[str, list[float]] = {name: [] for name, cmd in commands.items() if cmd}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    with tempfile.TemporaryDirectory() as cwd:  # no configuration file on the way up
        for _ in range(repeat):
            for name in runs:
                wall_s, cpu_s = _timed(commands[name], cwd)  # type: ignore[arg-type]
                runs[name].append(wall_s)
                cpu[name].append(cpu_s)
    median = {name: statistics.median(t) for name, t in runs.items()}
    least = {name: min(t) for name, t in runs.items()}
    cpu_median = {name: statistics.median(t) for name, t in cpu.items()}
    ratios = {
        f"planc / {name}": {
            "median": median["planc check"] / median[name],
            "min": least["planc check"] / least[name],
            "cpu median": cpu_median["planc check"] / cpu_median[name],
        }
        for name in runs
        if name != "planc check" and "planc check" in runs
    }
    return {
        "median_s": median,
        "min_s": least,
        "cpu_median_s": cpu_median,
        "ratios": ratios,
        "targets": {"planc / check-jsonschema": "< 1", "planc / yamllint": "≤ 1.1"},
    }


def many_files(count: int, repeat: int) -> dict[str, Any]:
    """`planc check` over `count` distinct valid specs in one call."""
    text = EXAMPLE.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i in range(count):
            path = Path(tmp) / f"spec-{i:04d}.yaml"
            path.write_text(
                text.replace("name: llama3-8b-1x8xh100", f"name: job-{i}"), encoding="utf-8"
            )
            paths.append(str(path))
        planc = _tool("planc") or "planc"
        one = wall([planc, "check", paths[0]], repeat)
        all_files = wall([planc, "check", *paths], max(1, repeat // 2))
    return {
        "files": count,
        "one_file_s": one,
        "all_files_s": all_files,
        "per_file_ms": 1e3 * (all_files - one) / max(count - 1, 1),
        "ratio_all_to_one": all_files / one,
    }


def precision_check(repeat: int) -> dict[str, Any]:
    """`planc check` on bf16 specs against the same specs in FP8 (issue 25: an FP8 spec checks
    as fast as a bf16 one): the shipped DeepSeek-V3 pair and llama3-8b-1node in both."""
    planc = _tool("planc") or "planc"
    text = EXAMPLE.read_text(encoding="utf-8")
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        fp8 = Path(tmp) / "llama3-8b-1node-fp8.yaml"
        fp8.write_text(text.replace("precision: bf16", "precision: fp8"), encoding="utf-8")
        pairs = {
            "llama3-8b-1node": (EXAMPLE, fp8),
            "deepseek-v3-2048xh800": (
                ROOT / "examples" / "deepseek-v3-2048xh800.yaml",
                ROOT / "examples" / "deepseek-v3-2048xh800-fp8.yaml",
            ),
        }
        for name, (bf16, low) in pairs.items():
            a = wall([planc, "check", str(bf16)], repeat)
            b = wall([planc, "check", str(low)], repeat)
            out[name] = {"bf16_s": a, "fp8_s": b, "ratio_fp8_to_bf16": b / a}
    return out


def verify_times() -> dict[str, Any]:
    """`planc verify` on the plan.json of each shipped example, compiled in memory."""
    from planc.analysis import analyse
    from planc.compile import compile_job
    from planc.compile.plan import plan_json
    from planc.plannable import plannable
    from planc.spec.load import load_path
    from planc.verify import verify_text

    out = {}
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        job = load_path(str(path)).job
        plan = plannable(job) if job is not None else ()
        if isinstance(plan, tuple):
            continue
        text = plan_json(compile_job(analyse(plan)))
        start = time.perf_counter()
        result = verify_text(text)
        out[path.name] = {
            "seconds": time.perf_counter() - start,
            "ok": result.ok,
            "ring_shapes": len(result.rings),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    parser.add_argument("--json", type=Path, help="also write the numbers to this file")
    parser.add_argument(
        "--venv",
        type=Path,
        help="measure start-up with the tools of this venv; with --install, create it first "
        "(pip install . plus yamllint and check-jsonschema)",
    )
    parser.add_argument("--install", action="store_true", help="create --venv (or a temporary one)")
    args = parser.parse_args()
    repeat = 3 if args.quick else 9

    import bench_compile
    import bench_deepseek
    import bench_pipeline
    import bench_sim

    results: dict[str, Any] = {}
    bin_dir = None
    if args.install:
        target = args.venv or Path(tempfile.mkdtemp(prefix="planc-bench-")) / "venv"
        bin_dir = install_venv(target)
    elif args.venv:
        bin_dir = args.venv / ("Scripts" if sys.platform == "win32" else "bin")
    results["startup"] = startup(3 * repeat, bin_dir)
    print("start-up (median wall seconds):", json.dumps(results["startup"], indent=2))
    results["check_many"] = many_files(100 if args.quick else 1000, repeat)
    print("check over many files:", json.dumps(results["check_many"], indent=2))
    results["precision"] = precision_check(repeat)
    print("check, bf16 against fp8:", json.dumps(results["precision"], indent=2))
    results["verify"] = verify_times()
    print("verify:", json.dumps(results["verify"], indent=2))
    results["compile"] = bench_compile.run(quick=args.quick)
    print("compile:", json.dumps(results["compile"], indent=2, default=str))
    results["deepseek"] = bench_deepseek.run(repeat)
    print("compile DeepSeek-V3 (2,048 H800):", json.dumps(results["deepseek"], indent=2))
    results["sim"] = bench_sim.run(quick=args.quick)
    print("simulated all-reduce:", json.dumps(results["sim"], indent=2, default=str))
    results["pipeline"] = bench_pipeline.run(quick=args.quick)
    print("pipeline simulation (CPU us an op):", json.dumps(results["pipeline"], indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
