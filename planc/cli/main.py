"""The command line: a thin click layer. Each command parses, calls one function, prints, exits.

Heavy modules are imported inside the commands so that `planc check` starts fast.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import TYPE_CHECKING, NoReturn

import click

from planc import __version__

if TYPE_CHECKING:
    from typing import Any, ClassVar, Protocol, TypeVar

    from planc.spec.job import Cluster

    class _Clustered(Protocol):
        """A job or plannable job: a dataclass with a cluster (`_with_hosts`)."""

        __dataclass_fields__: ClassVar[dict[str, Any]]

        @property
        def cluster(self) -> Cluster: ...

    _Job = TypeVar("_Job", bound=_Clustered)
    from collections.abc import Callable

    from planc.spec.options import Option

    _Command = TypeVar("_Command", bound=Callable[..., None])
    from planc.analysis import Analysis
    from planc.findings import Finding

FORMATS = ("text", "json", "github", "sarif")


def _default_format() -> str:
    return "github" if os.environ.get("GITHUB_ACTIONS") == "true" else "text"


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="planc")
def main() -> None:
    """Validate distributed LLM training specs and compile them into launch plans.

    Exit codes: 0 clean (warnings allowed), 1 findings that fail, 2 unusable input or usage error.
    """


def entry() -> None:
    """The `planc` program (console script and `python -m planc`): `main` in planc.cli.boundary."""
    from planc.cli.boundary import run

    run(main)


def _complete_rules(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[click.shell_completion.CompletionItem]:
    """Rule ids for `planc rules <TAB>` and `--select/--ignore` (the part after the last comma)."""
    from click.shell_completion import CompletionItem

    from planc.rules import REGISTRY

    done, _, last = incomplete.rpartition(",")
    prefix = f"{done}," if done else ""
    return [
        CompletionItem(prefix + rule_id, help=rule.title)
        for rule_id, rule in REGISTRY.items()
        if rule_id.startswith(last.upper())
    ]


class _ConfigProblem(click.ClickException):
    """A configuration file or option planc cannot use: exit 2, like a usage error."""

    exit_code = 2

    def show(self, file: object = None) -> None:
        click.echo(f"planc: error: {self.format_message()}", err=True)


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=True, allow_dash=True))
@click.option(
    "--format",
    "output_format",
    type=click.Choice(FORMATS),
    default=None,
    help="Output format. Default: text, or github when GITHUB_ACTIONS=true.",
)
@click.option("--strict", is_flag=True, help="Fail on warnings too.")
@click.option(
    "--select",
    multiple=True,
    metavar="RULES",
    shell_complete=_complete_rules,
    help="Run only these rules (ids or prefixes; comma-separated or repeated). Replaces the "
    "configuration's select.",
)
@click.option(
    "--ignore",
    multiple=True,
    metavar="RULES",
    shell_complete=_complete_rules,
    help="Do not run these rules (ids or prefixes; comma-separated or repeated). Adds to the "
    "configuration's ignore. Input rules PLC100-PLC111 cannot be ignored.",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, exists=True),
    help="Use this .planc.toml or pyproject.toml instead of searching upwards from each file.",
)
@click.option(
    "--exclude",
    multiple=True,
    metavar="GLOB",
    help="Leave out files and directories matching GLOB when walking directories (repeatable).",
)
@click.option(
    "--force-exclude",
    is_flag=True,
    help="Apply --exclude and the configuration's exclude to files named on the command line too.",
)
@click.option(
    "--skip-non-specs",
    is_flag=True,
    help="Skip named files that do not look like planc specs, as files found in directories "
    "are (the pre-commit hook passes every YAML file).",
)
@click.option(
    "--output-file",
    type=click.Path(dir_okay=False, allow_dash=False),
    help="Write the report to this file (atomically) instead of stdout.",
)
@click.option("-q", "--quiet", is_flag=True, help="Only the findings: no source lines, no summary.")
@click.option(
    "--exit-zero",
    is_flag=True,
    help="Exit 0 even when findings fail (unusable input still exits 2).",
)
@click.option(
    "--stdin-filename",
    default="-",
    metavar="NAME",
    help="The name reported for - (stdin) in every format, and where its configuration is found.",
)
def check(
    files: tuple[str, ...],
    output_format: str | None,
    strict: bool,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    config_file: str | None,
    exclude: tuple[str, ...],
    force_exclude: bool,
    skip_non_specs: bool,
    output_file: str | None,
    quiet: bool,
    exit_zero: bool,
    stdin_filename: str,
) -> None:
    """Check training specs against planc's rules.

    FILES are spec files, directories (walked for *.yaml and *.yml files that look like planc
    specs) or - for stdin. Configuration comes from [tool.planc] in pyproject.toml or from
    .planc.toml, found upwards from each file.
    """
    from planc.check import check_paths
    from planc.cli.discover import Excludes, discover
    from planc.cli.reporters import REPORTERS, Options, use_color
    from planc.findings import exit_code
    from planc.rules.config import ConfigError, Resolver

    try:
        configs = Resolver(config_file, select or None, ignore)
        cli_excludes = Excludes(exclude)

        def excluded(path: str) -> bool:
            config = configs.for_path(path)
            return cli_excludes.match(path) or Excludes(config.exclude, config.base).match(path)

        paths = discover(files, excluded, skip_non_specs, force_exclude)
        results = check_paths(paths, configs, stdin_filename)
    except ConfigError as error:
        raise _ConfigProblem(str(error)) from None
    if not paths and not skip_non_specs:
        click.echo("planc: no planc specs found in " + ", ".join(files), err=True)
    to_file = output_file is not None
    color = not to_file and use_color(sys.stdout.isatty())
    options = Options(quiet=quiet, color=color, source=not quiet)
    report = REPORTERS[output_format or _default_format()](results, strict, options)
    if output_file is not None:
        from planc.outputs.emit import write_text_atomic

        write_text_atomic(output_file, report)
    else:
        click.echo(report, nl=False, color=color)  # click would strip colour off a non-TTY
    sys.exit(exit_code(results, strict, exit_zero))


@main.command()
@click.argument("rule_id", required=False, shell_complete=_complete_rules)
def rules(rule_id: str | None) -> None:
    """List the rules, or explain RULE_ID with a passing and a failing example."""
    from planc.cli.reporters import level, rule_url
    from planc.rules import REGISTRY, get

    if rule_id is None:
        for rule in REGISTRY.values():
            click.echo(f"{rule.id}  {level(rule.severity):<7}  {rule.title}")
        return
    try:
        rule = get(rule_id)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    exits = "; unusable input: exit 2" if rule.severity.rank > 2 else ""
    click.echo(f"{rule.id} ({level(rule.severity)}{exits})\n\n{rule.doc}\n\n{rule_url(rule.id)}")


def _with_hosts(job: _Job, spec: str, hosts_file: str | None) -> _Job:
    """`planc compile --hosts FILE`: the file's names replace the job's hosts after the host
    rule's checks (PLC014; findings on stderr, exit 1, or 2 for a file that cannot be read).
    Without hosts anywhere, warn that the launcher files name placeholders."""
    import dataclasses

    from planc.spec.job import NodeNames

    hosts = job.cluster.hosts
    if hosts_file is None:
        if isinstance(hosts, NodeNames):
            click.echo(
                f"{spec}: warning: no hardware.hosts: the launcher files name node-0 ... "
                f"node-{len(hosts) - 1}, which torchrun cannot resolve; set hardware.hosts or "
                "pass --hosts FILE",
                err=True,
            )
        return job
    from planc.cli.reporters import REPORTERS
    from planc.findings import exit_code
    from planc.spec.hostfile import check_hosts

    result, names = check_hosts(hosts_file, job.cluster.nodes)
    if result.findings:
        click.echo(REPORTERS["text"]((result,), False), nl=False, err=True)
        sys.exit(max(exit_code((result,)), 1))
    return dataclasses.replace(job, cluster=dataclasses.replace(job.cluster, hosts=names))


@main.command()
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False), help="Write to a file instead of stdout."
)
def schema(output: str | None) -> None:
    """Print the JSON Schema of the spec (the file published as schemas/spec.schema.json)."""
    import json

    from planc.spec.models import json_schema

    text = json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"
    if output is None:
        click.echo(text, nl=False)
        return
    from planc.outputs.emit import write_text_atomic

    write_text_atomic(output, text)


@main.command()
def presets() -> None:
    """List the GPU and model presets with their sources."""
    from planc.presets import all_gpu_presets, all_model_presets

    click.echo("GPUs:")
    for name, gpu in all_gpu_presets().items():
        memory = f"{gpu['memory_gib']} GiB" if "memory_gib" in gpu else f"{gpu['memory_gb']} GB"
        click.echo(
            f"  {name:<12} {memory:>8}  {gpu['bf16_tflops']:>5} TFLOPS bf16  NVLink domain "
            f"{gpu['nvlink_domain']}\n      source: {gpu['source']}"
        )
    click.echo("Models:")
    for name, model in all_model_presets().items():
        click.echo(
            f"  {name:<15} L={model['layers']} h={model['hidden']} heads={model['heads']} "
            f"V={model['vocab']}\n      source: {model['source']}"
        )


def _about_the_run(rule_id: str) -> bool:
    """Whether a rule's finding is about the run a spec describes (a run rule or a
    precondition), not about a file planc cannot use as a spec (an input rule)."""
    from planc.rules import REGISTRY, RuleKind

    rule = REGISTRY.get(rule_id)
    return rule is not None and rule.kind is not RuleKind.INPUT


def _plan_or_exit(
    path: str,
    output_format: str = "text",
    tolerate: frozenset[str] = frozenset(),
    force: bool = False,
) -> tuple[Analysis, tuple[Finding, ...]]:
    """The analysed, plannable job of a spec, and the error findings a forced run went past.

    Error findings stop the command (exit 1; 2 for unusable input), except rules in `tolerate`
    (a memory report is most useful when PLC007 fails) and, with `force`, every rule about the
    run itself. A job with no layout at all (a precondition rule ignored or re-levelled) stops
    every command with the refusal, located, whatever the flags.
    """
    from planc.analysis import analyse
    from planc.check import check_file, with_refusals
    from planc.cli.reporters import REPORTERS
    from planc.findings import FileResult, Severity, exit_code
    from planc.plannable import plannable
    from planc.spec.load import load_path

    def stop(result: FileResult) -> NoReturn:
        reporter = REPORTERS["json" if output_format == "json" else "text"]
        click.echo(reporter((result,), False), nl=False, err=True)
        sys.exit(max(exit_code((result,)), 1))

    loaded = load_path(path)
    result, context = check_file(loaded)
    errors = tuple(f for f in result.findings if f.severity.rank >= Severity.ERROR.rank)
    blocking = [
        f for f in errors if f.rule not in tolerate and not (force and _about_the_run(f.rule))
    ]
    if loaded.job is None or blocking:
        stop(result)
    plan = plannable(loaded.job)
    if isinstance(plan, tuple):
        stop(with_refusals(result, plan, loaded.locator))
    # check analysed the job already when a rule needed it; never twice.
    analysis = context.analysis if context is not None and context.analysis is not None else None
    return analysis or analyse(plan), tuple(f for f in errors if f.rule not in tolerate)


@main.command()
@click.argument("spec", type=click.Path(allow_dash=True))
@click.option("--format", "output_format", type=click.Choice(("text", "json")), default="text")
def memory(spec: str, output_format: str) -> None:
    """Per-rank memory budget of SPEC, term by term, for every pipeline stage."""
    from planc.outputs.memory import render_text, to_json

    analysis, _ = _plan_or_exit(spec, output_format, frozenset({"PLC006", "PLC007"}))
    job, result = analysis.plan, analysis.memory
    if output_format == "json":
        import json

        click.echo(json.dumps(to_json(job, result), indent=2))
    else:
        click.echo(render_text(job, result), nl=False)


@main.command()
@click.argument("spec", type=click.Path(allow_dash=True))
@click.option("--format", "output_format", type=click.Choice(("text", "json")), default="text")
def explain(spec: str, output_format: str) -> None:
    """Summary of SPEC for review: memory, traffic per link, bubble, step time, tokens/s, MFU."""
    from planc.outputs.explain import explain as build
    from planc.outputs.explain import render_text, to_json

    analysis, _ = _plan_or_exit(spec, output_format, frozenset({"PLC006", "PLC007"}))
    result = build(analysis)
    if output_format == "json":
        import json

        click.echo(json.dumps(to_json(result), indent=2))
    else:
        click.echo(render_text(result), nl=False)


@main.command()
@click.argument("spec", type=click.Path(allow_dash=True))
@click.option(
    "--output",
    "-o",
    required=True,
    type=click.Path(dir_okay=False),
    help="The HTML file to write (atomically; one self-contained file).",
)
def report(spec: str, output: str) -> None:
    """One HTML page of SPEC: findings, memory per stage, pipeline schedule, placement, traffic.

    Self-contained (opens from file://, no network). Drawn even when memory (PLC007) or the
    bubble (PLC006) fails; other errors exit 1 with the findings, unusable input exits 2.
    """
    from planc.cli.reporters import REPORTERS
    from planc.findings import exit_code
    from planc.outputs.emit import write_text_atomic
    from planc.report import build_report  # start-up: the analysis, the simulation and numpy

    built = build_report(spec)
    if built.page is None:
        click.echo(REPORTERS["text"]((built.result,), False), nl=False, err=True)
        sys.exit(max(exit_code((built.result,)), 1))
    write_text_atomic(output, built.page)
    click.echo(f"{spec}: wrote {output} ({len(built.page.encode()):,} bytes)")


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


@main.command()
@click.argument("spec", type=click.Path(allow_dash=True))
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=1), metavar="K",
              help="How many layouts to list.")
@click.option("--format", "output_format", type=click.Choice(("text", "json", "csv")),
              default="text", show_default=True)
@click.option("--write", type=click.Path(dir_okay=False), metavar="BEST.yaml",
              help="Write the best layout as a complete spec (planc check passes it).")
@click.option("--jobs", "-j", default=1, show_default=True, type=click.IntRange(min=1),
              metavar="N", help="Worker processes; the results do not depend on N.")
@click.option("--allow", multiple=True, metavar="AXIS=V,V",
              help="Values to try on one axis, replacing the spec's search section "
              "(repeatable), e.g. --allow tensor=4,8 --allow recompute=selective,full.")
@_rule_option_flags
@click.option("--strict", is_flag=True,
              help="Warnings reject a candidate too, as planc check --strict fails on them.")
@click.option("--report", type=click.Path(dir_okay=False), metavar="FILE.html",
              help="Also write a page to explore the best layouts: controls per searched axis, "
              "each layout's memory bars, step time, throughput and bubble.")  # fmt: skip
def search(
    spec: str,
    top: int,
    output_format: str,
    write: str | None,
    jobs: int,
    allow: tuple[str, ...],
    strict: bool,
    report: str | None,
    **limits: float | None,
) -> None:
    """Find the fastest parallel layouts for SPEC's model, hardware and training step.

    Every parallelism or training field SPEC writes is pinned. Left out, tensor, pipeline,
    virtual_stages, context, sequence_parallel, zero_stage, micro_batch and recompute are
    searched (data is derived); SPEC's search section narrows them. Candidates are pruned by the
    rules planc check runs and ranked by estimated step time, then peak memory.

    Exit codes: 0 layouts found, 1 no candidate is feasible, 2 unusable input or usage error.
    """
    from planc.cli.search import Request, run  # start-up: loads the analysis and rules

    request = Request(spec, top, output_format, write, jobs, allow, limits, strict, report)
    if report is not None:
        from planc.report.explorer import write_explorer  # start-up: the page and its charts

        outcome = run(request, write_explorer)
    else:
        outcome = run(request)
    click.echo(outcome.text, nl=False)
    click.echo(outcome.notes, nl=False, err=True)
    sys.exit(outcome.code)


@main.command(name="diff")
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
        click.echo(f"planc diff: error: {error}", err=True)
        sys.exit(2)
    if output_format == "json":
        import json

        click.echo(json.dumps(to_json(result), indent=2))
    else:
        render = render_markdown if output_format == "markdown" else render_text
        click.echo(render(result), nl=False)
    sys.exit(exit_status(result))


@main.command(name="compile")
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
def compile_command(
    spec: str,
    out_dir: str,
    force: bool,
    overwrite: bool,
    hosts_file: str | None,
    run_verify: bool,
) -> None:
    """Compile SPEC into plan.json, process groups and launcher files in a directory.

    Nothing is written when check finds an error (unless --force); the directory appears
    complete or not at all.
    """
    from pathlib import Path

    from planc.compile import OutputError, compile_job, write_plan
    from planc.compile.plan import plan_json

    analysis, forced = _plan_or_exit(spec, force=force)
    # Host names only name the nodes; no number of the analysis depends on them.
    analysis = dataclasses.replace(analysis, plan=_with_hosts(analysis.plan, spec, hosts_file))
    for item in forced:
        click.echo(
            f"{spec}:{item.line}:{item.column}: forced past error {item.rule}: {item.text}",
            err=True,
        )
    plan = compile_job(analysis, forced)
    if run_verify and not _verified(plan_json(plan)):
        sys.exit(1)
    try:
        protect = () if spec == "-" else (spec,)
        written = write_plan(plan, Path(out_dir), overwrite=overwrite, protect=protect)
    except OutputError as error:
        click.echo(f"{spec}: error: {error}", err=True)
        sys.exit(2)
    summary = plan.summary
    click.echo(
        f"{spec}: wrote {len(written)} files to {out_dir}: {summary.world_size} ranks, peak memory "
        f"{summary.peak_memory_bytes / 2**30:.2f} GiB on rank {summary.peak_rank} (stage "
        f"{summary.peak_stage}) of {summary.hbm_bytes / 2**30:.2f} GiB"
    )


def _verified(text: str) -> bool:
    """Verify plan.json text independently of the code that wrote it; print the table."""
    from planc.verify import render, verify_text  # start-up: numpy and the simulators

    result = verify_text(text)
    click.echo(render(result), nl=False)
    return result.ok


@main.command()
@click.argument("path", type=click.Path(allow_dash=True))
def verify(path: str) -> None:
    """Prove a plan: PATH is a compiled plan directory or a spec (compiled in memory).

    The plan.json is checked as written, independently of the code that wrote it: groups,
    placement, every op's bytes from tensor shapes, wire totals per rank, ring collectives
    simulated on the real group members, and the pipeline's send/receive pairs. Exit 1 on any
    mismatch, 2 when PATH is not a readable spec or plan.
    """
    from pathlib import Path

    from planc.verify.plandata import PlanFormatError  # start-up: numpy

    if path != "-" and Path(path).is_dir():
        target = Path(path) / "plan.json"
        try:
            text = target.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            click.echo(f"{target}: error: cannot read the plan: {error}", err=True)
            sys.exit(2)
    else:
        from planc.compile import compile_job
        from planc.compile.plan import plan_json

        analysis, _ = _plan_or_exit(path, tolerate=frozenset({"PLC006", "PLC007"}))
        text = plan_json(compile_job(analysis))
    try:
        sys.exit(0 if _verified(text) else 1)
    except PlanFormatError as error:
        click.echo(f"{path}: error: {error}", err=True)
        sys.exit(2)

@main.command()
@click.argument("measurements", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False), help="The file to write."
)
def calibrate(measurements: str, output: str) -> None:
    """Fit efficiency tables to measured step times: MEASUREMENTS is a CSV of `spec path,
    seconds per step` (paths relative to it), all on one GPU type.

    Writes one GPU's entry of planc/presets/efficiency.json to OUTPUT (reference it from a spec
    as hardware.calibration) and prints each run's error before and after the fit and from a fit
    that left it out.
    """
    from planc.analysis import predictor
    from planc.outputs.emit import write_text_atomic
    from planc.perf import calibrate as cal  # start-up: numpy and the step model

    try:
        rows = cal.read_measurements(measurements)
    except (OSError, ValueError) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(2)
    tolerate = frozenset({"PLC006", "PLC007"})
    analyses = [(path, s, _plan_or_exit(str(path), tolerate=tolerate)[0]) for path, s in rows]
    runs = [cal.Run(str(path), a.plan, s, predictor(a)) for path, s, a in analyses]
    try:
        result = cal.calibrate_runs(runs)
    except ValueError as error:
        click.echo(f"{measurements}: error: {error}", err=True)
        sys.exit(2)
    write_text_atomic(output, cal.calibration_json(result, measurements))
    click.echo(cal.render(result), nl=False)
    click.echo(f"wrote {output}")
