"""docs/rules.md, generated from the rule docstrings: one section per rule, anchored by its id.

SARIF `helpUri` and `planc rules ID` point at these sections (`#plc006`).
Regenerate with `python -m planc.cli.rules_doc > docs/rules.md`; a test keeps it current.
"""

from __future__ import annotations

import re

from planc.cli.reporters import level, rule_name
from planc.rules import REGISTRY


def markdown() -> str:
    out = [
        "# planc rules",
        "",
        "Generated from the rule docstrings by `python -m planc.cli.rules_doc > docs/rules.md`;",
        "`planc rules ID` prints the same text. Severities are defaults: a spec's `rules.severity`,",
        "or `severity` in `[tool.planc]` / `.planc.toml`, changes them. Input rules (PLC100-PLC111)",
        "report files planc cannot read as a spec; they always run and cannot be ignored.",
        "",
        "| id | name | severity | what it checks |",
        "|---|---|---|---|",
    ]
    out += [
        f"| [{r.id}](#{r.id.lower()}) | {rule_name(r)} | {level(r.severity)} | {r.title} |"
        for r in REGISTRY.values()
    ]
    for rule in REGISTRY.values():
        exits = " (unusable input: exit 2)" if rule.severity.value == "fatal" else ""
        out += [
            "",
            f"## {rule.id}",
            "",
            f"`{rule_name(rule)}`, default severity **{level(rule.severity)}**{exits}.",
            "",
            *_body(rule.doc).splitlines(),
        ]
    return "\n".join(out).rstrip() + "\n"


def _body(doc: str) -> str:
    """The docstring as Markdown: `Passes:` / `Fails:` blocks become YAML code blocks."""
    text = re.sub(r"^Base: (\S+)$", r"Examples change `examples/\1`.", doc, flags=re.MULTILINE)
    return re.sub(
        r"^(Passes|Fails):\n((?:    .*\n?)+)",
        lambda m: (
            f"{m.group(1)}:\n\n```yaml\n"
            + "".join(line[4:] + "\n" for line in m.group(2).rstrip("\n").split("\n"))
            + "```\n"
        ),
        text + "\n",
        flags=re.MULTILINE,
    ).rstrip()


if __name__ == "__main__":  # pragma: no cover
    print(markdown(), end="")
