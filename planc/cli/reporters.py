"""Reporters: render check results as text, JSON, GitHub annotations, SARIF 2.1.0 or GitLab Code
Quality JSON.

Every reporter renders the same `FileResult`s; none decides the exit code. One severity
vocabulary reaches users: error, warning, info. `fatal` (input planc cannot use, exit 2) is shown
as error everywhere, in `planc rules` too.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

from planc import __version__
from planc.findings import FileResult, Finding, Severity
from planc.outputs import escape
from planc.record import record
from planc.rules import REGISTRY

if TYPE_CHECKING:
    from planc.rules import Rule

DOCS_URL = "https://github.com/planc/planc/blob/main/docs/rules.md"


@record
class Options:
    """How to render: `quiet` leaves out the summary, `color` adds ANSI colours (text only),
    `source` shows the source line with a caret under each finding (text only)."""

    quiet: bool = False
    color: bool = False
    source: bool = True


DEFAULTS = Options()  # frozen: a shared default is safe


class Reporter(Protocol):
    def __call__(
        self, results: Sequence[FileResult], strict: bool, options: Options = ...
    ) -> str: ...


def level(severity: Severity) -> str:
    """The word users see for a severity: fatal input is an error (it also exits 2)."""
    return severity.word


def _level(finding: Finding) -> str:
    return level(finding.severity)


def use_color(stream_is_tty: bool, environ: Mapping[str, str] | None = None) -> bool:
    """Colour on a terminal, unless NO_COLOR is set (https://no-color.org); FORCE_COLOR forces it
    anywhere (https://force-color.org). Both count only when set to a non-empty value; NO_COLOR
    wins when both are."""
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    return stream_is_tty


_STYLE = MappingProxyType(
    {
        "error": "\x1b[1;31m",
        "warning": "\x1b[1;33m",
        "info": "\x1b[1;36m",
        "bold": "\x1b[1m",
        "gutter": "\x1b[34m",
    }
)
_RESET = "\x1b[0m"


def _paint(text: str, style: str, color: bool) -> str:
    return f"{_STYLE[style]}{text}{_RESET}" if color else text


# The token a caret row underlines: a key or plain scalar up to a YAML indicator.
_TOKEN = re.compile(r"[^\s:,\[\]{}#]+")
# What YAML counts as a line break (libyaml's marks count lines so; CRLF was folded on reading).
_BREAKS = re.compile("[\n\r\x85\u2028\u2029]")
# Never sent to a terminal: control characters (escape sequences) and bidirectional overrides
# ("Trojan Source"); each becomes one U+FFFD so the caret stays aligned.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
SNIPPET_WIDTH = 120


def snippet(source: str, finding: Finding, color: bool = False) -> list[str]:
    """The finding's source line with a caret row under its token, ruff style; empty when the
    line is not in the source. Control characters are replaced, and a long line is cut to a
    window around the column, marked with an ellipsis."""
    lines = _BREAKS.split(source)
    if not 1 <= finding.line <= len(lines):
        return []
    line = _UNSAFE.sub("\ufffd", lines[finding.line - 1].replace("\t", " "))
    start = max(finding.column - 1, 0)
    token = _TOKEN.match(line, start) if start < len(line) else None
    width = max(token.end() - start, 1) if token else 1
    if len(line) > SNIPPET_WIDTH:
        left = max(0, min(start - SNIPPET_WIDTH // 3, len(line) - SNIPPET_WIDTH))
        head = "…" if left else ""
        tail = "…" if left + SNIPPET_WIDTH < len(line) else ""
        line = head + line[left : left + SNIPPET_WIDTH] + tail
        start = start - left + len(head)
        width = max(1, min(width, len(line) - len(tail) - start))
    number = str(finding.line)
    pad = " " * len(number)
    bar = _paint("|", "gutter", color)
    caret = _paint("^" * width, _level(finding), color)
    return [
        f"{_paint(number, 'gutter', color)} {bar} {line}".rstrip(),
        f"{pad} {bar} {' ' * start}{caret}",
    ]


def end_column(source: str | None, finding: Finding) -> int | None:
    """The column just past the token the finding points at (the caret's span, in code points),
    or None when the line is not in the source: SARIF's exclusive endColumn."""
    if source is None:
        return None
    lines = _BREAKS.split(source)
    if not 1 <= finding.line <= len(lines):
        return None
    line, start = lines[finding.line - 1], max(finding.column - 1, 0)
    token = _TOKEN.match(line, start) if start < len(line) else None
    return finding.column + (max(token.end() - start, 1) if token else 1)


def _summary(results: Sequence[FileResult], strict: bool) -> str:
    counts = {
        s: sum(_level(f) == s for r in results for f in r.findings)
        for s in ("error", "warning", "info")
    }
    failed = sum(not r.ok(strict) for r in results)
    return (
        f"{len(results)} file{'s' * (len(results) != 1)} checked: {counts['error']} error(s), "
        f"{counts['warning']} warning(s), {counts['info']} info; "
        + (f"{failed} failed" if failed else "all passed")
    )


def text(results: Sequence[FileResult], strict: bool, options: Options = DEFAULTS) -> str:
    """One line per finding, `path:line:col: severity PLCnnn message`, then (unless `source` is
    off) the source line with a caret under the spot, then a summary (unless `quiet`)."""
    color = options.color
    lines: list[str] = []
    for r in results:
        for f in r.findings:
            where = escape.line(f"{r.path}:{f.line}:{f.column}:")
            head = (
                f"{_paint(where, 'bold', color)} "
                f"{_paint(_level(f), _level(f), color)} {_paint(f.rule, 'bold', color)} "
                f"{escape.line(f.text)}"
            )
            lines.append(head)
            if options.source and r.source is not None:
                shown = snippet(r.source, f, color)
                lines += [*shown, ""] if shown else []
    if not options.quiet:
        lines.append(_summary(results, strict))
    return "".join(line + "\n" for line in lines)


def as_json(results: Sequence[FileResult], strict: bool, options: Options = DEFAULTS) -> str:
    document = {
        "ok": all(r.ok(strict) for r in results),
        "files": [
            {
                "path": r.path,
                "ok": r.ok(strict),
                "findings": [f.record() for f in r.findings],
            }
            for r in results
        ],
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


# In a workflow command: every control character but the line breaks GitHub escapes itself,
# and bidirectional overrides, as U+FFFD.
_COMMAND_UNSAFE = re.compile(
    "[\x00-\x09\x0b\x0c\x0e-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def github_data(value: str) -> str:
    """Text as the data of a GitHub workflow command (`::error ...::DATA`), GitHub's own
    escaping (actions/toolkit `escapeData`): `%` `%25`, CR `%0D`, LF `%0A`; no input ends the
    line, so none can write a workflow command of its own. Other control characters as U+FFFD."""
    value = _COMMAND_UNSAFE.sub("\ufffd", value)
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def github_property(value: str) -> str:
    """Text as a property value of a workflow command (`file=VALUE,...`): `github_data`, and
    `:` `%3A`, `,` `%2C` (actions/toolkit `escapeProperty`)."""
    return github_data(value).replace(":", "%3A").replace(",", "%2C")


def github(results: Sequence[FileResult], strict: bool, options: Options = DEFAULTS) -> str:
    """GitHub Actions workflow commands (`::error file=...,line=...::msg`), then the text summary
    (unless `quiet`)."""
    kinds = {"error": "error", "warning": "warning", "info": "notice"}
    lines = []
    for r in results:
        for f in r.findings:
            end = end_column(r.source, f)
            # GitHub's endColumn is the last column annotated (it defaults to col).
            span = [f"endLine={f.line}", f"endColumn={end - 1}"] if end is not None else []
            props = ",".join(
                [
                    f"file={github_property(r.path)}",
                    f"line={f.line}",
                    f"col={f.column}",
                    *span,
                    f"title={f.rule}",
                ]
            )
            lines.append(f"::{kinds[_level(f)]} {props}::{github_data(f'{f.rule} {f.text}')}")
    if not options.quiet:
        lines.append(_summary(results, strict))
    return "".join(line + "\n" for line in lines)


def rule_name(rule: Rule) -> str:
    """A rule's kebab-case name (SARIF `name`), from its function: `pipeline-bubble`."""
    return getattr(rule.doc_source, "__name__", rule.id).strip("_").replace("_", "-")


def rule_url(rule_id: str) -> str:
    """The rule's documentation: its section of docs/rules.md."""
    return f"{DOCS_URL}#{rule_id.lower()}"


def _sarif_rule(rule: Rule) -> dict[str, object]:
    return {
        "id": rule.id,
        "name": rule_name(rule),
        "shortDescription": {"text": rule.title},
        "fullDescription": {"text": rule.doc},
        "help": {"text": rule.doc, "markdown": rule.doc},
        "helpUri": rule_url(rule.id),
        "defaultConfiguration": {"level": _sarif_level(rule.severity)},
    }


def sarif(results: Sequence[FileResult], strict: bool, options: Options = DEFAULTS) -> str:
    """SARIF 2.1.0 as GitHub code scanning accepts it: rules with descriptions, located results.

    Columns count Unicode code points (`columnKind`), as planc's columns do.
    """
    used = sorted({f.rule for r in results for f in r.findings if f.rule in REGISTRY})
    index = {rule_id: i for i, rule_id in enumerate(used)}
    found = []
    root = os.getcwd()
    for r in results:
        artifact = _artifact(r.path, root)
        for f in r.findings:
            region = {"startLine": f.line, "startColumn": f.column}
            end = end_column(r.source, f)
            if end is not None:
                region |= {"endLine": f.line, "endColumn": end}
            result: dict[str, object] = {
                "ruleId": f.rule,
                "level": _sarif_level(f.severity),
                "message": {"text": f.text},
                "locations": [
                    {
                        "physicalLocation": {"artifactLocation": artifact, "region": region},
                        "logicalLocations": (
                            [{"fullyQualifiedName": f.field, "kind": "member"}] if f.field else []
                        ),
                    }
                ],
            }
            if f.rule in index:
                result["ruleIndex"] = index[f.rule]
            found.append(result)
    log = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "planc",
                        "version": __version__,
                        "informationUri": "https://github.com/planc/planc",
                        "rules": [_sarif_rule(REGISTRY[rule_id]) for rule_id in used],
                    }
                },
                "originalUriBaseIds": {SRCROOT: {"uri": _file_uri(root) + "/"}},
                "columnKind": "unicodeCodePoints",
                "results": found,
            }
        ],
    }
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n"


# The base of relative artifact URIs: the directory planc ran in (GitHub code scanning takes
# %SRCROOT% as the repository's checkout).
SRCROOT = "%SRCROOT%"


def _artifact(path: str, root: str) -> dict[str, str]:
    """A SARIF artifactLocation: a URI relative to %SRCROOT% (the working directory) for a
    file under it, else an absolute file URI."""
    if path != "-" and os.path.isabs(path):
        inside = os.path.commonpath([os.path.abspath(path), root]) == root
        if not inside:
            return {"uri": _file_uri(path)}
        path = os.path.relpath(path, root)
    elif os.path.normpath(path).startswith(os.pardir):
        return {"uri": _file_uri(os.path.abspath(path))}
    return {"uri": _uri(path), "uriBaseId": SRCROOT}


def _file_uri(path: str) -> str:
    """An absolute path as a file URI (forward slashes, escaped as _uri escapes)."""
    text = path.replace(os.sep, "/")
    return "file://" + ("" if text.startswith("/") else "/") + _uri(text)


def _uri(path: str) -> str:
    """A relative URI reference for a path: forward slashes, no leading ./, spaces escaped."""
    from urllib.parse import quote

    return quote(path.replace(os.sep, "/").removeprefix("./"), safe="/:@-._~!$&'()*+,;=")


def _sarif_level(severity: Severity) -> str:
    return {"info": "note", "warning": "warning", "error": "error", "fatal": "error"}[
        severity.value
    ]


# GitLab Code Quality's severities (info, minor, major, critical, blocker) for planc's.
_GITLAB_SEVERITY = MappingProxyType(
    {"info": "info", "warning": "minor", "error": "major", "fatal": "critical"}
)


def gitlab_path(path: str, root: str) -> str:
    """A finding's path as GitLab Code Quality wants it: relative to the repository's checkout
    (the working directory), forward slashes, no leading ./; a file outside it keeps its
    absolute path."""
    if path != "-" and os.path.isabs(path):
        if os.path.commonpath([os.path.abspath(path), root]) != root:
            return path.replace(os.sep, "/")
        path = os.path.relpath(path, root)
    return path.replace(os.sep, "/").removeprefix("./")


def gitlab(results: Sequence[FileResult], strict: bool, options: Options = DEFAULTS) -> str:
    """GitLab Code Quality JSON (the `codequality` report artifact): a list of issues, each with
    a description, check_name (the rule id), fingerprint, severity and location {path, lines:
    {begin}}. The fingerprint (MD5 of path, rule, field and message, and the occurrence when
    those repeat) does not move with the line, so GitLab follows a finding across edits that
    shift it; the list is in the reporters' finding order, so the same input gives the same
    bytes."""
    import hashlib

    root = os.getcwd()
    issues: list[dict[str, object]] = []
    seen: dict[str, int] = {}
    for r in results:
        path = gitlab_path(r.path, root)
        for f in r.findings:
            key = "\0".join((path, f.rule, f.field, f.message))
            seen[key] = seen.get(key, 0) + 1
            if seen[key] > 1:
                key += f"\0{seen[key]}"
            issues.append(
                {
                    "description": f"{f.rule} {f.text}",
                    "check_name": f.rule,
                    "fingerprint": hashlib.md5(key.encode(), usedforsecurity=False).hexdigest(),
                    "severity": _GITLAB_SEVERITY[f.severity.value],
                    "location": {"path": path, "lines": {"begin": f.line}},
                }
            )
    return json.dumps(issues, indent=2, ensure_ascii=False) + "\n"


REPORTERS: Mapping[str, Reporter] = MappingProxyType(
    {"text": text, "json": as_json, "github": github, "sarif": sarif, "gitlab": gitlab}
)
