"""Findings: what a check says about a file, as plain frozen data. Reporters render them."""

from __future__ import annotations

import dataclasses
from enum import Enum
from types import MappingProxyType

from planc.record import record


class Severity(str, Enum):
    """How much a finding matters. `fatal` marks input that could not be read at all (exit 2)."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    FATAL = "fatal"

    @property
    def rank(self) -> int:
        return _RANK[self]

    @property
    def word(self) -> str:
        """The word users see: fatal input is an error (it also exits 2)."""
        return "error" if self is Severity.FATAL else self.value


_RANK = MappingProxyType(
    {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2, Severity.FATAL: 3}
)


@record(order=True)
class Finding:
    """One located finding. Lines and columns are 1-based; `field` is the dotted spec path."""

    line: int
    column: int
    rule: str
    severity: Severity = dataclasses.field(compare=False)
    message: str = dataclasses.field(compare=False)
    field: str = ""
    fix: str = dataclasses.field(default="", compare=False)

    @property
    def text(self) -> str:
        """The message and, when there is one, the fix."""
        return f"{self.message}; fix: {self.fix}" if self.fix else self.message

    def record(self) -> dict[str, object]:
        """The finding as JSON data, in one shape for `check --format json` and plan.json."""
        return {
            "rule": self.rule,
            "severity": self.severity.word,
            "message": self.message,
            "fix": self.fix,
            "line": self.line,
            "column": self.column,
            "field": self.field,
        }


@record
class Violation:
    """What a rule found, before it is placed in a file: the spec field it concerns, the numbers,
    and the fix.

    `near` lists other fields to point at when `field` is not written in the file (it came from
    a preset or a default).
    """

    field: str
    message: str
    fix: str = ""
    near: tuple[str, ...] = ()


@record
class FileResult:
    """All findings for one input, sorted by location."""

    path: str
    findings: tuple[Finding, ...]
    # The decoded input, when it was read, for source snippets under findings.
    source: str | None = dataclasses.field(default=None, compare=False, repr=False)

    def worst(self) -> Severity | None:
        return max((f.severity for f in self.findings), key=lambda s: s.rank, default=None)

    def ok(self, strict: bool = False) -> bool:
        worst = self.worst()
        if worst is None:
            return True
        threshold = Severity.WARNING if strict else Severity.ERROR
        return worst.rank < threshold.rank


def exit_code(
    results: tuple[FileResult, ...] | list[FileResult],
    strict: bool = False,
    exit_zero: bool = False,
) -> int:
    """The one place the exit code is decided: 2 unusable input, 1 findings that fail, 0 clean.

    `exit_zero` (`planc check --exit-zero`) turns 1 into 0; unusable input still exits 2.
    """
    if any(r.worst() is Severity.FATAL for r in results):
        return 2
    return 0 if exit_zero or all(r.ok(strict) for r in results) else 1
