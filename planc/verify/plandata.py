"""plan.json as arrays: what the verifier reads, and nothing it derives.

Ranks come as one record per rank (`"ranks": [...]`) or, in large plans, as columns
(`"ranks": {"encoding": "columns", ...}`, docs/compile.md); groups as lists of member lists or,
in large plans, as `{"starts": [...], "offsets": [...]}` (group g is starts[g] + offsets). Both forms are read into
the same arrays here, so every check below works on one shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any

import numpy as np
import numpy.typing as npt

from planc.record import record
from planc.verify.source import PlanFormatError as PlanFormatError
from planc.verify.source import parse, validate

Ints = npt.NDArray[np.int64]
AXES = ("tp", "cp", "dp", "pp")
MEMORY_FIELDS = ("weights", "gradients", "optimizer", "activations", "buffers", "reserve", "total")
WIRE_FIELDS = ("sent", "received")  # per tier, in a rank's wire record
# The plan layout this verifier reads (planc compile writes it; 2 keys wire bytes by tier).
FORMAT_VERSION = 2


@record(eq=False)
class PlanData:
    """The plan's own numbers. Per-rank arrays are indexed by position in the file."""

    raw: Mapping[str, Any]
    world: int
    order: tuple[str, ...]
    degrees: Mapping[str, int]
    strides: Mapping[str, int]
    nodes: int
    gpus_per_node: int
    nvlink_domain: int
    tiers: tuple[tuple[str, int], ...]  # cluster.fabric: (name, span in ranks), innermost first
    hosts: tuple[str, ...]
    stage_layers: tuple[tuple[tuple[int, int], ...], ...]
    model: Mapping[str, Any]
    training: Mapping[str, Any]
    zero: int
    data_shard: int  # ranks ZeRO/FSDP shards over; d·c unless HSDP
    framework: str
    sequence_parallel: bool
    virtual_stages: int
    groups: Mapping[str, Ints]  # kind -> (groups × members)
    rank: Ints
    node: Ints
    local_rank: Ints
    rail: Ints
    domain: Ints
    host: tuple[str, ...] | None  # per rank, when the file lists it per rank
    coords: Mapping[str, Ints]
    optimizer_shard: Ints
    layers: tuple[tuple[tuple[int, int], ...], ...] | None  # per rank, when listed per rank
    memory: Ints  # (ranks × MEMORY_FIELDS)
    wire: Ints  # (ranks × tiers × WIRE_FIELDS)
    ops: tuple[Mapping[str, Any], ...]
    pipeline: Mapping[str, Any] | None
    # Mixture-of-experts plans: the expert grid's order and sizes (layout.expert); () and {}
    # for a dense plan.
    expert_order: tuple[str, ...] = ()
    expert_degrees: Mapping[str, int] = field(default_factory=dict)
    # layout.expert.dispatcher (alltoall when absent, as plans before the field ran it).
    dispatcher: str = "alltoall"
    # layout.cp_comm_type (p2p, ring attention, when absent) and a2a+p2p's inner size.
    cp_comm_type: str = "p2p"
    cp_a2a_size: int = 1
    # Per tier of cluster.fabric: its rails carry only rail-aligned groups (rail_aligned and
    # no cluster.pxn). () for a plan that lists no rails.
    rails_only: tuple[bool, ...] = ()


def _need(data: Mapping[str, Any], key: str, where: str) -> Any:
    if not isinstance(data, Mapping) or key not in data:
        raise PlanFormatError(f"{where} has no {key!r}")
    return data[key]


def _ranges(value: Any) -> tuple[tuple[int, int], ...]:
    return tuple((int(a), int(b)) for a, b in value)


def _progression(spec: Mapping[str, Any], kind: str, world: int) -> Ints:
    """Members of offset-encoded groups: group g is starts[g] + offsets (every group of the
    kind has the same shape, so one offsets list serves all). Their count is checked against
    the world before the table is built (no kind holds more members than there are ranks)."""
    members = len(_need(spec, "starts", f"groups.{kind}")) * len(
        _need(spec, "offsets", f"groups.{kind}")
    )
    if members > world:
        raise PlanFormatError(
            f"groups.{kind}: {members:,} members in all (starts × offsets), more than the {world:,} ranks listed"
        )
    starts = np.asarray(_need(spec, "starts", f"groups.{kind}"), dtype=np.int64).reshape(-1)
    offsets = np.asarray(_need(spec, "offsets", f"groups.{kind}"), dtype=np.int64).reshape(-1)
    return starts[:, None] + offsets[None, :]


def _groups(raw: Mapping[str, Any], world: int) -> dict[str, Ints]:
    """Every kind's groups as a (groups × members) table; a kind whose groups hold more
    members in all than there are ranks is refused before any table is built."""
    out: dict[str, Ints] = {}
    for kind, value in _need(raw, "groups", "plan.json").items():
        if isinstance(value, Mapping):
            out[kind] = _progression(value, kind, world)
        else:
            members = sum(len(group) for group in value)
            if members > world:
                raise PlanFormatError(
                    f"groups.{kind}: {members:,} members in all, more than the {world:,} ranks listed"
                )
            lists = [list(map(int, group)) for group in value]
            width = {len(group) for group in lists}
            if len(width) > 1:
                raise PlanFormatError(f"groups.{kind} lists groups of sizes {sorted(width)}")
            out[kind] = np.asarray(lists, dtype=np.int64).reshape(
                len(lists), width.pop() if lists else 0
            )
    return out


def _column(values: Sequence[Any]) -> Ints:
    return np.asarray(values, dtype=np.int64)


def _tiers(cluster: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """cluster.fabric: each tier's name and span, innermost first."""
    tiers = _need(cluster, "fabric", "cluster")
    if not isinstance(tiers, list) or not tiers:
        raise PlanFormatError("cluster.fabric is not a list of tiers")
    return tuple(
        (str(_need(tier, "name", "cluster.fabric[]")), int(_need(tier, "span", "cluster.fabric[]")))
        for tier in tiers
    )


def _rails_only(cluster: Mapping[str, Any]) -> tuple[bool, ...]:
    """Each tier of cluster.fabric: rail_aligned and cluster.pxn not set."""
    pxn = cluster.get("pxn") is True
    return tuple(
        tier.get("rail_aligned") is True and not pxn for tier in _need(cluster, "fabric", "cluster")
    )


def _wire(records: Sequence[Mapping[str, Any]], tiers: Sequence[str]) -> Ints:
    """(records × tiers × WIRE_FIELDS) from wire records keyed by tier."""
    for wire in records:
        if not isinstance(wire, Mapping) or list(wire) != list(tiers):
            names = list(wire) if isinstance(wire, Mapping) else wire
            raise PlanFormatError(
                f"a wire record names the tiers {names}, not cluster.fabric's {list(tiers)}"
            )
    return np.asarray(
        [[[w[tier][f] for f in WIRE_FIELDS] for tier in tiers] for w in records], dtype=np.int64
    ).reshape(len(records), len(tiers), len(WIRE_FIELDS))


def _per_rank(records: Sequence[Mapping[str, Any]], tiers: Sequence[str]) -> dict[str, Any]:
    """Columns from one record per rank."""

    def col(key: str) -> Ints:
        return _column([r[key] for r in records])

    try:
        return {
            "rank": col("rank"),
            "node": col("node"),
            "local_rank": col("local_rank"),
            "rail": col("rail"),
            "domain": col("nvlink_domain"),
            "host": tuple(str(r["host"]) for r in records),
            "coords": {axis: _column([r["coords"][axis] for r in records]) for axis in AXES},
            "optimizer_shard": col("optimizer_shard"),
            "layers": tuple(_ranges(r["layers"]) for r in records),
            "memory": np.asarray(
                [[r["memory"][f] for f in MEMORY_FIELDS] for r in records], dtype=np.int64
            ).reshape(len(records), len(MEMORY_FIELDS)),
            "wire": _wire([r["wire"] for r in records], tiers),
        }
    except (KeyError, TypeError) as error:
        raise PlanFormatError(f"a rank record lacks {error}") from None


def _columns(block: Mapping[str, Any], tiers: Sequence[str]) -> dict[str, Any]:
    """Columns from the columnar form: explicit int columns, memory and wire as tables with a
    per-rank row index."""
    cols = _need(block, "columns", "ranks")
    if list(_need(block, "memory_fields", "ranks")) != list(MEMORY_FIELDS):
        raise PlanFormatError(f"ranks.memory_fields is not {list(MEMORY_FIELDS)}")
    memory_table = np.asarray(_need(block, "memory_table", "ranks"), dtype=np.int64)
    wire_table = _wire(_need(block, "wire_table", "ranks"), tiers)
    memory_row = _column(_need(cols, "memory_row", "ranks.columns"))
    wire_row = _column(_need(cols, "wire_row", "ranks.columns"))
    for name, rows, table in (("memory", memory_row, memory_table), ("wire", wire_row, wire_table)):
        if rows.size and int(rows.max()) >= len(table):
            raise PlanFormatError(
                f"ranks.columns.{name}_row names row {int(rows.max()):,} of ranks.{name}_table, "
                f"which has {len(table):,}"
            )
    return {
        "rank": np.arange(int(_need(block, "count", "ranks")), dtype=np.int64),
        "node": _column(_need(cols, "node", "ranks.columns")),
        "local_rank": _column(_need(cols, "local_rank", "ranks.columns")),
        "rail": _column(_need(cols, "rail", "ranks.columns")),
        "domain": _column(_need(cols, "nvlink_domain", "ranks.columns")),
        "host": None,
        "coords": {axis: _column(_need(cols, axis, "ranks.columns")) for axis in AXES},
        "optimizer_shard": _column(_need(cols, "optimizer_shard", "ranks.columns")),
        "layers": None,
        "memory": memory_table[memory_row],
        "wire": wire_table[wire_row],
    }


def _expert(layout: Mapping[str, Any]) -> dict[str, Any]:
    """layout.expert of a mixture-of-experts plan: its order and degrees (none when dense)."""
    expert = layout.get("expert")
    if expert is None:
        return {}
    degrees = _need(expert, "degrees", "layout.expert")
    return {
        "expert_order": tuple(str(a) for a in _need(expert, "order", "layout.expert")),
        "expert_degrees": {str(a): int(n) for a, n in degrees.items()},
        "dispatcher": str(expert.get("dispatcher", "alltoall")),
    }


def _listed(raw: Mapping[str, Any]) -> int:
    """How many ranks the file lists: its rank records, or the columns' count once every column
    has that length (checked before any per-rank array is built)."""
    ranks = raw["ranks"]
    if not isinstance(ranks, Mapping):
        return len(ranks)
    count = int(ranks["count"])
    for name, column in ranks["columns"].items():
        if len(column) != count:
            raise PlanFormatError(
                f"ranks.columns.{name} lists {len(column):,} ranks, ranks.count is {count:,}"
            )
    return count


def read_plan(text: str) -> PlanData:
    """Parse plan.json text, bounded, and validate it against the plan schema before reading
    anything from it. Raises PlanFormatError for anything that is not a readable plan."""
    raw = parse(text)
    if not isinstance(raw, dict) or raw.get("format") != "planc-plan":
        raise PlanFormatError("plan.json is not a planc plan (format is not 'planc-plan')")
    version = raw.get("format_version")
    if version != FORMAT_VERSION:
        raise PlanFormatError(
            f"plan.json has format_version {version!r}, but this planc verify reads version "
            f"{FORMAT_VERSION} only: compile the spec again with this planc"
        )
    validate(raw)
    listed = _listed(raw)
    try:
        layout = _need(raw, "layout", "plan.json")
        cluster = _need(raw, "cluster", "plan.json")
        ranks = _need(raw, "ranks", "plan.json")
        tiers = _tiers(cluster)
        names = [name for name, _ in tiers]
        columns = _columns(ranks, names) if isinstance(ranks, Mapping) else _per_rank(ranks, names)
        comm = _need(raw, "communication", "plan.json")
        return PlanData(
            raw=raw,
            world=int(raw["world_size"]),
            order=tuple(str(a) for a in _need(layout, "order", "layout")),
            degrees={a: int(_need(layout, "degrees", "layout")[a]) for a in AXES},
            strides={a: int(_need(layout, "strides", "layout")[a]) for a in AXES},
            nodes=int(_need(cluster, "nodes", "cluster")),
            gpus_per_node=int(_need(cluster, "gpus_per_node", "cluster")),
            nvlink_domain=int(_need(cluster, "nvlink_domain", "cluster")),
            tiers=tiers,
            rails_only=_rails_only(cluster),
            hosts=tuple(str(h) for h in _need(cluster, "hosts", "cluster")),
            stage_layers=tuple(_ranges(s) for s in _need(layout, "stage_layers", "layout")),
            model=_need(raw, "model", "plan.json"),
            training=_need(raw, "training", "plan.json"),
            zero=int(_need(layout, "zero_stage", "layout")),
            data_shard=int(_need(layout, "data_shard", "layout")),
            framework=str(_need(_need(raw, "training", "plan.json"), "framework", "training")),
            sequence_parallel=bool(_need(layout, "sequence_parallel", "layout")),
            virtual_stages=int(_need(layout, "virtual_stages", "layout")),
            groups=_groups(raw, listed),
            ops=tuple(_need(comm, "ops", "communication")),
            pipeline=comm.get("pipeline"),
            cp_comm_type=str(layout.get("cp_comm_type", "p2p")),
            cp_a2a_size=int(layout.get("cp_a2a_size", 1)),
            **_expert(layout),
            **columns,
        )
    except (KeyError, IndexError, TypeError, ValueError) as error:
        if isinstance(error, PlanFormatError):
            raise
        raise PlanFormatError(f"plan.json has a value of the wrong kind: {error}") from None
