"""Slurm's network topology as fabric tiers: `hardware.topology` names the scheduler's own
`topology.conf` (tree: `SwitchName=… Nodes=…|Switches=…`; block: `BlockName=… Nodes=…` and
`BlockSizes=…`) or `topology.yaml` (a list of topologies; the one with `cluster_default: true`,
else the first, of type `tree` with `switches` or `block` with `blocks` and `block_sizes`), as
Slurm's topology.conf(5) and topology.yaml(5) describe them.

Each level of the file becomes a tier above the NVLink domain:

- tree: a switch's height (leaf switches, with nodes, are 1; a switch is one more than its
  highest child) is its level; the tiers are `leaf`, `spine`, `core`, then `level4`, …; a node's
  group at level l is its highest ancestor of height ≤ l;
- block: the blocks are the first level (`block`); each further block size b_k joins
  b_k / b_0 consecutive blocks in file order (`blocks4` for four), as Slurm pairs contiguous
  blocks into higher-level ones.

The job's hosts (hardware.hosts, `--hosts`, else the file's first nodes in file order) are
placed by their position in the file: sorted by their group at each level, outermost first, so
that every block of every tier is consecutive hosts, and ranks fill the hosts in that order. A
tier's span is the hosts of one of its groups; a level whose groups hold different numbers of
the job's hosts cannot be a tier of equal blocks and is left out with a warning (its groups are
priced on the tier above), as is a level that does not hold a whole number of the blocks below;
a level no larger than the one below (a block that is one NVL72 rack, the NVLink domain) adds
nothing and is left out. Each tier takes hardware.inter_node's bandwidth and latency
(Slurm's LinkSpeed is in arbitrary units, its manual says, and is not read); write
hardware.fabric for oversubscription or rails.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from planc.bounded import InputError, read_text
from planc.record import record
from planc.spec.fabric import Topology
from planc.spec.hostfile import HostfileError, expand_nodelist
from planc.spec.job import Cluster, LinkSpeed, spec_fabric

if TYPE_CHECKING:
    from planc.spec.nodes import Node

# A topology file of a 100,000-node cluster is a few MB; the reader stops well above that.
MAX_BYTES = 16 * 2**20
MAX_LEVELS = 12
MAX_NAME = 64  # Slurm: a switch name "cannot be longer than 64 characters"
MAX_NAMES = 1_000_000
TREE_NAMES = ("leaf", "spine", "core")
_KEY = re.compile(r"([A-Za-z]+)=(\S*)")


class TopologyError(ValueError):
    """A topology file planc cannot use; `line` is 1-based (0: the file as a whole)."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.line = line


@record
class Placed:
    """The job's hosts in topology order, the tiers above the NVLink domain that their groups
    make (hardware.fabric's shape: name and nodes; the last joins every node) and the levels
    left out, with why."""

    hosts: tuple[str, ...]
    tiers: tuple[Mapping[str, Any], ...]
    skipped: tuple[str, ...]


# --- reading --------------------------------------------------------------------------------


def parse(text: str, path: str) -> Topology:
    """The topology in `text`: YAML when `path` ends in .yaml or .yml, else topology.conf."""
    if path.endswith((".yaml", ".yml")):
        return _from_yaml(text, path)
    return _from_conf(text, path)


def _from_conf(text: str, path: str) -> Topology:
    switches: dict[str, tuple[int, list[str], list[str]]] = {}  # name: line, nodes, children
    blocks: list[tuple[int, str, list[str]]] = []
    sizes: list[int] = []
    budget = [MAX_NAMES]
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        pairs = [_KEY.fullmatch(word) for word in words]
        bad = next((w for w, p in zip(words, pairs, strict=True) if p is None), None)
        if bad is not None:
            raise TopologyError(f"{_cut(bad)!r} is not Key=Value", number)
        values = {p.group(1).lower(): p.group(2) for p in pairs if p is not None}
        if "switchname" in values:
            name = _name(values["switchname"], number)
            if name in switches:
                raise TopologyError(f"switch {name} is defined twice", number)
            nodes = _names(values.get("nodes", ""), number, budget)
            children = _names(values.get("switches", ""), number, budget)
            switches[name] = (number, nodes, children)
        elif "blockname" in values:
            nodes = _names(values.get("nodes", ""), number, budget)
            blocks.append((number, _name(values["blockname"], number), nodes))
        elif "blocksizes" in values:
            sizes = [_size(v, number) for v in values["blocksizes"].split(",")]
        elif "ringname" in values:
            raise TopologyError(
                "topology/ring is not a tree or blocks: planc reads those two", number
            )
        else:
            raise TopologyError(
                f"a line without SwitchName, BlockName or BlockSizes: {_cut(line)!r}", number
            )
    if switches and blocks:
        raise TopologyError("the file mixes switches and blocks; give one topology")
    if blocks:
        return _blocks(path, blocks, sizes)
    if not switches:
        raise TopologyError("the file defines no switch and no block")
    return _tree(path, switches)


def _from_yaml(text: str, path: str) -> Topology:
    from planc.spec.nodes import compose  # start-up: only for hardware.topology

    documents, problems = compose(text)
    if problems:
        raise TopologyError(problems[0].message, problems[0].line)
    if len(documents) != 1 or documents[0].kind != "seq" or not documents[0].value:
        raise TopologyError("topology.yaml is one list of topologies")
    entries = documents[0].value
    if not all(entry.kind == "map" for entry in entries):
        raise TopologyError("each topology is a mapping (topology: NAME, then tree or block)")
    chosen = next((e for e in entries if _value(e, "cluster_default") is True), entries[0])
    for kind, items in (("tree", "switches"), ("block", "blocks")):
        found = chosen.get(kind)
        if found is not None:
            return _yaml_topology(path, kind, found[1], items)
    raise TopologyError(
        f"topology {_cut(str(_value(chosen, 'topology')))} is neither a tree nor a block topology",
        chosen.line,
    )


def _value(node: Node, key: str) -> object:
    """The plain value of `key` in a mapping node (None when absent or not a scalar)."""
    found = node.get(key)
    return found[1].value if found is not None and found[1].kind == "scalar" else None


def _yaml_topology(path: str, kind: str, node: Node, items: str) -> Topology:
    """A tree's switches or a block topology's blocks, each entry at its own line."""
    from planc.spec.nodes import to_data  # start-up: only for hardware.topology

    found = node.get(items) if node.kind == "map" else None
    if found is None or found[1].kind != "seq" or not found[1].value:
        raise TopologyError(f"{kind}: {items} is a list", node.line)
    budget = [MAX_NAMES]
    key = "switch" if kind == "tree" else "block"
    entries: list[tuple[int, str, list[str], list[str]]] = []
    for entry in found[1].value:
        data = to_data(entry)
        if not isinstance(data, dict) or not isinstance(data.get(key), str):
            raise TopologyError(f"each of {items} is a mapping with {key}: NAME", entry.line)
        nodes = _names(_text(data.get("nodes"), entry.line), entry.line, budget)
        children = _names(_text(data.get("children"), entry.line), entry.line, budget)
        entries.append((entry.line, _name(data[key], entry.line), nodes, children))
    if kind == "block":
        given = node.get("block_sizes")
        sizes = [] if given is None else to_data(given[1])
        if not isinstance(sizes, list) or not all(type(v) is int for v in sizes):
            raise TopologyError("block: block_sizes is a list of node counts", node.line)
        blocks = [(line, name, nodes) for line, name, nodes, _ in entries]
        return _blocks(path, blocks, [_size(str(v), node.line) for v in sizes])
    switches: dict[str, tuple[int, list[str], list[str]]] = {}
    for line, name, nodes, children in entries:
        if name in switches:
            raise TopologyError(f"switch {name} is defined twice", line)
        switches[name] = (line, nodes, children)
    return _tree(path, switches)


def _text(value: object, line: int) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TopologyError("nodes and children are hostlist expressions (text)", line)
    return value


def _name(value: str, line: int) -> str:
    if not value or len(value) > MAX_NAME:
        raise TopologyError(
            f"a switch or block name of 1 to {MAX_NAME} characters, not {_cut(value)!r}", line
        )
    return value


def _names(expression: str, line: int, budget: list[int]) -> list[str]:
    """The names of a hostlist expression; `budget` holds how many more names the file may
    expand to (MAX_NAMES in all), so a file of many large ranges stops early."""
    if not expression:
        return []
    try:
        names = expand_nodelist(expression, budget[0])
    except HostfileError as error:
        raise TopologyError(f"{_cut(expression)}: {error}", line) from None
    budget[0] -= len(names)
    return names


def _size(value: str, line: int) -> int:
    if not value.isdigit() or len(value) > 7 or int(value) < 1:
        raise TopologyError(f"a block size is a node count, not {_cut(value)!r}", line)
    return int(value)


def _cut(text: str, limit: int = 60) -> str:
    shown = "".join(c if c.isprintable() else "?" for c in text)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _tree(path: str, switches: Mapping[str, tuple[int, list[str], list[str]]]) -> Topology:
    parent: dict[str, str] = {}
    for name, (line, nodes, children) in switches.items():
        if nodes and children:
            raise TopologyError(
                f"switch {name} has both nodes and switches; a leaf has nodes", line
            )
        for child in children:
            if child not in switches:
                raise TopologyError(
                    f"switch {name} names {_cut(child)}, which is not defined", line
                )
            if child in parent:
                raise TopologyError(
                    f"switch {child} is under both {parent[child]} and {name}", line
                )
            parent[child] = name
    height = _heights(switches)
    levels = max(height.values())
    if levels > MAX_LEVELS:
        raise TopologyError(f"the tree has {levels} levels; planc takes at most {MAX_LEVELS}")
    places: dict[str, tuple[str, ...]] = {}
    order: list[str] = []
    for name, (line, nodes, _) in switches.items():
        chain = _chain(name, parent)
        for node in nodes:
            if node in places:
                raise TopologyError(f"node {_cut(node)} is under two leaf switches", line)
            places[node] = tuple(
                next(s for s in reversed(chain) if height[s] <= level)
                for level in range(1, levels + 1)
            )
            order.append(node)
    if not order:
        raise TopologyError("no switch lists nodes")
    names = tuple(TREE_NAMES[i] if i < len(TREE_NAMES) else f"level{i + 1}" for i in range(levels))
    return Topology(path, names, MappingProxyType(places), tuple(order))


def _heights(switches: Mapping[str, tuple[int, list[str], list[str]]]) -> dict[str, int]:
    """Each switch's height (a leaf 1), without recursion; a cycle is an error."""
    height: dict[str, int] = {}
    for start in switches:
        stack, on_path = [start], {start}
        while stack:
            name = stack[-1]
            children = switches[name][2]
            pending = [c for c in children if c not in height]
            if not pending:
                height[name] = 1 + max((height[c] for c in children), default=0)
                on_path.discard(stack.pop())
                continue
            child = pending[0]
            if child in on_path:
                raise TopologyError(
                    f"switches {name} and {child} are each other's children", switches[name][0]
                )
            on_path.add(child)
            stack.append(child)
    return height


def _chain(name: str, parent: Mapping[str, str]) -> list[str]:
    """A switch and its ancestors, innermost first."""
    chain = [name]
    while chain[-1] in parent:
        chain.append(parent[chain[-1]])
    return chain


def _blocks(
    path: str, blocks: Sequence[tuple[int, str, list[str]]], sizes: Sequence[int]
) -> Topology:
    base = sizes[0] if sizes else 1
    joined = []
    for size in sizes[1:]:
        ratio = size // base
        if size % base or ratio & (ratio - 1) or ratio < 2:
            raise TopologyError(f"block size {size} is not a power of two times the base {base}")
        joined.append(ratio)
    if len(joined) + 1 > MAX_LEVELS:
        raise TopologyError(f"{len(joined) + 1} block levels; planc takes at most {MAX_LEVELS}")
    places: dict[str, tuple[str, ...]] = {}
    order: list[str] = []
    for index, (line, name, nodes) in enumerate(blocks):
        for node in nodes:
            if node in places:
                raise TopologyError(f"node {_cut(node)} is in two blocks", line)
            places[node] = (name, *(f"{ratio}:{index // ratio}" for ratio in joined))
            order.append(node)
    if not order:
        raise TopologyError("no block lists nodes")
    return Topology(
        path, ("block", *(f"blocks{r}" for r in joined)), MappingProxyType(places), tuple(order)
    )


# --- placing the job's hosts -------------------------------------------------------------------


def place(
    topology: Topology, hosts: Sequence[str] | None, nodes: int, domain_nodes: float
) -> Placed:
    """The job's `nodes` hosts (`hosts`, else the file's first nodes) in topology order and the
    tiers they make. `domain_nodes`: nodes one NVLink domain joins (a level no larger is left
    out: the NVLink tier holds it). TopologyError for a host the file does not list, or a file
    with fewer nodes than the job."""
    if hosts is None:
        if len(topology.order) < nodes:
            raise TopologyError(
                f"the file lists {len(topology.order):,} nodes, fewer than hardware.nodes {nodes:,}"
            )
        hosts = topology.order[:nodes]
    missing = next((h for h in hosts if h not in topology.places), None)
    if missing is not None:
        raise TopologyError(f"host {_cut(missing)} is in no switch or block of the file")
    rank = {node: i for i, node in enumerate(topology.order)}
    first: dict[tuple[int, str], int] = {}
    for node in topology.order:
        for level, group in enumerate(topology.places[node]):
            first.setdefault((level, group), rank[node])
    depth = len(topology.levels)

    def key(host: str) -> tuple[int, ...]:
        groups = topology.places[host]
        return (*(first[(level, groups[level])] for level in reversed(range(depth))), rank[host])

    placed = tuple(sorted(hosts, key=key))
    tiers: list[dict[str, Any]] = []
    skipped: list[str] = []
    below, outer = max(domain_nodes, 1.0), "network"
    for level, name in enumerate(topology.levels):
        counts: dict[str, int] = {}
        for host in placed:
            group = topology.places[host][level]
            counts[group] = counts.get(group, 0) + 1
        sizes = sorted(set(counts.values()))
        if len(counts) == 1:
            outer = name
            break
        if len(sizes) > 1:
            skipped.append(
                f"{name}: its groups hold {sizes[0]:,} to {sizes[-1]:,} of the job's hosts"
            )
        elif sizes[0] % below:
            skipped.append(
                f"{name}: its groups of {sizes[0]:,} hosts are not a whole number of the "
                f"{below:g}-node blocks below"
            )
        elif sizes[0] > below:
            tiers.append({"name": name, "nodes": sizes[0]})
            below = sizes[0]
    tiers.append({"name": outer})
    return Placed(placed, tuple(MappingProxyType(t) for t in tiers), tuple(skipped))


# --- the cluster on its topology ---------------------------------------------------------------


def read(path: str) -> Topology:
    """The topology file at `path` (a regular file of at most MAX_BYTES); TopologyError."""
    try:
        text = read_text(path, MAX_BYTES)
    except InputError as error:
        raise TopologyError(str(error)) from None
    return parse(text, path)


def placed_cluster(
    cluster: Cluster, topology: Topology, hosts: Sequence[str] | None
) -> tuple[Cluster, tuple[str, ...]]:
    """`cluster` with its hosts placed on `topology` (`hosts`, else the file's first nodes) and
    the fabric their groups make, and the levels left out (warnings). The cluster's fabric must
    be the two-tier default (hardware.fabric is not given with hardware.topology): its tiers
    give the NVLink and network links. TopologyError when the hosts cannot be placed."""
    nvlink, network = cluster.fabric.innermost, cluster.fabric.outermost
    placed = place(topology, hosts, cluster.nodes, cluster.nvlink_domain / cluster.gpus_per_node)
    fabric = spec_fabric(
        [dict(tier) for tier in placed.tiers],
        cluster.fabric.pxn,
        LinkSpeed(nvlink.bandwidth_gbs, nvlink.latency_us),
        LinkSpeed(network.bandwidth_gbs, network.latency_us),
        (cluster.nodes, cluster.gpus_per_node, cluster.nvlink_domain),
    )
    if isinstance(fabric, list):
        raise TopologyError(fabric[0].message)
    field = "hardware.topology"
    tiers = tuple(
        dataclasses.replace(tier, field=field) if index else tier
        for index, tier in enumerate(fabric.tiers)
    )
    placed_fabric = dataclasses.replace(fabric, tiers=tiers)
    return (
        dataclasses.replace(cluster, hosts=placed.hosts, fabric=placed_fabric, topology=topology),
        placed.skipped,
    )
