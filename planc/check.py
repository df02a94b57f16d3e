"""Check: run every rule on a loaded spec and collect located findings.

Per file, the job is made plannable once and analysed once (only when an enabled rule reads the
analysis); every rule sees the same `Context`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable

from planc.analysis import analyse
from planc.dims import Numerics, RankDims
from planc.findings import FileResult, Finding, Severity, Violation
from planc.plannable import (
    Chunks,
    Refusal,
    formats_and_dims,
    layer_chunks,
    plannable,
    refusals,
)
from planc.record import record
from planc.rules import REGISTRY, Rule
from planc.rules.base import Context, Needs, RuleKind
from planc.rules.config import Resolver
from planc.spec.job import Job
from planc.spec.load import Loaded, base_dir, load_path
from planc.spec.locate import Locator


def severity_of(rule_id: str, default: Severity, job: Job) -> Severity:
    override = job.rules.severity.get(rule_id)
    return Severity(override) if override else default


def locate(violation: Violation, locator: Locator) -> tuple[int, int]:
    return locator.first_present([violation.field, *violation.near])


def finding(rule: str, severity: Severity, violation: Violation, locator: Locator) -> Finding:
    line, column = locate(violation, locator)
    return Finding(line, column, rule, severity, violation.message, violation.field, violation.fix)


def _enabled(job: Job) -> list[Rule]:
    ignored = set(job.rules.ignore)
    return [r for r in REGISTRY.values() if r.check is not None and r.id not in ignored]


def context_of(
    job: Job,
    rules: Iterable[Rule],
    *,
    suggest: bool = True,
    chunks_of: Callable[[Job], tuple[Chunks, tuple[int, ...]]] = layer_chunks,
    refusals_of: Callable[[Job], tuple[Refusal, ...]] = refusals,
    derived_of: Callable[[Job], tuple[Numerics, RankDims]] = formats_and_dims,
) -> Context:
    """The context every rule of one file sees: the plannable job and, when a rule reads it, the
    analysis, each computed once (`chunks_of`, `derived_of`: the layer chunks, the number
    formats and a rank's dims, `planc.plannable.plannable`; `refusals_of`: what `refusals`
    gives; a search's share them between candidates)."""
    refused = refusals_of(job)
    plan = plannable(job, refused, chunks_of, derived_of)
    if isinstance(plan, tuple):
        return Context(job, refusals=refused, suggest=suggest)
    needed = any(r.needs is Needs.ANALYSIS for r in rules)
    return Context(job, plan, analyse(plan) if needed else None, suggest=suggest)


def _not_evaluated(rules: list[Rule], refused: Refusal, locator: Locator) -> Finding:
    """An info finding when rules were skipped because the job has no plan, so that a run whose
    failing precondition is ignored or re-levelled does not pass silently."""
    skipped = ", ".join(r.id for r in rules if r.needs is not Needs.JOB)
    violation = Violation(
        refused.violation.field,
        f"{skipped} were not evaluated: the run cannot be planned ({refused.rule}: "
        f"{refused.violation.message})",
        refused.violation.fix,
        refused.violation.near,
    )
    return finding(refused.rule, Severity.INFO, violation, locator)


@record
class Evaluation:
    """What the rules say about one job, before placing it in a file: each enabled rule's
    violations at its (possibly re-levelled) severity, and the context they were computed on."""

    context: Context
    violations: tuple[tuple[str, Severity, Violation], ...]

    def worst(self) -> Severity | None:
        return max((sev for _, sev, _ in self.violations), key=lambda s: s.rank, default=None)


def evaluate(job: Job, *, suggest: bool = True) -> Evaluation:
    """Run every enabled rule on `job` (the plannable job and analysis computed once); without
    `suggest`, rules skip fixes that cost more analyses."""
    rules = _enabled(job)
    ctx = context_of(job, rules, suggest=suggest)
    found: list[tuple[str, Severity, Violation]] = []
    for rule in rules:
        if rule.check is None:
            continue
        severity = severity_of(rule.id, rule.severity, job)
        found += [(rule.id, severity, v) for v in rule.check(ctx)]
    return Evaluation(ctx, tuple(found))


def _placed(result: Evaluation, job: Job, locator: Locator) -> list[Finding]:
    """An evaluation's violations as located findings, and the note on what was not evaluated."""
    findings = [finding(rule, sev, v, locator) for rule, sev, v in result.violations]
    refused = result.context.refusals
    if refused and not any(f.severity.rank >= Severity.ERROR.rank for f in findings):
        findings.append(_not_evaluated(_enabled(job), refused[0], locator))
    return findings


def _noted(findings: list[Finding], job: Job) -> list[Finding]:
    """The loader's findings under the job's rules: a note (RuleKind.NOTE, an hf_config info
    line) left out when ignored and re-levelled by `rules.severity`; input rules as they are."""
    ignored = set(job.rules.ignore)
    out = []
    for f in findings:
        rule = REGISTRY.get(f.rule)
        if rule is None or rule.kind is not RuleKind.NOTE:
            out.append(f)
        elif f.rule not in ignored:
            out.append(dataclasses.replace(f, severity=severity_of(f.rule, f.severity, job)))
    return out


# Findings about a spec judged otherwise than by every rule: `planc check` passes the one for
# search specs (planc.cli.searchspec, above this layer), which returns None for any other spec.
Special = Callable[[Loaded], "list[Finding] | None"]


def check_file(loaded: Loaded, special: Special | None = None) -> tuple[FileResult, Context | None]:
    """The file's findings, and the context the rules saw (None when the spec did not load), so
    that a command can use the plannable job and analysis check already computed. A spec for
    which `special` gives findings gets those in place of the rules' (and no context)."""
    findings = list(loaded.findings)
    context = None
    if loaded.job is not None:
        findings = _noted(findings, loaded.job)
        instead = special(loaded) if special is not None else None
        if instead is not None:
            return FileResult(loaded.path, tuple(sorted(findings + instead)), loaded.text), None
        result = evaluate(loaded.job)
        context = result.context
        findings += _placed(result, loaded.job, loaded.locator)
    return FileResult(loaded.path, tuple(sorted(findings)), loaded.text), context


def with_refusals(result: FileResult, refused: Iterable[Refusal], locator: Locator) -> FileResult:
    """`result` with a run's refusals as located 'cannot plan' errors, in place of the findings
    of the same rules (which an ignore or a re-levelling may have made quieter)."""
    refusals = tuple(
        finding(
            r.rule,
            Severity.ERROR,
            dataclasses.replace(r.violation, message="cannot plan: " + r.violation.message),
            locator,
        )
        for r in refused
    )
    rules = {f.rule for f in refusals}
    kept = tuple(f for f in result.findings if f.rule not in rules)
    return dataclasses.replace(result, findings=tuple(sorted((*kept, *refusals))))


def check_loaded(loaded: Loaded, special: Special | None = None) -> FileResult:
    return check_file(loaded, special)[0]


def check_paths(
    paths: Iterable[str],
    configs: Resolver | None = None,
    stdin_name: str = "-",
    special: Special | None = None,
) -> tuple[FileResult, ...]:
    """Check each file on its own; one bad file does not stop the others.

    `configs` gives each file its configuration (`planc.rules.config`: rule defaults, and select and
    ignore as the rules the spec's `rules.ignore` gains); stdin (`-`) is reported, and its
    configuration looked up, under `stdin_name`.
    """
    results = []
    for path in paths:
        name = stdin_name if path == "-" else path
        # A pipe (`<(cat spec.yaml)`, /dev/fd/63) takes the working directory's configuration.
        where = name if path == "-" else os.path.join(base_dir(path), os.path.basename(path))
        defaults = configs.for_path(where).rule_defaults() if configs is not None else None
        result = check_loaded(load_path(path, defaults or None), special)
        results.append(result if name == path else dataclasses.replace(result, path=name))
    return tuple(results)
