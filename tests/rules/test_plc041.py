"""PLC041 data-parallel groups stay on their rails.

Base: Llama 3 70B on 8 nodes of 8 H100 under a rail-aligned leaf of 4 nodes (32 GPUs) and a
spine. With t = 4, d = 4, p = 4 (order tp-cp-dp-pp: strides tp 1, dp 4, pp 16) a DP group is
r, r + 4, r + 8, r + 12: GPUs 0 and 4 of node 0, GPUs 0 and 4 of node 1: members on different
nodes differ in local index, so the rail leaf cannot carry the ring.
"""

from __future__ import annotations

from typing import Any

from planc.comm.schedule import link_class
from planc.findings import Severity
from planc.vocab import Axis

from conftest import check_overlay, job_of, rules_fired

BASE = "llama3-70b-8x8.yaml"
RAILS = [{"name": "leaf", "nodes": 4, "rail_aligned": True}, {"name": "spine"}]


def _spec(tensor: int, pipeline: int, data: int, **hardware: Any) -> dict[str, Any]:
    return {
        "hardware": {"nodes": 8, "hosts": [], "fabric": RAILS, **hardware},
        "parallelism": {"tensor": tensor, "pipeline": pipeline, "data": data},
        "training": {"seq_len": 4096},
    }


def test_fails_when_the_data_parallel_ring_crosses_rails() -> None:
    (finding,) = [f for f in check_overlay(_spec(4, 4, 4), BASE).findings if f.rule == "PLC041"]
    assert finding.severity is Severity.WARNING
    assert (
        "the data-parallel groups (4 ranks, e.g. 0 (GPU 0 of node 0), 4 (GPU 4 of node 0), "
        "8 (GPU 0 of node 1), 12 (GPU 4 of node 1)) differ in local GPU index across nodes: "
        "the rail-aligned leaf (blocks of 32 GPUs) cannot carry them, and their gradients "
        "cross spine (50 GB/s per GPU)" in finding.message
    )
    assert "hardware.pxn: true" in finding.fix


def test_the_fix_pxn_puts_the_groups_back_on_the_leaf() -> None:
    spec = _spec(4, 4, 4, pxn=True)
    assert link_class(job_of(spec, BASE), (Axis.DP,)) == "leaf"
    assert "PLC041" not in rules_fired(check_overlay(spec, BASE))


def test_passes_when_tensor_fills_the_node() -> None:
    # t = 8: DP stride 8, members r and r + 8 share local index r mod 8: on the rails.
    spec = _spec(8, 4, 2)
    assert link_class(job_of(spec, BASE), (Axis.DP,)) == "leaf"
    assert "PLC041" not in rules_fired(check_overlay(spec, BASE))


def test_an_order_fix_is_checked_when_one_exists() -> None:
    # An order is offered only when it keeps DP on the leaf. t = 4, p = 2, d = 8: dp stride 4,
    # 8 members over 32 GPUs (GPUs 0 and 4 of 4 nodes). A rail-aligned DP needs a stride of 8:
    # order tp-pp-dp-cp gives it, but then r, r + 8, …, r + 56 span 64 GPUs, the spine. No
    # order keeps it on the leaf, so only PXN is offered.
    (finding,) = [f for f in check_overlay(_spec(4, 2, 8), BASE).findings if f.rule == "PLC041"]
    assert "order:" not in finding.fix
