"""The command line: a thin click layer. Each command parses, calls one function, prints, exits.

The commands live by what they do: `lint` (check, rules, schema, presets), `review` (memory,
explain, report, search, diff) and `build` (compile, verify, calibrate). Heavy modules are
imported inside the commands so that `planc check` starts fast.
"""

from __future__ import annotations

import click

from planc import __version__
from planc.cli import build, lint, review


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


for command in (
    lint.check,
    lint.rules,
    lint.schema,
    lint.presets,
    review.memory,
    review.explain,
    review.report,
    review.search,
    review.diff_command,
    build.compile_command,
    build.verify,
    build.calibrate,
):
    main.add_command(command)
