"""PLC073 a rank's traffic per step stays below 2^62 bytes, the largest count plan.json holds.

Base: Llama 3 8B on one node of 8 H100, t = 8 without sequence parallelism, d = 1, no ZeRO, so a
rank's only NVLink traffic is tensor parallelism's: per layer and micro-batch two all-reduces
forward and two backward of [s, b, h] bf16 = 8,192 × 1 × 4,096 × 2 B = 67,108,864 B, each sending
2(t − 1)/t of it around the ring: 32 × 4 × 1.75 × 67,108,864 = 15,032,385,536 B per micro-batch;
and at the model's ends (one stage holds both) the word embedding's output and the LM head's input
gradient all-reduced, the same size, and the loss's three fp32 all-reduces of the 8,192 rows.
"""

from __future__ import annotations

import math
from pathlib import Path

from click.testing import CliRunner

from planc.cli.main import main

from conftest import check_overlay, rules_fired, spec_text

PER_MICRO_BATCH = (32 * 4 + 2) * 2 * 7 * 8_192 * 4_096 * 2 // 8 + 3 * 2 * 7 * 8_192 * 4 // 8
THRESHOLD = math.ceil(2**62 / PER_MICRO_BATCH)  # the first m at which a rank reaches 2^62 B


def _spec(global_batch: int) -> dict[str, object]:
    return {
        "parallelism": {"tensor": 8, "sequence_parallel": False, "zero_stage": 0, "order": None},
        "training": {"global_batch": global_batch, "recompute": "none"},
    }


def test_fails_at_the_first_micro_batch_count_that_reaches_two_to_the_62() -> None:
    result = check_overlay(_spec(THRESHOLD))
    (finding,) = [f for f in result.findings if f.rule == "PLC073"]
    assert finding.field == "training.global_batch"
    assert f"m = {THRESHOLD:,} micro-batches" in finding.message
    assert f"{PER_MICRO_BATCH * THRESHOLD:.3e} bytes per step on nvlink" in finding.message


def test_passes_one_micro_batch_below() -> None:
    assert "PLC073" not in rules_fired(check_overlay(_spec(THRESHOLD - 1)))


def test_compile_writes_nothing_verify_would_refuse(tmp_path: Path) -> None:
    """The bug it closes: compile wrote a plan whose wire bytes planc verify refused."""
    spec = tmp_path / "s.yaml"
    spec.write_text(spec_text(_spec(THRESHOLD)), encoding="utf-8")
    done = CliRunner().invoke(main, ["compile", str(spec), "-o", str(tmp_path / "plan")])
    assert done.exit_code == 1, done.output
    assert "PLC073" in done.output and not (tmp_path / "plan").exists()
