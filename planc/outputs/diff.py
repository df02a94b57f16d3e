"""planc diff OLD NEW: what a change to a spec does to the run.

Each side is a spec file, or `REV:path` read from git (`git show REV:path`, the path as git
takes it: from the repository root, or `./path` from the working directory). Both sides are
loaded and checked as `planc check` would (the nearest planc configuration of the path applies);
when a side can be planned it is analysed as `planc explain` analyses it. The diff shows memory
per pipeline stage and the peak, step time, tokens/s, MFU, the bubble, bytes per rank per step
on each tier of the fabric, and the findings added and removed (compared by rule, field and message).
A side with no plan (a refusal, a spec that does not load) still diffs its findings. A
`model.hf_config` of a `REV:path` side is read from the working tree, beside the path.

Exit status (`exit_status`): 1 when NEW has an error finding whose rule and field OLD did not
have (an error OLD already had, with other numbers in its message, is not new), else 0; an
unusable input (no such file, git missing, a bad revision) is a `DiffError` and exit 2.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from planc.analysis import Analysis, StepEstimate, analyse, estimate_step
from planc.check import check_file
from planc.findings import Finding, Severity
from planc.outputs import escape
from planc.plannable import plannable
from planc.record import record
from planc.rules.config import ConfigError, Resolver
from planc.spec.job import GB, GIB
from planc.spec.load import MAX_BYTES, decode, load_text, read_input

FORMATS = ("text", "json", "markdown")
MAX_STAGE_ROWS = 16  # more stages: the first and last 8 (json has them all)


class DiffError(ValueError):
    """An input that cannot be diffed at all: exit 2 with this message."""


@record
class Side:
    """One side of the diff: its findings and, when it can be planned, its analysis and step."""

    label: str
    findings: tuple[Finding, ...]
    analysis: Analysis | None = None
    step: StepEstimate | None = None


# ----------------------------------------------------------------------------- reading


def _git_show(revision: str, path: str) -> bytes:
    """`git show REV:path`, REV never taken as an option: one starting with `-` is refused, and
    `--end-of-options` ends git's options before it."""
    if revision.startswith("-"):
        raise DiffError(f"{revision}:{path}: a revision cannot start with '-'")
    try:
        run = subprocess.run(
            ["git", "show", "--end-of-options", f"{revision}:{path}"],
            capture_output=True,
            check=False,
            timeout=60,
        )
    except FileNotFoundError:
        raise DiffError("git is not installed: it is needed to read REV:path") from None
    except (OSError, subprocess.TimeoutExpired) as error:
        raise DiffError(f"git show {revision}:{path} failed: {error}") from None
    if run.returncode != 0:
        reason = run.stderr.decode("utf-8", errors="replace").strip().splitlines()
        shown = reason[0] if reason else f"exit status {run.returncode}"
        raise DiffError(f"cannot read {revision}:{path} from git: {shown.removeprefix('fatal: ')}")
    return run.stdout


def is_revision(source: str) -> bool:
    """`REV:path` names a file in git unless a file of that name exists."""
    return ":" in source and not os.path.exists(source)


def read_side(source: str) -> Side:
    """Load, check and (when it can be planned) analyse one side. Raises DiffError for an input
    that cannot be read at all."""
    if is_revision(source):
        revision, _, path = source.partition(":")
        data: bytes | None = _git_show(revision, path)
        if data is not None and len(data) > MAX_BYTES:
            raise DiffError(f"{source}: larger than {MAX_BYTES:,} bytes; a spec is a few KB")
        base_dir = os.path.dirname(path.removeprefix("./")) or "."
    else:
        path = source
        data, failure = read_input(source)
        if failure is not None:
            raise DiffError(f"{source}: {failure.message}")
        base_dir = os.path.dirname(source) or "."
    assert data is not None
    text, failure = decode(data)
    if failure is not None or text is None:
        raise DiffError(f"{source}: {failure.message if failure else 'cannot be decoded'}")
    try:
        defaults = Resolver().for_path(path).rule_defaults()
    except ConfigError as error:
        raise DiffError(str(error)) from None
    loaded = load_text(source, text, defaults or None, base_dir)
    result, context = check_file(loaded)
    fatal = [f for f in result.findings if f.severity is Severity.FATAL]
    if fatal:
        raise DiffError(f"{source}: {fatal[0].message}")
    if loaded.job is None:
        return Side(source, result.findings)
    plan = plannable(loaded.job)
    if isinstance(plan, tuple):
        return Side(source, result.findings)
    # check analysed the job already when a rule needed it; never twice.
    analysis = context.analysis if context is not None and context.analysis else analyse(plan)
    return Side(source, result.findings, analysis, estimate_step(analysis))


# ----------------------------------------------------------------------------- the numbers


def _key(finding: Finding) -> tuple[str, str, str]:
    return (finding.rule, finding.field, finding.message)


def _record(finding: Finding) -> dict[str, Any]:
    return {
        "rule": finding.rule,
        "severity": finding.severity.value,
        "field": finding.field,
        "message": finding.message,
        "fix": finding.fix,
    }


def metrics(side: Side) -> dict[str, Any] | None:
    """The numbers of a planned side, as plain data; None without a plan."""
    an, step = side.analysis, side.step
    if an is None or step is None:
        return None
    plan, lay = an.plan, an.plan.layout
    peak = an.memory.peak
    wires = an.wires
    return {
        "world_size": plan.world,
        "layout": {
            "tensor": lay.t,
            "pipeline": lay.p,
            "data": lay.d,
            "context": lay.c,
            "virtual_stages": lay.v,
            "zero_stage": lay.zero,
            "micro_batches": plan.m,
        },
        "parameters": an.memory.parameters,
        "gpu": plan.cluster.gpu.name,
        "hbm_bytes": plan.cluster.gpu.memory_bytes,
        "memory_per_stage": [stage.memory.total for stage in an.memory.stages],
        "peak_memory_bytes": peak.memory.total,
        "peak_stage": peak.stage,
        "step_time_s": step.step_time_s,
        "tokens_per_s": step.tokens_per_s,
        "mfu": step.mfu,
        "bubble_fraction": step.pipeline.bubble_fraction,
        # Per rank per step, on each tier of the fabric, the heaviest stage's rank (what its
        # links must carry).
        **{
            f"{tier.name}_sent_bytes": max(w.on(tier.name).sent for w in wires)
            for tier in plan.cluster.fabric
        },
    }


@record
class Diff:
    old: Side
    new: Side

    @property
    def added(self) -> tuple[Finding, ...]:
        before = {_key(f) for f in self.old.findings}
        return tuple(f for f in self.new.findings if _key(f) not in before)

    @property
    def removed(self) -> tuple[Finding, ...]:
        after = {_key(f) for f in self.new.findings}
        return tuple(f for f in self.old.findings if _key(f) not in after)

    @property
    def new_errors(self) -> tuple[Finding, ...]:
        """Errors of NEW whose rule and field OLD had no error for."""
        before = {
            (f.rule, f.field) for f in self.old.findings if f.severity.rank >= Severity.ERROR.rank
        }
        return tuple(
            f
            for f in self.new.findings
            if f.severity.rank >= Severity.ERROR.rank and (f.rule, f.field) not in before
        )


def diff(old: str, new: str) -> Diff:
    """Read both sides; DiffError for an input that cannot be read."""
    return Diff(read_side(old), read_side(new))


def exit_status(result: Diff) -> int:
    return 1 if result.new_errors else 0


def to_json(result: Diff) -> dict[str, Any]:
    return {
        "old": {"source": result.old.label, "plan": metrics(result.old)},
        "new": {"source": result.new.label, "plan": metrics(result.new)},
        "findings": {
            "added": [_record(f) for f in result.added],
            "removed": [_record(f) for f in result.removed],
        },
        "new_errors": len(result.new_errors),
    }


# ----------------------------------------------------------------------------- rendering


@record
class Row:
    label: str
    old: str
    new: str
    change: str


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def _gb(n: float) -> str:
    return f"{n / GB:,.2f} GB"


def _percent(n: float) -> str:
    return f"{n:.2%}"


def _relative(old: float, new: float) -> str:
    if old == new:
        return ""
    if old == 0:
        return " (new)"
    return f" ({(new - old) / old:+.1%})"


def _change(old: Any, new: Any, unit: str) -> str:
    """new − old in the row's unit, with the relative change; blank when either is missing."""
    if old is None or new is None or old == new:
        return "" if old == new else "—"
    delta = new - old
    if unit == "GiB":
        return f"{'+' if delta > 0 else '-'}{abs(delta) / GIB:.2f} GiB{_relative(old, new)}"
    if unit == "GB":
        return f"{'+' if delta > 0 else '-'}{abs(delta) / GB:,.2f} GB{_relative(old, new)}"
    if unit == "s":
        return f"{'+' if delta > 0 else '-'}{abs(delta):.3f} s{_relative(old, new)}"
    if unit == "tokens/s":
        return f"{'+' if delta > 0 else '-'}{abs(delta):,.0f}{_relative(old, new)}"
    return f"{'+' if delta > 0 else '-'}{abs(delta) * 100:.2f} pt"  # fractions: points


_FORMATTERS = {
    "GiB": _gib,
    "GB": _gb,
    "s": lambda n: f"{n:.3f} s",
    "tokens/s": lambda n: f"{n:,.0f}",
    "fraction": _percent,
}


def _layout(m: dict[str, Any] | None) -> str:
    if m is None:
        return "no plan"
    lay = m["layout"]
    return (
        f"t={lay['tensor']} p={lay['pipeline']} d={lay['data']} c={lay['context']} "
        f"v={lay['virtual_stages']} ZeRO-{lay['zero_stage']}, {m['world_size']} GPUs"
    )


def rows(result: Diff) -> list[Row]:
    """The table both text and markdown show, in a fixed order."""
    old, new = metrics(result.old), metrics(result.new)

    def value(m: dict[str, Any] | None, key: str, index: int | None = None) -> Any:
        if m is None or key not in m:  # a tier only the other side's fabric has
            return None
        item = m[key]
        if index is None:
            return item
        return item[index] if index < len(item) else None

    def row(label: str, key: str, unit: str, index: int | None = None) -> Row:
        a, b = value(old, key, index), value(new, key, index)
        fmt = _FORMATTERS[unit]
        return Row(
            label,
            "—" if a is None else fmt(a),
            "—" if b is None else fmt(b),
            _change(a, b, unit),
        )

    out = [Row("layout", _layout(old), _layout(new), "")]
    out.append(
        Row(
            "GPU",
            "—" if old is None else f"{old['gpu']}, {_gib(old['hbm_bytes'])}",
            "—" if new is None else f"{new['gpu']}, {_gib(new['hbm_bytes'])}",
            "",
        )
    )
    peak_label = "peak memory per GPU"
    if old is not None or new is not None:
        stages = {m["peak_stage"] for m in (old, new) if m is not None}
        if len(stages) == 1:
            peak_label += f" (stage {stages.pop()})"
    out.append(row(peak_label, "peak_memory_bytes", "GiB"))
    count = max((len(m["memory_per_stage"]) for m in (old, new) if m is not None), default=0)
    shown = range(count) if count <= MAX_STAGE_ROWS else [*range(8), *range(count - 8, count)]
    for i in shown:
        if count > MAX_STAGE_ROWS and i == count - 8:
            out.append(Row(f"  stages 8 to {count - 9}", "…", "…", ""))
        out.append(row(f"  stage {i}", "memory_per_stage", "GiB", i))
    out += [
        row("step time", "step_time_s", "s"),
        row("tokens/s", "tokens_per_s", "tokens/s"),
        row("MFU", "mfu", "fraction"),
        row("pipeline bubble", "bubble_fraction", "fraction"),
    ]
    out += [
        row(f"{label} sent per GPU per step", f"{name}_sent_bytes", "GB")
        for name, label in _tiers(result)
    ]
    return out


# The tiers of a spec's default fabric (planc.spec.job.default_fabric), shown when neither
# side has a plan to read its own from.
DEFAULT_TIERS = (("nvlink", "NVLink"), ("network", "network"))


def _tiers(result: Diff) -> list[tuple[str, str]]:
    """(name, label) of every tier either side's fabric has, the old side's first."""
    out: list[tuple[str, str]] = []
    for side in (result.old, result.new):
        if side.analysis is not None:
            for tier in side.analysis.plan.cluster.fabric:
                if tier.name not in (name for name, _ in out):
                    out.append((tier.name, tier.shown))
    return out or list(DEFAULT_TIERS)


def _finding_line(finding: Finding) -> str:
    shown = finding.field and not finding.message.startswith(finding.field)
    field = f" ({finding.field})" if shown else ""
    return f"{finding.severity.value} {finding.rule}{field}: {finding.message}"


def render_text(result: Diff) -> str:
    """The table and the findings as text; every string from input one line (`escape.line`)."""
    table = [
        Row(*(escape.line(cell) for cell in (r.label, r.old, r.new, r.change)))
        for r in rows(result)
    ]
    width = max(len(r.label) for r in table)
    left = max(len(r.old) for r in table)
    right = max(len(r.new) for r in table)
    lines = [f"planc diff {escape.line(result.old.label)} → {escape.line(result.new.label)}", ""]
    lines.append(f"{'':<{width}}  {'before':>{left}}  {'after':>{right}}  change")
    for r in table:
        lines.append(f"{r.label:<{width}}  {r.old:>{left}}  {r.new:>{right}}  {r.change}".rstrip())
    lines += ["", f"findings added: {len(result.added)}"]
    lines += [f"  + {escape.line(_finding_line(f))}" for f in result.added]
    lines.append(f"findings removed: {len(result.removed)}")
    lines += [f"  - {escape.line(_finding_line(f))}" for f in result.removed]
    if result.new_errors:
        lines.append(f"new errors: {len(result.new_errors)} (exit 1)")
    return "\n".join(lines) + "\n"


def render_markdown(result: Diff) -> str:
    """A pull-request comment: a heading, the table, and the findings as lists. File names
    are code spans (`escape.code`), every other string from input is text (`escape.markdown`):
    no link, image, HTML, mention or cell of its own."""
    title = (
        result.new.label.partition(":")[2] if is_revision(result.new.label) else result.new.label
    )
    verdict = f"**{len(result.new_errors)} new error(s)**" if result.new_errors else "no new errors"
    lines = [
        f"### planc diff: {escape.code(title)}",
        "",
        f"{escape.code(result.old.label)} → {escape.code(result.new.label)}: {verdict}",
        "",
        "| | before | after | change |",
        "|---|---:|---:|---:|",
    ]
    for r in rows(result):
        label = r.label.strip() if not r.label.startswith("  ") else "↳ " + r.label.strip()
        cells = (escape.markdown(cell) for cell in (label, r.old, r.new, r.change))
        lines.append("| " + " | ".join(cells) + " |")
    for heading, items in (("Findings added", result.added), ("Findings removed", result.removed)):
        lines += ["", f"**{heading}** ({len(items)})", ""]
        lines += [f"- {escape.markdown(_finding_line(f))}" for f in items] or ["- none"]
    return "\n".join(lines) + "\n"
