"""The candidate space of `planc search`: one entry per axis, as data.

An axis is a spec field `planc search` may choose (`tensor`, `micro_batch`, ...) with planc's
default range for a job. A field the spec writes is pinned to its value; the spec's `search:`
section (or `--allow AXIS=V,V` on the command line) narrows an axis to the values it lists. The
data degree is derived (world / (tensor · pipeline · context)), and so is the layer split of an
uneven pipeline (`stage_split`). Adding an axis is one more `SearchAxisDef` in `AXES` and one
more field in `candidate_job`.

Axes that depend on each other form a group of consecutive axes (`GROUPS`), and the space is the
product of each group's combinations that can differ (`_keeps`): a context-parallel
communication type or a rank order only with context > 1 (or pipeline > 1) to tell it apart, a
pipeline schedule only for the virtual stages it runs on (without a pipeline the default and
combined 1F1B), a shard group or parameter offload only with ZeRO-3 or FSDP2, ETP 1 or tensor. The combinations are in product order within a group, so
the candidates keep the fixed layout order (the last axis varies fastest). An axis whose values
cannot differ for the spec (a dense model's `expert`) collapses to its one value.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from planc.comm.context import a2a_sub_group
from planc.pipeline.registry import SCHEDULES, unmet
from planc.record import record
from planc.spec.job import Job
from planc.vocab import CP_COMM_TYPES, OFFLOADS, ScheduleKind

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


def _expert_tensor(job: Job) -> tuple[Value, ...]:
    """MoE: 1 and every tensor degree (ETP 1 or ETP = tensor, `_keeps`); dense: tensor's."""
    return (1, *_tensor(job)) if job.model.moe is not None else _tensor(job)


def _expert(job: Job) -> tuple[Value, ...]:
    """MoE: the divisors of the routed experts E that divide the world; dense: 1."""
    if job.model.moe is None:
        return (1,)
    return tuple(k for k in divisors(job.model.moe.E, job.world) if job.world % k == 0)


def _schedules(job: Job) -> tuple[Value, ...]:
    """The registry's schedules the spec's framework runs; combined 1F1B (which overlaps the
    expert all-to-all) only for a MoE model."""
    framework = job.training.framework
    return tuple(
        kind.value
        for kind, definition in SCHEDULES.items()
        if framework in definition.runs_on
        and (kind is not ScheduleKind.COMBINED_1F1B or job.model.moe is not None)
    )


# The rank orders searched (Megatron's convention, fastest-varying first): Megatron-Core's dense
# default, context parallelism across data parallelism, and pipeline inside data parallelism
# (Llama 3's [TP, CP, PP, DP], Dubey et al. 2024 §3.3.2). A MoE model names ep before dp
# (Megatron-Core's default tp-cp-ep-dp-pp): the expert groups then fold out of data parallelism.
DENSE_ORDERS = ("tp-cp-dp-pp", "tp-dp-cp-pp", "tp-cp-pp-dp")


def _orders(job: Job) -> tuple[Value, ...]:
    if job.model.moe is None:
        return DENSE_ORDERS
    return tuple(order.replace("dp", "ep-dp") for order in DENSE_ORDERS)


def _data_shard(job: Job) -> tuple[Value, ...]:
    """HSDP: all (shard over data × context) and the GPUs of a node, where the shard group is
    the spec's to choose (ZeRO-3 or FSDP2; `_keeps`)."""
    return ("all", job.cluster.gpus_per_node)


def _offload(job: Job) -> tuple[Value, ...]:
    """none, optimizer, optimizer+parameters under DeepSpeed or FSDP2 (Megatron offloads
    nothing planc models: training.offload needs deepspeed or fsdp2)."""
    if job.training.framework not in ("deepspeed", "fsdp2"):
        return ("none",)
    return ("none", "optimizer", "optimizer+parameters")


def _precision(job: Job) -> tuple[Value, ...]:
    """The spec's precision (bf16 unless it says): a number format is a training recipe, which
    changes what the run converges to, not only its layout, so search compares fp8 (with the
    framework's default recipe) only when the `search:` section or --allow lists it; a GPU
    without an FP8 peak never gets it (PLC043 would refuse it)."""
    return (job.training.precision,)


AXES: tuple[SearchAxisDef, ...] = (
    SearchAxisDef("tensor", "parallelism", _tensor, "divisors of the world size up to the NVLink domain"),
    SearchAxisDef("expert_tensor", "parallelism", _expert_tensor, "1 and tensor (MoE)"),
    SearchAxisDef("expert", "parallelism", _expert, "divisors of the experts (MoE)"),
    SearchAxisDef("pipeline", "parallelism", _pipeline, "divisors of the world size up to the layers"),
    SearchAxisDef("virtual_stages", "parallelism", _virtual, f"1 to {MAX_VIRTUAL_STAGES}"),
    SearchAxisDef(
        "pipeline_schedule", "parallelism", _schedules, "the schedules the framework runs"
    ),
    SearchAxisDef(
        "context",
        "parallelism",
        _context,
        f"divisors of the world size leaving ≥ {MIN_TOKENS_PER_CP_RANK:,} tokens per rank",
    ),
    SearchAxisDef("cp_comm_type", "parallelism", lambda job: CP_COMM_TYPES, "p2p, a2a, allgather, a2a+p2p"),
    SearchAxisDef("order", "parallelism", _orders, ", ".join(DENSE_ORDERS)),
    SearchAxisDef("sequence_parallel", "parallelism", lambda job: (False, True), "off, on"),
    SearchAxisDef("zero_stage", "parallelism", lambda job: (0, 1, 2, 3), "0 to 3"),
    SearchAxisDef("data_shard", "parallelism", _data_shard, "all and a node (ZeRO-3, FSDP2)"),
    SearchAxisDef("offload", "training", _offload, "none, optimizer, optimizer+parameters"),
    SearchAxisDef("micro_batch", "training", lambda job: MICRO_BATCHES, "1, 2, 4, 8"),
    SearchAxisDef("recompute", "training", lambda job: RECOMPUTE, "none, selective, full"),
    SearchAxisDef("precision", "training", _precision, "the spec's (list bf16, fp8 to compare)"),
)
AXIS_NAMES = tuple(axis.name for axis in AXES)
# Consecutive axes whose values depend on each other: the space is the product of each group's
# combinations that `_keeps` lets through.
GROUPS: tuple[tuple[str, ...], ...] = (
    (
        "tensor",
        "expert_tensor",
        "expert",
        "pipeline",
        "virtual_stages",
        "pipeline_schedule",
        "context",
        "cp_comm_type",
        "order",
        "sequence_parallel",
    ),
    ("zero_stage", "data_shard", "offload"),
    ("micro_batch",),
    ("recompute",),
    ("precision",),
)
# Fields that are not searched but are pinned when the spec writes them.
PINNABLE = (("parallelism", "data"), ("parallelism", "stage_layers"))


# The fixed order of each axis's string values; strings elsewhere (schedules, orders) keep the
# order their default range lists them in, then any other alphabetically.
_WORDS: tuple[str, ...] = (
    *RECOMPUTE,
    *CP_COMM_TYPES,
    *OFFLOADS,
    "bf16",
    "fp8",
    *(kind.value for kind in ScheduleKind),
    *DENSE_ORDERS,
    *(order.replace("dp", "ep-dp") for order in DENSE_ORDERS),
)


def _order_key(value: Value) -> tuple[int, int | str]:
    """Ascending numbers and booleans; words in `_WORDS` order (recompute none, selective,
    full; ...); a shard group's `all` (the default) before its numbers."""
    if isinstance(value, str):
        if value == "all":
            return (-1, 0)
        return (0, _WORDS.index(value)) if value in _WORDS else (2, value)
    return (0, int(value))


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
    # Each group's combinations of consecutive axes (`GROUPS`, `_keeps`), in axis order; ():
    # every axis on its own (the plain product of the axes' values).
    combos: tuple[tuple[tuple[Value, ...], ...], ...] = ()

    def limit(self, name: str) -> float:
        """The value of one rule option in this search (KeyError for an unknown name)."""
        return dict(self.limits)[name]

    @property
    def _parts(self) -> tuple[tuple[tuple[Value, ...], ...], ...]:
        if self.combos:
            return self.combos
        return tuple(tuple((value,) for value in axis.values) for axis in self.axes)

    @property
    def size(self) -> int:
        size = 1
        for part in self._parts:
            size *= len(part)
        return size

    def candidates(self) -> Iterator[tuple[Value, ...]]:
        """Every candidate, in the fixed layout order (the last axis varies fastest)."""
        for picked in itertools.product(*self._parts):
            yield tuple(value for combo in picked for value in combo)

    def candidate(self, index: int) -> tuple[Value, ...]:
        """The candidate at `index` in `candidates()` order."""
        out: list[tuple[Value, ...]] = []
        for part in reversed(self._parts):
            index, at = divmod(index, len(part))
            out.append(part[at])
        return tuple(value for combo in reversed(out) for value in combo)

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
        given = allowed.get(axis.name, section.get(axis.name))
        axes.append(_narrowed(axis, job, _written(spec, axis, present), given))
    par = spec["parallelism"]
    data = par["data"] if present(("parallelism", "data")) else None
    stages = tuple(par["stage_layers"]) if present(("parallelism", "stage_layers")) else ()
    combos = grouped(tuple(axes), job)
    return Space(
        axes=_effective(tuple(axes), combos),
        combos=combos,
        data=data,
        stage_layers=stages,
        limits=tuple(
            (name, _threshold((limits or {}).get(name), section.get(name), value))
            for name, value in job.rules.options.items()
        ),
    )


def _written(
    spec: Mapping[str, Any], axis: SearchAxisDef, present: Callable[[tuple[str, str]], bool]
) -> tuple[Value] | None:
    """The axis's value as the spec writes it (pinned), else None. `offload` is written as
    training.offload's two switches, `data_shard` unset is `all`."""
    if not present((axis.section, axis.name)):
        return None
    value = spec[axis.section][axis.name]
    if axis.name == "offload":
        return (offload_choice(bool(value.get("optimizer")), bool(value.get("parameters"))),)
    if axis.name == "data_shard" and value is None:
        return ("all",)
    if axis.name == "expert_tensor" and value is None:
        return None
    return (value,)


def offload_choice(optimizer: bool, parameters: bool) -> str:
    """training.offload's two switches as one offload value."""
    if optimizer and parameters:
        return "optimizer+parameters"
    return "optimizer" if optimizer else "parameters" if parameters else "none"


def grouped(axes: tuple[SearchAxis, ...], job: Job) -> tuple[tuple[tuple[Value, ...], ...], ...]:
    """Each group's combinations of its axes' values that `_differs` lets through, in product
    order (`GROUPS`; the axes are in `AXES` order). A group that nothing is left of (a pinned
    tensor degree that divides no world) keeps every combination that can differ, so that the
    rules say why none runs."""
    at = 0
    out = []
    for group in GROUPS:
        part = axes[at : at + len(group)]
        if tuple(axis.name for axis in part) != group:
            raise ValueError(f"the axes are not in the groups' order at {group[0]}")
        combos = tuple(_combos(part, job, True)) or tuple(_combos(part, job, False))
        out.append(combos)
        at += len(group)
    return tuple(out)


def _effective(
    axes: tuple[SearchAxis, ...], combos: tuple[tuple[tuple[Value, ...], ...], ...]
) -> tuple[SearchAxis, ...]:
    """The axes with the values some combination takes (what the search tries of each)."""
    out: list[SearchAxis] = []
    for part in combos:
        start = len(out)
        width = len(part[0]) if part else 0
        for at in range(width):
            axis = axes[start + at]
            taken = {combo[at] for combo in part}
            kept = tuple(value for value in axis.values if value in taken)
            out.append(SearchAxis(axis.name, axis.section, kept, axis.pinned))
    return tuple(out) if len(out) == len(axes) else axes


def _combos(
    part: Sequence[SearchAxis], job: Job, structural: bool
) -> Iterator[tuple[Value, ...]]:
    """The combinations of `part`'s values, axis by axis, each value checked against the ones
    before it (`_differs`; with `structural`, `_possible` too); a pinned value always stays."""
    chosen: dict[str, Value] = {}
    by_name = {axis.name: axis for axis in AXES}
    defaults = frozenset(
        axis.name
        for axis in part
        if axis.values == tuple(sorted(set(by_name[axis.name].default(job)), key=_order_key))
    )

    def walk(at: int) -> Iterator[tuple[Value, ...]]:
        if at == len(part):
            yield tuple(chosen.values())
            return
        axis = part[at]
        for value in axis.values:
            chosen[axis.name] = value
            if axis.pinned or (
                _differs(axis.name, chosen, job, axis.values)
                and (not structural or _possible(axis.name, chosen, job, defaults))
            ):
                yield from walk(at + 1)
            del chosen[axis.name]

    return walk(0)


def _possible(name: str, v: Mapping[str, Value], job: Job, defaults: frozenset[str]) -> bool:
    """What no rule needs to judge, the values before it given: a model-parallel size that
    divides the world (PLC001; equals it with a written data degree), virtual stages only
    with a pipeline and a layer split (PLC004, PLC010), sequence parallelism only with tensor
    parallelism (PLC008), an all-to-all context type only where the heads split (PLC060,
    PLC061); and, at its default range only, context parallelism outside data parallelism only
    where tensor × context leave the NVLink domain. `defaults`: the axes at their default
    range."""
    world = job.world
    if name == "pipeline":
        inner = int(v["tensor"]) * int(v["pipeline"])
        experts = int(v["expert_tensor"]) * int(v["expert"]) * int(v["pipeline"])
        return world % inner == 0 and world % experts == 0
    if name == "virtual_stages":
        p, chunks = int(v["pipeline"]), int(v["virtual_stages"])
        if p == 1:
            return chunks == 1
        layers = job.model.L
        return bool(job.layout.stage_layers) or layers % (p * chunks) == 0 or bool(
            stage_split(layers, p, chunks)
        )
    if name == "context":
        inner = int(v["tensor"]) * int(v["pipeline"]) * int(v["context"])
        if job.layout.d_given and job.layout.d is not None:
            return inner * job.layout.d == world
        return world % inner == 0
    if name == "sequence_parallel":
        return v[name] is False or int(v.get("tensor", 2)) > 1
    if name == "order" and str(v[name]).startswith("tp-dp-cp") and "order" in defaults:
        # Context parallelism outside data parallelism only where tensor × context leave the
        # NVLink domain anyway: inside it, moving cp out puts its per-layer exchange on the
        # network to bring the once-per-step gradients in (a heuristic: --allow order=... or
        # search: order tries it everywhere).
        return int(v["tensor"]) * int(v["context"]) > job.cluster.fabric.innermost.span
    if name == "cp_comm_type" and v[name] in ("a2a", "a2a+p2p"):
        return _heads_split(str(v[name]), int(v["tensor"]), int(v["context"]), job)
    return True


def _heads_split(kind: str, t: int, c: int, job: Job) -> bool:
    """a2a splits whole query and key/value heads of a tensor-parallel rank over c (PLC060);
    a2a+p2p over an inner group of them (PLC061)."""
    n_t, g_t = -(-job.model.n // t), max(1, job.model.g // t)
    if kind == "a2a":
        return n_t % c == 0 and g_t % c == 0
    span = job.cluster.fabric.innermost.span
    return a2a_sub_group(c, t, span, n_t, g_t) > 1


def _differs(
    name: str, v: Mapping[str, Value], job: Job, values: tuple[Value, ...]
) -> bool:
    """A value of axis `name` makes a layout of its own, the values before it given: ETP 1 or
    tensor (tensor on a dense model); a schedule the virtual stages run (without a pipeline
    the default one, and one that pairs each forward with another micro-batch's backward); a communication type other than p2p only with context > 1; an order
    that places its groups differently from every order before it; a shard group or parameter
    offload only where the spec's framework shards the parameters."""
    moe = job.model.moe is not None
    if name == "expert_tensor":
        return v[name] == v["tensor"] or (moe and v[name] == 1)
    if name == "pipeline_schedule":
        kind, p, chunks = ScheduleKind(str(v[name])), int(v["pipeline"]), int(v["virtual_stages"])
        if p == 1:  # one stage runs every schedule alike, but one that pairs the MoE passes
            paired = SCHEDULES[kind].overlaps_experts and unmet(kind, p, None, chunks) is None
            return kind is ScheduleKind.default(chunks) or paired
        return unmet(kind, p, None, chunks) is None
    if name == "cp_comm_type":
        c = int(v["context"])
        if v[name] == "a2a+p2p":  # two levels: a divisor of c strictly between 1 and c
            return any(c % a == 0 for a in range(2, c))
        return v[name] == "p2p" or c > 1
    if name == "order":
        earlier = values[: values.index(v[name])]
        return _placement(str(v[name]), v) not in {_placement(str(o), v) for o in earlier}
    shards = job.training.framework == "fsdp2" or v.get("zero_stage") == 3
    if name == "data_shard":
        return v[name] == "all" or shards
    if name == "offload":
        return "parameters" not in str(v[name]) or shards
    return True


def _placement(order: str, v: Mapping[str, Value]) -> tuple[str, ...]:
    """The order without its axes of size one here (context, pipeline): two orders with the
    same placement build the same groups."""
    single = {"cp"} if int(v["context"]) == 1 else set()
    if int(v["pipeline"]) == 1:
        single.add("pp")
    return tuple(axis for axis in order.split("-") if axis not in single)


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
