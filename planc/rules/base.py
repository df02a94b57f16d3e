"""The rule protocol: a stable id, a default severity, a kind, the options it reads, a check, and
its docstring as documentation."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from enum import Enum

from planc.analysis import Analysis
from planc.findings import Severity, Violation
from planc.plannable import PRECONDITIONS, Plannable, Refusal
from planc.record import record
from planc.spec.job import Job
from planc.spec.options import Option


class Needs(str, Enum):
    """What a rule reads: the resolved job, the plannable job, or the analysis (memory,
    communication, compute). Rules that need more run only when it exists, after the cheap ones."""

    JOB = "job"
    PLAN = "plan"
    ANALYSIS = "analysis"


class RuleKind(str, Enum):
    """What a rule's finding says: the file is not a usable spec (input, reported by the loader;
    always runs, exit 2), the job has no layout at all (precondition: `planc.plannable`
    PRECONDITIONS refuses it before planning), or the run it describes would fail or waste
    (run)."""

    INPUT = "input"
    PRECONDITION = "precondition"
    RUN = "run"
    # A note on how planc read the input (an hf_config key not read, a value approximated):
    # reported by the loader like an input rule, ignored and re-levelled like a run rule.
    NOTE = "note"


@record
class Context:
    """What every rule of one file sees, computed once per file (yamllint's shape): the job, its
    plannable form when it has one, and its analysis when a rule needs it."""

    job: Job
    plan: Plannable | None = None
    analysis: Analysis | None = None
    refusals: tuple[Refusal, ...] = ()  # the failed preconditions, computed once
    # Whether a rule may compute fixes that cost more analyses (PLC007 tries variants); search
    # judges thousands of candidates and reads only the rule ids, so it turns this off.
    suggest: bool = True
    # Whether only which rules fire is read, not their messages (search's judging): a rule may
    # then skip what only its message needs (PLC007's largest terms).
    brief: bool = False

    def option(self, option: Option) -> float:
        """The value of one of a rule's options for this file: the spec's `rules:` section,
        else the project configuration, else the option's default (resolved in `Job.rules`)."""
        return self.job.rules.options[option.name]

    def refused(self, rule_id: str) -> Iterator[Violation]:
        """What the precondition of rule `rule_id` found (`planc.plannable.PRECONDITIONS`)."""
        return (r.violation for r in self.refusals if r.rule == rule_id)


Check = Callable[[Context], Iterable[Violation]]


@record
class Rule:
    id: str
    severity: Severity
    check: Check | None  # None: the loader reports it (input and schema rules)
    doc_source: Callable[..., object]
    needs: Needs = Needs.JOB
    kind: RuleKind = RuleKind.RUN
    options: tuple[Option, ...] = ()  # the thresholds it reads, in `rules:` (ctx.option)

    @property
    def doc(self) -> str:
        import inspect  # start-up: only `planc rules` and the reporters' rule texts need it

        return inspect.cleandoc(self.doc_source.__doc__ or "")

    @property
    def title(self) -> str:
        return self.doc.splitlines()[0] if self.doc else self.id

    def example(self, kind: str) -> str | None:
        """The YAML of the docstring's `Passes:` or `Fails:` block (an overlay on `Base:`)."""
        match = re.search(rf"^{kind}:\n((?:    .*\n?|\n)+)", self.doc + "\n", re.MULTILINE)
        if match is None:
            return None
        import inspect  # start-up: as in `doc`

        return inspect.cleandoc(match.group(1))

    @property
    def base(self) -> str:
        match = re.search(r"^Base: (\S+)", self.doc, re.MULTILINE)
        return match.group(1) if match else "llama3-8b-1node.yaml"


# The rules whose check is a precondition of planning (`planc.plannable.PRECONDITIONS`).
_PRECONDITION_IDS = frozenset(rule_id for rule_id, _ in PRECONDITIONS)


def rule(
    id: str,
    severity: Severity = Severity.ERROR,
    needs: Needs = Needs.JOB,
    options: tuple[Option, ...] = (),
) -> Callable[[Check], Rule]:
    """Turn a check function into a `Rule`; its docstring becomes the rule's documentation.

    `options` are the thresholds the check reads (`ctx.option(OPTION)`); each becomes a key of
    the spec's `rules:` section, of `[tool.planc]` and a `planc search` option once
    `scripts/regenerate.py` has run. A rule listed in PRECONDITIONS is a precondition."""
    kind = RuleKind.PRECONDITION if id in _PRECONDITION_IDS else RuleKind.RUN
    owned = tuple(replace(option, rule=id) for option in options)

    def wrap(check: Check) -> Rule:
        return Rule(id, severity, check, check, needs, kind, owned)

    return wrap


def documented(
    id: str, severity: Severity = Severity.ERROR, kind: RuleKind = RuleKind.INPUT
) -> Callable[[Callable[[], None]], Rule]:
    """An input rule (or a note, `kind=RuleKind.NOTE`), which the loader reports; the decorated
    function only carries its documentation."""

    def wrap(doc: Callable[[], None]) -> Rule:
        return Rule(id, severity, None, doc, kind=kind)

    return wrap


__all__ = [
    "Check",
    "Context",
    "Needs",
    "Option",
    "Rule",
    "RuleKind",
    "Violation",
    "documented",
    "rule",
]
