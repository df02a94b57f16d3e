"""Safe YAML to located nodes, built from the parser's event stream.

PyYAML's own composer and `safe_load` keep the last of two duplicate keys, expand aliases
without limit once the data is walked, recurse on deep nesting and read `on`/`010` the YAML 1.1
way. Composing from events ourselves gives one iterative pass in which every hazard becomes a
`YamlProblem` with a location, and every node keeps its 1-based line and column.

Scalars are read by the YAML 1.2 core schema (as editors and yaml-language-server do); a plain
scalar that a YAML 1.1 reader (PyYAML, Ruby, older Go) would read differently is reported, so
a spec means the same thing to every tool.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, NoReturn

import yaml

from planc.record import record

MAX_DEPTH = 64
MAX_EXPANDED_NODES = 200_000
# Python converts at most 4,300 digits between text and int (sys.get_int_max_str_digits); a
# longer integer could be neither read nor shown in a message. No spec number comes close.
MAX_INT_DIGITS = 4300
_INT_LIMIT = 10**MAX_INT_DIGITS

Kind = Literal["map", "seq", "scalar"]
Pairs = tuple[tuple["Node", "Node"], ...]


@record(eq=False)
class Node:
    """A located YAML node. `value` is pairs (map), nodes (seq) or the constructed scalar."""

    kind: Kind
    line: int
    column: int
    value: Any  # pairs for a map, a tuple of nodes for a seq, the scalar itself
    plain: bool = False
    source: str = ""
    size: int = 1

    def pairs(self) -> Pairs:
        pairs: Pairs = self.value if self.kind == "map" else ()
        return pairs

    def get(self, key: str) -> tuple[Node, Node] | None:
        for k, v in self.pairs():
            if k.value == key:
                return k, v
        return None


@record
class YamlProblem:
    """A hazard found while composing. `code` names the kind; the loader maps it to a rule id."""

    code: str
    line: int
    column: int
    message: str
    fix: str = ""
    path: str = ""


class _Stop(Exception):
    def __init__(self, problem: YamlProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


_CORE_TAGS = frozenset(
    {
        "tag:yaml.org,2002:str",
        "tag:yaml.org,2002:int",
        "tag:yaml.org,2002:float",
        "tag:yaml.org,2002:bool",
        "tag:yaml.org,2002:null",
        "tag:yaml.org,2002:map",
        "tag:yaml.org,2002:seq",
    }
)

_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL = MappingProxyType(
    {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
)
_INT10 = re.compile(r"^[-+]?[0-9]+$")
_INT8 = re.compile(r"^0o[0-7]+$")
_INT16 = re.compile(r"^0x[0-9a-fA-F]+$")
_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$")
_INF = re.compile(r"^[-+]?\.(?:inf|Inf|INF)$")
_NAN = re.compile(r"^\.(?:nan|NaN|NAN)$")


def _yaml11_tag(text: str) -> str:
    """The tag PyYAML (YAML 1.1) resolves an untagged plain scalar to."""
    tag: str = yaml.resolver.Resolver().resolve(yaml.ScalarNode, text, (True, False))  # type: ignore[no-untyped-call]
    return tag


def _yaml11_value(text: str) -> Any:
    """What PyYAML (YAML 1.1, safe) makes of an untagged plain scalar."""
    node = yaml.ScalarNode(_yaml11_tag(text), text)
    return yaml.constructor.SafeConstructor().construct_object(node)


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def _describe_yaml11(text: str, value: Any) -> str:
    if text in _SINGLE_LETTER_BOOLS:
        return f"the boolean {_SINGLE_LETTER_BOOLS[text]} (YAML 1.1 spec; PyYAML itself keeps a string)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int) and abs(value) >= _INT_LIMIT:
        return f"a number of more than {MAX_INT_DIGITS:,} digits"
    if isinstance(value, int):
        digits = text.replace("_", "").lstrip("+-")
        if digits.startswith("0") and digits[1:2].isdigit():
            return f"the octal number {value}"
        if ":" in text:
            return f"the base-60 number {value}"
        if digits.startswith("0b"):
            return f"the binary number {value}"
        if "_" in text:
            return f"the number {value} (underscores removed)"
        return f"the number {value}"
    if isinstance(value, float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if value is None:
        return "null"
    return f"a {type(value).__name__}"


# The YAML 1.1 boolean type lists y/Y/n/N; PyYAML leaves them strings, other 1.1 readers do not.
_SINGLE_LETTER_BOOLS = MappingProxyType({"y": "true", "Y": "true", "n": "false", "N": "false"})


def yaml11_reading(text: str) -> str | None:
    """How a YAML 1.1 reader (PyYAML) takes this plain scalar, when YAML 1.2 core differs."""
    if text in _SINGLE_LETTER_BOOLS:
        return _describe_yaml11(text, text)
    if ":" in text and len(text) > MAX_INT_DIGITS and _yaml11_tag(text).endswith(":int"):
        # PyYAML builds a base-60 integer part by part in quadratic time (a 2 MB one takes
        # minutes); YAML 1.2 has no base 60, so it reads a string whatever the number is.
        return f"a base-60 number of {len(text):,} characters"
    try:
        old = _yaml11_value(text)
    except (yaml.YAMLError, ValueError, OverflowError):
        return "not a valid value"
    return None if _same(old, _plain_scalar(text)) else _describe_yaml11(text, old)


def _plain_scalar(text: str) -> Any:
    """YAML 1.2 core schema resolution of an untagged plain scalar."""
    if _NULL.fullmatch(text):
        return None
    if text in _BOOL:
        return _BOOL[text]
    if _INT10.fullmatch(text):
        return _checked_int(text, 10)
    if _INT8.fullmatch(text):
        return _checked_int(text[2:], 8)
    if _INT16.fullmatch(text):
        return _checked_int(text[2:], 16)
    if _FLOAT.fullmatch(text):
        return float(text)
    if _INF.fullmatch(text):
        return -math.inf if text.startswith("-") else math.inf
    if _NAN.fullmatch(text):
        return math.nan
    return text


class _NumberTooLong(Exception):
    """An integer scalar past MAX_INT_DIGITS decimal digits; the message says how long."""


def _checked_int(text: str, base: int) -> int:
    """int(text, base), refused beyond MAX_INT_DIGITS decimal digits (before converting)."""
    digits = len(text.lstrip("+-"))
    if base == 10 and digits > MAX_INT_DIGITS:
        raise _NumberTooLong(f"an integer of {digits:,} digits")
    value = int(text, base)
    if abs(value) >= _INT_LIMIT:
        kind = {8: "octal", 16: "hexadecimal"}[base]
        raise _NumberTooLong(f"a {kind} integer of {digits:,} digits, above 10^{MAX_INT_DIGITS}")
    return value


def _tagged_scalar(tag: str, text: str) -> Any:
    short = tag.rsplit(":", 1)[-1]
    if short == "str":
        return text
    value = _plain_scalar(text)
    expected = {"int": int, "float": (int, float), "bool": bool, "null": type(None)}[short]
    if short != "bool" and isinstance(value, bool):
        raise ValueError(text)
    if not isinstance(value, expected):  # type: ignore[arg-type]
        raise ValueError(text)
    return float(value) if short == "float" else value


@dataclass
class _Frame:
    """A mapping or sequence being composed: where it starts, its anchor, what it holds so far
    (mutable: the composer fills it event by event, and it becomes a frozen Node when closed)."""

    kind: Kind
    line: int
    column: int
    anchor: str | None
    items: list[Node]
    keys: dict[Any, int]


def _mark(event: yaml.Event) -> tuple[int, int]:
    mark = event.start_mark
    return (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)


class _Composer:
    """Turns parser events into nodes; raises `_Stop` on the first hazard it cannot go past."""

    def __init__(self) -> None:
        self.anchors: dict[str, Node] = {}
        self.stack: list[_Frame] = []
        self.problems: list[YamlProblem] = []
        self.documents: list[Node] = []

    def stop(self, code: str, at: tuple[int, int], message: str, fix: str = "") -> NoReturn:
        raise _Stop(YamlProblem(code, at[0], at[1], message, fix))

    def add(self, node: Node, anchor: str | None) -> None:
        if node.size > MAX_EXPANDED_NODES:
            self.stop(
                "expansion",
                (node.line, node.column),
                f"aliases expand this document to more than {MAX_EXPANDED_NODES:,} nodes "
                "(an alias bomb)",
                "write the values out instead of nesting aliases",
            )
        if anchor is not None:
            self.anchors[anchor] = node
        if not self.stack:
            self.documents.append(node)
            return
        frame = self.stack[-1]
        if frame.kind == "map" and len(frame.items) % 2 == 0:
            self.check_key(frame, node)
        frame.items.append(node)

    def check_key(self, frame: _Frame, key: Node) -> None:
        at = (key.line, key.column)
        if key.kind != "scalar":
            self.stop("key", at, "a mapping key must be a plain name, not a mapping or list")
        if key.plain and key.source == "<<":
            self.stop("merge", at, "merge keys (<<) are not supported", "write the keys out")
        if not isinstance(key.value, str):
            reading = repr(key.value) if key.value is not None else "null"
            self.stop(
                "key",
                at,
                f"the key {key.source!r} is read as {reading}, not a name",
                f'quote it: "{key.source}"',
            )
        first = frame.keys.get(key.value)
        if first is not None:
            self.problems.append(
                YamlProblem(
                    "duplicate",
                    key.line,
                    key.column,
                    f"duplicate key {key.value!r}: first defined on line {first}; "
                    "YAML readers silently keep only the last value",
                    "remove one of the two entries",
                )
            )
        else:
            frame.keys[key.value] = key.line

    def scalar(self, event: yaml.ScalarEvent) -> None:
        at = _mark(event)
        plain = not event.style and event.implicit[0] and event.tag in (None, "!")
        try:
            if plain:
                value = _plain_scalar(event.value)
            elif event.tag in (None, "!") or event.implicit[1]:
                value = event.value
            elif event.tag in _CORE_TAGS:
                try:
                    value = _tagged_scalar(event.tag, event.value)
                except (ValueError, KeyError):
                    self.stop("tag", at, f"{event.value[:40]!r} is not a valid {event.tag}")
            else:
                self.unsafe_tag(event.tag, at)
        except _NumberTooLong as long:
            self.stop(
                "number",
                at,
                f"{long}; planc reads integers of at most {MAX_INT_DIGITS:,} digits",
                "no spec number needs that many; quote it if it is a name",
            )
        self.add(Node("scalar", *at, value, plain, event.value), event.anchor)

    def unsafe_tag(self, tag: str | None, at: tuple[int, int]) -> NoReturn:
        self.stop(
            "tag",
            at,
            f"the tag {str(tag).replace('tag:yaml.org,2002:', '!!')} is not allowed: planc reads "
            "plain data only and never builds objects",
            "remove the tag",
        )

    def start(self, kind: Kind, event: yaml.CollectionStartEvent) -> None:
        at = _mark(event)
        if event.tag not in (None, "!") and event.tag not in _CORE_TAGS:
            self.unsafe_tag(event.tag, at)
        if len(self.stack) >= MAX_DEPTH:
            self.stop(
                "depth", at, f"nesting deeper than {MAX_DEPTH} levels", "flatten the document"
            )
        self.stack.append(_Frame(kind, at[0], at[1], event.anchor, [], {}))

    def end(self) -> None:
        frame = self.stack.pop()
        items = frame.items
        size = 1 + sum(n.size for n in items)
        if frame.kind == "map":
            pairs = tuple(zip(items[0::2], items[1::2], strict=True))
            self.add(Node("map", frame.line, frame.column, pairs, size=size), frame.anchor)
        else:
            self.add(Node("seq", frame.line, frame.column, tuple(items), size=size), frame.anchor)

    def alias(self, event: yaml.AliasEvent) -> None:
        node = self.anchors.get(event.anchor or "")
        if node is None:
            self.stop("syntax", _mark(event), f"alias *{event.anchor} has no anchor before it")
        self.add(node, None)

    def feed(self, event: yaml.Event) -> None:
        if isinstance(event, yaml.ScalarEvent):
            self.scalar(event)
        elif isinstance(event, yaml.MappingStartEvent):
            self.start("map", event)
        elif isinstance(event, yaml.SequenceStartEvent):
            self.start("seq", event)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            self.end()
        elif isinstance(event, yaml.AliasEvent):
            self.alias(event)
        elif isinstance(event, yaml.DocumentStartEvent):
            self.anchors = {}


def _loader() -> type[Any]:
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _events(text: str) -> Iterator[yaml.Event]:
    events: Iterator[yaml.Event] = yaml.parse(text, Loader=_loader())
    return events


def _flow_depth_position(text: str, depth: int) -> tuple[int, int] | None:
    """1-based position of the bracket that opens flow level `depth` (quotes and comments skipped)."""
    level = 0
    for number, line in enumerate(text.splitlines(), start=1):
        quote = ""
        for column, char in enumerate(line, start=1):
            if quote:
                quote = "" if char == quote else quote
            elif char in "'\"":
                quote = char
            elif char == "#" and (column == 1 or line[column - 2] in " \t"):
                break
            elif char in "[{":
                level += 1
                if level == depth:
                    return number, column
            elif char in "]}":
                level -= 1
    return None


def _syntax_problem(error: yaml.YAMLError, text: str) -> YamlProblem:
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    problem = getattr(error, "problem", None) or str(error)
    lines = text.splitlines()
    if lines and line > len(lines):
        # libyaml puts an error at the end of a file without a final newline on the line after
        # it; point at the end of the last line instead, as pure-Python PyYAML does.
        line, column = len(lines), len(lines[-1]) + 1
    source_line = lines[line - 1] if 0 < line <= len(lines) else ""
    if "\t" in source_line[: max(column, 1) + 1] or "found character '\\t'" in str(problem):
        tab = source_line.find("\t")
        return YamlProblem(
            "syntax",
            line,
            tab + 1 if tab >= 0 else column,
            "a tab character is used for indentation; YAML allows only spaces",
            "replace the tab with spaces",
        )
    if "nesting depth" in str(problem):
        # libyaml ≥ 0.2.6 (PyYAML 6.0.4 wheels) stops deep flow nesting itself while scanning
        # ahead; report where the nesting passes planc's limit, as the composer does without it
        # (the top-level mapping is the first of the MAX_DEPTH levels).
        line, column = _flow_depth_position(text, MAX_DEPTH) or (line, column)
        return YamlProblem(
            "depth", line, column, f"nesting deeper than {MAX_DEPTH} levels", "flatten the document"
        )
    context = getattr(error, "context", None)
    detail = f"{context}, {problem}" if context else str(problem)
    return YamlProblem("syntax", line, column, f"YAML syntax error: {detail}")


# Line breaks to YAML 1.1 (libyaml, PyYAML) but ordinary characters to YAML 1.2, which dropped
# them for JSON compatibility: `nodes: 2 # c<NEL>gpus_per_node: 4` sets gpus_per_node for one
# reader and is a comment for the other, and inside a double-quoted string libyaml folds NEL into a
# space. With the YAML escape that writes the character in a double-quoted string.
_YAML11_BREAKS = MappingProxyType(
    {
        "\x85": ("NEL (U+0085, next line)", "\\N"),
        "\u2028": ("U+2028 (line separator)", "\\L"),
        "\u2029": ("U+2029 (paragraph separator)", "\\P"),
    }
)
_YAML11_BREAK = re.compile("[\x85\u2028\u2029]")
_YAML12_BREAK = re.compile("\r\n|\r|\n")


def _yaml11_break(text: str) -> YamlProblem | None:
    """The first character that YAML 1.1 reads as a line break and YAML 1.2 does not, located
    as YAML 1.2 counts lines (LF, CR, CRLF)."""
    found = _YAML11_BREAK.search(text)
    if found is None:
        return None
    offset = found.start()
    breaks = list(_YAML12_BREAK.finditer(text, 0, offset))
    line_start = breaks[-1].end() if breaks else 0
    name, escape = _YAML11_BREAKS[found.group()]
    others = len(_YAML11_BREAK.findall(text)) - 1
    more = f" ({others:,} more in the file)" if others else ""
    return YamlProblem(
        "yaml11",
        len(breaks) + 1,
        offset - line_start + 1,
        f"{name} is a line break to a YAML 1.1 reader (PyYAML, libyaml) but an ordinary "
        f"character to a YAML 1.2 reader, so the file means different things to different "
        f"tools{more}",
        f"replace it with a newline, or write it as {escape} inside a double-quoted string",
    )


def compose(text: str) -> tuple[list[Node], list[YamlProblem]]:
    """All documents of `text` as located nodes, and the problems found on the way.

    When a problem stops composing (a YAML 1.1 line break, syntax, alias bomb, depth, unsafe
    tag, an over-long integer), the document list is empty and the problem list holds that
    problem.
    """
    ambiguous = _yaml11_break(text)
    if ambiguous is not None:
        return [], [ambiguous]
    composer = _Composer()
    try:
        for event in _events(text):
            composer.feed(event)
    except _Stop as stop:
        return [], [*composer.problems, stop.problem]
    except yaml.YAMLError as error:
        return [], [_syntax_problem(error, text)]
    except RecursionError:
        return [], [YamlProblem("depth", 1, 1, "the document nests too deeply to read")]
    return composer.documents, composer.problems


def to_data(node: Node) -> Any:
    """Plain Python data (dict, list, scalars) from a node. Sizes were capped when composing."""
    if node.kind == "map":
        return {k.value: to_data(v) for k, v in node.pairs()}
    if node.kind == "seq":
        return [to_data(n) for n in node.value]
    return node.value


def walk_plain_scalars(
    node: Node, path: tuple[str | int, ...] = ()
) -> Iterator[tuple[tuple[str | int, ...], Node]]:
    """Every plain scalar value (not keys) with its path, depth first."""
    if node.kind == "map":
        for key, value in node.pairs():
            yield from walk_plain_scalars(value, (*path, key.value))
    elif node.kind == "seq":
        for index, item in enumerate(node.value):
            yield from walk_plain_scalars(item, (*path, index))
    elif node.plain:
        yield path, node
