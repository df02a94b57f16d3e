"""planc verify: the plan's collectives, simulated, reduce exactly and move the budgeted bytes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from planc.analysis import analyse
from planc.cli import main
from planc.comm.schedule import CommOp
from planc.verify import check_collective, verify_collectives, verify_pipeline

from conftest import job_of

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_verify(path: Path) -> None:
    result = CliRunner().invoke(main, ["verify", str(path)])
    assert result.exit_code == 0, result.output
    assert "verified" in result.output


def test_every_group_kind_with_traffic_is_checked() -> None:
    job = job_of("{parallelism: {tensor: 2, data: 2, context: 2, zero_stage: 0}}")
    ops = analyse(job).ops
    checks = verify_collectives(job, ops)
    assert {c.group for c in checks} == {"tp", "dp_cp"}
    assert all(c.ok for c in checks)
    # TP on 8192 tokens split over c = 2: b·(s/c)·h·2 bytes = 4096·4096·2, simulated at 2^20 elements.
    tp = next(c for c in checks if c.group == "tp")
    assert tp.buffer_bytes == 4096 * 4096 * 2 and tp.scaled


def test_pipeline_messages_match_the_plan() -> None:
    job = job_of(None, "llama3-70b-8x8.yaml")
    check = verify_pipeline(job, analyse(job).ops)
    assert check is not None and check.ok
    # 1F1B, p = 4, m = 256: 3 boundaries × 256 micro-batches × (forward + backward).
    assert check.messages == 3 * 256 * 2
    assert abs(check.bubble_fraction - 3 / (256 + 3)) < 1e-12


def test_mismatched_plan_bytes_fail() -> None:
    job = job_of()
    op = next(o for o in analyse(job).ops if o.group == "tp")

    class Inflated(CommOp):
        @property
        def bytes_sent(self) -> int:
            return super().bytes_sent + 1

    inflated = Inflated(**dataclasses.asdict(op))
    check = check_collective(inflated, 2, 1)
    assert not check.bytes_ok and "plan says" in check.detail


def test_each_shape_reports_the_groups_it_stands_for() -> None:
    job = job_of(None, "llama3-70b-8x8.yaml")
    checks = verify_collectives(job, analyse(job).ops)
    tp = [c for c in checks if c.group == "tp"]
    # 64 ranks / t = 8: eight TP groups, all with the same activation shape.
    assert {c.stands_for for c in tp} == {8}
    # DP×CP groups: 64 / 2 = 32, each stage's 8 groups listed per bucket shape.
    full_buckets = [c for c in checks if c.group == "dp_cp" and c.buffer_bytes == 40_000_000 * 2]
    assert {c.stands_for for c in full_buckets} == {32}
