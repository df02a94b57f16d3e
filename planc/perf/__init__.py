"""Per-operation performance model: FLOPs and bytes per op, efficiency curves, step composition.

:mod:`planc.perf.ops` (what each op costs), :mod:`planc.perf.efficiency` (achieved fractions of
peak, as data in `planc/presets/efficiency.json`), :mod:`planc.perf.compute` (time per op and
chunk), :mod:`planc.perf.step` (the pipeline and what stays exposed), :mod:`planc.perf.validate`
(a job to `StepInputs`), :mod:`planc.perf.calibrate` (fit a user's measurements).
See docs/explain.md, "Per-operation model".
"""

from planc.perf.efficiency import Efficiency, for_gpu, load_calibration
from planc.perf.step import StageInputs, StepEstimate, StepInputs, estimate_step

__all__ = [
    "Efficiency",
    "StageInputs",
    "StepEstimate",
    "StepInputs",
    "estimate_step",
    "for_gpu",
    "load_calibration",
]
