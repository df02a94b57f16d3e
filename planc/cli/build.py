"""`planc compile`, `planc verify` and `planc calibrate`: the commands that write a plan, prove one
and fit the step model to measured runs."""

from __future__ import annotations

import dataclasses
import os
import sys

import click

from planc.cli.common import plan_or_exit, with_hosts
from planc.outputs.escape import line
from planc.outputs.progress import beating


@click.command(name="compile")
@click.argument("spec", type=click.Path(allow_dash=True))
@click.option(
    "--output",
    "-o",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Directory to write the plan into (replaced atomically).",
)
@click.option("--force", is_flag=True, help="Write the plan even when check finds errors.")
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace the output directory even if it holds files planc did not write.",
)
@click.option(
    "--hosts",
    "hosts_file",
    type=click.Path(dir_okay=False),
    help="Host names in node order, replacing the spec's: a hostfile (one per line, DeepSpeed "
    "'name slots=8' accepted) or a Slurm nodelist such as gpu-[001-004].",
)
@click.option(
    "--verify",
    "run_verify",
    is_flag=True,
    help="Prove the plan with the numpy collective simulator first; write nothing if it fails.",
)
@click.option(
    "--fallbacks",
    "lost_nodes",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    metavar="K",
    help="Also write fallbacks.json: the plans for the world less 1 … K nodes (planc search "
    "--lost-nodes), so an operator has them before the failure.",
)
@beating("planc compile")
def compile_command(
    spec: str,
    out_dir: str,
    force: bool,
    overwrite: bool,
    hosts_file: str | None,
    run_verify: bool,
    lost_nodes: int,
) -> None:
    """Compile SPEC into plan.json, process groups and launcher files in a directory.

    Nothing is written when check finds an error (unless --force); the directory appears
    complete or not at all.
    """
    from pathlib import Path

    from planc.compile import OutputError, compile_job, render_files
    from planc.compile.plan import plan_json
    from planc.compile.write import write_files

    if lost_nodes and spec == "-":
        click.echo(f"{spec}: error: --fallbacks reads the spec twice: give a file", err=True)
        sys.exit(2)
    analysis, forced = plan_or_exit(spec, force=force)
    # Host names only name the nodes; no number of the analysis depends on them.
    analysis = dataclasses.replace(analysis, plan=with_hosts(analysis.plan, spec, hosts_file))
    for item in forced:
        click.echo(
            f"{spec}:{item.line}:{item.column}: forced past error {item.rule}: {item.text}",
            err=True,
        )
    plan = compile_job(analysis, forced)
    if run_verify:
        from planc.verify.plandata import PlanFormatError  # start-up: numpy

        try:
            verified = _verified(plan_json(plan))
        except PlanFormatError as error:  # a plan verify cannot read: a planc bug, said plainly
            click.echo(line(f"{spec}: error: the compiled plan is not one verify reads: {error}"), err=True)
            sys.exit(2)
        if not verified:
            sys.exit(1)
    try:
        protect = () if spec == "-" else (spec,)
        files = render_files(plan)
        if lost_nodes:
            files = _with_fallbacks(files, spec, lost_nodes)
        written = write_files(files, Path(out_dir), overwrite=overwrite, protect=protect)
    except OutputError as error:
        click.echo(line(f"{spec}: error: {error}"), err=True)
        sys.exit(2)
    summary = plan.summary
    click.echo(
        f"{spec}: wrote {len(written)} files to {out_dir}: {summary.world_size} ranks, peak memory "
        f"{summary.peak_memory_bytes / 2**30:.2f} GiB on rank {summary.peak_rank} (stage "
        f"{summary.peak_stage}) of {summary.hbm_bytes / 2**30:.2f} GiB"
    )


def _with_fallbacks(files: dict[str, str], spec: str, lost_nodes: int) -> dict[str, str]:
    """The plan's files with fallbacks.json (the keep and re-layout plans for the world less
    1 … `lost_nodes` nodes, as planc search --lost-nodes finds them) and the manifest renewed."""
    import json

    from planc.cli.search import Request, setup_of  # start-up: the search machinery
    from planc.compile.write import MANIFEST, manifest
    from planc.search.fallback import fallbacks
    from planc.search.output import fallback_json
    from planc.spec.load import load_path

    loaded = load_path(spec)
    if loaded.job is None:  # plan_or_exit loaded it already
        raise AssertionError("a compiled spec loads")
    plans = fallbacks(setup_of(loaded, Request(spec)), loaded.job, lost_nodes)
    data = {"spec": loaded.job.name, "fallbacks": [fallback_json(p) for p in plans]}
    out = {**files, "fallbacks.json": json.dumps(data, indent=2) + "\n"}
    out[MANIFEST] = manifest(out)
    return out


def _verified(text: str) -> bool:
    """Verify plan.json text independently of the code that wrote it; print the table."""
    from planc.verify import render, verify_text  # start-up: numpy and the simulators

    result = verify_text(text)
    click.echo(render(result), nl=False)
    return result.ok


@click.command()
@click.argument("path", type=click.Path(allow_dash=True))
@beating("planc verify")
def verify(path: str) -> None:
    """Prove a plan: PATH is a compiled plan directory or a spec (compiled in memory).

    The plan.json is checked as written, independently of the code that wrote it: groups,
    placement, every op's bytes from tensor shapes, wire totals per rank, ring collectives
    simulated on the real group members, and the pipeline's send/receive pairs. Exit 1 on any
    mismatch, 2 when PATH is not a readable spec or plan.
    """
    from pathlib import Path

    from planc.verify.plandata import PlanFormatError  # start-up: numpy
    from planc.verify.source import read_plan_file  # start-up: jsonschema

    if path != "-" and Path(path).is_dir():
        target = Path(path) / "plan.json"
        try:
            text = read_plan_file(target)
        except PlanFormatError as error:
            click.echo(f"{target}: error: {error}", err=True)
            sys.exit(2)
    else:
        from planc.compile import compile_job
        from planc.compile.plan import plan_json

        analysis, _ = plan_or_exit(path, tolerate=frozenset({"PLC006", "PLC007"}))
        text = plan_json(compile_job(analysis))
    try:
        sys.exit(0 if _verified(text) else 1)
    except PlanFormatError as error:
        click.echo(line(f"{path}: error: {error}"), err=True)
        sys.exit(2)


@click.command()
@click.argument("measurements", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False), help="The file to write."
)
def calibrate(measurements: str, output: str) -> None:
    """Fit efficiency tables to measured step times: MEASUREMENTS is a CSV of `spec path,
    seconds per step` (paths relative to it), all on one GPU type.

    Fits the GEMM curve and each link's efficiency and, where the runs have Megatron-LM MoE
    layers, the time per local expert of their training.framework_release and recipe. Writes one
    GPU's entry of planc/presets/efficiency.json to OUTPUT (reference it from a spec as
    hardware.calibration) and prints each run's error before and after the fit and from a fit
    that left it out.
    """
    from planc.analysis import predictor
    from planc.outputs.emit import write_text_atomic
    from planc.perf import calibrate as cal  # start-up: numpy and the step model

    try:
        rows = cal.read_measurements(measurements)
    except (OSError, ValueError) as error:
        click.echo(line(f"error: {error}"), err=True)
        sys.exit(2)
    tolerate = frozenset({"PLC006", "PLC007"})
    analyses = [(path, s, plan_or_exit(str(path), tolerate=tolerate)[0]) for path, s in rows]
    # each run labelled as its row names it: relative to the measurements file
    here = os.path.dirname(os.path.abspath(measurements))
    runs = [
        cal.Run(os.path.relpath(os.path.abspath(path), here), a.plan, s, predictor(a))
        for path, s, a in analyses
    ]
    try:
        result = cal.calibrate_runs(runs)
    except ValueError as error:
        click.echo(line(f"{measurements}: error: {error}"), err=True)
        sys.exit(2)
    read = [measurements, *(str(path) for path, _ in rows)]
    write_text_atomic(output, cal.calibration_json(result, measurements), read)
    click.echo(cal.render(result), nl=False, err=output == "-")  # stdout holds the file
    click.echo(f"wrote {output}", err=output == "-")
