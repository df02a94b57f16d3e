"""Reporters: render check results as text, JSON, GitHub annotations or SARIF 2.1.0."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from planc.findings import FileResult, Finding, Severity

Reporter = Callable[[Sequence[FileResult], bool], str]


def _level(finding: Finding) -> str:
    return "error" if finding.severity is Severity.FATAL else finding.severity.value


def text(results: Sequence[FileResult], strict: bool) -> str:
    """One line per finding, `path:line:col: severity PLCnnn message`, then a summary."""
    lines = [
        f"{r.path}:{f.line}:{f.column}: {_level(f)} {f.rule} {f.text}"
        for r in results
        for f in r.findings
    ]
    counts = {
        s: sum(_level(f) == s for r in results for f in r.findings)
        for s in ("error", "warning", "info")
    }
    failed = sum(not r.ok(strict) for r in results)
    summary = (
        f"{len(results)} file{'s' * (len(results) != 1)} checked: {counts['error']} error(s), "
        f"{counts['warning']} warning(s), {counts['info']} info; "
        + (f"{failed} failed" if failed else "all passed")
    )
    return "\n".join([*lines, summary]) + "\n"


def as_json(results: Sequence[FileResult], strict: bool) -> str:
    document = {
        "ok": all(r.ok(strict) for r in results),
        "files": [
            {
                "path": r.path,
                "ok": r.ok(strict),
                "findings": [
                    {
                        "rule": f.rule,
                        "severity": _level(f),
                        "message": f.message,
                        "fix": f.fix,
                        "line": f.line,
                        "column": f.column,
                        "field": f.field,
                    }
                    for f in r.findings
                ],
            }
            for r in results
        ],
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def _escape(value: str, prop: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return value.replace(":", "%3A").replace(",", "%2C") if prop else value


def github(results: Sequence[FileResult], strict: bool) -> str:
    """GitHub Actions workflow commands (`::error file=...,line=...::msg`), then the text summary."""
    kinds = {"error": "error", "warning": "warning", "info": "notice"}
    lines = []
    for r in results:
        for f in r.findings:
            props = ",".join(
                [
                    f"file={_escape(r.path, True)}",
                    f"line={f.line}",
                    f"col={f.column}",
                    f"title={f.rule}",
                ]
            )
            lines.append(f"::{kinds[_level(f)]} {props}::{_escape(f'{f.rule} {f.text}')}")
    return (
        "\n".join(lines) + ("\n" if lines else "") + text(results, strict).splitlines()[-1] + "\n"
    )


def sarif(results: Sequence[FileResult], strict: bool) -> str:
    """SARIF 2.1.0 as GitHub code scanning accepts it: rules with descriptions, located results."""
    from planc import __version__
    from planc.rules import REGISTRY

    used = sorted({f.rule for r in results for f in r.findings})
    rules = [
        {
            "id": rule_id,
            "name": rule_id,
            "shortDescription": {"text": REGISTRY[rule_id].title},
            "fullDescription": {"text": REGISTRY[rule_id].doc},
            "help": {"text": REGISTRY[rule_id].doc},
            "defaultConfiguration": {"level": _sarif_level(REGISTRY[rule_id].severity)},
        }
        for rule_id in used
        if rule_id in REGISTRY
    ]
    index = {rule_id: i for i, rule_id in enumerate(used)}
    found = [
        {
            "ruleId": f.rule,
            "ruleIndex": index[f.rule],
            "level": _sarif_level(f.severity),
            "message": {"text": f.text},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {
                            "uri": r.path.removeprefix("./") if r.path != "-" else "stdin"
                        },
                        "region": {"startLine": f.line, "startColumn": f.column},
                    },
                    "logicalLocations": [{"fullyQualifiedName": f.field}] if f.field else [],
                }
            ],
        }
        for r in results
        for f in r.findings
    ]
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
                        "rules": rules,
                    }
                },
                "results": found,
            }
        ],
    }
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n"


def _sarif_level(severity: Severity) -> str:
    return {"info": "note", "warning": "warning", "error": "error", "fatal": "error"}[
        severity.value
    ]


REPORTERS: Mapping[str, Reporter] = MappingProxyType(
    {"text": text, "json": as_json, "github": github, "sarif": sarif}
)
