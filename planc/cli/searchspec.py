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


def _saving(space: Space, world: int) -> list[tuple[Value, ...]]:
    """The candidates of least memory in the space: of the (tensor, pipeline, context) the
    world divides (times data, when the spec pins it), the most parallel first, each with every
    saving the space allows."""
    from planc.search.space import RECOMPUTE  # start-up: as in search_spec_findings

    axes = {axis.name: axis.values for axis in space.axes}
    least = {
        "virtual_stages": min(axes["virtual_stages"]),
        "sequence_parallel": max(axes["sequence_parallel"]),
        "zero_stage": max(axes["zero_stage"]),
        "micro_batch": min(axes["micro_batch"]),
        "recompute": max(axes["recompute"], key=lambda mode: RECOMPUTE.index(str(mode))),
    }
    data = space.data
    degrees = sorted(
        (
            (int(t), int(p), int(c))
            for t in axes["tensor"]
            for p in axes["pipeline"]
            for c in axes["context"]
            if world % (int(t) * int(p) * int(c)) == 0
            and (data is None or int(t) * int(p) * int(c) * data == world)
        ),
        key=lambda tpc: (-tpc[0] * tpc[1] * tpc[2], -tpc[0], -tpc[1]),
    )
    out = []
    for t, p, c in degrees[:MOST_PARALLEL]:
        named = {**least, "tensor": t, "pipeline": p, "context": c}
        out.append(tuple(named[axis.name] for axis in space.axes))
    return out


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
