"""`planc memory`, `explain`, `report`, `search` and `diff`: the commands that show what a run
costs and where it could go."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, get_args

import click

from planc.cli.common import plan_or_exit
from planc.outputs import escape
from planc.outputs.progress import beating
from planc.vocab import SearchObjective

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    from planc.spec.options import Option

    _Command = TypeVar("_Command", bound=Callable[..., None])


# explain's and memory's --format: one definition of the option both take.
_TEXT_OR_JSON = click.option(
    "--format",
    "output_format",
    type=click.Choice(("text", "json")),
    default="text",
    show_default=True,
    help="text for people; json for tools (bytes as integers).",
)


@click.command()
@click.argument("spec", type=click.Path(allow_dash=True))
@_TEXT_OR_JSON
@beating("planc memory")
def memory(spec: str, output_format: str) -> None:
    """Per-rank memory budget of SPEC, term by term, for every pipeline stage."""
    from planc.outputs.memory import render_text, to_json

    analysis, _ = plan_or_exit(spec, output_format, frozenset({"PLC006", "PLC007"}))
    job, result = analysis.plan, analysis.memory
    if output_format == "json":
        import json

        click.echo(json.dumps(to_json(job, result), indent=2))
    else:
        click.echo(render_text(job, result), nl=False)


@click.command()
@click.argument("spec", type=click.Path(allow_dash=True))
@_TEXT_OR_JSON
@click.option(
    "--ops",
    is_flag=True,
    help="Also list the step model's ops per kind of layer: FLOPs, bytes and milliseconds of "
    "each pass on one rank.",
)
@beating("planc explain")
def explain(spec: str, output_format: str, ops: bool) -> None:
    """Summary of SPEC for review: memory, traffic per link, bubble, step time, tokens/s, MFU."""
    from planc.outputs.explain import explain as build
    from planc.outputs.explain import render_text, to_json

    analysis, _ = plan_or_exit(spec, output_format, frozenset({"PLC006", "PLC007"}))
    result = build(analysis, ops)
    if output_format == "json":
        import json

        click.echo(json.dumps(to_json(result), indent=2))
    else:
        click.echo(render_text(result), nl=False)


@click.command()
@click.argument("spec", type=click.Path(allow_dash=True))
@click.option(
    "--output",
    "-o",
    required=True,
    type=click.Path(dir_okay=False),
    help="The HTML file to write (atomically; one self-contained file).",
)
@click.option(
    "--compare",
    metavar="BASE",
    default=None,
    help="Also draw what `planc diff BASE SPEC` says (a spec file or REV:path).",
)
@beating("planc report")
def report(spec: str, output: str, compare: str | None) -> None:
    """One HTML page of SPEC: findings, memory per stage, pipeline schedule, placement, traffic.

    Self-contained (opens from file://, no network). Drawn even when memory (PLC007) or the
    bubble (PLC006) fails; other errors exit 1 with the findings, unusable input exits 2.
    """
    from planc.cli.reporters import REPORTERS
    from planc.findings import exit_code
    from planc.outputs.diff import DiffError  # start-up: the analysis
    from planc.outputs.emit import write_text_atomic
    from planc.report import build_report  # start-up: the analysis, the simulation and numpy

    try:
        built = build_report(spec, compare)
    except DiffError as error:
        click.echo(f"planc report: error: {escape.line(str(error))}", err=True)
        sys.exit(2)
    if built.page is None:
        click.echo(REPORTERS["text"]((built.result,), False), nl=False, err=True)
        sys.exit(max(exit_code((built.result,)), 1))
    write_text_atomic(output, built.page, (spec,))
    click.echo(f"{spec}: wrote {output} ({len(built.page.encode()):,} bytes)", err=output == "-")


def _bounds_type(option: Option) -> click.IntRange | click.FloatRange:
    """A rule option's click type: its bounds, open or closed as declared."""
    low = option.ge if option.ge is not None else option.gt
    high = option.le if option.le is not None else option.lt
    min_open, max_open = option.gt is not None, option.lt is not None
    if option.value_type is int:
        return click.IntRange(
            None if low is None else int(low),
            None if high is None else int(high),
            min_open=min_open,
            max_open=max_open,
        )
    return click.FloatRange(_shown(low), _shown(high), min_open=min_open, max_open=max_open)


def _shown(bound: float | None) -> float | None:
    """A whole bound as an int, so the help reads [0<=x<1] (click prints the bound as given)."""
    return int(bound) if bound is not None and bound.is_integer() else bound


def _rule_option_flags(command: _Command) -> _Command:
    """`planc search`'s `--max-bubble` and the rest: one flag per rule option, in the order of
    `planc.spec.rule_options` (the rules' declarations)."""
    from planc.spec.rule_options import OPTIONS

    for option in reversed(OPTIONS):  # click lists the last decorator applied first
        flag = click.option(
            option.flag, option.name, type=_bounds_type(option), help=option.flag_help()
        )
        command = flag(command)
    return command


@click.command()
@click.argument("spec", type=click.Path(allow_dash=True))
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=1), metavar="K",
              help="How many layouts to list.")
@click.option("--format", "output_format", type=click.Choice(("text", "json", "csv")),
              default="text", show_default=True)
@click.option("--write", type=click.Path(dir_okay=False), metavar="BEST.yaml",
              help="Write the best layout as a complete spec (planc check passes it).")
@click.option("--jobs", "-j", default=None, type=click.IntRange(min=1), metavar="N",
              help="Worker processes; the results do not depend on N.  [default: the cores "
              "available, one for a small space]")
@click.option("--allow", multiple=True, metavar="AXIS=V,V",
              help="Values to try on one axis, replacing the spec's search section "
              "(repeatable), e.g. --allow tensor=4,8 --allow recompute=selective,full.")
@_rule_option_flags
@click.option("--strict", is_flag=True,
              help="Warnings reject a candidate too, as planc check --strict fails on them.")
@click.option("--allow-framework-warnings", is_flag=True,
              help="Keep layouts a framework rule warns about (ZeRO-2/3 with a pipeline, "
              "orders, schedules, context-parallel types the framework does not run as "
              "planned); by default they are left out.")
@click.option("--report", type=click.Path(dir_okay=False), metavar="FILE.html",
              help="Also write a page to explore the best layouts: controls per searched axis, "
              "each layout's memory bars, step time, throughput and bubble.")
@click.option("--objective", type=click.Choice(get_args(SearchObjective)),
              default="step", show_default=True,
              help="Rank by the step time, or by the run's time-to-train or cost: the step over "
              "the goodput its checkpoint leaves (the same order for both: the world and the "
              "run's steps are fixed).")
@click.option("--lost-nodes", default=0, show_default=True, type=click.IntRange(min=0),
              metavar="K", help="Also list fallback plans for the world less 1 … K nodes: the "
              "fastest keeping the model-parallel layout (no reshard) and the fastest re-layout, "
              "each with its time-to-train.")
@click.option("--batch-tolerance", default=0.10, show_default=True,
              type=click.FloatRange(0, 1), metavar="F",
              help="How far a fallback plan's global batch may move from the spec's, as a "
              "fraction.")  # fmt: skip
def search(
    spec: str,
    top: int,
    output_format: str,
    write: str | None,
    jobs: int | None,
    allow: tuple[str, ...],
    strict: bool,
    report: str | None,
    objective: str,
    lost_nodes: int,
    batch_tolerance: float,
    allow_framework_warnings: bool,
    **limits: float | None,
) -> None:
    """Find the fastest parallel layouts for SPEC's model, hardware and training step.

    Every parallelism or training field SPEC writes is pinned. Left out, tensor, expert_tensor,
    expert, pipeline, virtual_stages, pipeline_schedule, context, cp_comm_type, order,
    sequence_parallel, zero_stage, data_shard, offload, micro_batch, recompute and precision
    are searched (data is derived); SPEC's search section narrows them. Candidates are pruned
    by the rules planc check runs (and by default by a framework rule's warning) and ranked by
    estimated step time, then peak memory.

    Exit codes: 0 layouts found, 1 no candidate is feasible, 2 unusable input or usage error.
    """
    from planc.cli.search import Request, run  # start-up: loads the analysis and rules

    request = Request(
        spec, top, output_format, write, jobs, allow, limits, strict, report, objective,
        lost_nodes, batch_tolerance, allow_framework_warnings,
    )
    if report is not None:
        from planc.report.explorer import write_explorer  # start-up: the page and its charts

        outcome = run(request, write_explorer)
    else:
        outcome = run(request)
    click.echo(outcome.text, nl=False)
    click.echo(outcome.notes, nl=False, err=True)
    sys.exit(outcome.code)


@click.command(name="diff")
@click.argument("old")
@click.argument("new")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(("text", "json", "markdown")),
    default="text",
    help="markdown: a pull-request comment.",
)
def diff_command(old: str, new: str, output_format: str) -> None:
    """What changing OLD into NEW does: memory per stage and the peak, step time, tokens/s, MFU,
    bubble, traffic per link class, findings added and removed.

    OLD and NEW are spec files or git revisions as REV:path (read with git show), e.g.
    planc diff origin/main:specs/run.yaml specs/run.yaml. Exit codes: 0 no new errors, 1 NEW has
    an error OLD did not have, 2 an input that cannot be read (no file, no git, bad revision).
    """
    from planc.outputs.diff import (  # start-up: loads the analysis
        DiffError,
        diff,
        exit_status,
        render_markdown,
        render_text,
        to_json,
    )

    try:
        result = diff(old, new)
    except DiffError as error:
        click.echo(f"planc diff: error: {escape.line(str(error))}", err=True)
        sys.exit(2)
    if output_format == "json":
        import json

        click.echo(json.dumps(to_json(result), indent=2))
    else:
        render = render_markdown if output_format == "markdown" else render_text
        click.echo(render(result), nl=False)
    sys.exit(exit_status(result))
