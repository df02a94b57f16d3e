"""PLC046 the checkpoint interval keeps the goodput within rules.max_goodput_loss of Daly's.

Base: llama3-8b on one 8-GPU node; 1,000 GB/s aggregate and 100 GB/s per node save its
112.4 GB in 1.12 s; the job's MTBF is 50,677 h / 8 = 6,335 h. Checkpointing every step (about
6.1 s) keeps about 6.1/(6.1 + 1.1) = 84 % of the time for training; Daly's interval, about
two hours, keeps 99.9 %.
"""

from __future__ import annotations

from conftest import check_overlay

STORAGE = {"hardware": {"storage": {"write_gbs": 1000, "node_write_gbs": 100}}}


def _fired(overlay: dict[str, object]) -> list[object]:
    return [f for f in check_overlay({**STORAGE, **overlay}).findings if f.rule == "PLC046"]


def test_every_step_is_far_from_the_optimum() -> None:
    (finding,) = _fired({"checkpoint": {"interval": 1}})
    assert finding.severity.value == "warning"  # type: ignore[attr-defined]
    assert "every step" in finding.message  # type: ignore[attr-defined]
    # A save of about a second after every step of a few seconds costs well over the 1 %
    # threshold: the message gives the goodput and the loss against Daly's interval.
    import re

    message = finding.message  # type: ignore[attr-defined]
    got, loss = (
        float(x) for x in re.findall(r"gives ([0-9.]+)% goodput, ([0-9.]+)% below", message)[0]
    )
    assert got < 90.0 and loss > 10.0
    assert "interval: optimal" in finding.fix  # type: ignore[attr-defined]


def test_the_threshold_is_an_option() -> None:
    """A 15 % loss is accepted with max_goodput_loss 0.2."""
    assert not _fired({"checkpoint": {"interval": 1}, "rules": {"max_goodput_loss": 0.2}})


def test_the_optimal_interval_passes() -> None:
    assert not _fired({"checkpoint": {"interval": "optimal"}})
