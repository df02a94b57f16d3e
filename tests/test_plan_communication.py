"""plan.json's communication half: the schedule, the pipeline order and per-rank wire bytes."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from planc.compile import compile_job
from planc.compile.plan import plan_json

from conftest import job_of

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "schemas" / "plan.schema.json").read_text())


@pytest.mark.parametrize(
    "base", ["llama3-8b-1node.yaml", "llama3-70b-8x8.yaml", "gpt3-175b-gb200-nvl72.yaml"]
)
def test_wire_bytes_balance_over_the_world(base: str) -> None:
    plan = json.loads(plan_json(compile_job(job_of(None, base))))
    jsonschema.validate(plan, SCHEMA)
    for link in ("nvlink", "network"):
        sent = sum(rank["wire"][f"{link}_sent"] for rank in plan["ranks"])
        received = sum(rank["wire"][f"{link}_received"] for rank in plan["ranks"])
        # Every byte one rank sends, another receives.
        assert sent == received


def test_pipeline_order_in_the_plan_is_1f1b() -> None:
    plan = json.loads(plan_json(compile_job(job_of(None, "llama3-70b-8x8.yaml"))))
    pipe = plan["communication"]["pipeline"]
    assert (pipe["p"], pipe["m"], pipe["v"], pipe["schedule"]) == (4, 256, 1, "1f1b")
    first = pipe["stages"][0]
    # Stage 0 of p = 4: warm-up of p − 1 = 3 forwards, then one forward and the first backward.
    assert first[:5] == [["F", 0, 0], ["F", 1, 0], ["F", 2, 0], ["F", 3, 0], ["B", 0, 0]]
    assert len(first) == 2 * 256
    last = pipe["stages"][3]
    assert last[:4] == [["F", 0, 0], ["B", 0, 0], ["F", 1, 0], ["B", 1, 0]]


def test_tp_ops_are_on_nvlink_and_pp_on_the_network() -> None:
    plan = json.loads(plan_json(compile_job(job_of(None, "llama3-70b-8x8.yaml"))))
    links = {(op["group"], op["link"]) for op in plan["communication"]["ops"]}
    assert ("tp", "nvlink") in links and ("pp", "network") in links
    rank0 = plan["ranks"][0]["wire"]
    assert rank0["nvlink_sent"] > 0 and rank0["network_sent"] > 0
