"""The rule protocol: a stable id, a default severity, a check, and its docstring as documentation."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from planc.findings import Severity
from planc.job import Job


@dataclass(frozen=True)
class Violation:
    """What a rule found: the spec field it concerns, the numbers, and the fix.

    `near` lists other fields to point at when `field` is not written in the file (it came from
    a preset or a default).
    """

    field: str
    message: str
    fix: str = ""
    near: tuple[str, ...] = ()


Check = Callable[[Job], Iterable[Violation]]


@dataclass(frozen=True)
class Rule:
    id: str
    severity: Severity
    check: Check | None  # None: the loader reports it (input and schema rules)
    doc_source: Callable[..., object]

    @property
    def doc(self) -> str:
        return inspect.cleandoc(self.doc_source.__doc__ or "")

    @property
    def title(self) -> str:
        return self.doc.splitlines()[0] if self.doc else self.id

    def example(self, kind: str) -> str | None:
        """The YAML of the docstring's `Passes:` or `Fails:` block (an overlay on `Base:`)."""
        match = re.search(rf"^{kind}:\n((?:    .*\n?|\n)+)", self.doc + "\n", re.MULTILINE)
        if match is None:
            return None
        return inspect.cleandoc(match.group(1))

    @property
    def base(self) -> str:
        match = re.search(r"^Base: (\S+)", self.doc, re.MULTILINE)
        return match.group(1) if match else "llama3-8b-1node.yaml"


def rule(id: str, severity: Severity = Severity.ERROR) -> Callable[[Check], Rule]:
    """Turn a check function into a `Rule`; its docstring becomes the rule's documentation."""

    def wrap(check: Check) -> Rule:
        return Rule(id, severity, check, check)

    return wrap


def documented(
    id: str, severity: Severity = Severity.ERROR
) -> Callable[[Callable[[], None]], Rule]:
    """A rule the loader reports; the decorated function only carries its documentation."""

    def wrap(doc: Callable[[], None]) -> Rule:
        return Rule(id, severity, None, doc)

    return wrap
