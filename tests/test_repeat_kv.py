"""K and V repeated to every query head before the attention kernel (`training.repeat_kv`).

torchtitan's Llama before v0.2.2 runs `keys = repeat_kv(xk, n_rep)` and `values = repeat_kv(xv,
n_rep)` ahead of F.scaled_dot_product_attention (torchtitan/models/llama/model.py, 9dec370), and
torch's ring attention wraps that SDPA call: the K/V it exchanges, and the fp32 dK/dV it passes
back, carry n heads, not g. SDPA saves the repeated K and V; the copy is a kernel and its
gradient a sum. The expected values below are Llama 3 8B's (32 query heads, 8 key/value heads
of 128 channels, 32 layers) worked by hand from those shapes.
"""

from __future__ import annotations

import json

import pytest

from planc.analysis import analyse, estimate_step
from planc.compile.frameworks import torchtitan_settings
from planc.compile.plan import plan_json
from planc.memory.activations import key, shape_of, value
from planc.perf.inputs import layer_shape
from planc.perf.ops import kv_repeat, layer_ops
from planc.plannable import Plannable
from planc.verify import render, verify_text

from conftest import check_overlay, compiled, job_of, rules_fired

N, G, K = 32, 8, 128  # Llama 3 8B: query heads, key/value heads, channels per head
S, C = 131072, 4
TOKENS = S // C  # a rank's share of the sequence


def torchtitan(repeat: bool, kind: str = "allgather", kernels: str = "compiled") -> Plannable:
    return job_of(
        {
            "parallelism": {"tensor": 1, "context": C, "cp_comm_type": kind},
            "training": {
                "seq_len": S,
                "global_batch": 2,
                "recompute": "full",
                "framework": "fsdp2",
                "kernels": kernels,
                "repeat_kv": repeat,
            },
        }
    )


def cp_ops(plan: Plannable) -> list[tuple[str, int, int]]:
    return [
        (str(op.op), op.calls, op.buffer_bytes)
        for op in analyse(plan).ops
        if op.group == "cp" and op.stage == 0
    ]


@pytest.mark.parametrize(("repeat", "heads"), [(False, G), (True, N)])
def test_torch_ring_passes_the_heads_the_kernel_reads(repeat: bool, heads: int) -> None:
    block = TOKENS * heads * (K + K) * 2  # one rank's K and V in bf16
    steps = 32 * torchtitan(repeat).m
    assert cp_ops(torchtitan(repeat)) == [
        ("all_gather", 3 * steps, C * block),  # forward, again under full recompute, backward
        ("send_recv", C * steps, 2 * block),  # fp32 dK/dV, c permutes a layer
    ]
    assert cp_ops(torchtitan(repeat, "p2p")) == [
        ("send_recv", 3 * (C - 1) * steps, block),
        ("send_recv", C * steps, 2 * block),
    ]


def test_repeated_heads_quadruple_the_context_bytes_of_llama3_8b() -> None:
    # n/g = 4: every CP op moves four times the bytes, and the bytes alone.
    grouped, repeated = cp_ops(torchtitan(False)), cp_ops(torchtitan(True))
    assert [(kind, calls) for kind, calls, _ in grouped] == [(k, c) for k, c, _ in repeated]
    assert [r // g for (_, _, g), (_, _, r) in zip(grouped, repeated, strict=True)] == [4, 4]


def test_the_attention_saves_k_and_v_at_every_query_head() -> None:
    # ε·(s/c)·b·heads·k each; SDPA's saved K and V are the repeated ones.
    for repeat, heads in ((False, G), (True, N)):
        x = shape_of(torchtitan(repeat))
        assert key(x) == value(x) == 2 * TOKENS * heads * K


@pytest.mark.parametrize(
    ("kernels", "forward", "backward_flops"),
    [
        # a copy kernel: read g heads, write n; its gradient's sum reads n and writes g
        ("unfused", TOKENS * (G + N) * 2 * K * 2, TOKENS * (N - G) * 2 * K),
        # fused into the kernel that made K and V: n − g heads more written, and read back
        ("compiled", TOKENS * (N - G) * 2 * K * 2, 0),
    ],
)
def test_the_repeat_is_priced_as_its_kernels_move_it(
    kernels: str, forward: int, backward_flops: int
) -> None:
    (op,) = kv_repeat(layer_shape(torchtitan(True, kernels=kernels)))
    assert op.forward.bytes == forward
    assert op.backward.bytes == forward
    assert op.backward.flops == backward_flops
    assert op in layer_ops(layer_shape(torchtitan(True, kernels=kernels)))
    assert kv_repeat(layer_shape(torchtitan(False, kernels=kernels))) == ()


@pytest.mark.parametrize(("attention", "copies"), [("eager", 1), ("flash", 0)])
def test_megatron_s_eager_attention_pays_its_repeat_interleave(attention: str, copies: int) -> None:
    # Megatron's local DotProductAttention runs key.repeat_interleave(n/g) and the same for V
    # before its QKᵀ and attention over V, which read n heads (as the saved K and V count them),
    # with or without the field; TE's fused kernel reads the g heads.
    plan = job_of({"parallelism": {"tensor": 1}, "training": {"attention": attention}})
    shape = layer_shape(plan)
    repeats = kv_repeat(shape)
    assert len(repeats) == copies
    if copies:
        tokens = shape.b * shape.s
        assert repeats[0].forward.bytes == tokens * (G + N) * 2 * K * 2
        assert repeats[0] in layer_ops(shape)


def test_no_repeat_where_every_head_has_its_own_keys() -> None:
    plan = job_of(
        {
            "model": {"kv_heads": 32},
            "training": {"framework": "fsdp2", "kernels": "unfused", "repeat_kv": True},
        }
    )
    assert kv_repeat(layer_shape(plan)) == ()


def test_the_step_pays_for_the_repeated_exchange() -> None:
    grouped, repeated = (estimate_step(analyse(torchtitan(r))) for r in (False, True))
    assert repeated.step_time_s > grouped.step_time_s
    assert repeated.cp_comm_s >= grouped.cp_comm_s


def test_verify_recounts_the_repeated_exchange() -> None:
    text = plan_json(compiled(torchtitan(True)))
    data = json.loads(text)
    assert data["training"]["repeat_kv"] is True
    assert verify_text(text).ok
    # a plan that drops the field no longer adds up: its CP ops carry n heads, the recount g
    del data["training"]["repeat_kv"]
    failed = verify_text(json.dumps(data))
    assert not failed.ok
    assert "cp all_gather" in render(failed)


def test_plans_without_the_repeat_keep_their_bytes() -> None:
    assert "repeat_kv" not in json.loads(plan_json(compiled(torchtitan(False))))["training"]


@pytest.mark.parametrize(
    ("training", "refused"),
    [
        ({"repeat_kv": True}, True),  # Megatron's TE attention reads the grouped heads
        ({"repeat_kv": True, "attention": "eager"}, False),  # its local attention repeats them
        ({"repeat_kv": True, "framework": "fsdp2", "kernels": "compiled"}, False),
        ({"repeat_kv": False}, False),
    ],
)
def test_megatron_flash_attention_does_not_repeat(training: dict[str, object], refused: bool) -> None:
    result = check_overlay({"training": training})
    assert ("PLC048" in rules_fired(result)) is refused
    if refused:
        (finding,) = [f for f in result.findings if f.rule == "PLC048"]
        assert "grouped key/value heads" in finding.message


def test_the_torchtitan_files_say_their_version_reads_grouped_heads() -> None:
    # The files target torchtitan 0.3.0, whose SDPA takes the grouped heads: a plan priced with
    # the old repeat says it will overstate that version's memory and exchange.
    def notes(repeat: bool) -> str:
        return " ".join(torchtitan_settings(compiled(torchtitan(repeat)))[2])

    assert "repeat_kv" in notes(True) and "smaller than planned" in notes(True)
    assert "repeat_kv" not in notes(False)
