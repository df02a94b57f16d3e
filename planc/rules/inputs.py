"""Input rules: reported by the loader while reading a file. Each function only documents its rule."""

from __future__ import annotations

from planc.findings import Severity
from planc.rules.base import documented


@documented("PLC100", Severity.FATAL)
def unreadable() -> None:
    """The input cannot be read: missing, a directory, or not permitted.

    planc exits 2 for input it cannot use at all, so CI tells a broken invocation apart from a
    spec with findings. A FIFO, device or socket is refused before anything is read (it could
    block forever), as is `-` when standard input is closed.
    """


@documented("PLC101", Severity.FATAL)
def not_text() -> None:
    """The input is not UTF-8 text: binary data or another encoding.

    The finding points at the first byte that cannot be decoded. A UTF-8 byte-order mark and
    CRLF line ends are accepted.
    """


@documented("PLC102")
def too_large() -> None:
    """The input exceeds planc's limits on size, nesting depth or alias expansion.

    The limits: 2 MiB, 64 levels of nesting, and aliases that expand past 200,000 nodes (an alias
    bomb). PyYAML loads an alias bomb in milliseconds, but anything that walks the data expands it
    exponentially. planc counts the expanded size while composing and stops early. An integer
    of more than 4,300 digits (Python's limit for converting between text and integers) is
    refused where it stands.
    """


@documented("PLC103")
def yaml_syntax() -> None:
    """The YAML does not parse: the finding gives the parser's reason at its position.

    Tabs used for indentation get their own message, since YAML allows only spaces.
    """


@documented("PLC104")
def duplicate_key() -> None:
    """A mapping repeats a key.

    YAML 1.1 readers such as PyYAML silently keep the last value, so the first one is a trap.
    The finding names the line of the first definition.
    """


@documented("PLC105")
def document_shape() -> None:
    """The file does not hold exactly one mapping.

    It is empty, has several documents, or its top level is a list or a single value.
    """


@documented("PLC106")
def unsupported_yaml() -> None:
    """The YAML uses a feature a spec does not: a tag, a merge key or a key that is not a name.

    Tags such as !!python/object are refused (planc never builds objects from YAML), as are merge
    keys (<<) and keys that are not plain names.
    """


@documented("PLC107")
def yaml11_ambiguity() -> None:
    """A plain value reads differently in YAML 1.1 and YAML 1.2.

    PyYAML (YAML 1.1) reads `on`, `off`, `yes`, `no`, `y`, `n` as booleans, `010` as the octal
    number 8, `1:30` as 90, `1_000` as 1000 and `2024-01-02` as a date; YAML 1.2 tools (editors,
    yaml-language-server) read them as strings or decimals. planc reads YAML 1.2 and refuses
    values whose meaning depends on the reader. NEL (U+0085), U+2028 and U+2029 are line breaks
    to YAML 1.1 and ordinary characters to YAML 1.2, even in quoted strings: they are refused
    anywhere (in a double-quoted string, write them as the escapes \\N, \\L and \\P).
    """


@documented("PLC108")
def unknown_key() -> None:
    """A key the spec does not define; the finding suggests the closest known key.

    Silently ignored typos are the most reported config bug in DeepSpeed (issues #653, #774,
    #1809); planc rejects unknown keys at every level.
    """


@documented("PLC109")
def missing_field() -> None:
    """A required field is missing, in the file or after merging the presets.

    A model without a preset needs layers, hidden, heads and vocab.
    """


@documented("PLC110")
def bad_value() -> None:
    """A value has the wrong type or lies outside its range.

    For example a number written as a string, a float where an integer belongs, a negative
    degree, NaN or infinity, or a value not in the allowed list.
    """


@documented("PLC111")
def unknown_preset() -> None:
    """A GPU or model preset name planc does not know.

    The finding lists the known ones and the closest match (`planc presets` shows them with their
    sources).
    """
