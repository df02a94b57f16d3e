"""Per-operation performance model: FLOPs and bytes per op, efficiency curves, step composition.

:mod:`planc.perf.ops` (what each op costs), :mod:`planc.presets.efficiency` (achieved fractions of
peak, as data in `planc/presets/efficiency.json`), :mod:`planc.perf.compute` (time per op and
chunk), :mod:`planc.perf.step` (the pipeline and what stays exposed), :mod:`planc.perf.inputs`
(a job to `StepInputs`), :mod:`planc.perf.calibrate` (fit a user's measurements).
See docs/explain.md, "Per-operation model".
"""

from planc.perf.step import PipelineStep, StageInputs, StepInputs, pipeline_step
from planc.presets.efficiency import Efficiency, for_gpu, load_calibration

__all__ = [
    "Efficiency",
    "PipelineStep",
    "StageInputs",
    "StepInputs",
    "for_gpu",
    "load_calibration",
    "pipeline_step",
]
