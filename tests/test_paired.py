"""A MoE layer's forward and backward run as a pair (combined 1F1B, DualPipe): the two streams'
graph by hand, and what it leaves exposed on runs planc builds."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planc.perf.inputs import (
    dispatch_combine_s,
    efficiency_of,
    ep_per_layer,
    moe_layer_parts,
    paired_per_layer,
)
from planc.perf.paired import MoeLayerParts, compute_s, pair_s, paired_exposed
from planc.scoring import analysed

ROOT = Path(__file__).resolve().parent.parent


def _parts(**changed: float) -> MoeLayerParts:
    base = {
        "pre_forward_s": 1.0,
        "pre_backward_s": 2.0,
        "experts_forward_s": 1.0,
        "experts_backward_s": 1.0,
        "experts_weight_s": 1.0,
        "dispatch_forward_s": 0.5,
        "combine_forward_s": 0.5,
        "dispatch_backward_s": 0.5,
        "combine_backward_s": 0.5,
    }
    return MoeLayerParts(**{**base, **changed})


def test_small_exchanges_hide_entirely() -> None:
    # Each exchange is shorter than the compute beside it: the pair is its 6 s of compute.
    parts = _parts()
    assert compute_s(parts) == 6.0
    assert pair_s(parts) == 6.0
    assert paired_exposed(parts) == (0.0, 0.0)


def test_a_long_combine_gradient_waits_out_the_pre_dispatch_forward() -> None:
    # comm: combine_bwd [0, 3]; compute: pre_f [0, 1]. experts_b [3, 4], dispatch_f [3, 3.5],
    # experts_w [4, 5], dispatch_b [4, 4.5], experts_f [5, 6], combine_f [6, 6.5],
    # pre_b [6, 8]: 8 s, 2 s beyond the compute, shared 1 : 3.5 by the passes' exchanges.
    parts = _parts(combine_backward_s=3.0)
    assert pair_s(parts) == 8.0
    forward, backward = paired_exposed(parts)
    assert forward == pytest.approx(2.0 * 1.0 / 4.5)
    assert backward == pytest.approx(2.0 * 3.5 / 4.5)


def test_a_long_dispatch_outlasts_the_experts_backward() -> None:
    # comm: combine_bwd [0, 0.5], dispatch_f [1, 5] (after pre_f); compute: experts_b [1, 2],
    # experts_w [2, 3], experts_f waits for the dispatch [5, 6]; dispatch_b [5, 5.5],
    # combine_f [6, 6.5], pre_b [6, 8]: 8 s.
    assert pair_s(_parts(dispatch_forward_s=4.0)) == 8.0


def test_serial_exchanges_bound_the_pair() -> None:
    # The pair never beats its compute, nor its communication stream run back to back.
    parts = _parts(dispatch_forward_s=3.0, combine_forward_s=2.0, dispatch_backward_s=4.0)
    comm = 3.0 + 2.0 + 4.0 + 0.5
    assert pair_s(parts) >= max(compute_s(parts), comm)


_SECONDS = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)
_FIELDS = (
    "pre_forward_s", "pre_backward_s", "experts_forward_s", "experts_backward_s",
    "experts_weight_s", "dispatch_forward_s", "combine_forward_s", "dispatch_backward_s",
    "combine_backward_s",
)
_PARTS = st.builds(MoeLayerParts, **dict.fromkeys(_FIELDS, _SECONDS))


@given(_PARTS)
def test_a_pair_lies_between_its_busiest_stream_and_running_everything_in_turn(
    parts: MoeLayerParts,
) -> None:
    comm = (
        parts.dispatch_forward_s
        + parts.combine_forward_s
        + parts.dispatch_backward_s
        + parts.combine_backward_s
    )
    slack = 1e-9
    assert pair_s(parts) >= max(compute_s(parts), comm) - slack
    assert pair_s(parts) <= compute_s(parts) + comm + slack
    forward, backward = paired_exposed(parts)
    assert forward >= 0.0 and backward >= 0.0
    assert forward + backward == pytest.approx(pair_s(parts) - compute_s(parts), abs=slack)


@given(_PARTS, st.sampled_from(_FIELDS), st.floats(min_value=0.0, max_value=5.0))
def test_a_longer_part_never_shortens_the_pair(
    parts: MoeLayerParts, field: str, more: float
) -> None:
    longer = MoeLayerParts(**{**{f: getattr(parts, f) for f in _FIELDS},
                             field: getattr(parts, field) + more})
    assert pair_s(longer) >= pair_s(parts) - 1e-9


@pytest.mark.parametrize(
    "run",
    [
        "bridge2608-deepseek-v3-256xgb200-fp8mx",  # HybridEP on NVLink: everything hides
        "bridge2511-qwen3-235b-a22b-256xh100-fp8cs",  # all-to-all across nodes: part stays
    ],
)
def test_published_runs_split_into_parts_that_add_up(run: str) -> None:
    _, analysis = analysed(str(ROOT / "validation" / "runs" / f"{run}.yaml"))
    job = analysis.plan
    eff = efficiency_of(job)
    exchange = ep_per_layer(job, eff)
    parts = moe_layer_parts(job, eff, exchange)
    assert parts is not None
    if job.layout.dispatcher == "alltoall":
        # Megatron's alltoall dispatcher: the combine is the second of two all-to-alls of the
        # same rows (dispatch_combine_s prices both).
        assert parts.combine_forward_s == pytest.approx(dispatch_combine_s(job, eff) / 2)
    # The dispatch carries more than the tokens' rows (probabilities, token counts or routing
    # maps): longer than the combine, both positive.
    assert parts.dispatch_forward_s > parts.combine_forward_s > 0.0
    forward, backward = paired_per_layer(job, eff, exchange)
    assert 0.0 <= forward <= exchange.forward_s and 0.0 <= backward <= exchange.backward_s
    across_nodes = "h100" in run
    # (what hides completely may leave a rounding residue of the subtractions, ~1e-18 s)
    assert (forward + backward > 1e-12) is across_nodes
