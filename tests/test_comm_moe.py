"""The expert traffic of the communication schedule, against hand-derived numbers.

The Mixtral 8x7B example (examples/mixtral-8x7b-64xh100.yaml): 32 layers, h = 4096, E = 8,
k = 2, f_e = 14,336, SwiGLU; 64 H100s, t = 1, p = 4, d = 16, EP = 8, ETP = 1, EDP = 64/(1·8·4)
= 2, order tp-cp-ep-dp-pp, b = 1, s = 4,096, B = 512, so m = 512/(1·16) = 32 and every stage
holds 8 MoE layers.
"""

from __future__ import annotations

import math
from fractions import Fraction

from planc.analysis import analyse
from planc.comm.cost import all_to_all_rounds, bus_factor, ring_steps, wire_bytes
from planc.comm.schedule import CommOp, Wire
from planc.vocab import Collective, GroupKind

from conftest import job_of

MIXTRAL = "mixtral-8x7b-64xh100.yaml"


def _stage_ops(overlay: str | None = None, stage: int = 0) -> list[CommOp]:
    return [op for op in analyse(job_of(overlay, MIXTRAL)).ops if op.stage == stage]


def _named(ops: list[CommOp], group: GroupKind, word: str) -> CommOp:
    return next(op for op in ops if op.group is group and word in op.phase)


def test_all_to_all_bus_factor_and_steps() -> None:
    # nccl-tests PERFORMANCE.md: alltoall busBw = algBw·(n−1)/n. NCCL runs the n−1 peers of
    # an all-to-all eight at a time per channel (NCCL_MAX_DEV_WORK_P2P_PER_BATCH = 8), so the
    # 7 peers of an 8-rank group pay one latency, not the 7 of a pairwise exchange.
    assert bus_factor("all_to_all", 8) == Fraction(7, 8)
    assert ring_steps("all_to_all", 8) == 1
    assert wire_bytes("all_to_all", 3, 10) == 7  # ⌈20/3⌉
    assert wire_bytes("all_to_all", 1, 10) == 0


def test_all_to_all_latency_rounds_are_eight_peers_at_a_time() -> None:
    # ⌈(n − 1)/8⌉ by hand: 9 ranks have 8 peers (one batch), 10 have 9 (two), Llama 4
    # Maverick's EP 128 has 127 peers: 15 full batches of 8 and one of 7, 16 rounds.
    assert [all_to_all_rounds(n) for n in (1, 2, 9, 10, 128)] == [0, 1, 1, 2, 16]
    # The rings keep their n − 1 (2(n − 1) for an all-reduce) steps.
    assert ring_steps("all_gather", 128) == 127
    assert ring_steps("all_reduce", 8) == 14


def test_mixtral_dispatch_and_combine_bytes_and_calls() -> None:
    ops = _stage_ops()
    # T = b·s = 4,096 tokens (t = 1), T·k = 8,192 rows of h = 4,096 bf16 values.
    rows = 1 * 4096 * 2
    for word in ("dispatch", "combine"):
        op = _named(ops, GroupKind.EP, word)
        assert op.op is Collective.ALL_TO_ALL and op.group_size == 8
        assert op.buffer_bytes == rows * 4096 * 2 == 67_108_864
        # 8 MoE layers × 32 micro-batches forward, as many backward (selective recompute does
        # not re-run the MoE layer).
        assert op.calls == 8 * 32 + 8 * 32 == 512
        # Each rank keeps 1/8 of its rows: 7/8 · 64 MiB leave it per call.
        assert op.bytes_sent == 67_108_864 * 7 // 8 == 58_720_256
        # EP is the fastest expert axis (ETP = 1): ranks 8i..8i+7, inside one 8-GPU node.
        assert op.link == "nvlink"
    probs = _named(ops, GroupKind.EP, "probabilities")
    assert (probs.buffer_bytes, probs.calls) == (rows * 2, 512)
    counts = _named(ops, GroupKind.EP, "tokens per expert")
    # E = 8 longs from each of the ETP·EP = 8 ranks, forward only.
    assert (counts.op, counts.buffer_bytes, counts.calls) == (Collective.ALL_GATHER, 8 * 8 * 8, 256)


def test_mixtral_has_no_tensor_parallel_ops_and_expert_gradients_go_over_edp() -> None:
    an = analyse(job_of(None, MIXTRAL))
    ops = [op for op in an.ops if op.stage == 0]
    assert not [op for op in ops if op.group in (GroupKind.TP, GroupKind.ETP)]
    # Expert parameters of stage 0: 8 MoE layers × E/EP = 1 expert × 3·h·f_e.
    experts = 8 * 1 * 3 * 4096 * 14336
    assert an.parameters[0].expert_total == experts == 1_409_286_144
    bucket = max(40_000_000, 1_000_000 * 16)  # Megatron DDP default, d = 16
    edp = [op for op in ops if op.group is GroupKind.EDP]
    scatter = sorted(
        (op.buffer_bytes, op.calls) for op in edp if op.op is Collective.REDUCE_SCATTER
    )
    # 1,409,286,144 = 35 × 40,000,000 + 9,286,144, bf16 gradients.
    assert scatter == [(9_286_144 * 2, 1), (bucket * 2, 35)]
    assert {op.group_size for op in edp} == {2}
    # EDP members are 8 ranks apart (ep = 8 is faster in the order): across nodes.
    assert {op.link for op in edp} == {"network"}
    # The dense gradients, Ψ_dense = Ψ_r − Ψ_expert, over dp_cp.
    dense = an.parameters[0].dense_total
    reduced = sum(
        op.calls * op.buffer_bytes // 2
        for op in ops
        if op.group is GroupKind.DP_CP and op.op is Collective.REDUCE_SCATTER
    )
    assert reduced == dense


def test_full_recompute_runs_the_forward_exchanges_again() -> None:
    ops = _stage_ops("{training: {recompute: full}}")
    assert _named(ops, GroupKind.EP, "dispatch").calls == 3 * 8 * 32
    assert _named(ops, GroupKind.EP, "tokens per expert").calls == 2 * 8 * 32


# Drop and pad (model.moe.pad_to_capacity): every expert takes exactly its capacity
# C = ⌈(T·k/E)·CF⌉ rows from each rank (Megatron-Core get_capacity), so a rank sends E·C rows.
def _capacity(cf: float, padded: bool) -> str:
    return f"{{model: {{moe: {{capacity_factor: {cf}, pad_to_capacity: {str(padded).lower()}}}}}}}"


def test_padded_exchanges_move_every_expert_filled_to_its_capacity() -> None:
    # T = 4,096, k = 2, E = 8, CF 1.25: C = ⌈1,024·1.25⌉ = 1,280, E·C = 10,240 rows for the
    # balanced T·k = 8,192.
    T, k, E = 4096, 2, 8
    C = math.ceil((T * k / E) * 1.25)
    assert (C, E * C) == (1280, 10_240)
    ops = _stage_ops(_capacity(1.25, True))
    for word in ("dispatch", "combine"):
        op = _named(ops, GroupKind.EP, word)
        assert (op.buffer_bytes, op.calls) == (E * C * 4096 * 2, 512)
        assert "E·C rows" in op.formula
    assert _named(ops, GroupKind.EP, "probabilities").buffer_bytes == E * C * 2
    # The counts are C for every expert, known on the host: no token-count all-gather.
    assert not [op for op in ops if "tokens per expert" in op.phase]


def test_drop_only_exchanges_stay_at_the_balanced_rows() -> None:
    # The same capacity without padding: the balanced T·k rows, and the counts gathered.
    ops = _stage_ops(_capacity(1.25, False))
    dispatch = _named(ops, GroupKind.EP, "dispatch")
    assert dispatch.buffer_bytes == 4096 * 2 * 4096 * 2 and "T·k rows" in dispatch.formula
    counts = _named(ops, GroupKind.EP, "tokens per expert")
    assert (counts.buffer_bytes, counts.calls) == (8 * 8 * 8, 256)


def test_padded_expert_tensor_parallelism_gathers_etp_times_e_c_rows() -> None:
    # t = 2 with SP, ETP = 2, EP = 4 (as above): T = 2,048, CF 1.3: C = ⌈512·1.3⌉ = 666 (665.6
    # rounded up), E·C = 5,328 rows dispatched, 2 × 5,328 gathered over ETP.
    C = math.ceil((2048 * 2 / 8) * 1.3)
    assert C == 666
    ops = _stage_ops(
        "{parallelism: {tensor: 2, data: 8, expert: 4, expert_tensor: 2, "
        "sequence_parallel: true}, model: {moe: {capacity_factor: 1.3, pad_to_capacity: true}}}"
    )
    assert _named(ops, GroupKind.EP, "dispatch").buffer_bytes == 8 * C * 4096 * 2
    gather = _named(ops, GroupKind.ETP, "dispatched tokens")
    assert gather.buffer_bytes == 2 * 8 * C * 4096 * 2 and "ETP·E·C" in gather.formula
    assert _named(ops, GroupKind.ETP, "probabilities (").buffer_bytes == 2 * 8 * C * 2


def test_ep_across_nodes_takes_the_network() -> None:
    # Order tp-cp-dp-ep-pp: in the expert grid dp (EDP = 2) is faster than ep, so an EP group
    # spans ranks 0, 2, ..., 14: two nodes.
    ops = _stage_ops("{parallelism: {order: tp-cp-dp-ep-pp}}")
    assert _named(ops, GroupKind.EP, "dispatch").link == "network"
    assert {op.link for op in ops if op.group is GroupKind.EDP} == {"nvlink"}


def test_expert_tensor_parallelism_gathers_the_dispatched_rows() -> None:
    # t = 2 with SP, ETP = 2, EP = 4: EDP = 64/(2·4·4) = 2, d = 64/(2·4) = 8, m = 512/8 = 64.
    ops = _stage_ops(
        "{parallelism: {tensor: 2, data: 8, expert: 4, expert_tensor: 2, "
        "sequence_parallel: true}}"
    )
    # T = b·s/t = 2,048 tokens, T·k = 4,096 rows; ETP gathers 2 × 4,096 rows.
    dispatch = _named(ops, GroupKind.EP, "dispatch")
    assert dispatch.buffer_bytes == 4096 * 4096 * 2 and dispatch.group_size == 4
    assert dispatch.calls == 2 * 8 * 64
    gather = _named(ops, GroupKind.ETP, "dispatched tokens")
    scatter = _named(ops, GroupKind.ETP, "expert outputs")
    assert gather.op is Collective.ALL_GATHER and scatter.op is Collective.REDUCE_SCATTER
    assert gather.buffer_bytes == scatter.buffer_bytes == 2 * 4096 * 4096 * 2
    assert gather.calls == scatter.calls == 2 * 8 * 64
    assert _named(ops, GroupKind.ETP, "probabilities (").calls == 8 * 64
    assert _named(ops, GroupKind.ETP, "probabilities' gradient").calls == 8 * 64
    # Dense TP: attention only (no shared experts): 1 all-gather forward + 1 backward per
    # layer per micro-batch, gathered b·s·h·2, and the QKV input gathered again in backward
    # for its weight gradient; the experts take the ETP-gathered rows, gathered once.
    # Stage 0 also reduce-scatters the word embedding's output and gathers its gradient, once
    # a micro-batch.
    tp = [op for op in ops if op.group is GroupKind.TP]
    assert {(op.op, op.calls, op.buffer_bytes) for op in tp} == {
        (Collective.ALL_GATHER, 2 * 8 * 64, 4096 * 4096 * 2),
        (Collective.REDUCE_SCATTER, 2 * 8 * 64, 4096 * 4096 * 2),
        (Collective.ALL_GATHER, 8 * 64, 4096 * 4096 * 2),
        (Collective.REDUCE_SCATTER, 64, 4096 * 4096 * 2),
        (Collective.ALL_GATHER, 64, 4096 * 4096 * 2),
    }


def test_shared_experts_keep_the_mlp_tensor_parallel_collectives() -> None:
    ops = _stage_ops(
        "{model: {moe: {shared_experts: 1}}, parallelism: {tensor: 2, data: 8, expert: 4, "
        "expert_tensor: 2, sequence_parallel: true}}"
    )
    tp = [op for op in ops if op.group is GroupKind.TP]
    # Attention and the shared expert: 2 blocks per layer, forward and backward, and each
    # block's input gathered again in backward (the shared expert's fc1 is column-parallel);
    # the word embedding's reduce-scatter and gradient gather, once a micro-batch.
    assert sorted(op.calls for op in tp) == [64, 64, 2 * 8 * 64, 2 * 2 * 8 * 64, 2 * 2 * 8 * 64]


def test_dense_layers_of_a_moe_model_keep_their_mlp_collectives() -> None:
    # first_dense_layers: 4 → stage 0 (layers 0-7) has 4 MoE layers, stage 1 has 8.
    overlay = (
        "{model: {moe: {first_dense_layers: 4}}, parallelism: {tensor: 2, data: 8, "
        "expert: 4, expert_tensor: 2, sequence_parallel: true}}"
    )
    first, second = _stage_ops(overlay, 0), _stage_ops(overlay, 1)
    assert _named(first, GroupKind.EP, "dispatch").calls == 2 * 4 * 64
    assert _named(second, GroupKind.EP, "dispatch").calls == 2 * 8 * 64
    # Blocks: 2 per dense layer, 1 per MoE layer: (2·4 + 4) and 8; each block's input is
    # gathered again in backward. Stage 0 also reduces the word embedding once a micro-batch
    # (tests/test_tp_ends.py); stage 1 holds neither end.
    assert {op.calls for op in first if op.group is GroupKind.TP} == {2 * 12 * 64, 12 * 64, 64}
    assert {op.calls for op in second if op.group is GroupKind.TP} == {2 * 8 * 64, 8 * 64}


def test_dense_models_have_no_expert_ops() -> None:
    an = analyse(job_of(None, "llama3-70b-8x8.yaml"))
    assert not [op for op in an.ops if op.group in (GroupKind.EP, GroupKind.ETP, GroupKind.EDP)]
    assert not [op for op in an.ops if op.op is Collective.ALL_TO_ALL]


def test_wire_budget_counts_the_all_to_all_both_ways() -> None:
    an = analyse(job_of(None, MIXTRAL))
    ep = [op for op in an.ops if op.stage == 0 and op.link == "nvlink"]
    sent = sum(op.calls * op.bytes_sent for op in ep)
    # dispatch + combine: 1,024 calls × 58,720,256 B; probabilities: 512 × ⌈7·16,384/8⌉;
    # token counts: 256 × 7/8·512.
    assert sent == 1024 * 58_720_256 + 512 * 14_336 + 256 * 448
    assert an.wires[0].tiers["nvlink"] == Wire(sent, sent)
