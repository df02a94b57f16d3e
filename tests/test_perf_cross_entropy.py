"""training.cross_entropy_fusion: the LM loss's kernels under Megatron-LM, priced from what each
reads and writes, kept in memory as each keeps it, emitted as Megatron's flags and checked
against Megatron-LM's own parser and validate_args (megatron-core 0.19.2) where installed.

The expected numbers are derived here from the kernels' code: Megatron's eager
`_VocabParallelCrossEntropy` (tensor_parallel/cross_entropy.py), Megatron-Core's compiled
`fused_vocab_parallel_cross_entropy` (fusions/fused_cross_entropy.py) and Transformer Engine's
Triton `parallel_cross_entropy` (TE v2.2, pytorch/triton/cross_entropy.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from test_frameworks import MEGATRON_PARSER, MEGATRON_TP_ENV, _run, megatron_python

from planc.analysis import analyse, estimate_step
from planc.compile.frameworks import megatron_arguments
from planc.memory.activations import stage_activation_terms
from planc.perf.inputs import comm_time_s, efficiency_of, layer_shape, tp_link
from planc.perf.ops import cross_entropy
from planc.presets.efficiency import for_gpu

from conftest import check_overlay, compiled, job_of

# Llama 3 8B on one 8-GPU H100 node (examples/llama3-8b-1node.yaml: t 2, sequence 8192,
# micro-batch 1, GBS 64, d 4, so m = 16 micro-batches a step), its loss set by the overlay.
FUSIONS = ("none", "native", "te")
BETA = 2  # bf16
TOKENS = 8192  # b·s/c on one rank
V_RANK = 128_256 // 2  # V'/t: 128,256 is already a multiple of 128·t
LOGITS = TOKENS * V_RANK

# Bytes per logit element, (forward, backward), read off each implementation:
BYTES = {
    # .float() β+4, max 4, subtract in place 4+4, exp in place 4+4, sum 4, divide in place
    # 4+4; backward mul_ 4+4 and autograd's cast to bf16 4+β.
    "none": (BETA + 36, BETA + 12),
    # cast with the max β+4, subtract-exp-sum 4+4, divide 4+4; backward reads the softmax,
    # writes its in-place result back (4+4) and the bf16 gradient β.
    "native": (BETA + 20, BETA + 8),
    # online softmax reads β; the second kernel reads β and writes the gradient in place β;
    # backward element_mul reads and writes β.
    "te": (3 * BETA, 2 * BETA),
}


def _loss(fusion: str) -> dict[str, Any]:
    return {"training": {"cross_entropy_fusion": fusion}}


@pytest.mark.parametrize("fusion", FUSIONS)
def test_each_loss_moves_the_bytes_its_kernels_move(fusion: str) -> None:
    op = cross_entropy(layer_shape(job_of(_loss(fusion))))
    forward, backward = BYTES[fusion]
    assert op.forward.bytes == LOGITS * forward
    assert op.backward.bytes == LOGITS * backward
    assert op.backward_weight.bytes == 0


def _hbm_s(moved: float) -> float:
    """Seconds of one memory-bound kernel pass of `moved` bytes on an H100 SXM: 3,350 GB/s at
    efficiency.json's e_hbm·B/(B + B½)."""
    hbm = for_gpu("h100-sxm").hbm
    return moved / (3350e9 * hbm.efficiency * moved / (moved + hbm.half_bytes))


# Each loss's reductions over the t = 2 ranks' vocabulary slices, fp32 over the rows
# (tests/test_tp_ends.py): the eager loss all-reduces the max, the target logits and the sums of
# exponentials; the fused one the max, then the other two together; TE's all-gathers each
# rank's three values a row.
REDUCTIONS = {
    "none": (("all_reduce", 4 * TOKENS),) * 3,
    "native": (("all_reduce", 4 * TOKENS), ("all_reduce", 8 * TOKENS)),
    "te": (("all_gather", 2 * 3 * 4 * TOKENS),),
}


def test_a_fused_loss_shortens_the_step_by_its_saved_memory_time() -> None:
    # One stage (p = 1), so every micro-batch's loss is on the step's path: m = 64/4 = 16 of
    # them, each a forward and a backward pass over the logits at HBM speed, and its
    # reductions over the TP group.
    jobs = {f: job_of(_loss(f)) for f in FUSIONS}
    steps = {f: estimate_step(analyse(job)).step_time_s for f, job in jobs.items()}
    link = tp_link(analyse(jobs["none"]).ops, 0)
    assert link is not None
    eff = efficiency_of(jobs["none"])

    def reduced_s(fusion: str) -> float:
        return sum(comm_time_s(jobs[fusion], eff, op, 2, size, link) for op, size in REDUCTIONS[fusion])

    per_micro_batch = {
        f: _hbm_s(LOGITS * BYTES[f][0]) + _hbm_s(LOGITS * BYTES[f][1]) + reduced_s(f)
        for f in FUSIONS
    }
    for fused in ("native", "te"):
        saved = 16 * (per_micro_batch["none"] - per_micro_batch[fused])
        assert steps["none"] - steps[fused] == pytest.approx(saved, rel=1e-6)
    assert steps["te"] < steps["native"] < steps["none"]


def _last_stage_loss_terms(fusion: str) -> tuple[dict[str, int], list[str]]:
    job = job_of(_loss(fusion))
    acts, buffers = stage_activation_terms(job, job.layout.p - 1)
    loss = {t.name: t.bytes for t in acts if "cross-entropy" in t.name}
    return loss, [t.name for t in buffers if "logits" in t.name]


def test_transformer_engines_loss_keeps_only_the_16_bit_logits() -> None:
    # Megatron's eager and fused losses save the fp32 softmax (4 bytes a logit) and the target
    # index and mask (9 bytes a token), and the bf16 logits live until their fp32 copy exists.
    for fusion in ("none", "native"):
        loss, transient = _last_stage_loss_terms(fusion)
        assert loss == {
            "cross-entropy softmax (fp32)": 4 * LOGITS,
            "cross-entropy targets (int64 + bool)": 9 * TOKENS,
        }
        assert transient == ["LM head logits (bf16, transient)"]
    # TE saves the logits tensor it overwrote with the gradient, β bytes a logit, and nothing
    # else: no fp32 copy, no transient.
    loss, transient = _last_stage_loss_terms("te")
    assert loss == {"cross-entropy logits and their gradient (16-bit, in place)": BETA * LOGITS}
    assert transient == []


def test_megatron_arguments_name_the_loss() -> None:
    def loss_flags(fusion: str) -> list[str]:
        args, _ = megatron_arguments(compiled(job_of(_loss(fusion))))
        return [a for a in args if "cross-entropy" in a]

    assert loss_flags("none") == []
    assert loss_flags("native") == ["--cross-entropy-loss-fusion"]
    assert loss_flags("te") == ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl te"]


def _fired(overlay: dict[str, Any]) -> set[str]:
    return {f.rule for f in check_overlay(overlay).findings}


def test_megatron_refuses_te_and_other_frameworks_run_their_own_loss() -> None:
    assert "PLC048" in _fired(_loss("te"))
    assert not {"PLC048", "PLC051"} & _fired(_loss("native"))
    # Under DeepSpeed, torchtitan or unfused kernels the loss runs eager: a warning, and the
    # price is the eager loss's.
    for other in (
        {"training": {"framework": "deepspeed", "cross_entropy_fusion": "native"}},
        {"training": {"framework": "fsdp2", "cross_entropy_fusion": "te"}},
        {"training": {"kernels": "unfused", "cross_entropy_fusion": "native"}},
    ):
        assert "PLC051" in _fired(other), other
    eager = job_of({"training": {"kernels": "unfused", "cross_entropy_fusion": "te"}})
    assert cross_entropy(layer_shape(eager)).forward.bytes == LOGITS * BYTES["none"][0]


MEGATRON_LOSS = MEGATRON_PARSER + MEGATRON_TP_ENV + r"""
out = {}
for case, (lines, world, vocab) in json.load(sys.stdin).items():
    words = [word for line in lines for word in line.split()]
    args = parser.parse_args(words + extra + ["--vocab-size", str(vocab)])
    args.world_size, args.rank = world, 0
    parsed = [args.cross_entropy_loss_fusion, args.cross_entropy_fusion_impl]
    try:
        arguments.validate_args(args)
        out[case] = parsed + [None]
    except AssertionError as refused:
        out[case] = parsed + [str(refused)]
print(json.dumps(out))
"""


def test_megatron_reads_the_loss_flags_and_refuses_te_as_plc048_says() -> None:
    python = megatron_python()
    payload = {}
    for fusion in FUSIONS:
        plan = compiled(job_of(_loss(fusion)))
        payload[fusion] = [megatron_arguments(plan)[0], plan.world, plan.job.model.V]
    parsed = _run(python, MEGATRON_LOSS, payload)
    assert parsed["none"][:2] == [False, "native"]
    assert parsed["native"][:2] == [True, "native"]
    assert parsed["te"][:2] == [True, "te"]
    for fusion in FUSIONS:
        refused = parsed[fusion][2]
        assert ("PLC048" in _fired(_loss(fusion))) == (refused is not None), (fusion, refused)
    assert "stability" in parsed["te"][2]
