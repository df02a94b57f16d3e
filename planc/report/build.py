"""From a spec path to a page: check, plan, analyse, estimate, draw.

Like `planc explain`, a report is drawn when the only errors are the ones it exists to show:
memory that does not fit (PLC007) and a bubble over the limit (PLC006). Any other error, and a
job with no layout at all, gives no page: the check result says why (as `planc explain` says it).
"""

from __future__ import annotations

import dataclasses
import os

from planc.analysis import analyse, estimate_step
from planc.check import check_file, with_refusals
from planc.findings import FileResult, Severity
from planc.outputs.diff import Diff, Side, read_side
from planc.plannable import plannable
from planc.record import record
from planc.report.page import render_page
from planc.run import estimate_run
from planc.spec.load import load_path

TOLERATED = frozenset({"PLC006", "PLC007"})


@record
class Built:
    """The page, or None with the check result (its errors) that stopped it."""

    result: FileResult
    page: str | None


def build_report(path: str, compare: str | None = None) -> Built:
    """The page of the spec at `path`; with `compare` (a spec path or REV:path, as planc diff
    takes it) also what `planc diff COMPARE PATH` says, drawn. Raises DiffError when `compare`
    cannot be read."""
    base = read_side(compare) if compare is not None else None
    loaded = load_path(path)
    result, context = check_file(loaded)
    blocking = [
        f
        for f in result.findings
        if f.severity.rank >= Severity.ERROR.rank and f.rule not in TOLERATED
    ]
    if loaded.job is None or blocking:
        return Built(result, None)
    plan = plannable(loaded.job)
    if isinstance(plan, tuple):  # a precondition rule the spec ignores or re-levels
        return Built(with_refusals(result, plan, loaded.locator), None)
    # check analysed the job already when a rule needed it; never twice.
    analysis = context.analysis if context is not None and context.analysis is not None else None
    analysis = analysis or analyse(plan)
    shown = dataclasses.replace(result, path=page_path(result.path))
    step = estimate_step(analysis)
    run = estimate_run(analysis, step) if plan.run.asked else None
    versus = None if base is None else Diff(base, Side(path, result.findings, analysis, step))
    return Built(result, render_page(shown, analysis, step, run, versus))


def page_path(path: str) -> str:
    """`path` as the page shows it: a file name that is not UTF-8 (Python holds its bytes as
    lone surrogates, PEP 383) with those bytes as \\xNN escapes, so the page stays UTF-8."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")
