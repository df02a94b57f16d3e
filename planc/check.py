"""Check: run every rule on a loaded spec and collect located findings."""

from __future__ import annotations

from collections.abc import Iterable

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
    return FileResult(loaded.path, tuple(sorted(findings)))


def check_paths(paths: Iterable[str]) -> tuple[FileResult, ...]:
    """Check each file on its own; one bad file does not stop the others."""
    return tuple(check_loaded(load_path(path)) for path in paths)
