"""training.async_tp_allreduce: the column-parallel input gradient's reduction hides behind the
weight gradient only when it is asynchronous (Megatron-LM since 2021-09); synchronous (the
2021-04 code Narayanan et al. 2021 measured) it is all exposed."""

from __future__ import annotations

import pytest
import yaml

from planc.analysis import analyse
from planc.perf.inputs import comm_time_s, efficiency_of, input_gradient_exposed_s, tp_per_layer
from planc.plannable import Plannable, plannable
from planc.spec.load import load_text

S, H, T, B = 2048, 8192, 8, 2


def plan_of(asynchronous: bool, sequence_parallel: bool = False) -> Plannable:
    spec = {
        "version": 1,
        "name": "tp-async",
        "model": {
            "layers": 4,
            "hidden": H,
            "heads": 64,
            "ffn_hidden": 4 * H,
            "vocab": 51200,
            "mlp": "gelu",
            "norm": "layernorm",
            "bias": True,
            "position_embedding": "learned",
            "max_seq_len": S,
        },
        "hardware": {"gpu": "a100-80gb", "nodes": 1},
        "parallelism": {"tensor": T, "sequence_parallel": sequence_parallel},
        "training": {
            "seq_len": S,
            "micro_batch": B,
            "global_batch": B,
            "precision": "fp16",
            "recompute": "none",
            "attention": "eager",
            "async_tp_allreduce": asynchronous,
        },
    }
    job = load_text("tp-async.yaml", yaml.safe_dump(spec)).job
    assert job is not None
    plan = plannable(job)
    assert isinstance(plan, Plannable)
    return plan


def test_the_term_by_hand() -> None:
    # 3 ms of reduction beside 2 ms of weight gradient: 1 ms shows, 2 ms hide; synchronous, all 3
    # ms show and nothing hides.
    assert input_gradient_exposed_s(3e-3, 2e-3, True) == pytest.approx((1e-3, 2e-3))
    assert input_gradient_exposed_s(1e-3, 2e-3, True) == pytest.approx((0.0, 1e-3))
    assert input_gradient_exposed_s(3e-3, 2e-3, False) == (3e-3, 0.0)


def test_synchronous_all_reduce_is_exposed_whole() -> None:
    # Without SP each block (attention, MLP) all-reduces dX of [s, b, h] in fp16 once in the
    # backward; synchronous, both calls are on the path, and the exposed backward also holds
    # nothing else (the output gradient needs no collective without SP).
    sync = plan_of(False)
    analysis = analyse(sync)
    eff = efficiency_of(sync)
    link = next(str(op.link) for op in analysis.ops if op.group == "tp")
    call = comm_time_s(sync, eff, "all_reduce", T, S * B * H * 2, link)
    per_layer = tp_per_layer(sync, eff, analysis.ops, 0)
    assert per_layer.backward_exposed_s == pytest.approx(2 * call, rel=1e-12)
    assert per_layer.backward_overlapped_s == 0.0
    asynchronous = tp_per_layer(plan_of(True), eff, analyse(plan_of(True)).ops, 0)
    # The same two calls, split between hidden and exposed; the forward is the same.
    total = asynchronous.backward_exposed_s + asynchronous.backward_overlapped_s
    assert total == pytest.approx(2 * call, rel=1e-12)
    assert asynchronous.backward_overlapped_s > 0.0
    assert asynchronous.forward_s == pytest.approx(per_layer.forward_s, rel=1e-12)


def test_synchronous_reduce_scatter_under_sp() -> None:
    # With SP the input gradient is reduce-scattered; synchronous, the exposed backward is that
    # and the output gradient's all-gather, per block.
    sync = plan_of(False, sequence_parallel=True)
    analysis = analyse(sync)
    eff = efficiency_of(sync)
    link = next(str(op.link) for op in analysis.ops if op.group == "tp")
    size = S * B * H * 2
    scatter = comm_time_s(sync, eff, "reduce_scatter", T, size, link)
    gather = comm_time_s(sync, eff, "all_gather", T, size, link)
    per_layer = tp_per_layer(sync, eff, analysis.ops, 0)
    assert per_layer.backward_exposed_s == pytest.approx(2 * (scatter + gather), rel=1e-12)
    # What hides is only each block's input gathered again for its weight gradient, beside the
    # dgrad GEMM (Megatron's SP layers keep their shard of it): nothing of the reduction.
    assert per_layer.backward_overlapped_s == pytest.approx(2 * gather, rel=1e-12)
