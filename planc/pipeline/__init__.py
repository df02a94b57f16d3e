"""Pipeline-parallel schedules as data, and a simulation of them.

:mod:`planc.pipeline.registry` holds the schedules by name (`planc.vocab.ScheduleKind`): each
one's builder, needs and closed forms, with the op lists and the bounded simulator where a
closed form is missing; :mod:`planc.pipeline.schedule` builds the per-stage op lists (F, B and
W ops) of Megatron's 1F1B and interleaved 1F1B schedules (stdlib only);
:mod:`planc.pipeline.timeline` compiles them once (an order of the ops that respects every
wait, which shows a deadlock whatever the times) and times them, checks that every send meets
its receive, and reports the bubble fraction; :mod:`planc.pipeline.bounded` gives the makespan
for any m with bounded work; :mod:`planc.pipeline.inflight` counts the activations held at a
rank's peak; :mod:`planc.pipeline.bubble` is the closed form. See ``docs/pipeline.md``.

Every name loads its module on first use, so that importing the counting modules (on `planc
check`'s path) loads neither the schedule builder nor the exact-arithmetic simulation.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    **dict.fromkeys(
        ("Link", "Op", "Schedule", "build_schedule", "held_at_peak", "in_flight", "validate_schedule"),
        "planc.pipeline.schedule",
    ),
    "num_warmup": "planc.pipeline.counts",
    **dict.fromkeys(
        (
            "DeadlockError",
            "Message",
            "Program",
            "Span",
            "Timeline",
            "compile_schedule",
            "render",
            "simulate",
            "stage_ends",
        ),
        "planc.pipeline.timeline",
    ),
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'planc.pipeline' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


__all__ = [
    "DeadlockError",
    "Link",
    "Message",
    "Op",
    "Program",
    "Schedule",
    "Span",
    "Timeline",
    "build_schedule",
    "compile_schedule",
    "held_at_peak",
    "in_flight",
    "num_warmup",
    "render",
    "simulate",
    "stage_ends",
    "validate_schedule",
]
