"""Load: bytes -> located YAML nodes -> validated `Spec` -> resolved `Job`, or located findings.

Every failure is a `Finding` with a rule id and a position; nothing here raises on bad input.
"""

from __future__ import annotations

import dataclasses
import errno
import math
import os
import re
import stat
import sys
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from planc.bounded import read_pipe
from planc.findings import Finding, Severity
from planc.record import record
from planc.spec.job import Job, resolve
from planc.spec.locate import Locator, dotted
from planc.spec.nodes import Node, compose, to_data, walk_plain_scalars, yaml11_reading

if TYPE_CHECKING:
    from pydantic import ValidationError

MAX_BYTES = 2 * 1024 * 1024

_YAML_CODES = MappingProxyType(
    {
        "syntax": "PLC103",
        "duplicate": "PLC104",
        "expansion": "PLC102",
        "depth": "PLC102",
        "number": "PLC102",
        "yaml11": "PLC107",
        "tag": "PLC106",
        "merge": "PLC106",
        "key": "PLC106",
    }
)


@record
class Loaded:
    """The outcome of loading one input: findings, and the job when the spec resolved."""

    path: str
    findings: tuple[Finding, ...]
    locator: Locator
    spec: dict[str, Any] | None = None  # the validated spec as plain data, defaults filled in
    job: Job | None = None
    text: str | None = None  # the decoded input (load_path), for source snippets in reports


def _finding(
    rule: str,
    at: tuple[int, int],
    message: str,
    fix: str = "",
    field: str = "",
    severity: Severity = Severity.ERROR,
) -> Finding:
    return Finding(at[0], at[1], rule, severity, message, field, fix)


def _fatal(message: str, fix: str = "") -> Finding:
    return _finding("PLC100", (1, 1), message, fix, severity=Severity.FATAL)


def _read_stdin() -> bytes | Finding:
    """Standard input's first MAX_BYTES + 1 bytes."""
    closed = _fatal(
        "standard input is closed: there is no spec to read from it",
        "pipe the spec in (planc check - < spec.yaml) or pass the file's path",
    )
    # Started with descriptor 0 closed (`planc check - <&-`), Python has no sys.stdin; the
    # planc program puts a stand-in there whose reads fail with EBADF.
    if sys.stdin is None:
        return closed
    try:
        data: bytes = sys.stdin.buffer.read(MAX_BYTES + 1)
    except OSError as error:
        if error.errno == errno.EBADF:
            return closed
        raise
    return data


# What a spec path may name besides a regular file, for the message.
_NOT_A_FILE = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _read_file(path: str, devices: bool = False) -> bytes | Finding:
    """A regular file's or a pipe's first MAX_BYTES + 1 bytes. Opened without blocking and
    checked before reading: a FIFO with no writer, a terminal or /dev/zero must not hang or flood
    the check. A pipe (`planc check <(cat spec.yaml)`, a FIFO a program writes) is read to its
    end through the bounded reader; an empty one, such as a FIFO nothing writes to, is refused.
    With `devices` (`--hosts`), a character device other than a terminal is read too, bounded."""
    descriptor = os.open(
        path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    )
    with open(descriptor, "rb", closefd=True) as handle:
        mode = os.fstat(descriptor).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(path)
        if stat.S_ISREG(mode):
            return handle.read(MAX_BYTES + 1)
        if stat.S_ISFIFO(mode) or (devices and stat.S_ISCHR(mode) and not os.isatty(descriptor)):
            data = read_pipe(descriptor, MAX_BYTES)
            if data or not stat.S_ISFIFO(mode):
                return data
            return _fatal(
                "is a pipe (FIFO) with nothing written to it: no program writes to it",
                "write the file to it while planc reads it (planc check <(cat spec.yaml)), "
                "or pass the file itself",
            )
        what = next((name for test, name in _NOT_A_FILE if test(mode)), "not a regular file")
        return _fatal(
            f"is {what}, not a regular file or a pipe: planc reads spec files",
            "pass the spec file itself, or '-' to read standard input "
            "(planc check - < spec.yaml)",
        )


def read_input(path: str, devices: bool = False) -> tuple[bytes | None, Finding | None]:
    """The raw bytes of a file, a pipe (or stdin for `-`), capped; or a fatal finding. With
    `devices`, a character device that is not a terminal is read too (bounded)."""
    try:
        data = _read_stdin() if path == "-" else _read_file(path, devices)
    except FileNotFoundError:
        return None, _finding("PLC100", (1, 1), "no such file", severity=Severity.FATAL)
    except IsADirectoryError:
        return None, _finding(
            "PLC100",
            (1, 1),
            "is a directory, not a spec file",
            "pass the YAML files inside it",
            severity=Severity.FATAL,
        )
    except PermissionError:
        return None, _finding(
            "PLC100", (1, 1), "permission denied: the file cannot be read", severity=Severity.FATAL
        )
    except OSError as error:
        return None, _finding(
            "PLC100", (1, 1), f"cannot be read: {error.strerror or error}", severity=Severity.FATAL
        )
    if isinstance(data, Finding):
        return None, data
    if len(data) > MAX_BYTES:
        return None, _finding(
            "PLC102",
            (1, 1),
            f"the file is larger than {MAX_BYTES:,} bytes; a spec is a few KB",
            "check that this is the spec you meant",
            severity=Severity.FATAL,
        )
    return data, None


def decode(data: bytes) -> tuple[str | None, Finding | None]:
    """UTF-8 text without a BOM, with CRLF normalised; or a fatal finding at the bad byte."""
    if b"\x00" in data:
        at = _line_col(data, data.index(b"\x00"))
        return None, _finding(
            "PLC101", at, "binary data (a NUL byte): not a YAML text file", severity=Severity.FATAL
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        at = _line_col(data, error.start)
        return None, _finding(
            "PLC101",
            at,
            f"not UTF-8: byte 0x{data[error.start]:02x} cannot be decoded",
            "save the file as UTF-8",
            severity=Severity.FATAL,
        )
    return text.removeprefix("\ufeff").replace("\r\n", "\n"), None


def _line_col(data: bytes, offset: int) -> tuple[int, int]:
    """1-based line and character (not byte) column of a byte offset."""
    line = data.count(b"\n", 0, offset) + 1
    start = data.rfind(b"\n", 0, offset) + 1
    return line, len(data[start:offset].decode("utf-8", errors="replace")) + 1


def _empty_file() -> Finding:
    return _finding(
        "PLC105",
        (1, 1),
        "the file is empty: no spec in it",
        "start from one of the files in examples/",
    )


def _document(text: str) -> tuple[Node | None, list[Finding]]:
    documents, problems = compose(text)
    findings = [
        _finding(_YAML_CODES[p.code], (p.line, p.column), p.message, p.fix) for p in problems
    ]
    if not documents:
        if not problems:
            findings.append(_empty_file())
        return None, findings
    if len(documents) > 1:
        second = documents[1]
        findings.append(
            _finding(
                "PLC105",
                (second.line, second.column),
                f"{len(documents)} YAML documents in one file; a spec file holds one",
                "split the documents into separate files",
            )
        )
        return None, findings
    root = documents[0]
    if root.kind != "map":
        what = {"seq": "a list", "scalar": "a single value"}[root.kind]
        if root.kind == "scalar" and root.value is None:
            findings.append(_empty_file())
        else:
            findings.append(
                _finding(
                    "PLC105",
                    (root.line, root.column),
                    f"the top level is {what}; a spec is a mapping of sections",
                    "start with 'version: 1'",
                )
            )
        return None, findings
    return root, findings


def _cut(text: str, limit: int = 60) -> str:
    """`text` for a message, cut to `limit` characters."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _yaml11(root: Node) -> list[Finding]:
    findings = []
    for path, node in walk_plain_scalars(root):
        reading = yaml11_reading(node.source)
        if reading is None:
            continue
        field = dotted(path)
        source = _cut(node.source)
        quoted = f'"{source}"'
        if reading.startswith("the boolean"):
            fix = f"write true or false for a boolean, or {quoted} for a string"
        elif isinstance(node.value, int):
            fix = f"write {_cut(str(node.value))} without a leading zero, or {quoted} for a string"
        else:
            fix = f"quote it ({quoted}) if you mean a string"
        findings.append(
            _finding(
                "PLC107",
                (node.line, node.column),
                f"{field}: {source} is {reading} to a YAML 1.1 reader (PyYAML) but "
                f"{_cut(repr(node.value))} to a YAML 1.2 reader",
                fix,
                field,
            )
        )
    return findings


def _validated(
    data: Any, locator: Locator, flagged: set[str]
) -> tuple[dict[str, Any] | None, list[Finding]]:
    """The spec as defaulted plain data, or the findings that say why not.

    The fast path (`planc.spec.fastcheck`) accepts valid specs without importing pydantic; anything
    it does not accept goes through the pydantic models, which decide and explain.
    """
    from planc.spec.fastcheck import fast_validate  # start-up: reads the published schema lazily

    fast = fast_validate(data)
    if fast is not None:
        return fast, []
    from pydantic import ValidationError  # start-up: pydantic only for specs the fast path refuses

    from planc.spec.models import Spec  # start-up: the pydantic models

    try:
        return Spec.model_validate(data).model_dump(), []
    except ValidationError as error:
        return None, [f for f in translate(error, data, locator) if f.field not in flagged]


# What YAML (and libyaml's marks) count as line breaks; CRLF was folded to LF on reading.
_YAML_LINE_BREAKS = ("\n", "\r", "\x85", "\u2028", "\u2029")


def _within(text: str, findings: list[Finding]) -> list[Finding]:
    """Keep every position inside the file: an empty node at the very end of the input is marked
    on a line after the last one."""
    last = 1 + sum(text.count(br) for br in _YAML_LINE_BREAKS)
    return [f if f.line <= last else dataclasses.replace(f, line=last, column=1) for f in findings]


def fill_rule_defaults(data: Any, defaults: Mapping[str, Any]) -> Any:
    """The spec data with `defaults` in its `rules` section wherever the spec leaves a key out;
    `severity` is merged per rule id with the spec's entries winning, and `ignore` is the union of
    the spec's list and the defaults'. Data that is not a mapping (or a `rules` that is not one)
    is returned unchanged, for validation to report."""
    if not defaults or not isinstance(data, dict):
        return data
    rules = data.get("rules", {})
    if not isinstance(rules, dict):
        return data
    merged = {**{k: v for k, v in defaults.items() if k not in ("severity", "ignore")}, **rules}
    if "severity" in defaults:
        own = rules.get("severity", {})
        merged["severity"] = {**defaults["severity"], **own} if isinstance(own, dict) else own
    if "ignore" in defaults:
        own = rules.get("ignore", [])
        merged["ignore"] = (
            list(dict.fromkeys([*own, *defaults["ignore"]])) if isinstance(own, list) else own
        )
    return {**data, "rules": merged}


def load_text(
    path: str, text: str, defaults: dict[str, Any] | None = None, base_dir: str = "."
) -> Loaded:
    """Load a spec from text; `path` is only used for messages.

    `defaults` (from a configuration file, `planc.rules.config`) fill the spec's `rules` section where
    the spec leaves a key out, before validation. `base_dir` is where a relative
    `model.hf_config` starts.
    """
    root, findings = _document(text)
    findings = _within(text, findings)
    locator = Locator(root)
    if root is None:
        return Loaded(path, tuple(findings), locator)
    findings += _yaml11(root)
    data = to_data(root)
    if defaults:
        data = fill_rule_defaults(data, defaults)
    spec, errors = _validated(data, locator, {f.field for f in findings})
    findings += errors
    if spec is None or findings:
        return Loaded(path, tuple(findings), locator, spec)
    if spec["model"].get("hf_config") is not None:
        spec, notes = _hf_model(spec, locator, base_dir)
        findings += notes
        if spec is None:
            return Loaded(path, tuple(findings), locator)
    resolved = resolve(spec)
    if isinstance(resolved, list):
        findings += [
            _finding(p.rule, locator.first_present([p.field]), p.message, p.fix, p.field)
            for p in resolved
        ]
        return Loaded(path, tuple(findings), locator, spec)
    calibration = spec["hardware"].get("calibration")
    if calibration is not None:
        resolved, problem = _calibrated(resolved, calibration, locator, base_dir)
        if problem is not None:
            return Loaded(path, (*findings, problem), locator, spec)
    topology = spec["hardware"].get("topology")
    if topology is not None:
        given = spec["hardware"].get("hosts")
        placed, notes = _placed(resolved, topology, bool(given), locator, base_dir)
        findings += notes
        if placed is None:
            return Loaded(path, tuple(findings), locator, spec)
        resolved = placed
    return Loaded(path, tuple(findings), locator, spec, resolved)


def _placed(
    job: Job, name: str, hosts_given: bool, locator: Locator, base_dir: str
) -> tuple[Job | None, list[Finding]]:
    """The job with its hosts placed on `hardware.topology` (a Slurm topology.conf or
    topology.yaml, relative to the spec) and the tiers it makes (`planc.spec.topology`), and
    the levels left out as warnings; None and a located finding when the file cannot be used."""
    from planc.spec.topology import TopologyError, placed_cluster, read  # start-up: topology

    at = locator.position(("hardware", "topology"))
    field = "hardware.topology"
    target = os.path.join(base_dir, name)
    hosts = job.cluster.hosts if hosts_given else None
    try:
        cluster, skipped = placed_cluster(job.cluster, read(target), hosts)
    except TopologyError as error:
        where = f"{_cut(target, 200)}:{error.line}" if error.line else _cut(target, 200)
        return None, [
            _finding(
                "PLC110",
                at,
                f"{field}: {where}: {error}",
                "give the scheduler's topology.conf or topology.yaml (a tree or blocks) that "
                "lists every host of the job",
                field,
            )
        ]
    notes = [
        _finding(
            "PLC110",
            at,
            f"{field}: level {level}; it is not a tier, and its groups are priced on the tier above",
            "give the job the same number of hosts under every switch or block of that level",
            field,
            Severity.WARNING,
        )
        for level in skipped
    ]
    return dataclasses.replace(job, cluster=cluster), notes


def _calibrated(
    job: Job, name: str, locator: Locator, base_dir: str
) -> tuple[Job, Finding | None]:
    """The job with `hardware.calibration`'s efficiency tables read in (a file `planc calibrate`
    wrote, relative to the spec), or a located finding saying why the file cannot be used."""
    from planc.presets.efficiency import read_calibration  # start-up: hardware.calibration

    at = locator.position(("hardware", "calibration"))
    field = "hardware.calibration"
    target = os.path.join(base_dir, name)
    try:
        # A regular file, bounded, strict JSON, checked as strictly as a spec.
        data, _ = read_calibration(target)
    except ValueError as error:
        return job, _finding(
            "PLC110",
            at,
            f"{field}: {_cut(target, 200)} cannot be used: {error}",
            "give the file `planc calibrate -o FILE` wrote, relative to this spec",
            field,
        )
    cluster = dataclasses.replace(job.cluster, calibration=data)
    return dataclasses.replace(job, cluster=cluster), None


def _hf_model(
    spec: dict[str, Any], locator: Locator, base_dir: str
) -> tuple[dict[str, Any] | None, list[Finding]]:
    """The spec with `model.hf_config` read in (`planc.spec.hf`), and its notes as findings at
    the hf_config value; None when the config cannot be used (an error among them)."""
    from planc.spec.hf import merged_model  # start-up: only for model.hf_config

    model, notes = merged_model(spec["model"], base_dir)
    field = "model.hf_config"
    at = locator.position(("model", "hf_config"))
    findings = [
        _finding(
            note.rule, at, f"{field}: {note.message}", note.fix, field, Severity(note.severity)
        )
        for note in notes
    ]
    return (None if model is None else {**spec, "model": model}), findings


def base_dir(path: str) -> str:
    """Where a spec's relative paths (model.hf_config, hardware.calibration) start: its own
    directory, or the working directory for stdin and a pipe (`<(cat spec.yaml)` is
    /dev/fd/63, whose directory holds no spec's files)."""
    if path == "-":
        return "."
    try:
        special = not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:  # a file that is not there: its own directory, as before
        special = False
    return "." if special else os.path.dirname(path) or "."


def load_path(path: str, defaults: dict[str, Any] | None = None) -> Loaded:
    data, failure = read_input(path)
    if failure is None and data is not None:
        text, failure = decode(data)
        if failure is None and text is not None:
            loaded = load_text(path, text, defaults, base_dir(path))
            return dataclasses.replace(loaded, text=text)
    return Loaded(path, (failure,) if failure else (), Locator(None))


# --- pydantic errors -> findings -------------------------------------------------------------

_TYPE_WORDS = MappingProxyType(
    {
        "int_type": "an integer",
        "float_type": "a number",
        "bool_type": "true or false",
        "string_type": "a string",
        "dict_type": "a mapping",
        "model_type": "a mapping",
        "list_type": "a list",
        "literal_error": "one of the allowed values",
    }
)


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if value is None:
        return "null (an empty value)"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the string {shown!r}"
    if isinstance(value, float):
        return f"the number {value!r}"
    if isinstance(value, int):
        text = str(value)
        return f"the number {text if len(text) <= 24 else text[:10] + '...(' + str(len(text)) + ' digits)'}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


_SCALAR_TAGS = frozenset({"str", "int", "float", "bool"})


def _is_union_tag(segment: Any) -> bool:
    """pydantic adds the union member's name to `loc` (`GpuSpec`, `literal[...]`, `str`)."""
    if not isinstance(segment, str):
        return False
    return segment in _SCALAR_TAGS or re.fullmatch(r"[a-z_][a-z0-9_]*", segment) is None


@record
class _Loc:
    """A pydantic loc split into the spec path, the union branch taken, and what stands there."""

    path: tuple[Any, ...]
    tag: Any  # the first union member name in the loc, or None
    union_input: Any  # the value the union was given (where the tag stood)
    value: Any  # the value at the path
    key_error: bool  # the error is about a mapping key ("[key]" in the loc), not its value


def _has(node: Any, segment: Any) -> bool:
    if isinstance(node, dict):
        return segment in node
    return isinstance(node, list) and isinstance(segment, int) and 0 <= segment < len(node)


def _data_at(data: Any, loc: tuple[Any, ...]) -> _Loc:
    path: list[Any] = []
    tag: Any = None
    union_input: Any = None
    key_error = False
    node = data
    for segment in loc:
        if segment == "[key]":
            key_error = True
        elif _has(node, segment):
            node = node[segment]
            path.append(segment)
        elif _is_union_tag(segment):
            if tag is None:
                tag, union_input = segment, node
        else:
            node = None  # a missing key: still part of the path
            path.append(segment)
    return _Loc(tuple(path), tag, union_input, node, key_error)


def _branch_fits(tag: Any, value: Any) -> bool:
    text = str(tag)
    if isinstance(value, str):
        return text.startswith(("literal", "str", "constrained-str"))
    if isinstance(value, list):
        return text.startswith("list")
    if isinstance(value, dict):
        return text[:1].isupper() or text.startswith("dict")
    return False


def translate(error: ValidationError, data: Any, locator: Locator) -> list[Finding]:
    """One finding per pydantic error, located on the YAML node, in plain language."""
    findings: dict[tuple[str, str], Finding] = {}
    union_misses: dict[str, dict[str, Any]] = {}
    for item in error.errors(include_url=False):
        loc = _data_at(data, tuple(item["loc"]))
        field = dotted(loc.path)
        if loc.tag is not None and not _branch_fits(loc.tag, loc.union_input):
            miss = union_misses.setdefault(
                field, {"path": loc.path, "value": loc.value, "tags": []}
            )
            miss["tags"].append(loc.tag)
            continue
        if loc.key_error:
            finding = _bad_key(item, loc, field, locator)
        else:
            finding = _one(item, loc.path, field, loc.value, locator)
        findings.setdefault((finding.field, finding.rule), finding)
    for field, miss in union_misses.items():
        if any(
            key[0] == field or key[0].startswith((field + ".", field + "[")) for key in findings
        ):
            continue
        at = locator.position(miss["path"])
        findings[(field, "PLC110")] = _finding(
            "PLC110",
            at,
            f"{field} must be {_union_words(field)}, got {_describe(miss['value'])}",
            _union_fix(field),
            field,
        )
    return list(findings.values())


def _bad_key(item: Any, loc: _Loc, field: str, locator: Locator) -> Finding:
    key = loc.path[-1] if loc.path else "?"
    parent = dotted(loc.path[:-1])
    want = "look like PLC001" if item["type"] == "string_pattern_mismatch" else "be a string"
    return _finding(
        "PLC110",
        locator.position(loc.path, at_key=True),
        f"{parent} key {key!r} must {want}",
        "use a rule id from 'planc rules'" if parent.startswith("rules.") else "",
        field,
    )


def _union_words(field: str) -> str:
    if field.endswith("gpu"):
        return "a GPU preset name or a mapping of the GPU's numbers"
    if field.endswith("hosts"):
        return "a list of host names or a pattern string"
    return "a value of another type"


def _union_fix(field: str) -> str:
    if field.endswith("gpu"):
        return "write a preset such as h100-sxm, or {memory_gb: 80, bf16_tflops: 989, ...}"
    return ""


def _one(item: Any, path: tuple[Any, ...], field: str, value: Any, locator: Locator) -> Finding:
    kind = item["type"]
    ctx = item.get("ctx", {})
    if kind == "extra_forbidden":
        return _unknown_key(path, field, locator)
    if kind == "missing":
        parent, name = dotted(path[:-1]) or "the top level", path[-1]
        return _finding(
            "PLC109",
            locator.position(path, at_key=True),
            f"{name} is required in {parent}",
            f"add {field}",
            field,
        )
    at = locator.position(path)
    if kind == "literal_error":
        return _literal(field, value, ctx, at)
    if kind in ("finite_number",):
        return _finding(
            "PLC110",
            at,
            f"{field} must be a finite number, got {_describe(value)}",
            "write a number",
            field,
        )
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        return _bound(kind, field, value, ctx, at)
    if kind in _TYPE_WORDS:
        return _type(kind, field, value, at)
    if kind == "string_pattern_mismatch":
        return _pattern_mismatch(field, value, ctx, at)
    message = item["msg"][:1].lower() + item["msg"][1:]
    return _finding("PLC110", at, f"{field}: {message}, got {_describe(value)}", "", field)


def _pattern_mismatch(field: str, value: Any, ctx: dict[str, Any], at: tuple[int, int]) -> Finding:
    from planc.spec.models import ONE_LINE  # start-up: pydantic, on the error path only

    if ctx.get("pattern") != ONE_LINE or not isinstance(value, str):
        return _finding(
            "PLC110",
            at,
            f"{field} must look like PLC001, got {_describe(value)}",
            "use a rule id from 'planc rules'",
            field,
        )
    bad = next((i for i, char in enumerate(value) if not re.fullmatch(ONE_LINE, char)), None)
    where = f": U+{ord(value[bad]):04X} at character {bad + 1}" if bad is not None else ""
    return _finding(
        "PLC110",
        at,
        f"{field} must be one line of printable characters, got {_describe(value)}{where}",
        "remove the line breaks, tabs and other control characters",
        field,
    )


def _unknown_key(path: tuple[Any, ...], field: str, locator: Locator) -> Finding:
    from planc.spec.models import Spec as Root  # start-up: pydantic, on the error path only

    model: Any = Root
    for segment in path[:-1]:
        annotation = (
            model.model_fields[segment].annotation if segment in model.model_fields else None
        )
        candidates = [
            a for a in getattr(annotation, "__args__", (annotation,)) if hasattr(a, "model_fields")
        ]
        model = candidates[0] if candidates else None
        if model is None:
            break
    known = sorted(model.model_fields) if model is not None else []
    name = str(path[-1])
    import difflib

    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    parent = dotted(path[:-1]) or "the top level"
    fix = (
        f"did you mean '{close[0]}'?" if close else f"remove it; {parent} takes {', '.join(known)}"
    )
    return _finding(
        "PLC108",
        locator.position(path, at_key=True),
        f"unknown key '{name}' in {parent}",
        fix,
        field,
    )


def _literal(field: str, value: Any, ctx: dict[str, Any], at: tuple[int, int]) -> Finding:
    expected = [
        e.strip().strip("'") for e in ctx.get("expected", "").replace(" or ", ", ").split(", ")
    ]
    close = _closest(value, expected)
    hint = f"did you mean '{close}'? " if close else ""
    allowed = ", ".join(expected)
    if field in ("model.preset", "hardware.gpu"):
        kind = "model" if field == "model.preset" else "GPU"
        return _finding(
            "PLC111",
            at,
            f"unknown {kind} preset {str(value)[:60]!r}",
            f"{hint}known presets: {allowed}",
            field,
        )
    if field == "parallelism.order":
        return _finding(
            "PLC110",
            at,
            f"{field} must name tp, cp, dp and pp once each, and ep at most once, "
            f"fastest-varying first; got {_describe(value)}",
            "write tp-cp-dp-pp, or tp-cp-ep-dp-pp with expert parallelism (Megatron's default), "
            "or leave it out for that default",
            field,
        )
    return _finding(
        "PLC110",
        at,
        f"{field} must be one of {allowed}; got {_describe(value)}",
        hint.strip() or f"choose one of {allowed}",
        field,
    )


def _closest(value: Any, choices: list[str]) -> str | None:
    if not isinstance(value, str):
        return None
    prefixed = [c for c in choices if c.startswith(value.lower()) or value.lower().startswith(c)]
    if prefixed:
        return prefixed[0]
    import difflib

    close = difflib.get_close_matches(value.lower(), choices, n=1, cutoff=0.5)
    return close[0] if close else None


def _bound(kind: str, field: str, value: Any, ctx: dict[str, Any], at: tuple[int, int]) -> Finding:
    symbol = {
        "greater_than_equal": "≥",
        "greater_than": ">",
        "less_than_equal": "≤",
        "less_than": "<",
    }[kind]
    limit = next(iter(ctx.values()), "?")
    if isinstance(limit, float) and limit.is_integer() and 1000 <= abs(limit) < 1e15:
        limit = int(limit)  # a float field's bound 1000000.0 reads better as 1,000,000
    limit_text = f"{limit:,}" if isinstance(limit, int) else str(limit)
    return _finding(
        "PLC110",
        at,
        f"{field} must be {symbol} {limit_text}, got {_describe(value)}",
        f"use a value {symbol} {limit_text}",
        field,
    )


def _type(kind: str, field: str, value: Any, at: tuple[int, int]) -> Finding:
    want = _TYPE_WORDS[kind]
    fix = ""
    if isinstance(value, str) and kind in ("int_type", "float_type"):
        fix = (
            f"write the number without quotes: {value.strip()}"
            if _numeric(value)
            else "write a number"
        )
    elif isinstance(value, bool) and kind in ("int_type", "float_type"):
        fix = "write a number: true and false are not numbers"
    elif isinstance(value, float) and kind == "int_type":
        fix = f"write a whole number, e.g. {_whole(value)}" if math.isfinite(value) else "write a whole number"
    elif isinstance(value, str) and kind == "bool_type":
        fix = "write true or false without quotes"
    elif value is None:
        fix = f"give {field} a value or remove the key"
    return _finding("PLC110", at, f"{field} must be {want}, got {_describe(value)}", fix, field)


def _whole(value: float) -> str:
    """The whole numbers next to `value`: both, since the field's bound, unknown here, may rule
    out the lower one (tensor: 0.5 is not fixed by 0)."""
    low, high = math.floor(value), math.ceil(value)
    return str(low) if low == high else f"{low} or {high}"


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
