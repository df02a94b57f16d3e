"""Host names from a file, for `planc compile --hosts FILE`.

Accepted, one entry per line, in node order:

- a plain hostfile: `gpu-a01`; `#` starts a comment; blank lines are skipped;
- DeepSpeed / Open MPI hostfile lines: `gpu-a01 slots=8`: `slots=N` is the GPUs (processes)
  of that node, and must equal the spec's `hardware.gpus_per_node`, since planc places exactly
  that many ranks on every node (a different count is a PLC014 finding at the `slots=` word);
  other `key=value` words (`max_slots=8`) are accepted and ignored;
- Slurm nodelists, as `scontrol show hostnames` expands them: `gpu-[001-004,007]`,
  `rack[1-2]-gpu[01-02]`, several separated by commas (`gpu-[01-02],cpu-01`).

Problems are findings of PLC014 (the host rule) located in the file; the names then meet the host
rule's terms for `hardware.hosts` (one per node, usable in a hostfile by the rule's own
HOST_NAME pattern, none repeated).
"""

from __future__ import annotations

import os
import re

from planc.findings import FileResult, Finding, Severity
from planc.record import record
from planc.spec.job import HOST_NAME
from planc.spec.load import decode, read_input

# A nodelist written on the command line: host-name characters, brackets, ranges and commas.
_NODELIST_CHARS = re.compile(r"[A-Za-z0-9_.:\[\],-]+")
RULE = "PLC014"
# The most names a file may expand to: planc's node limit (spec.MAX_NODES).
MAX_NAMES = 1_000_000
_OPTION = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*=\S*")
# The most digits a slots count may have (a node's GPUs are counted in the tens).
MAX_SLOT_DIGITS = 6
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


class HostfileError(ValueError):
    """A line planc cannot read as host names; `column` is 1-based."""

    def __init__(self, message: str, column: int = 1) -> None:
        super().__init__(message)
        self.column = column


@record
class Hosts:
    """Host names in file order, the line each came from, and the findings of reading them."""

    names: tuple[str, ...]
    lines: tuple[int, ...]
    findings: tuple[Finding, ...]
    # Each `slots=N` word: its line, 1-based column and N (the names of that line share it).
    slots: tuple[tuple[int, int, int], ...] = ()


def parse_hosts(text: str) -> Hosts:
    """Every name in `text`, or located PLC014 findings for the lines that cannot be read."""
    names: list[str] = []
    lines: list[int] = []
    findings: list[Finding] = []
    slots: list[tuple[int, int, int]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        entry, *options = line.split()
        bad = next((o for o in options if not _OPTION.fullmatch(o)), None)
        try:
            if bad is not None:
                raise HostfileError(
                    f"expected one host name per line, then only key=value words such as "
                    f"slots=8; got {bad!r}",
                    raw.index(bad) + 1,
                )
            expanded = expand_nodelist(entry, MAX_NAMES - len(names))
        except HostfileError as error:
            offset = raw.index(entry) if bad is None else 0
            findings.append(
                Finding(number, offset + error.column, RULE, Severity.ERROR, str(error), "hosts")
            )
            continue
        try:
            slots += _slots(number, raw, options)
        except HostfileError as error:
            findings.append(
                Finding(number, error.column, RULE, Severity.ERROR, str(error), "hosts")
            )
            continue
        names += expanded
        lines += [number] * len(expanded)
    if not names and not findings:
        findings.append(
            Finding(1, 1, RULE, Severity.ERROR, "the file names no hosts", "hosts", "one per line")
        )
    return Hosts(tuple(names), tuple(lines), tuple(findings), tuple(slots))


def _slots(number: int, raw: str, options: list[str]) -> list[tuple[int, int, int]]:
    """The line's `slots=N` words as (line, column, N); HostfileError for an N that is not a
    whole number of processes."""
    out = []
    position = 0
    for option in options:
        position = raw.index(option, position)
        key, _, value = option.partition("=")
        if key == "slots":
            if not (value.isascii() and value.isdigit()) or len(value) > MAX_SLOT_DIGITS:
                raise HostfileError(
                    f"slots={value[:20]} is not a count of GPUs (a whole number)", position + 1
                )
            out.append((number, position + 1, int(value)))
        position += len(option)
    return out


def expand_nodelist(text: str, limit: int = MAX_NAMES) -> list[str]:
    """A Slurm nodelist as host names: `gpu-[001-003,007]` → gpu-001, gpu-002, gpu-003, gpu-007.

    Zero padding follows the lower bound's digits, as in Slurm. HostfileError for unbalanced
    brackets, an empty or reversed range, or more than `limit` names.
    """
    out: list[str] = []
    for start, part in _top_level(text):
        try:
            count = _count(part)
        except HostfileError as error:
            raise HostfileError(str(error), start + error.column) from None
        if count > limit - len(out):
            raise HostfileError(f"{text[:60]!r} names more than {limit:,} hosts", start + 1)
        out += _expand(part)
    return out


def _top_level(text: str) -> list[tuple[int, str]]:
    """The comma-separated parts outside brackets, with their 0-based offsets."""
    parts: list[tuple[int, str]] = []
    depth, begin = 0, 0
    for index, char in enumerate(text):
        if char == "[":
            if depth:
                raise HostfileError("nested brackets in a nodelist", index + 1)
            depth = 1
        elif char == "]":
            if not depth:
                raise HostfileError("']' without '['", index + 1)
            depth = 0
        elif char == "," and not depth:
            parts.append((begin, text[begin:index]))
            begin = index + 1
    if depth:
        raise HostfileError("'[' without ']'", text.rindex("[") + 1)
    parts.append((begin, text[begin:]))
    for offset, part in parts:
        if not part:
            raise HostfileError("an empty name in a nodelist", offset + 1)
    return parts


def _ranges(body: str, at: int) -> list[tuple[int, int, int]]:
    """`001-004,007` as (low, high, width) triples; `at` is the body's 0-based offset."""
    out = []
    offset = 0
    for item in body.split(","):
        match = _RANGE.fullmatch(item)
        if match is None:
            raise HostfileError(
                f"[{body}]: {item!r} is not a number or a range such as 001-004", at + offset + 1
            )
        low_text, high_text = match.group(1), match.group(2) or match.group(1)
        low, high = int(low_text), int(high_text)
        if high < low:
            raise HostfileError(f"[{body}]: the range {item} runs backwards", at + offset + 1)
        out.append((low, high, len(low_text) if low_text.startswith("0") else 1))
        offset += len(item) + 1
    return out


def _count(part: str) -> int:
    total, position = 1, 0
    while (open_at := part.find("[", position)) >= 0:
        close_at = part.index("]", open_at)
        body = part[open_at + 1 : close_at]
        total *= sum(high - low + 1 for low, high, _ in _ranges(body, open_at + 1))
        position = close_at + 1
    return total


def _expand(part: str) -> list[str]:
    open_at = part.find("[")
    if open_at < 0:
        return [part]
    close_at = part.index("]", open_at)
    head, body, tail = part[:open_at], part[open_at + 1 : close_at], part[close_at + 1 :]
    rest = _expand(tail)
    return [
        f"{head}{number:0{width}d}{suffix}"
        for low, high, width in _ranges(body, open_at + 1)
        for number in range(low, high + 1)
        for suffix in rest
    ]


def check_hosts(
    path: str, nodes: int, gpus_per_node: int | None = None
) -> tuple[FileResult, tuple[str, ...]]:
    """Read a hosts file and check its names by the host rule's terms (PLC014, as for
    `hardware.hosts`): one per node, each usable in a hostfile or rankfile, none repeated, and
    every `slots=N` equal to `gpus_per_node` (when given). Findings are located in the hosts
    file; the names come back only when there are none."""
    # `--hosts 'gpu-[001-004,007]'`: the names themselves, not a file of them.
    # A pipe (`--hosts <(scontrol show hostnames)`) or a device is read too, bounded.
    inline = _inline_nodelist(path)
    data, failure = (path.encode(), None) if inline else read_input(path, devices=True)
    text = None
    if failure is None and data is not None:
        text, failure = decode(data)
    if failure is not None or text is None:
        return FileResult(path, (failure,) if failure else ()), ()
    hosts = parse_hosts(text)
    findings = hosts.findings or (
        *_host_rule(hosts, nodes),
        *_slots_rule(hosts, gpus_per_node),
    )
    if findings:
        return FileResult(path, tuple(sorted(findings)), text), ()
    return FileResult(path, (), text), hosts.names


def _inline_nodelist(value: str) -> bool:
    """Whether a `--hosts` value is a Slurm nodelist written out (`gpu-[001-004,007]`,
    `a1,a2`) rather than a file: no such file, a bracket or a comma (a lone name is taken for a
    file name, so a mistyped one still says "no such file"), and only the characters of host
    names, brackets, ranges and commas."""
    return (
        not os.path.exists(value)
        and ("[" in value or "," in value)
        and _NODELIST_CHARS.fullmatch(value) is not None
    )


def _slots_rule(hosts: Hosts, gpus_per_node: int | None) -> list[Finding]:
    """A `slots=N` other than the spec's GPUs per node: planc places gpus_per_node ranks on
    every node, so the file and the spec disagree about the cluster."""
    if gpus_per_node is None:
        return []
    return [
        Finding(
            line,
            column,
            RULE,
            Severity.ERROR,
            f"slots={count}, but the spec runs {gpus_per_node} GPUs on every node "
            "(hardware.gpus_per_node)",
            "hosts",
            f"write slots={gpus_per_node}, or set hardware.gpus_per_node: {count} in the spec",
        )
        for line, column, count in hosts.slots
        if count != gpus_per_node
    ]


def _host_rule(hosts: Hosts, nodes: int) -> list[Finding]:
    def at(line: int, message: str, fix: str) -> Finding:
        return Finding(line, 1, RULE, Severity.ERROR, message, "hosts", fix)

    out = []
    if len(hosts.names) != nodes:
        out.append(
            at(
                hosts.lines[-1],
                f"{len(hosts.names)} host names for {nodes} nodes",
                "give exactly one host name per node",
            )
        )
    seen: set[str] = set()
    for name, line in zip(hosts.names, hosts.lines, strict=True):
        if not HOST_NAME.fullmatch(name):
            out.append(
                at(
                    line,
                    f"host name {name!r} cannot go into a hostfile or rankfile",
                    "use letters, digits, '.', '_', ':' and '-' only",
                )
            )
        elif name in seen:
            out.append(at(line, f"host name {name} repeats", "list every node once"))
        seen.add(name)
    return out
