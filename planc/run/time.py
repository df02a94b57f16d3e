"""The run's length, wall time, GPU-hours, energy and cost (landscape 2026-12-01 §6).

D is the training tokens, B_i the global batch of a phase (sequences), s the sequence length,
N the GPUs, G the goodput; times in seconds, energy in kWh, cost in the spec's currency.
"""

from __future__ import annotations

from planc.dims import ceil_div

HOUR = 3600.0
JOULES_PER_KWH = 3.6e6


def steps_for_tokens(tokens: int, global_batch: int, seq_len: int) -> int:
    """⌈D/(B·s)⌉ optimizer steps to train D tokens at B sequences of s tokens a step (the last
    step is whole)."""
    return ceil_div(tokens, global_batch * seq_len)


def wall_s(compute_s: float, goodput: float, exports_s: float = 0.0) -> float:
    """T_wall = Σ steps·T_step / G + exports: the failure-free compute stretched by the goodput
    (checkpoints, lost work, restarts), and the model-only exports written synchronously."""
    return compute_s / goodput + exports_s


def gpu_hours(gpus: int, wall: float) -> float:
    """N·T_wall/3600: every GPU of the job is held for the whole wall time."""
    return gpus * wall / HOUR


def energy_kwh(gpus: int, power_w: float, wall: float, pue: float) -> float:
    """N·P·T_wall·PUE / 3.6·10⁶ kWh: the GPUs' average power over the wall time, times the
    facility's power usage effectiveness (The Green Grid's PUE: facility over IT energy)."""
    return gpus * power_w * wall * pue / JOULES_PER_KWH


def cost(hours: float, price_per_gpu_hour: float) -> float:
    """GPU-hours × price per GPU-hour (user input: planc ships no prices)."""
    return hours * price_per_gpu_hour


def six_nd(parameters: int, tokens: int) -> float:
    """6·N·D FLOPs: forward and backward of N parameters over D tokens (Kaplan et al. 2020,
    §2.1), the sanity line beside planc's own model FLOPs (which add attention and the LM head)."""
    return 6.0 * parameters * tokens
