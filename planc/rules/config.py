"""Project configuration for `planc check`: `[tool.planc]` in pyproject.toml, or `.planc.toml`.

Found upwards from each checked file's directory: the nearest directory holding a `.planc.toml`,
or a `pyproject.toml` with a `[tool.planc]` table, wins (in one directory `.planc.toml` wins over
pyproject.toml; a pyproject.toml without `[tool.planc]` is passed over). The search stops after
the first directory that contains `.git` (the repository root) or at the filesystem root.
`--config FILE` replaces the search.

Keys (all optional):

    select = ["PLC0"]                     # rule ids or prefixes that run (default: all)
    ignore = ["PLC011"]                   # rule ids or prefixes that do not run
    severity = {PLC006 = "warning"}       # error, warning or info
    exclude = ["k8s", "*.tmpl.yaml"]      # globs, relative to the configuration's directory
    max_bubble = 0.2                      # default of the spec's rules.max_bubble
    memory_headroom = 0.05                # default of the spec's rules.memory_headroom

The last two are rule options: every option a rule declares (`planc.spec.rule_options`, which
`planc rules` and docs/rules.md list) is a key here, checked against the option's type and
bounds, and is the default of the spec's `rules.<name>`.

Precedence, strongest first: the spec's own `rules:` section (per key; `severity` per rule id),
the command line (`--select` replaces `select`; `--ignore` and the spec's `rules.ignore` add to
`ignore`), the configuration file, planc's defaults. Input rules PLC100-PLC111 say a file cannot
be used at all; they always run and cannot be selected away or ignored.

Nothing here is imported, and no TOML parsed, when no configuration file exists: finding one
costs a few `stat` calls per directory, each directory looked up once (`_Lookup`). A
configuration file is a regular file of at most `MAX_BYTES` (`planc.bounded`); anything tomllib
refuses, nesting too deep for it included, is a one-line ConfigError (exit 2).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import field
from types import MappingProxyType
from typing import Any

from planc.bounded import InputError, read_regular
from planc.record import record
from planc.rules import REGISTRY, RuleKind
from planc.spec.options import Option
from planc.spec.rule_options import OPTIONS

CONFIG_NAMES = (".planc.toml", "pyproject.toml")


def keys(options: tuple[Option, ...]) -> tuple[str, ...]:
    """The keys of a configuration: select, ignore, severity and exclude, then the rule
    options."""
    return ("select", "ignore", "severity", "exclude", *(o.name for o in options))


KEYS = keys(OPTIONS)
SEVERITIES = ("error", "warning", "info")
_RULE_PREFIX = re.compile(r"^PLC\d{0,3}$")
# Input rules: the loader reports them; without them there is no spec to check.
INPUT_RULES = frozenset(r.id for r in REGISTRY.values() if r.kind is RuleKind.INPUT)


class ConfigError(ValueError):
    """A configuration file or option planc cannot use (exit 2)."""


@record
class Config:
    """One configuration: where it came from and what it sets (None or empty: not set)."""

    path: str | None = None
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    severity: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    exclude: tuple[str, ...] = ()
    options: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def base(self) -> str:
        """The directory `exclude` patterns are relative to."""
        return os.path.dirname(os.path.abspath(self.path)) if self.path else "."

    def rule_defaults(self) -> dict[str, Any]:
        """Values for the spec's `rules` section where the spec leaves a key out; `ignore` lists
        every rule that does not run under select and ignore (added to the spec's own)."""
        out: dict[str, Any] = {}
        if self.select is not None or self.ignore:
            off = [rule_id for rule_id in REGISTRY if not self.runs(rule_id)]
            if off:
                out["ignore"] = off
        out.update(self.options)
        if self.severity:
            out["severity"] = dict(self.severity)
        return out

    def runs(self, rule_id: str) -> bool:
        """Whether a rule runs under this configuration's select and ignore (input rules always
        do)."""
        if rule_id in INPUT_RULES:
            return True
        if self.select is not None and not rule_id.startswith(self.select):
            return False
        return not rule_id.startswith(self.ignore) if self.ignore else True


def with_options(
    config: Config, select: Iterable[str] | None, ignore: Iterable[str] = ()
) -> Config:
    """The command line over a configuration: `--select` replaces, `--ignore` adds."""
    from dataclasses import replace

    selected = rule_list(select, "--select") if select is not None else config.select
    ignored = (*config.ignore, *rule_list(ignore, "--ignore"))
    return replace(config, select=selected, ignore=tuple(dict.fromkeys(ignored)))


def rule_list(values: Iterable[str], where: str) -> tuple[str, ...]:
    """Rule ids or prefixes from repeated and comma-separated values, checked and upper-cased."""
    out: list[str] = []
    for value in values:
        for item in value.split(","):
            item = item.strip().upper()
            if not item:
                continue
            if not _RULE_PREFIX.fullmatch(item):
                raise ConfigError(f"{where}: {item!r} is not a rule id or prefix such as PLC006")
            if where.endswith("ignore") and any(r.startswith(item) for r in INPUT_RULES):
                raise ConfigError(
                    f"{where}: {item} would ignore input rules (PLC100-PLC111), which report a "
                    "file planc cannot read as a spec; they cannot be ignored"
                )
            if not _known_prefix(item):
                raise ConfigError(f"{where}: no rule starts with {item}; 'planc rules' lists them")
            out.append(item)
    return tuple(dict.fromkeys(out))


def _known_prefix(item: str) -> bool:
    return any(rule_id.startswith(item) for rule_id in REGISTRY)


# --- finding and reading configuration files ------------------------------------------------


def find_config(start: str) -> str | None:
    """The nearest configuration file for a file in directory `start`, or None (one lookup;
    `Resolver` remembers every directory it passes, so a tree is looked up once)."""
    return _Lookup().nearest(os.path.abspath(start))


class _Lookup:
    """The configuration found from each directory, remembered: looking up a directory walks up
    only to the first directory already looked up, so a tree of any depth costs a few `stat`
    calls per directory, not per directory per level."""

    def __init__(self) -> None:
        self._found: dict[str, str | None] = {}

    def nearest(self, directory: str) -> str | None:
        """The configuration for files in the absolute path `directory`."""
        passed: list[str] = []
        found: str | None = None
        while directory not in self._found:
            passed.append(directory)
            own = _own_config(directory)
            parent = os.path.dirname(directory)
            if (
                own is not None
                or parent == directory
                or os.path.exists(os.path.join(directory, ".git"))
            ):
                found = own
                break
            directory = parent
        else:
            found = self._found[directory]
        for seen in passed:
            self._found[seen] = found
        return found


def _own_config(directory: str) -> str | None:
    """The configuration file in `directory` itself, if it has one."""
    for name in CONFIG_NAMES:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and (name != "pyproject.toml" or _has_planc_table(candidate)):
            return candidate
    return None


# A configuration file is a few hundred bytes; a pyproject.toml a few KB.
MAX_BYTES = 1024 * 1024

# A `[tool.planc]` (or `[tool.planc.x]`) header, or a dotted `tool.planc.key = ...` line; a
# header left unclosed (`[tool.planc`) too, so the parse reports it instead of passing over it.
_PLANC_TABLE = re.compile(
    rb"^[ \t]*(?:\[[ \t]*tool[ \t]*\.[ \t]*planc(?![A-Za-z0-9_-])|tool\.planc\.)", re.M
)


def _has_planc_table(path: str) -> bool:
    """Whether a pyproject.toml has a tool.planc table. A cheap look first (no TOML parsed for a
    pyproject.toml that never names it); when a line looks like one, the parse decides, so a
    `[tool.planc]` inside a string or a comment is not one. A pyproject.toml that cannot be read
    or parsed is reported, when it names the table, by `load_config`."""
    try:
        data = read_regular(path, MAX_BYTES)
    except InputError:
        return True
    if _PLANC_TABLE.search(data) is None:
        return False
    try:
        document = _parse(data, path)
    except ConfigError:
        return True
    tool = document.get("tool")
    return isinstance(tool, dict) and "planc" in tool


def _parse(data: bytes, path: str) -> dict[str, Any]:
    """TOML bytes as a document; ConfigError (one line) for anything tomllib refuses."""
    import tomllib  # start-up: only a run that has a configuration file parses TOML

    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path}: not UTF-8: byte 0x{data[error.start]:02x} at offset {error.start}"
        ) from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid TOML for planc: nested too deeply") from None
    except ValueError as error:  # an integer past Python's 4,300 digits
        raise ConfigError(f"{path}: not valid TOML for planc: {str(error)[:80]}") from None


def load_config(path: str) -> Config:
    """Read and check one configuration file (a regular file of at most `MAX_BYTES`);
    ConfigError says what is wrong and where."""
    try:
        data = read_regular(path, MAX_BYTES)
    except InputError as error:
        raise ConfigError(f"{path}: {error}") from None
    document = _parse(data, path)
    if os.path.basename(path) == "pyproject.toml":
        tool = document.get("tool", {})
        table = tool.get("planc", {}) if isinstance(tool, dict) else {}
        where = f"{path}: [tool.planc]"
    else:
        table, where = document, path
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    return parse_table(table, where, path)


def parse_table(
    table: Mapping[str, Any],
    where: str,
    path: str | None = None,
    options: tuple[Option, ...] = OPTIONS,
) -> Config:
    """A configuration table, checked; `options` are the rule options it may set (the rules'
    declarations, `planc.spec.rule_options`)."""
    known = keys(options)
    unknown = sorted(set(table) - set(known))
    if unknown:
        import difflib  # start-up: only for a misspelt key

        close = difflib.get_close_matches(str(unknown[0]), known, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r}; {hint}planc takes {', '.join(known)}"
        )
    select = _strings(table, "select", where)
    severity = table.get("severity", {})
    if not isinstance(severity, dict):
        raise ConfigError(f'{where}: severity must be a table such as {{PLC006 = "warning"}}')
    for rule_id, level in severity.items():
        rule_list([rule_id], f"{where}: severity")
        if not re.fullmatch(r"PLC\d{3}", str(rule_id).upper()):
            raise ConfigError(
                f"{where}: severity takes whole rule ids such as PLC006, not {rule_id}"
            )
        if str(rule_id).upper() in INPUT_RULES:
            raise ConfigError(
                f"{where}: severity of {rule_id}: input rules (PLC100-PLC111) keep their severity"
            )
        if level not in SEVERITIES:
            raise ConfigError(
                f"{where}: severity of {rule_id} must be one of {', '.join(SEVERITIES)}, "
                f"got {level!r}"
            )
    return Config(
        path=path,
        select=rule_list(select, f"{where}: select") if "select" in table else None,
        ignore=rule_list(_strings(table, "ignore", where), f"{where}: ignore"),
        severity=MappingProxyType({k.upper(): v for k, v in sorted(severity.items())}),
        exclude=_strings(table, "exclude", where),
        options=MappingProxyType(
            {o.name: _option(table, o, where) for o in options if table.get(o.name) is not None}
        ),
    )


def _strings(table: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: {key} must be a list of strings")
    return tuple(value)


def _option(table: Mapping[str, Any], option: Option, where: str) -> float:
    """A rule option's value, checked against its type and bounds."""
    value = table[option.name]
    problem = option.problem(value)
    if problem is not None:
        raise ConfigError(f"{where}: {option.name} {problem}")
    return option.value_type(value)


class Resolver:
    """The configuration for each checked file, found once per directory.

    `explicit` (from `--config FILE`) applies to every file; otherwise each file gets its nearest
    configuration. `select` and `ignore` from the command line are laid over either.
    """

    def __init__(
        self,
        explicit: str | None = None,
        select: Iterable[str] | None = None,
        ignore: Iterable[str] = (),
    ) -> None:
        self._select = tuple(select) if select is not None else None
        self._ignore = tuple(ignore)
        with_options(Config(), self._select, self._ignore)  # check the options once, up front
        self._explicit = self._finish(load_config(explicit)) if explicit else None
        self._by_dir: dict[str, Config] = {}
        self._by_file: dict[str, Config] = {}
        self._lookup = _Lookup()

    def _finish(self, config: Config) -> Config:
        return with_options(config, self._select, self._ignore)

    def for_path(self, path: str) -> Config:
        """The configuration of a file (or of stdin, looked up from its display name)."""
        if self._explicit is not None:
            return self._explicit
        directory = os.path.dirname(os.path.abspath(path))
        if directory not in self._by_dir:
            found = self._lookup.nearest(directory) or ""
            if found not in self._by_file:
                self._by_file[found] = self._finish(load_config(found) if found else Config())
            self._by_dir[directory] = self._by_file[found]
        return self._by_dir[directory]
