"""PLC024 the world divides into expert_tensor × expert × pipeline (EDP whole).

Base: Mixtral 8x7B on 64 H100, pipeline 4, expert 8: EDP = 64 / (1·8·4) = 2.
"""

from __future__ import annotations

import pytest

from planc.findings import Severity

from conftest import check_overlay, check_text, resolved_of, rules_fired, spec_text

BASE = "mixtral-8x7b-64xh100.yaml"


def test_world_not_dividing_fails() -> None:
    text = spec_text({"parallelism": {"expert_tensor": 3}}, BASE)
    (finding,) = [f for f in check_text(text).findings if f.rule == "PLC024"]
    assert finding.severity is Severity.ERROR
    assert "3 × 8 × 4 = 96" in finding.message and "64" in finding.message


@pytest.mark.parametrize(("etp", "ep", "edp"), [(1, 8, 2), (2, 8, 1), (2, 4, 2), (1, 1, 16)])
def test_dividing_layouts_pass(etp: int, ep: int, edp: int) -> None:
    overlay = {"parallelism": {"expert_tensor": etp, "expert": ep}}
    assert "PLC024" not in rules_fired(check_overlay(overlay, BASE))
    assert resolved_of(overlay, BASE).layout.edp(64) == edp


def test_expert_tensor_defaults_to_tensor() -> None:
    # tensor 2, data 8, expert 8: ETP = 2 → 2·8·4 = 64, EDP 1.
    overlay = {"parallelism": {"tensor": 2, "data": 8, "sequence_parallel": True}}
    job = resolved_of(overlay, BASE)
    assert (job.layout.et, job.layout.edp(64)) == (2, 1)
    assert "PLC024" not in rules_fired(check_overlay(overlay, BASE))
