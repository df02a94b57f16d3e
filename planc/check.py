"""Check: run every rule on a loaded spec and collect located findings."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from planc.config import Resolver
from planc.findings import FileResult, Finding, Severity
from planc.job import Job
from planc.load import Loaded, load_path
from planc.locate import Locator
from planc.rules import REGISTRY, Rule, Violation


def _severity(rule: Rule, job: Job) -> Severity:
    override = job.rules.severity.get(rule.id)
    return Severity(override) if override else rule.severity


def _locate(violation: Violation, locator: Locator) -> tuple[int, int]:
    return locator.first_present([violation.field, *violation.near])


def run_rules(job: Job, locator: Locator) -> list[Finding]:
    """Every enabled rule's violations as findings; all violations, not only the first."""
    findings = []
    ignored = set(job.rules.ignore)
    for rule in REGISTRY.values():
        if rule.check is None or rule.id in ignored:
            continue
        severity = _severity(rule, job)
        for violation in rule.check(job):
            line, column = _locate(violation, locator)
            findings.append(
                Finding(
                    line,
                    column,
                    rule.id,
                    severity,
                    violation.message,
                    violation.field,
                    violation.fix,
                )
            )
    return findings


def check_loaded(loaded: Loaded) -> FileResult:
    findings = list(loaded.findings)
    if loaded.job is not None:
        findings += run_rules(loaded.job, loaded.locator)
    return FileResult(loaded.path, tuple(sorted(findings)), loaded.text)


def check_paths(
    paths: Iterable[str], configs: Resolver | None = None, stdin_name: str = "-"
) -> tuple[FileResult, ...]:
    """Check each file on its own; one bad file does not stop the others.

    `configs` gives each file its configuration (`planc.config`: rule defaults, and select and
    ignore as the rules the spec's `rules.ignore` gains); stdin (`-`) is reported, and its
    configuration looked up, under `stdin_name`.
    """
    results = []
    for path in paths:
        name = stdin_name if path == "-" else path
        defaults = configs.for_path(name).rule_defaults() if configs is not None else None
        result = check_loaded(load_path(path, defaults or None))
        results.append(result if name == path else dataclasses.replace(result, path=name))
    return tuple(results)
