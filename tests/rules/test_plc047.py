"""PLC047 goodput stays above rules.min_goodput.

Base: llama3-8b on one 8-GPU node, a 11.2 s save (112.4 GB at 10 GB/s per node). With
reliability {gpu_mtbf_hours: 10, restart_minutes: 60} the job's MTBF is 10 h / 8 = 1.25 h and
each restart costs an hour: at Daly's interval (√(2·11.2·4500) ≈ 317 s) the goodput is
τ/(M·e^{R/M}·(e^{(τ+δ)/M} − 1)) ≈ 317/(4500·e^{0.80}·(e^{0.073} − 1)) ≈ 42 %.
"""

from __future__ import annotations

import math

from conftest import check_overlay

BASE = {
    "hardware": {"storage": {"write_gbs": 100, "node_write_gbs": 10}},
    "checkpoint": {},
    "reliability": {"gpu_mtbf_hours": 10, "restart_minutes": 60},
}


def _fired(extra: dict[str, object] | None = None) -> list[object]:
    return [f for f in check_overlay({**BASE, **(extra or {})}).findings if f.rule == "PLC047"]


def test_an_unreliable_cluster_with_slow_restarts_fails() -> None:
    mtbf, delta = 4500.0, 112.43 / 10
    restart = 3600 + delta  # the restart and the load at the same 10 GB/s
    tau = math.sqrt(2 * delta * mtbf)
    by_hand = tau / (mtbf * math.exp(restart / mtbf) * math.expm1((tau + delta) / mtbf))
    (finding,) = _fired()
    assert finding.severity.value == "warning"  # type: ignore[attr-defined]
    shown = float(finding.message.split("goodput ")[1].split("%")[0]) / 100  # type: ignore[attr-defined]
    assert abs(shown - by_hand) < 0.01
    assert "below 80%" in finding.message  # type: ignore[attr-defined]


def test_the_threshold_is_an_option() -> None:
    assert not _fired({"rules": {"min_goodput": 0.4}})


def test_the_default_reliability_passes() -> None:
    assert not [
        f
        for f in check_overlay({**BASE, "reliability": {}}).findings
        if f.rule == "PLC047"
    ]
