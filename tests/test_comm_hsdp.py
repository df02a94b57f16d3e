"""HSDP traffic (parallelism.data_shard), FSDP2's traffic and the offload transfer time."""

from __future__ import annotations

from typing import Any

import yaml

from planc.comm.schedule import schedule, shard_link
from planc.memory.params import rank_parameters
from planc.perf.offload import offload_transfer_s
from planc.plannable import Plannable
from planc.spec.load import load_text
from planc.vocab import Collective, GroupKind

from conftest import plannable_of


def job(parallelism: dict[str, Any], training: dict[str, Any] | None = None) -> Plannable:
    spec = {
        "version": 1,
        "name": "hsdp",
        "model": {"preset": "llama3-8b"},
        "hardware": {"gpu": "h100-sxm", "nodes": 2},
        "parallelism": {"data": 16, **parallelism},
        "training": {"seq_len": 4096, "global_batch": 32, **(training or {})},
    }
    loaded = load_text("hsdp.yaml", yaml.safe_dump(spec))
    assert loaded.job is not None, loaded.findings
    return plannable_of(loaded.job)


def ops_of(plan: Plannable) -> list[Any]:
    return list(schedule(plan, [rank_parameters(plan, 0).total]))


def test_default_keeps_one_dp_cp_group() -> None:
    plan = job({"zero_stage": 1})
    groups = {op.group for op in ops_of(plan)}
    assert GroupKind.DP_CP in groups
    assert not groups & {GroupKind.DP_SHARD, GroupKind.DP_REPLICATE}


def test_hsdp_shards_in_the_node_and_all_reduces_across() -> None:
    # 16 ranks, data_shard 8: ranks 0-7 and 8-15 each hold a whole copy of the sharded state.
    plan = job({"zero_stage": 1, "data_shard": 8})
    ops = ops_of(plan)
    psi = rank_parameters(plan, 0).total  # 8,030,261,248
    bucket = 40_000_000  # max(4·10⁷, 10⁶·16)
    full, rest = divmod(psi, bucket)
    shard = [op for op in ops if op.group is GroupKind.DP_SHARD]
    replicate = [op for op in ops if op.group is GroupKind.DP_REPLICATE]
    assert {(op.op, op.group_size, op.link) for op in shard} == {
        (Collective.REDUCE_SCATTER, 8, "nvlink"),
        (Collective.ALL_GATHER, 8, "nvlink"),
    }
    assert [(op.op, op.group_size, op.link) for op in replicate] == [
        (Collective.ALL_REDUCE, 2, "network")
    ] * 2
    # ZeRO-1: once per step; the sharded gradients of each bucket: ⌈bucket/8⌉ bf16 elements.
    assert [(op.calls, op.buffer_bytes) for op in replicate] == [
        (full, 2 * (bucket // 8)),
        (1, 2 * -(-rest // 8)),
    ]


def test_shard_link_follows_where_the_slice_lies() -> None:
    # order dp-tp-cp-pp: dp has stride 1, a slice of 8 is ranks 0-7, one node: NVLink.
    assert shard_link(job({"data_shard": 8, "order": "dp-tp-cp-pp"})) == "nvlink"
    # order tp-cp-pp-dp with pipeline 2: dp has stride 2. A slice of 4 covers ranks 0, 2, 4, 6:
    # one node. A slice of 8 covers 0, 2, ..., 14: two nodes, the network.
    order = {"data": 8, "pipeline": 2, "order": "tp-cp-pp-dp"}
    assert shard_link(job({**order, "data_shard": 4})) == "nvlink"
    assert shard_link(job({**order, "data_shard": 2})) == "nvlink"
    wide = job({**order, "data_shard": 8})
    assert wide.layout.replicas == 1  # the whole dp_cp group: no HSDP
    assert shard_link(wide) == "network"


def test_fsdp2_runs_zero3_traffic() -> None:
    ops = ops_of(job({}, {"framework": "fsdp2"}))
    gathers = [op for op in ops if op.op is Collective.ALL_GATHER]
    assert gathers and all("forward and backward" in op.phase for op in gathers)


def test_offload_transfer_by_hand() -> None:
    # DeepSpeed ZeRO-1 over 16 ranks, optimizer offloaded: Ψ/16 bf16 gradients down and Ψ/16 bf16
    # weights up, once per step, over PCIe Gen5 (64 GB/s per direction on an H100 node).
    plan = job({"zero_stage": 1}, {"framework": "deepspeed", "offload": {"optimizer": True}})
    shard = -(-8_030_261_248 // 16)
    assert offload_transfer_s(plan, 8_030_261_248) == 2 * shard / 64e9
    assert offload_transfer_s(job({"zero_stage": 1}), 8_030_261_248) == 0.0
    # ZeRO-3 with the parameters offloaded too: 2·m uploads of the weights shard per step.
    both = job(
        {"zero_stage": 3},
        {"framework": "deepspeed", "offload": {"optimizer": True, "parameters": True}},
    )
    assert offload_transfer_s(both, 8_030_261_248) == 2 * both.m * 2 * shard / 64e9
