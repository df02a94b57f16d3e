"""One escaping rule per text format, for every string that came from input (a key or value of
a config.json, a file name, a GPU name, a spec's name, a revision) on its way out.

- Text (`line`): what planc prints is read line by line, by people, by scripts and by GitHub
  Actions, whose runner takes a line starting with `::error` as a workflow command. So no input
  can end a line: line breaks are shown as escapes (`\\n`, `\\r`, `\\t`, `\\u2028`, ...), and
  every other control character or bidirectional override (terminal escape sequences, "Trojan
  Source") as U+FFFD.
- Markdown (`markdown`, `code`): a pull-request comment shows input as text, never as markup:
  no link, image, HTML tag, code span or table cell of its own, and no @mention that would
  notify someone.

GitHub's workflow-command format has its own rule (`%25`, `%0D`, `%0A`; in properties also
`%3A`, `%2C`): `planc.cli.reporters.github_data` and `github_property`. The HTML report's is
`planc.report.svg.esc`.
"""

from __future__ import annotations

import re

# What some reader takes as the end of a line: LF, CR, VT, FF, the ASCII separators, NEL and
# Unicode's line and paragraph separators (Python's str.splitlines splits on all of them).
_SHOWN = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_BREAKS = frozenset("\n\r\t\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
WORD_JOINER = "\u2060"  # invisible, and breaks "@name" and "://" for GitHub's linkers


def _shown(match: re.Match[str]) -> str:
    char = match[0]
    if char in _BREAKS:
        return _SHOWN.get(char) or f"\\u{ord(char):04x}"
    return "\ufffd"


def line(text: str) -> str:
    """`text` as part of one line of text output: line breaks and tabs as escapes, other
    control characters and bidirectional overrides as U+FFFD. Text without them is unchanged."""
    return _CONTROL.sub(_shown, text)


# Characters that make Markdown (GitHub Flavored) out of text: escapes, code spans, links and
# images ([...](...), ![...]), raw HTML and autolinks (<...>), table cells (|).
_MARKDOWN = re.compile(r"([\\`\[\]<>|])")
_MENTION = re.compile(r"@(?=[A-Za-z0-9_-])")  # @user, @org/team
_AUTOLINK = re.compile(r"(?i)(?<=:)(?=//)|(?<=\bwww)(?=\.)")  # http://x, www.x


def markdown(text: str) -> str:
    """`text` as plain text in a GitHub Markdown paragraph, list item or table cell: one line
    (as `line`), Markdown's special characters backslash-escaped, and a word joiner after an
    `@` that would mention someone and inside `://` and `www.` that would become links."""
    text = _MARKDOWN.sub(r"\\\1", line(text))
    return _AUTOLINK.sub(WORD_JOINER, _MENTION.sub("@" + WORD_JOINER, text))


def code(text: str) -> str:
    """`text` as a Markdown code span (GitHub renders no markup, link or mention inside one):
    one line (as `line`), between backtick fences longer than any run of backticks in it."""
    text = line(text)
    runs = [len(run) for run in re.findall("`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"
