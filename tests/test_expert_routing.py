"""training.expert_routing round_robin: NeMo AutoModel's FakeBalancedGate (token t to experts
t·k … t·k + k − 1 mod E) as the flex dispatchers' rows see it, against counts by hand, planc.sim's
enumeration and planc verify.
"""

from __future__ import annotations

import copy
import json
from fractions import Fraction
from math import comb
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from planc.analysis import analyse
from planc.comm.dispatch import round_robin_blocks_reached
from planc.comm.schedule import CommOp
from planc.compile.plan import plan_json
from planc.scoring import analysed
from planc.sim import round_robin_blocks
from planc.spec.load import load_text
from planc.verify import render, verify_text
from planc.vocab import GroupKind

from conftest import ROOT, compiled, job_of, plannable_of

AUTOMODEL_QWEN3 = str(ROOT / "validation" / "runs" / "automodel-qwen3-30b-a3b-8xh100.yaml")


@pytest.mark.parametrize(
    ("experts", "top_k", "width", "want"),
    [
        # Qwen3-30B-A3B on EP 8: runs of 8 experts starting at multiples of 8, ranks of 16.
        (128, 8, 16, Fraction(1)),
        # E 8, k 3, blocks of 4: the starts 0, 3, 6, 1, 4, 7, 2, 5 give runs {0,1,2} {3,4,5}
        # {6,7,0} {1,2,3} {4,5,6} {7,0,1} {2,3,4} {5,6,7}: 1, 2, 2, 1, 1, 2, 2, 1 blocks.
        (8, 3, 4, Fraction(12, 8)),
        # E 160, k 6, blocks of 20: the 80 even starts; a run crosses a block edge when the start
        # is 16 or 18 mod 20, 2 of the 10 even residues.
        (160, 6, 20, Fraction(6, 5)),
        # One expert per block: every token reaches k blocks.
        (8, 2, 1, Fraction(2)),
    ],
)
def test_round_robin_blocks_by_hand(experts: int, top_k: int, width: int, want: Fraction) -> None:
    assert round_robin_blocks_reached(experts, top_k, width) == want


@pytest.mark.parametrize(
    ("experts", "top_k"), [(8, 2), (12, 5), (64, 6), (128, 8), (160, 6), (256, 8)]
)
def test_the_planner_agrees_with_the_simulated_gate(experts: int, top_k: int) -> None:
    """planc.comm.dispatch's period count equals planc.sim's count over E tokens' explicit
    expert lists, for every block width that tiles E."""
    for width in (w for w in range(1, experts + 1) if experts % w == 0):
        block_of = np.arange(experts, dtype=np.int64) // width
        assert round_robin_blocks_reached(experts, top_k, width) == round_robin_blocks(
            block_of, top_k
        )


def _expert_ops(ops: tuple[CommOp, ...]) -> list[CommOp]:
    kinds = (GroupKind.EP, GroupKind.EP_PEERS, GroupKind.EP_DOMAIN, GroupKind.TP_EP)
    return [op for op in ops if op.group in kinds and op.calls]


def test_automodel_qwen3_sends_each_token_to_one_rank() -> None:
    """The AutoModel Qwen3-30B-A3B run (8 H100, EP 8, DeepEP, FakeBalancedGate): T = 4 × 4,096 =
    16,384 tokens per rank and layer, h = 2,048 in bf16; DeepEP's records align16(4,096 + 8 + 8 ×
    8) = 4,176 bytes to dispatch and align16(4,096 + 8 + 4 × 8) = 4,144 to combine, each sent to
    the one rank holding the token's 8 experts."""
    job, analysis = analysed(AUTOMODEL_QWEN3)
    assert job.training.expert_routing == "round_robin"
    ops = _expert_ops(analysis.ops)
    assert sorted({op.buffer_bytes for op in ops}) == [16_384 * 4_144, 16_384 * 4_176]
    # A uniformly random 8 of 128 reaches 8·(1 − C(112, 8)/C(128, 8)) ranks of 16 experts.
    uniform = Fraction(8) * (1 - Fraction(comb(112, 8), comb(128, 8)))
    assert 5.3 < uniform < 5.4
    text = Path(AUTOMODEL_QWEN3).read_text(encoding="utf-8")
    loaded = load_text("uniform.yaml", text.replace(", expert_routing: round_robin}", "}"))
    random_ops = _expert_ops(analyse(plannable_of(loaded.job)).ops)
    assert loaded.job is not None and loaded.job.training.expert_routing == "uniform"
    want = -(-(16_384 * uniform.numerator * 4_176) // uniform.denominator)
    assert max(op.buffer_bytes for op in random_ops) == want


def _mixtral_flex(routing: str) -> dict[str, Any]:
    """Mixtral 8x7B with HybridEP over 2 nodes of 4 EP ranks each (EDP before ep)."""
    overlay = {
        "parallelism": {"order": "tp-cp-dp-ep-pp", "expert_dispatcher": "hybridep"},
        "training": {"expert_routing": routing},
    }
    plan: dict[str, Any] = json.loads(
        plan_json(compiled(job_of(overlay, "mixtral-8x7b-64xh100.yaml")))
    )
    return plan


def _peers_bytes(plan: dict[str, Any]) -> int:
    return next(
        int(op["buffer_bytes"])
        for op in plan["communication"]["ops"]
        if op["group"] == "ep_peers" and op["op"] == "all_to_all"
    )


def test_a_round_robin_plan_verifies_and_names_its_routing() -> None:
    """Mixtral's 8 experts, one per EP rank, 4 ranks per node: round robin sends token t to
    experts 2t and 2t + 1 mod 8, both on one node (one domain reached); a uniform 2 of 8 reach
    2 − P(both in one half) = 2 − 2·C(4, 2)/C(8, 2) = 11/7 domains."""
    plan = _mixtral_flex("round_robin")
    assert plan["training"]["expert_routing"] == "round_robin"
    result = verify_text(json.dumps(plan))
    assert result.ok, render(result)
    uniform = _mixtral_flex("uniform")
    assert "expert_routing" not in uniform["training"]
    assert _peers_bytes(uniform) / _peers_bytes(plan) == pytest.approx(11 / 7, rel=1e-6)
    # A plan that drops its routing claims the uniform rows: verify names the part.
    claimed = copy.deepcopy(plan)
    del claimed["training"]["expert_routing"]
    result = verify_text(json.dumps(claimed))
    assert not result.ok and "ep_peers all_to_all" in render(result)
