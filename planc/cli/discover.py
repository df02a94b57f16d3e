"""Which files `planc check` looks at: directories walked, excludes applied, non-specs skipped.

A path named on the command line is checked as given, even when it does not exist (the loader
reports PLC100) or does not look like a spec; so is a directory named like a YAML file (what
`docker run -v spec.yaml:...` leaves behind when the file was missing), reported as PLC100. A directory is walked recursively in sorted order;
among its files only `*.yaml` / `*.yml` files that pass `looks_like_spec` are checked, so a
repository's other YAML (Kubernetes manifests, CI workflows, Helm charts) is left alone.
Hidden directories (`.git`, `.venv`, ...), `node_modules` and `__pycache__` are not entered,
and symbolic links to directories are not followed. The walk is iterative (any depth), and a
directory below a named one that cannot be listed stops the run with an error naming it
(`UnreadableDirectory`, exit 2): its specs would otherwise go unchecked and the run pass.

With `only_specs` (the pre-commit hook's `--skip-non-specs`) the content test applies to named
files too, because pre-commit names every staged YAML file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from fnmatch import fnmatchcase

from planc.record import record

SUFFIXES = (".yaml", ".yml")
SKIPPED_DIRS = frozenset({"node_modules", "__pycache__"})
# How much of a file the content test reads; planc's own limit for a spec is 2 MiB.
_HEAD_BYTES = 2 * 1024 * 1024

# A top-level key starts a line at column 0: `key:`, `"key":` or `'key':`.
_TOP_KEY = re.compile(rb"""^(?:\xef\xbb\xbf)?["']?([A-Za-z_]+)["']?[ \t]*:(?:[ \t]|\r?$)""", re.M)
# The sections a spec cannot do without: every spec has both, and one is enough to recognise a
# spec whose other one is missing or further down past a syntax error. `parallelism:` and
# `training:` alone are not: a Helm values file often has `version:` and `training:`.
_SECTIONS = frozenset({b"model", b"hardware"})


def looks_like_spec(data: bytes) -> bool:
    """The content test: a top-level `version:` key and a top-level `model:` or `hardware:`.

    It reads lines, not YAML, so a spec with a syntax error further down is still recognised
    (and then reported), and it costs no YAML parse. A Kubernetes manifest (`apiVersion`, `kind`),
    a docker-compose file (`version` + `services`), a Helm chart (`version` + `name`) or a Helm
    values file (`version` + `training` + `resources`) fails it.
    """
    keys = {match.group(1) for match in _TOP_KEY.finditer(data)}
    return b"version" in keys and not keys.isdisjoint(_SECTIONS)


def file_looks_like_spec(path: str) -> bool:
    """The content test on a file; a file that cannot be read is not a spec here."""
    try:
        with open(path, "rb") as handle:
            return looks_like_spec(handle.read(_HEAD_BYTES))
    except OSError:
        return False


@record
class Excludes:
    """Glob patterns, each matched against every leading part of a path relative to `base`
    (`k8s`, `k8s/jobs`, `k8s/jobs/a.yaml`) and against each single name in it (`*.tmpl.yaml`).

    A pattern therefore excludes a directory with everything below it, or a file anywhere.
    """

    patterns: tuple[str, ...] = ()
    base: str = "."

    def match(self, path: str) -> bool:
        if not self.patterns:
            return False
        parts = _relative_parts(path, self.base)
        for end in range(1, len(parts) + 1):
            leading, name = "/".join(parts[:end]), parts[end - 1]
            if any(fnmatchcase(leading, p) or fnmatchcase(name, p) for p in self.patterns):
                return True
        return False


def _relative_parts(path: str, base: str) -> tuple[str, ...]:
    absolute, root = os.path.abspath(path), os.path.abspath(base)
    try:
        relative = os.path.relpath(absolute, root)
    except ValueError:  # another drive on Windows
        relative = absolute
    if relative.startswith(".."):
        relative = absolute
    # os.path, not pathlib: pathlib costs milliseconds of start-up in a pre-commit hook.
    parts = relative.replace(os.sep, "/").split("/")
    return tuple(p for p in parts if p not in ("", "."))


Excluded = Callable[[str], bool]


def _never(path: str) -> bool:
    return False


def discover(
    paths: Sequence[str],
    excluded: Excluded = _never,
    only_specs: bool = False,
    force_exclude: bool = False,
) -> list[str]:
    """The files to check, in argument order; each directory's files in sorted path order.

    `excluded(path)` says whether a path is excluded (`--exclude` and the configuration's
    `exclude`); it prunes directories while walking and, with `force_exclude`, applies to named
    files too. Each file is listed once.
    """
    out: list[str] = []
    seen: set[str] = set()

    def add(path: str) -> None:
        key = os.path.normcase(os.path.abspath(path)) if path != "-" else "-"
        if key not in seen:
            seen.add(key)
            out.append(path)

    for path in paths:
        if path == "-":
            add(path)
        elif force_exclude and excluded(path):
            continue
        elif os.path.isdir(path) and not path.endswith(SUFFIXES):
            for found in _walk(path, excluded):
                add(found)
        elif not (only_specs and os.path.exists(path) and not file_looks_like_spec(path)):
            add(path)
    return out


class UnreadableDirectory(ValueError):
    """A directory below a path given to `planc check` that cannot be listed: its specs would go
    unchecked, so the run is an error (exit 2), not a pass."""


def _walk(directory: str, excluded: Excluded) -> Iterator[str]:
    """YAML specs below `directory`, depth first, entries sorted by name (a directory's
    contents where its name sorts). Iterative: a stack of the open directories' remaining
    entries, so a tree of any depth is walked in constant Python stack, each directory listed
    once."""
    stack = [(directory, iter(_entries(directory)))]
    while stack:
        current, remaining = stack[-1]
        entry = next(remaining, None)
        if entry is None:
            stack.pop()
            continue
        # `planc check .` reports ml/spec.yaml, not ./ml/spec.yaml (as pre-commit names it).
        path = entry.name if current == os.curdir else os.path.join(current, entry.name)
        if entry.is_dir(follow_symlinks=False):
            if not (entry.name.startswith(".") or entry.name in SKIPPED_DIRS or excluded(path)):
                stack.append((path, iter(_entries(path))))
        elif (
            entry.name.endswith(SUFFIXES)
            and entry.is_file()
            and not excluded(path)
            and file_looks_like_spec(path)
        ):
            yield path


def _entries(directory: str) -> list[os.DirEntry[str]]:
    """A directory's entries sorted by name; UnreadableDirectory when it cannot be listed (one
    that vanished while being walked has nothing left to check and lists as empty)."""
    try:
        with os.scandir(directory) as scan:
            return sorted(scan, key=lambda e: e.name)
    except FileNotFoundError:
        return []
    except OSError as error:
        raise UnreadableDirectory(
            f"cannot read directory {directory}: {error.strerror or error}; the specs in it "
            "would go unchecked (make it readable, or exclude it with --exclude)"
        ) from None
