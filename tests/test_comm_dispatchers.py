"""The expert exchanges as each dispatcher runs them (parallelism.expert_dispatcher), against
hand-derived bytes, and what each framework accepts.

Base: the DeepSeek-V3 example (examples/deepseek-v3-2048xh800.yaml): 2,048 H800 in nodes of 8, t 1,
p 16 (v 2, dualpipev), EP 64 in the order tp-cp-ep-dp-pp, so an EP group is 64 consecutive ranks,
8 nodes of 8; h = 7,168, E = 256 routed experts in 8 groups of 32, top 8 from 4 groups; b 1, s
4,096 (no SP): T = 4,096 tokens per rank and MoE layer; m = 15,360 / 128 = 120, full recompute.
Each node of an EP group holds 8 ranks × 4 experts = 32 experts: exactly one routing group.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from planc.analysis import analyse
from planc.comm.cost import all_to_all_rounds
from planc.comm.schedule import CommOp
from planc.compile.groups import process_groups
from planc.compile.ranks import grid_of
from planc.sim import expected_blocks
from planc.spec.job import dispatcher_of
from planc.vocab import Collective, GroupKind

from conftest import check_overlay, compiled, job_of, resolved_of, rules_fired

DEEPSEEK = "deepseek-v3-2048xh800.yaml"
MIXTRAL = "mixtral-8x7b-64xh100.yaml"
T, H = 4096, 7168


def _ops(dispatcher: str, stage: int = 1) -> list[CommOp]:
    job = job_of({"parallelism": {"expert_dispatcher": dispatcher}}, DEEPSEEK)
    return [op for op in analyse(job).ops if op.stage == stage and op.calls]


def _expert_ops(ops: list[CommOp]) -> list[CommOp]:
    kinds = (GroupKind.EP, GroupKind.EP_PEERS, GroupKind.EP_DOMAIN, GroupKind.TP_EP)
    return [op for op in ops if op.group in kinds]


def test_deepep_sends_a_token_once_to_each_node_it_reaches() -> None:
    ops = _expert_ops(_ops("deepep"))
    peers = [op for op in ops if op.group is GroupKind.EP_PEERS]
    # Node-limited routing on nodes that are the routing groups: a token reaches exactly its 4
    # groups' nodes. DeepEP's record: align16(14,336 + 8 + 8 × 8) = 14,416 bytes to dispatch,
    # align16(14,336 + 8 + 4 × 8) = 14,384 to combine. Over the 8 nodes' peers, 7/8 crosses.
    assert [op.buffer_bytes for op in peers] == [T * 4 * 14_416, T * 4 * 14_384]
    assert all(op.group_size == 8 and op.link == "network" for op in peers)
    assert peers[0].bytes_sent == T * 4 * 14_416 * 7 // 8 == 206_667_776
    # The alltoall dispatcher sends 7/8 of T·k rows across nodes: twice the rows.
    flat = [op for op in _expert_ops(_ops("alltoall")) if op.group is GroupKind.EP_PEERS]
    assert flat[0].bytes_sent == T * 8 * H * 2 * 7 // 8
    assert flat[0].bytes_sent / peers[0].bytes_sent == pytest.approx(2 * 14_336 / 14_416)


def test_deepep_forwards_within_the_node_to_each_rank_it_reaches() -> None:
    ops = _expert_ops(_ops("deepep"))
    domain = [op for op in ops if op.group is GroupKind.EP_DOMAIN]
    # E[ranks reached], ranks of 4 experts, counted by planc.sim's own enumeration.
    ranks = expected_blocks(np.arange(256, dtype=np.int64) // 4, 8, 8, 4)
    assert 7.4 < ranks < 7.6
    want = [-(-(T * ranks.numerator * row) // ranks.denominator) for row in (14_416, 14_384)]
    assert [op.buffer_bytes for op in domain] == want
    assert all(op.group_size == 8 and op.link == "nvlink" for op in domain)


def test_flex_calls_and_no_separate_probabilities() -> None:
    job = job_of({"parallelism": {"expert_dispatcher": "deepep"}}, DEEPSEEK)
    layers = job.moe_layers(1)
    ops = _expert_ops(_ops("deepep"))
    # Dispatch and combine, each forward, backward and again forward under full recompute;
    # DeepEP carries the routing in its records: no probability all-to-all, no count gather.
    assert len(ops) == 4
    assert {op.calls for op in ops} == {3 * layers * job.m}
    assert all(op.op is Collective.ALL_TO_ALL for op in ops)


def test_hybridep_adds_the_domain_probabilities_and_the_routing_map_gather() -> None:
    ops = _expert_ops(_ops("hybridep"))
    peers = [op for op in ops if op.group is GroupKind.EP_PEERS]
    # 14,336 bytes of hidden state + 32 float32 probabilities of the destination node's experts.
    assert peers[0].buffer_bytes == T * 4 * (14_336 + 32 * 4)
    assert peers[1].buffer_bytes == T * 4 * 14_336
    (gather,) = [op for op in ops if op.op is Collective.ALL_GATHER]
    job = job_of(None, DEEPSEEK)
    # The group's 64 routing maps of T × 256 booleans, once per forward (again under full
    # recompute).
    assert gather.group is GroupKind.EP and gather.buffer_bytes == 64 * T * 256
    assert gather.calls == 2 * job.moe_layers(1) * job.m


def test_flat_all_to_all_splits_by_tier() -> None:
    ops = _expert_ops(_ops("alltoall"))
    buffer = T * 8 * H * 2  # T·k rows of h bf16 values
    dispatch = [op for op in ops if "dispatch of the routed tokens" in op.phase]
    net, nvl = dispatch
    # (n − g)/n = 56/64 over the network, (g − 1)/n = 7/64 inside the node: the whole buffer
    # over the 8 nodes' peers and its 1/8 over the node's 8 members; NCCL's flat call keeps its
    # ⌈63/8⌉ = 8 latency rounds on the network part.
    assert (net.group, net.group_size, net.buffer_bytes) == (GroupKind.EP_PEERS, 8, buffer)
    assert (nvl.group, nvl.group_size, nvl.buffer_bytes) == (GroupKind.EP_DOMAIN, 8, buffer // 8)
    assert net.bytes_sent == buffer * 56 // 64 and nvl.bytes_sent == buffer * 7 // 64
    assert net.bytes_sent + nvl.bytes_sent == buffer * 63 // 64
    assert net.steps == all_to_all_rounds(64) == 8 and nvl.steps == 1


def test_allgather_gathers_every_token_of_the_group() -> None:
    ops = _expert_ops(_ops("allgather"))
    gathered = 64 * T
    sizes = {(op.op, op.buffer_bytes) for op in ops}
    assert (Collective.ALL_GATHER, gathered * H * 2) in sizes
    assert (Collective.REDUCE_SCATTER, gathered * H * 2) in sizes
    assert (Collective.ALL_GATHER, gathered * 256 * 2) in sizes  # probabilities
    assert (Collective.ALL_GATHER, gathered * 256) in sizes  # routing map
    assert all(op.group is GroupKind.EP and op.group_size == 64 for op in ops)


def test_the_plan_lists_the_domain_slices() -> None:
    job = job_of({"parallelism": {"expert_dispatcher": "deepep"}}, DEEPSEEK)
    groups = compiled(job).groups
    assert groups.ep_domain is not None and groups.ep_peers is not None
    assert groups.ep_domain[0].tolist() == list(range(8))
    assert groups.ep_peers[0].tolist() == list(range(0, 64, 8))
    assert groups.tp_ep is None  # ETP = 1: tp_ep is the ep group
    # Inside one node, nothing to slice.
    plain = process_groups(grid_of(job_of(None, MIXTRAL).layout))
    assert plain.ep_domain is None


def test_defaults_are_the_frameworks() -> None:
    assert dispatcher_of(resolved_of(None, DEEPSEEK)) == "deepep"  # the example states it
    bare = {"parallelism": {"expert_dispatcher": None}}
    assert dispatcher_of(resolved_of(bare, MIXTRAL)) == "allgather"  # Megatron-Core 0.19.2
    for framework in ("deepspeed", "fsdp2"):
        job = resolved_of({**bare, "training": {"framework": framework}}, MIXTRAL)
        assert dispatcher_of(job) == "alltoall"
    combined = {
        "parallelism": {
            "expert_dispatcher": None,
            "virtual_stages": 2,
            "pipeline_schedule": "combined-1f1b",
        }
    }
    assert dispatcher_of(resolved_of(combined, MIXTRAL)) == "alltoall"


@pytest.mark.parametrize(
    ("overlay", "rule"),
    [
        ({"training": {"framework": "deepspeed"}, "parallelism": {"expert_dispatcher": "deepep"}}, "PLC049"),
        ({"training": {"framework": "fsdp2"}, "parallelism": {"expert_dispatcher": "allgather"}}, "PLC050"),
        (
            {
                "parallelism": {
                    "expert_dispatcher": "allgather",
                    "virtual_stages": 2,
                    "pipeline_schedule": "combined-1f1b",
                }
            },
            "PLC048",
        ),
        # EDP before ep: an EP group has 4 members per node, and DeepEP takes 8 consecutive
        # ranks of its group as one node's NVLink peers.
        ({"parallelism": {"expert_dispatcher": "deepep", "order": "tp-cp-dp-ep-pp"}}, "PLC048"),
        # torchtitan's deepep backend builds the same Buffer, with the same peers: refused
        # alike (found by the random MoE plans, which compiled it and failed verify's domain
        # check).
        (
            {
                "training": {"framework": "fsdp2"},
                "parallelism": {"expert_dispatcher": "deepep", "order": "tp-cp-dp-ep-pp"},
            },
            "PLC050",
        ),
    ],
)
def test_frameworks_refuse_what_they_cannot_run(overlay: dict[str, object], rule: str) -> None:
    assert rule in rules_fired(check_overlay(overlay, MIXTRAL))


@pytest.mark.parametrize("dispatcher", ["deepep", "hybridep", "allgather"])
def test_megatron_runs_the_other_dispatchers(dispatcher: str) -> None:
    fired = rules_fired(check_overlay({"parallelism": {"expert_dispatcher": dispatcher}}, MIXTRAL))
    assert not fired & {"PLC048", "PLC049", "PLC050"}


def test_deepep_group_sizes() -> None:
    # DeepEP's Buffer has configs for 2 … 160 ranks: EP 32 runs, EP 256 (on 4,096 GPUs, one
    # expert per rank) does not.
    fine = check_overlay({"parallelism": {"expert": 32, "data": 128}}, DEEPSEEK)
    assert "PLC048" not in rules_fired(fine)
    too_many = check_overlay(
        {
            "hardware": {"nodes": 512, "hosts": "h800-{000..511}"},
            "parallelism": {"expert": 256, "data": 256},
        },
        DEEPSEEK,
    )
    messages = [f.message for f in too_many.findings if f.rule == "PLC048"]
    assert len(messages) == 1 and "DeepEP over 256 ranks" in messages[0]


def test_flex_reach_is_exact_against_the_routing_simulation() -> None:
    # The NVLink part's E[ranks reached] and the network part's E[nodes reached] as planc's
    # closed form gives them equal planc.sim's enumeration over the expert placement.
    from planc.comm.schedule import domains_reached, ranks_reached

    job = job_of({"parallelism": {"expert_dispatcher": "hybridep"}}, DEEPSEEK)
    experts = np.arange(256, dtype=np.int64)
    assert ranks_reached(job) == expected_blocks(experts // 4, 8, 8, 4)
    assert domains_reached(job) == expected_blocks(experts // 32, 8, 8, 4) == Fraction(4)


def test_the_kernels_measured_throughput_bounds_the_network_part() -> None:
    # DeepEP's normal kernels measured 51 GB/s (dispatch) and 50 GB/s (combine) of rows per
    # destination node, its own included, at EP 64 on H800 with one 400 Gb/s CX-7 NIC each
    # (efficiency.json h800 network kernels): 7/8 of the rows leave, so the NIC carries
    # 51·7/8 = 44.6 GB/s, below the 48 GB/s an NCCL all-to-all reaches. One call: 1 latency
    # (7 peers, one batch) + the rows over 51 GB/s.
    from planc.perf.inputs import call_time_s, efficiency_of

    job = job_of(None, DEEPSEEK)
    eff = efficiency_of(job)
    ops = [op for op in analyse(job).ops if op.stage == 1 and op.group is GroupKind.EP_PEERS]
    dispatch, combine = ops
    assert dispatch.kernel == "deepep_dispatch" and combine.kernel == "deepep_combine"
    assert call_time_s(job, eff, dispatch) == pytest.approx(5e-6 + T * 4 * 14_416 / 51e9)
    assert call_time_s(job, eff, combine) == pytest.approx(5e-6 + T * 4 * 14_384 / 50e9)
    # Inside the node no kernel measurement applies: H800 NVLink's 200 GB/s at the all-to-all
    # efficiency 0.82, 2 µs a round.
    ops = [op for op in analyse(job).ops if op.stage == 1 and op.group is GroupKind.EP_DOMAIN]
    forward = ops[0]
    assert call_time_s(job, eff, forward) == pytest.approx(
        2e-6 + forward.bytes_sent / (200e9 * 0.82), rel=1e-9
    )
