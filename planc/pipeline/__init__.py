"""Pipeline-parallel schedules as data, and a discrete-event simulation of them.

:mod:`planc.pipeline.schedule` builds the per-stage op lists of Megatron's 1F1B and
interleaved 1F1B schedules (stdlib only); :mod:`planc.pipeline.simulate` times them,
checks that every send meets its receive and that the order cannot deadlock, and reports
the bubble fraction. See ``docs/pipeline.md``.
"""

from planc.pipeline.schedule import (
    Link,
    Op,
    Schedule,
    build_schedule,
    held_at_peak,
    in_flight,
    num_warmup,
    validate_schedule,
)
from planc.pipeline.simulate import (
    DeadlockError,
    Message,
    Span,
    Timeline,
    render,
    simulate,
)

__all__ = [
    "DeadlockError",
    "Link",
    "Message",
    "Op",
    "Schedule",
    "Span",
    "Timeline",
    "build_schedule",
    "held_at_peak",
    "in_flight",
    "num_warmup",
    "render",
    "simulate",
    "validate_schedule",
]
