"""The fabric: the ordered tiers of wire a rank's traffic can take, innermost first.

A tier joins blocks of `span` consecutive ranks (ranks fill nodes in order, so a tier of 72 is
an NVL72 rack of 18 four-GPU trays, a tier of 256 a 32-node scalable unit of eight-GPU nodes);
the outermost tier joins the whole world. A process group's link is the smallest tier whose
span holds it: the first tier, innermost first, inside one block of which every member of
the group lies (`planc.comm.schedule.group_tier`).

Each tier has its own per-GPU bandwidth and latency, an oversubscription k ≥ 1 (full bisection
is 1; under load a tier gives B/k, Llama 3's pods 1:7), and names the efficiency entry
(`planc/presets/efficiency.json`, `network.<entry>`: bus-bandwidth efficiency, latency per
ring step and processor usage per collective) that prices a call on it. This is Calculon's
`networks` list (each network a `size`, `bandwidth`, `latency` and `efficiency`; a parallel
axis is assigned one and must fit its size) and ASTRA-sim's per-dimension topology, decided
per group rather than per axis.

A tier may be rail-aligned (a rail-optimised leaf: NIC i of every node on switch i, as in a
DGX SuperPOD scalable unit): a group whose members on different nodes differ in local GPU index
cannot stay on it, and takes the next tier (the spine), unless NCCL routes cross-rail traffic
over NVLink first (PXN, `Fabric.pxn`).

A spec without hardware.fabric gives two tiers (`planc.spec.job.default_fabric`): `nvlink`, the
NVLink domain with hardware.intra_node's link, and `network`, the world with
hardware.inter_node's. hardware.fabric lists the tiers above the NVLink domain, innermost first,
or names a preset (`planc/presets/fabrics.json`); `planc.spec.job.spec_fabric` builds them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from planc.record import record


@record(kw_only=True)
class Tier:
    """One tier of the fabric.

    `name` keys the tier everywhere (ops' `link`, wire budgets, plan.json); `label` is how
    people read it ("NVLink"); `field` is the spec field it comes from, for findings."""

    name: str
    span: int  # GPUs one block of the tier joins (consecutive ranks)
    bandwidth_gbs: float  # per GPU per direction, GB/s (10^9 bytes per second)
    latency_us: float  # per message, as the spec gives it (µs)
    efficiency: str  # the efficiency entry that prices a call on it: network.<efficiency>
    oversubscription: float = 1.0  # k ≥ 1: bandwidth under full load is B/k (1: full bisection)
    label: str = ""
    field: str = ""
    rail_aligned: bool = False  # its switches are rails: NIC i of every node on switch i

    @property
    def shown(self) -> str:
        """The tier's label for people (its name when it has none)."""
        return self.label or self.name


@record
class Fabric:
    """The tiers, innermost first. The last one holds the whole world. `pxn`: NCCL moves
    cross-rail traffic over NVLink to the GPU on the destination's rail first (NCCL's PXN), so a
    rail-aligned tier also carries groups that are not rail-aligned."""

    tiers: tuple[Tier, ...]
    pxn: bool = False

    def __iter__(self) -> Iterator[Tier]:
        return iter(self.tiers)

    def __len__(self) -> int:
        return len(self.tiers)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(tier.name for tier in self.tiers)

    @property
    def innermost(self) -> Tier:
        return self.tiers[0]

    @property
    def outermost(self) -> Tier:
        return self.tiers[-1]

    @property
    def plain(self) -> bool:
        """Two tiers, no rails, no oversubscription and no PXN: what a spec without
        hardware.fabric or hardware.topology gives (outputs show no fabric section for it)."""
        return (
            len(self.tiers) == 2
            and not self.pxn
            and all(not t.rail_aligned and t.oversubscription == 1.0 for t in self.tiers)
        )

    def tier(self, name: str) -> Tier:
        """The tier called `name`. Raises KeyError for a name the fabric does not have."""
        for tier in self.tiers:
            if tier.name == name:
                return tier
        raise KeyError(f"the fabric has no tier {name!r} (it has {', '.join(self.names)})")

    def index(self, name: str) -> int:
        """The position of tier `name`, 0 innermost."""
        return self.names.index(name)


@record
class Topology:
    """A Slurm topology file read (`planc.spec.topology`): its levels' tier names innermost
    first, each node's group at every level (innermost first) and the nodes in file order."""

    path: str
    levels: tuple[str, ...]
    places: Mapping[str, tuple[str, ...]]
    order: tuple[str, ...]
