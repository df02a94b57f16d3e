"""plan.json's communication half: the schedule, the pipeline order and per-rank wire bytes."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from planc.compile.plan import plan_json

from conftest import compiled, job_of

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "schemas" / "plan.schema.json").read_text())


@pytest.mark.parametrize(
    "base", ["llama3-8b-1node.yaml", "llama3-70b-8x8.yaml", "gpt3-175b-gb200-nvl72.yaml"]
)
def test_wire_bytes_balance_over_the_world(base: str) -> None:
    plan = json.loads(plan_json(compiled(job_of(None, base))))
    jsonschema.validate(plan, SCHEMA)
    for link in ("nvlink", "network"):
        sent = sum(rank["wire"][link]["sent"] for rank in plan["ranks"])
        received = sum(rank["wire"][link]["received"] for rank in plan["ranks"])
        # Every byte one rank sends, another receives.
        assert sent == received


def test_pipeline_order_in_the_plan_is_1f1b() -> None:
    plan = json.loads(plan_json(compiled(job_of(None, "llama3-70b-8x8.yaml"))))
    pipe = plan["communication"]["pipeline"]
    assert (pipe["p"], pipe["m"], pipe["v"], pipe["schedule"]) == (4, 256, 1, "1f1b")
    # Stage r of p = 4 warms up with p − r − 1 forwards, runs m − warm-up (F, B) pairs, then
    # cools down with the remaining backwards: 2·m ops per stage, whatever m is.
    assert pipe["stages"] == [
        {"warmup": 3 - r, "steady": 256 - (3 - r), "cooldown": 3 - r} for r in range(4)
    ]


def test_tp_ops_are_on_nvlink_and_pp_on_the_network() -> None:
    plan = json.loads(plan_json(compiled(job_of(None, "llama3-70b-8x8.yaml"))))
    links = {(op["group"], op["link"]) for op in plan["communication"]["ops"]}
    assert ("tp", "nvlink") in links and ("pp", "network") in links
    rank0 = plan["ranks"][0]["wire"]
    assert rank0["nvlink"]["sent"] > 0 and rank0["network"]["sent"] > 0
