"""The whole run beyond one step: its length, checkpoints, failures, goodput, time and cost.

Below `planc.analysis` in the layering: it reads an `Analysis` and the step time of
`planc.analysis.estimate_step`, and the rules, outputs and search read it.
"""

from __future__ import annotations

from planc.run.estimate import CheckpointCost, Phase, RunEstimate, estimate_run

__all__ = ["CheckpointCost", "Phase", "RunEstimate", "estimate_run"]
