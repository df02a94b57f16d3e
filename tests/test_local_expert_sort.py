"""The second permutation of Megatron-Core's alltoall dispatcher (issue 24).

MoEAlltoAllTokenDispatcher permutes the routed rows by destination before the all-to-all
(`permute`) and, when a rank holds more than one expert, sorts the rows it received by local
expert after it (dispatch_postprocess, 'Permutation 2', sort_chunks_by_idxs) and back before the
return (combine_preprocess); the flex dispatchers permute once each way inside DeepEP's and
HybridEP's managers (token_dispatcher.py, Megatron-Core 0.17.1, 2edffadb). The expected bytes
are Qwen3-30B-A3B's (hidden 2,048, 128 experts, 8 per token) worked by hand.
"""

from __future__ import annotations

from typing import Any

import pytest

from planc.perf.inputs import expert_shape, layer_shape
from planc.perf.ops import OpCost, local_expert_sort, moe_layer_ops
from planc.plannable import Plannable

from conftest import job_of

H, TOPK = 2048, 8
S, B = 8192, 1  # the example's sequence and micro-batch


def _qwen(expert: int, dispatcher: str, experts: int = 128, **training: Any) -> Plannable:
    return job_of(
        {
            "model": {"preset": "qwen3-30b-a3b", "moe": {"experts": experts}},
            "parallelism": {
                "tensor": 1, "sequence_parallel": False, "expert": expert,
                "expert_dispatcher": dispatcher, "order": "tp-cp-ep-dp-pp",
            },
            "training": training,
        }
    )


def _sort(plan: Plannable) -> tuple[OpCost, ...]:
    experts = expert_shape(plan)
    assert experts is not None
    return local_expert_sort(layer_shape(plan), experts)


def test_the_received_rows_are_sorted_by_local_expert_and_back() -> None:
    plan = _qwen(8, "alltoall")  # 16 experts a rank
    (op,) = _sort(plan)
    rows = B * S * TOPK  # the balanced rows a rank receives
    # the sort and the sort back, each reading and writing every bf16 element
    assert op.forward.bytes == pytest.approx(2 * (2 + 2) * rows * H)
    assert op.backward.bytes == op.forward.bytes
    experts = expert_shape(plan)
    assert experts is not None
    names = [o.name for o in moe_layer_ops(layer_shape(plan), experts)]
    assert names.index("local expert sort") == names.index("token permutation") + 1


@pytest.mark.parametrize("dispatcher", ["deepep", "hybridep"])
def test_the_flex_dispatchers_permute_once_each_way(dispatcher: str) -> None:
    assert _sort(_qwen(8, dispatcher)) == ()


def test_one_expert_a_rank_needs_no_sort() -> None:
    assert _sort(_qwen(8, "alltoall", experts=8)) == ()  # 8 experts over EP 8: one each


def test_other_frameworks_dispatchers_are_not_charged() -> None:
    assert _sort(_qwen(8, "alltoall", framework="fsdp2", precision="bf16")) == ()
