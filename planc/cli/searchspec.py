"""`planc check` on a search spec: a spec with a `search:` section and no `parallelism:` section
is the input of `planc search`, not a layout. Checked at degrees of 1 it fails PLC007 by
construction, so check judges it as a search spec instead: the input rules (the loader's
findings), and PLC069, whether a layout of its search space can fit in memory at all.

The bound is cheap: the space planc search would build (`planc.search.space.build_space`, with
the spec's `search:` narrowing and pins), and of its tensor × pipeline × context degrees the
`MOST_PARALLEL` with the largest product that the world divides, each with every memory saving
the space allows (the highest ZeRO stage, the most recomputation, sequence parallelism, the
smallest micro-batch and virtual stages). PLC007 (the memory rule itself, on planc search's own
candidate job) judges each. A fitting one says the space is worth searching; none fitting is an
error: no layout planc search could try fits, since those are the layouts of least memory.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from planc.findings import Finding, Severity
from planc.spec.load import Loaded

if TYPE_CHECKING:
    from planc.search.space import Space, Value

RULE = "PLC069"
# How many tensor × pipeline × context combinations the bound tries, most parallel first.
MOST_PARALLEL = 8
GIB = 2**30


def is_search_spec(loaded: Loaded) -> bool:
    """Whether a loaded spec is planc search's input: it writes `search:` and no `parallelism:`."""
    present = loaded.locator.present
    return loaded.job is not None and present(("search",)) and not present(("parallelism",))


def _finding(loaded: Loaded, severity: Severity, message: str, fix: str = "") -> Finding:
    line, column = loaded.locator.position(("search",), at_key=True)
    return Finding(line, column, RULE, severity, message, "search", fix)


def _least(name: str, value: Value) -> tuple[int, str]:
    """How much memory an axis value keeps, for ordering (smaller: less): every saving on
    (sequence parallelism, the highest ZeRO stage over all ranks, the most offload, the smallest
    micro-batch, full recomputation), one chunk a stage, the ring's exchange (p2p holds no
    gathered K/V), then the space's own order."""
    from planc.search.space import RECOMPUTE  # start-up: as in search_spec_findings
    from planc.vocab import OFFLOADS  # start-up: as above

    if name in ("sequence_parallel", "zero_stage", "expert", "expert_tensor"):
        return (-int(value), "")
    if name == "virtual_stages" or name == "micro_batch":
        return (int(value), "")
    if name == "recompute":
        return (-RECOMPUTE.index(str(value)), "")
    if name == "offload":
        return (-OFFLOADS.index(str(value)), "")
    if name == "data_shard":
        return (0, "") if value == "all" else (1, str(value))
    if name == "cp_comm_type":
        return (0 if value == "p2p" else 1, "")
    return (0, "")


def _saving(space: Space, world: int) -> list[tuple[Value, ...]]:
    """The candidates of least memory in the space: of the (tensor, pipeline, context) the
    world divides (times data, when the spec pins it), the most parallel first, each with every
    saving the space allows (`_least`), taken from the space's own combinations of dependent
    axes so that each is a candidate planc search judges."""
    names = [axis.name for axis in space.axes]
    parts = space.combos or tuple(tuple((v,) for v in axis.values) for axis in space.axes)
    chosen: list[list[tuple[Value, ...]]] = []
    at = 0
    for part in parts:
        group = names[at : at + len(part[0])]
        at += len(group)
        ranked = sorted(
            part, key=lambda combo: [_least(n, v) for n, v in zip(group, combo, strict=True)]
        )
        if "tensor" not in group:
            chosen.append(ranked[:1])
            continue
        chosen.append(_most_parallel(space, world, group, ranked))
    return [
        tuple(value for combo in picked for value in combo) for picked in itertools.product(*chosen)
    ]


def _most_parallel(
    space: Space, world: int, group: list[str], ranked: list[tuple[Value, ...]]
) -> list[tuple[Value, ...]]:
    """Of the layout group's combinations (least memory first), the first of each (tensor,
    pipeline, context) the world divides, most parallel first, at most MOST_PARALLEL."""
    data = space.data
    best: dict[tuple[int, int, int], tuple[Value, ...]] = {}
    for combo in ranked:
        v = dict(zip(group, combo, strict=True))
        t, p, c = int(v["tensor"]), int(v["pipeline"]), int(v.get("context", 1))
        if world % (t * p * c) or (data is not None and t * p * c * data != world):
            continue
        best.setdefault((t, p, c), combo)
    degrees = sorted(best, key=lambda tpc: (-tpc[0] * tpc[1] * tpc[2], -tpc[0], -tpc[1]))
    return [best[tpc] for tpc in degrees[:MOST_PARALLEL]]


def _words(space: Space, values: tuple[Value, ...]) -> str:
    v = space.named(values)
    return (
        f"tensor {v['tensor']}, pipeline {v['pipeline']}, context {v['context']}, ZeRO-"
        f"{v['zero_stage']}, recompute {v['recompute']}, micro_batch {v['micro_batch']}"
        + (", sequence parallel" if v["sequence_parallel"] and int(v["tensor"]) > 1 else "")
    )


def search_spec_findings(loaded: Loaded) -> list[Finding] | None:
    """PLC069 on a search spec: info when a layout of its space fits in memory (layout rules
    are left to planc search), an error when none can, nothing more when the spec's rules
    ignore PLC069; None for a spec that is not a search spec (`is_search_spec`), which every
    rule judges."""
    job = loaded.job
    if job is None or loaded.spec is None or not is_search_spec(loaded):
        return None
    if RULE in job.rules.ignore:
        return []
    from planc.check import context_of  # start-up: search's modules only for a search spec
    from planc.rules import REGISTRY  # start-up: as above
    from planc.search.evaluate import Setup, base_job, candidate_job  # start-up: as above
    from planc.search.space import SearchError, build_space  # start-up: as above

    try:
        space = build_space(job, loaded.spec, loaded.locator.present, {})
    except SearchError as error:
        return [_finding(loaded, Severity.ERROR, f"planc search cannot search it: {error}")]
    cluster = job.cluster
    calibration = None if cluster.calibration is None else dict(cluster.calibration)
    fabric = cluster.fabric if cluster.topology is not None else None
    base = base_job(Setup(loaded.spec, space, calibration=calibration, fabric=fabric))
    memory = REGISTRY["PLC007"]
    check = memory.check
    if check is None:  # the memory rule always has its check; nothing to judge with otherwise
        return []
    tried: list[tuple[int, int, tuple[Value, ...]]] = []
    for values in _saving(space, base.world):
        ctx = context_of(candidate_job(base, space, values), [memory], suggest=False)
        if ctx.plan is None or ctx.analysis is None:
            continue  # no layout (heads, layers or batch do not split): search rejects it too
        peak, usable = ctx.analysis.memory.peak.memory.total, ctx.plan.usable_hbm_bytes
        if not any(True for _ in check(ctx)):
            return [
                _finding(
                    loaded,
                    Severity.INFO,
                    "a search spec (search: and no parallelism:), checked as planc search's "
                    "input: its layout rules are checked by planc search; a layout of its "
                    f"space fits in memory ({peak / GIB:.2f} GiB of {usable / GIB:.2f} GiB "
                    f"usable): {_words(space, values)}",
                )
            ]
        tried.append((peak, usable, values))
    return [_none_fits(loaded, space, tried)]


def _none_fits(
    loaded: Loaded, space: Space, tried: list[tuple[int, int, tuple[Value, ...]]]
) -> Finding:
    if not tried:
        return _finding(
            loaded,
            Severity.ERROR,
            f"a search spec with no layout: none of the {MOST_PARALLEL} most parallel "
            "tensor × pipeline × context degrees of its search space splits the model, the "
            "batch and the world",
            "allow other degrees in search: (or leave an axis out to search its default range)",
        )
    peak, usable, values = min(tried)
    return _finding(
        loaded,
        Severity.ERROR,
        f"no layout of this search space fits in memory: its {len(tried)} most parallel "
        f"layouts with every memory saving it allows need at least {peak / GIB:.2f} GiB "
        f"({_words(space, values)}), above {usable / GIB:.2f} GiB usable",
        "add GPUs or GPUs with more memory, or allow more parallelism, ZeRO stages or "
        "recomputation in search:",
    )
