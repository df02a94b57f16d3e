"""The candidate space of `planc search`: one entry per axis, as data.

An axis is a spec field `planc search` may choose (`tensor`, `micro_batch`, ...) with planc's
default range for a job. A field the spec writes is pinned to its value; the spec's `search:`
section (or `--allow AXIS=V,V` on the command line) narrows an axis to the values it lists. The
data degree is derived (world / (tensor · pipeline · context)), and so is the layer split of an
uneven pipeline (`stage_split`). Adding an axis (expert parallelism, data_shard, offload) is one
more `SearchAxisDef` in `AXES` and one more field in `candidate_job`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from planc.record import record
from planc.spec.job import Job

Value = int | bool | str

# Context parallelism below this many tokens per rank only adds communication: the default range
# of `context` stops where s / c would fall under it.
MIN_TOKENS_PER_CP_RANK = 1024
MAX_VIRTUAL_STAGES = 8
MICRO_BATCHES = (1, 2, 4, 8)
RECOMPUTE = ("none", "selective", "full")
# The most digits an `--allow` number may have: every axis is bounded far below 10^18 (degrees
# by the 1,048,576-rank cap), and a longer string is refused before int() reads it (which takes
# time quadratic in the digits and refuses more than 4,300).
MAX_DIGITS = 18


class SearchError(ValueError):
    """A search that cannot be set up (a pinned field outside the allowed values, an unknown
    axis on the command line): unusable input, exit 2."""


def divisors(n: int, upper: int) -> tuple[int, ...]:
    """The divisors of `n` that are at most `upper`, ascending."""
    small = [k for k in range(1, int(n**0.5) + 1) if n % k == 0]
    every = sorted({*small, *(n // k for k in small)})
    return tuple(k for k in every if k <= upper)


@record
class SearchAxisDef:
    """One searchable spec field: its `search:` key, the spec section it lives in, and planc's
    default range of values for a job."""

    name: str
    section: str
    default: Callable[[Job], tuple[Value, ...]]
    doc: str


def _tensor(job: Job) -> tuple[Value, ...]:
    """Divisors of the world up to the span of the fabric's innermost tier (the NVLink domain)."""
    return divisors(job.world, job.cluster.fabric.innermost.span)


def _pipeline(job: Job) -> tuple[Value, ...]:
    return divisors(job.world, job.model.L)


def _virtual(job: Job) -> tuple[Value, ...]:
    return tuple(range(1, MAX_VIRTUAL_STAGES + 1))


def _context(job: Job) -> tuple[Value, ...]:
    return divisors(job.world, max(1, job.training.s // MIN_TOKENS_PER_CP_RANK))


AXES: tuple[SearchAxisDef, ...] = (
    SearchAxisDef("tensor", "parallelism", _tensor, "divisors of the world size up to the NVLink domain"),
    SearchAxisDef("pipeline", "parallelism", _pipeline, "divisors of the world size up to the layers"),
    SearchAxisDef("virtual_stages", "parallelism", _virtual, f"1 to {MAX_VIRTUAL_STAGES}"),
    SearchAxisDef(
        "context",
        "parallelism",
        _context,
        f"divisors of the world size leaving ≥ {MIN_TOKENS_PER_CP_RANK:,} tokens per rank",
    ),
    SearchAxisDef("sequence_parallel", "parallelism", lambda job: (False, True), "off, on"),
    SearchAxisDef("zero_stage", "parallelism", lambda job: (0, 1, 2, 3), "0 to 3"),
    SearchAxisDef("micro_batch", "training", lambda job: MICRO_BATCHES, "1, 2, 4, 8"),
    SearchAxisDef("recompute", "training", lambda job: RECOMPUTE, "none, selective, full"),
)
AXIS_NAMES = tuple(axis.name for axis in AXES)
# Fields that are not searched but are pinned when the spec writes them.
PINNABLE = (("parallelism", "data"), ("parallelism", "stage_layers"))


def _order_key(value: Value) -> tuple[int, Value]:
    """Ascending numbers and booleans; recompute modes in the order none, selective, full."""
    if isinstance(value, str):
        return (0, RECOMPUTE.index(value) if value in RECOMPUTE else len(RECOMPUTE))
    return (0, value)


@record
class SearchAxis:
    """One axis of a concrete search: its values (in the fixed layout order) and whether the
    spec pins it."""

    name: str
    section: str
    values: tuple[Value, ...]
    pinned: bool


@record
class Space:
    """The candidates of one search: the product of the axes' values, in that order."""

    axes: tuple[SearchAxis, ...]
    data: int | None  # parallelism.data when the spec writes it
    stage_layers: tuple[int, ...]  # parallelism.stage_layers when the spec writes it
    # Every rule option (max_bubble, ...) as this search sets it, in the table's order; pairs,
    # not a mapping proxy, since the space goes to the worker processes.
    limits: tuple[tuple[str, float], ...]

    def limit(self, name: str) -> float:
        """The value of one rule option in this search (KeyError for an unknown name)."""
        return dict(self.limits)[name]

    @property
    def size(self) -> int:
        size = 1
        for axis in self.axes:
            size *= len(axis.values)
        return size

    def candidates(self) -> Iterator[tuple[Value, ...]]:
        """Every candidate, in the fixed layout order (the last axis varies fastest)."""
        return itertools.product(*(axis.values for axis in self.axes))

    def candidate(self, index: int) -> tuple[Value, ...]:
        """The candidate at `index` in `candidates()` order."""
        out: list[Value] = []
        for axis in reversed(self.axes):
            index, at = divmod(index, len(axis.values))
            out.append(axis.values[at])
        return tuple(reversed(out))

    def named(self, values: Sequence[Value]) -> dict[str, Value]:
        return {axis.name: value for axis, value in zip(self.axes, values, strict=True)}


def _narrowed(
    axis: SearchAxisDef, job: Job, pinned: tuple[Value] | None, allowed: Sequence[Value] | None
) -> SearchAxis:
    if pinned is not None:
        value = pinned[0]
        if allowed is not None and value not in allowed:
            raise SearchError(
                f"{axis.section}.{axis.name} is pinned to {_shown(value)} but the search allows "
                f"only {', '.join(_shown(v) for v in allowed)}: drop one of the two"
            )
        return SearchAxis(axis.name, axis.section, (value,), True)
    values = tuple(allowed) if allowed is not None else axis.default(job)
    unique = tuple(sorted(set(values), key=_order_key))
    return SearchAxis(axis.name, axis.section, unique, False)


def _shown(value: Value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def build_space(
    job: Job,
    spec: Mapping[str, Any],
    present: Callable[[tuple[str, str]], bool],
    allowed: Mapping[str, Sequence[Value]],
    limits: Mapping[str, float | None] | None = None,
) -> Space:
    """The search space of a resolved spec.

    `spec` is the validated spec data (defaults filled in), `present(section, field)` whether
    the file writes a field (`Locator.present`), `allowed` the values per axis that the command
    line gives (they replace the spec's `search:` lists). Thresholds (the rule options, by
    name): `limits` (the command line; None: not given), else the spec's `search:` section, else
    its `rules:` section.
    """
    unknown = sorted(set(allowed) - set(AXIS_NAMES))
    if unknown:
        raise SearchError(
            f"unknown search axis {unknown[0]!r}; the axes are {', '.join(AXIS_NAMES)}"
        )
    section: Mapping[str, Any] = spec.get("search") or {}
    axes = []
    for axis in AXES:
        written = present((axis.section, axis.name))
        pinned = (spec[axis.section][axis.name],) if written else None
        given = allowed.get(axis.name, section.get(axis.name))
        axes.append(_narrowed(axis, job, pinned, given))
    par = spec["parallelism"]
    data = par["data"] if present(("parallelism", "data")) else None
    stages = tuple(par["stage_layers"]) if present(("parallelism", "stage_layers")) else ()
    return Space(
        axes=tuple(axes),
        data=data,
        stage_layers=stages,
        limits=tuple(
            (name, _threshold((limits or {}).get(name), section.get(name), value))
            for name, value in job.rules.options.items()
        ),
    )


def _threshold(flag: float | None, searched: float | None, rule: float) -> float:
    """The first value given, of the type of the option's resolved value (`Rules.options`
    holds an integer option as int, a number as float)."""
    for value in (flag, searched):
        if value is not None:
            return type(rule)(value)
    return rule


def stage_split(layers: int, p: int, v: int) -> tuple[int, ...]:
    """The layers of each pipeline stage when they do not split evenly, else () (even split).

    Balanced as Llama 3 ran 126 layers on 16 stages (Dubey et al. 2024, §3.3.2: one layer fewer
    on the first and the last stage, which also hold the embedding and the LM head): every stage
    gets ⌈L/(v·p)⌉ chunks of v layers, and the surplus is taken one chunk a stage from the ends
    inwards, last stage first. () when no such split exists (PLC004 then refuses the candidate).
    """
    if layers % (p * v) == 0 or layers % v:
        return ()
    units = layers // v
    per_stage = -(-units // p)
    surplus = per_stage * p - units
    counts = [per_stage] * p
    ends = [r for pair in zip(range(p - 1, -1, -1), range(p), strict=True) for r in pair]
    order = list(dict.fromkeys(ends))
    for stage in order[:surplus]:
        counts[stage] -= 1
    if min(counts) == 0:
        return ()
    return tuple(count * v for count in counts)


def parse_allowed(items: Sequence[str]) -> dict[str, list[Value]]:
    """`--allow AXIS=V,V` options as `search:` lists, validated as the spec's `search:` section
    is (SearchError names the option that is wrong)."""
    from pydantic import ValidationError  # start-up: pydantic only when --allow is given

    from planc.spec.models import SearchSpec  # start-up: as above

    raw: dict[str, list[Value]] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not text.strip():
            raise SearchError(f"--allow {item!r}: write AXIS=V,V (for example tensor=4,8)")
        if name not in AXIS_NAMES:
            raise SearchError(
                f"--allow {item!r}: unknown axis; the axes are {', '.join(AXIS_NAMES)}"
            )
        raw[name] = [_token(name, token.strip()) for token in text.split(",")]
    try:
        checked = SearchSpec.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"][:1])
        raise SearchError(f"--allow {where}: {first['msg']}") from None
    return {name: list(getattr(checked, name)) for name in raw}


def _token(axis: str, text: str) -> Value:
    if len(text) > MAX_DIGITS and text.isascii() and text.isdigit():
        raise SearchError(
            f"--allow {axis}: a number of {len(text):,} digits; the values are at most "
            f"{MAX_DIGITS} digits long"
        )
    if text.lower() in ("true", "on"):
        return True
    if text.lower() in ("false", "off"):
        return False
    return int(text) if text.isascii() and text.isdigit() else text
