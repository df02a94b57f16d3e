"""Bounded work: every command at the 1,048,576-rank cap and at a billion micro-batches.

Usage: ``python benchmarks/bench_scale.py [--json FILE] [--only SPEC ...]``

Issue 19's and 30's target: each command under 30 s and 2 GB on this machine (2 cores), with
progress on stderr when it runs long, off a terminal too. Each command runs as its own
`python -m planc` process; its wall time, CPU seconds (user + system, its workers included) and
peak RSS (``ru_maxrss`` of the child, from ``os.wait4``) are measured, and the lines it wrote to
stderr (a pipe here: `planc.outputs.progress` logs a line every few seconds). The baseline, in the same run, is `planc check` of the
shipped 8-GPU example, so the ratios say how much more work the extreme specs cost than the
smallest one; the absolute figures are what the target is about.

The specs:
- cap: Llama 3 8B with 4,096 layers on 131,072 nodes × 8 H100 (1,048,576 ranks), t = 8,
  p = 4,096, d = 32, m = 4,096 (PLC006 ignored; PLC007 fails, so compile uses --force);
- cap-1gpu: a million nodes of one GPU each (planc's node limit; t = 1, p = 16, d = 62,500): a
  million host names and launcher lines;
- billion: Llama 3 8B on 16 H100, t = 8, p = 2, global batch 10⁹ (m = 10⁹) at seq_len 1,024, so
  that a rank's bytes per step (9.4·10¹⁷ on NVLink) stay below PLC073's 2^62;
- large-batch (`planc search` only, issue 30): Llama 3 70B on 2,048 nodes × 8 H100 (16,384
  GPUs) at global batch 1,179,648 and seq_len 8,192, the whole default space (m in the
  hundreds to thousands for every candidate), as a user runs it (on the cores available) and on
  one process (-j 1).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LIMIT_S, LIMIT_BYTES = 30.0, 2 * 10**9

SPECS = {
    "cap": """\
version: 1
name: cap
model: {preset: llama3-8b, layers: 4096}
hardware: {gpu: h100-sxm, nodes: 131072, hosts: "n{000001..131072}"}
parallelism: {tensor: 8, pipeline: 4096}
training: {seq_len: 8192, micro_batch: 1, global_batch: 131072}
rules: {ignore: [PLC006]}
""",
    "cap-1gpu": """\
version: 1
name: cap-1gpu
model: {preset: llama3-8b, layers: 32}
hardware: {gpu: h100-sxm, nodes: 1000000, gpus_per_node: 1, nvlink_domain: 1, hosts: "n{0000001..1000000}"}
parallelism: {tensor: 1, pipeline: 16, zero_stage: 1}
training: {seq_len: 8192, micro_batch: 1, global_batch: 1000000, recompute: full}
rules: {ignore: [PLC006, PLC019]}
""",
    "billion": """\
version: 1
name: billion
model: {preset: llama3-8b}
hardware: {gpu: h100-sxm, nodes: 2, hosts: "n{1..2}"}
parallelism: {tensor: 8, pipeline: 2}
training: {seq_len: 1024, micro_batch: 1, global_batch: 1000000000}
""",
}


# Specs only `planc search` runs (its space is the point, not the commands of one layout).
SEARCH_SPECS = {
    "large-batch": """\
version: 1
name: large-batch
model: {preset: llama3-70b}
hardware: {gpu: h100-sxm, nodes: 2048}
training: {seq_len: 8192, global_batch: 1179648}
""",
}


def run(args: list[str]) -> dict[str, Any]:
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "planc", *args],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.PIPE,
        )
        # stderr is read as it comes (a long command's progress lines must not fill the pipe).
        stderr = process.stderr.read().decode() if process.stderr else ""
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - start
        out.seek(0)
        stdout = out.read()
    code = os.waitstatus_to_exitcode(status)
    result = {
        "seconds": elapsed,
        # CPU seconds (user + system) of the command and the workers it waited for (-j N): the
        # figure a loaded machine changes least.
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_bytes": usage.ru_maxrss * 1024,
        "exit": code,
        "stderr": stderr[-300:],
        # stderr is a pipe, not a terminal: a command that runs long logs progress lines
        # there (planc.outputs.progress.logged, one every few seconds).
        "stderr_lines": stderr.count("\n"),
    }
    if args[0] == "search" and code in (0, 1):
        result["candidates"] = json.loads(stdout)["evaluated"]
    return result


def commands(spec: Path, out: Path) -> dict[str, list[str]]:
    return {
        "check": ["check", str(spec)],
        "memory": ["memory", str(spec)],
        "explain": ["explain", str(spec)],
        "report": ["report", str(spec), "-o", f"{out}.html"],
        "verify spec": ["verify", str(spec)],
        "compile": ["compile", str(spec), "-o", str(out), "--force"],
        "verify dir": ["verify", str(out)],
    }


def search_commands(spec: Path) -> dict[str, list[str]]:
    return {
        # As a user runs it: on the cores available.
        "search": ["search", str(spec), "--format", "json"],
        "search -j 1": ["search", str(spec), "--format", "json", "-j", "1"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    parser.add_argument(
        "--only", nargs="+", choices=[*SPECS, *SEARCH_SPECS], help="run these specs only"
    )
    options = parser.parse_args()
    chosen = set(options.only or [*SPECS, *SEARCH_SPECS])
    baseline = run(["check", str(ROOT / "examples" / "llama3-8b-1node.yaml")])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in SPECS.items():
            if name not in chosen:
                continue
            spec = Path(tmp) / f"{name}.yaml"
            spec.write_text(text)
            for command, args in commands(spec, Path(tmp) / f"{name}-plan").items():
                result = run(args)
                rows.append({"spec": name, "command": command, **result})
        for name, text in SEARCH_SPECS.items():
            if name not in chosen:
                continue
            spec = Path(tmp) / f"{name}.yaml"
            spec.write_text(text)
            for command, args in search_commands(spec).items():
                rows.append({"spec": name, "command": command, **run(args)})
    print(
        f"baseline: planc check of the 8-GPU example, {baseline['seconds']:.2f} s, {baseline['peak_bytes'] / 1e6:.0f} MB"
    )
    print(
        f"{'spec':<12}{'command':<13}{'exit':>5}{'seconds':>9}{'CPU s':>8}{'×base':>8}{'peak MB':>9}{'×base':>8}{'stderr lines':>13}  target (30 s, 2 GB)"
    )
    for row in rows:
        within = row["seconds"] < LIMIT_S and row["peak_bytes"] < LIMIT_BYTES
        print(
            f"{row['spec']:<12}{row['command']:<13}{row['exit']:>5}{row['seconds']:>9.2f}"
            f"{row['cpu_s']:>8.2f}{row['seconds'] / baseline['seconds']:>8.1f}"
            f"{row['peak_bytes'] / 1e6:>9.0f}"
            f"{row['peak_bytes'] / baseline['peak_bytes']:>8.1f}{row['stderr_lines']:>13}"
            f"  {'met' if within else 'MISSED'}"
        )
        if "candidates" in row:
            print(
                f"    {row['candidates']:,} candidates, "
                f"{row['candidates'] / row['cpu_s']:,.0f} per CPU second"
            )
        if row["exit"] not in (0, 1):
            print(f"    stderr: {row['stderr']}")
    if options.json:
        options.json.write_text(json.dumps({"baseline": baseline, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
