"""`planc check`, `planc rules`, `planc schema` and `planc presets`: the commands that read specs
and rules without planning a run."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

import click

from planc.outputs import escape
from planc.outputs.progress import beating

FORMATS = ("text", "json", "github", "sarif", "gitlab")


def _default_format() -> str:
    return "github" if os.environ.get("GITHUB_ACTIONS") == "true" else "text"


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
        click.echo(f"planc: error: {escape.line(self.format_message())}", err=True)


@click.command()
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
@beating("planc check")
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
    from planc.cli.discover import Excludes, UnreadableDirectory, discover
    from planc.cli.reporters import REPORTERS, Options, use_color
    from planc.cli.searchspec import search_spec_findings
    from planc.findings import exit_code
    from planc.rules.config import ConfigError, Resolver

    try:
        configs = Resolver(config_file, select or None, ignore)
        cli_excludes = Excludes(exclude)

        def excluded(path: str) -> bool:
            config = configs.for_path(path)
            return cli_excludes.match(path) or Excludes(config.exclude, config.base).match(path)

        paths = discover(files, excluded, skip_non_specs, force_exclude)
        results = check_paths(paths, configs, stdin_filename, search_spec_findings)
    except (ConfigError, UnreadableDirectory) as error:
        raise _ConfigProblem(str(error)) from None
    if not paths and not skip_non_specs:
        click.echo("planc: no planc specs found in " + escape.line(", ".join(files)), err=True)
    to_file = output_file is not None
    color = not to_file and use_color(sys.stdout.isatty())
    options = Options(quiet=quiet, color=color, source=not quiet)
    report = REPORTERS[output_format or _default_format()](results, strict, options)
    if output_file is not None:
        from planc.outputs.emit import write_text_atomic

        read = [configs.for_path(stdin_filename if p == "-" else p).path for p in paths]
        write_text_atomic(output_file, report, [*paths, *filter(None, read)])  # refused as output
    else:
        click.echo(report, nl=False, color=color)  # click would strip colour off a non-TTY
    sys.exit(exit_code(results, strict, exit_zero))


@click.command()
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


@click.command()
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


def _hbm(gpu: Mapping[str, Any]) -> str:
    """A preset's HBM in one unit for every GPU (GiB, what planc budgets), and the datasheet's
    GB beside it: a 40 GiB A100 is 42.9 GB, a 141 GB H200 131.3 GiB."""
    size = gpu["memory_gib"] * 2**30 if "memory_gib" in gpu else gpu["memory_gb"] * 10**9
    return f"{size / 2**30:>6.1f} GiB {size / 10**9:>6.1f} GB"


@click.command()
def presets() -> None:
    """List the GPU and model presets with their sources."""
    from planc.presets import all_gpu_presets, all_model_presets

    click.echo("GPUs (HBM in GiB, 2^30 bytes, as memory budgets count it; GB = 10^9 bytes):")
    for name, gpu in all_gpu_presets().items():
        click.echo(
            f"  {name:<12} {_hbm(gpu)}  {gpu['bf16_tflops']:>5} TFLOPS bf16  NVLink domain "
            f"{gpu['nvlink_domain']}\n      source: {gpu['source']}"
        )
    click.echo("Models:")
    for name, model in all_model_presets().items():
        click.echo(
            f"  {name:<15} L={model['layers']} h={model['hidden']} heads={model['heads']} "
            f"V={model['vocab']}\n      source: {model['source']}"
        )
