"""The tensor-parallel collectives at the model's ends: the word embedding, the LM head, the
vocabulary-parallel loss and the multi-token prediction modules' embedding and eh_proj.

Expected counts and sizes are worked by hand here from the frameworks' code, not from planc's:
- Megatron-Core d98e8a64: VocabParallelEmbedding reduces its output (reduce_scatter_to_
  sequence_parallel_region with SP, reduce_from_tensor_model_parallel_region without); the
  output layer is a ColumnParallelLinear (its input gathered with SP, gathered again for the
  weight gradient, its gradient reduce-scattered; all-reduced without SP); the loss is
  _VocabParallelCrossEntropy (three fp32 all-reduces of the rows), fused_cross_entropy.py (two:
  the max, then target logits and sums together) or Transformer Engine's parallel cross-entropy
  (one all-gather of three fp32 values a row); MultiTokenPredictionLayer embeds, runs eh_proj
  (a column-parallel [2h → h] linear) and gathers its output along the hidden dimension
  (gather_from_tensor_model_parallel_region), scattering it back to the sequence shards.
- torchtitan (DTensor TP): the embedding's RowwiseParallel output Shard(1) and the output's
  ColwiseParallel input Shard(1) (no re-gather: the gathered input is saved); loss_parallel's
  three reductions.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from planc.analysis import analyse
from planc.comm.ends import EndCollective, Ends, Hides, Linear
from planc.compile import compile_job
from planc.compile.plan import plan_json
from planc.perf.ends import GemmTimes, ends_times
from planc.plannable import Plannable
from planc.verify import render, verify_text
from planc.vocab import Collective

from conftest import job_of

S, B, H, T = 8192, 1, 4096, 2  # the example's Llama 3 8B at t = 2: s, b, h, t
HIDDEN = B * S * H * 2  # b·(s/c)·h·β_a, bf16
ROWS = B * S  # the loss's rows


def _job(training: dict[str, Any] | None = None, **parallelism: Any) -> Plannable:
    layout = {"tensor": T, "pipeline": 2, "sequence_parallel": True, **parallelism}
    return job_of({"parallelism": layout, "training": training or {}})


def _tp(job: Plannable, stage: int, phrase: str) -> Counter[tuple[str, int]]:
    """calls per step of the stage's TP ops whose phase names `phrase`, by (collective, bytes)."""
    found: Counter[tuple[str, int]] = Counter()
    for op in analyse(job).ops:
        if op.stage == stage and op.group.value == "tp" and phrase in op.phase:
            found[op.op.value, op.buffer_bytes] += op.calls
    return found


def test_sequence_parallel_megatron_ends() -> None:
    job = _job()
    m = job.m
    assert _tp(job, 0, "word embedding") == Counter(
        {("reduce_scatter", HIDDEN): m, ("all_gather", HIDDEN): m}
    )
    assert _tp(job, 1, "word embedding") == Counter()
    # forward gather, the weight gradient's re-gather, the input gradient's reduce-scatter
    assert _tp(job, 1, "LM head") == Counter({("all_gather", HIDDEN): 2 * m, ("reduce_scatter", HIDDEN): m})
    # Megatron's unfused vocabulary-parallel loss: max, target logits, sums of exponentials
    assert _tp(job, 1, "loss") == Counter({("all_reduce", 4 * ROWS): 3 * m})
    assert _tp(job, 0, "LM head") == Counter()


def test_without_sequence_parallelism_the_ends_all_reduce() -> None:
    job = _job(sequence_parallel=False)
    m = job.m
    assert _tp(job, 0, "word embedding") == Counter({("all_reduce", HIDDEN): m})
    assert _tp(job, 1, "LM head") == Counter({("all_reduce", HIDDEN): m})


@pytest.mark.parametrize(
    ("fusion", "expected"),
    [
        ("native", {("all_reduce", 4 * ROWS): 1, ("all_reduce", 8 * ROWS): 1}),
        ("te", {("all_gather", T * 3 * 4 * ROWS): 1}),
    ],
)
def test_the_fused_losses_reduce_less(fusion: str, expected: dict[tuple[str, int], int]) -> None:
    job = _job({"cross_entropy_fusion": fusion})
    assert _tp(job, 1, "loss") == Counter({key: n * job.m for key, n in expected.items()})


def test_torchtitan_saves_the_gathered_head_input() -> None:
    spec = {
        "model": {"preset": "llama3-8b"},
        "hardware": {"gpu": "h100-sxm", "nodes": 2, "hosts": ["a", "b"]},
        "parallelism": {"tensor": T, "pipeline": 1, "sequence_parallel": True, "zero_stage": 0},
        "training": {"framework": "fsdp2", "global_batch": 64},
    }
    job = job_of(spec)
    m = job.m
    assert _tp(job, 0, "LM head") == Counter({("all_gather", HIDDEN): m, ("reduce_scatter", HIDDEN): m})
    assert _tp(job, 0, "loss") == Counter({("all_reduce", 4 * ROWS): 3 * m})
    assert _tp(job, 0, "word embedding")[("reduce_scatter", HIDDEN)] == m


def test_one_tensor_parallel_rank_reduces_nothing() -> None:
    job = _job(tensor=1, sequence_parallel=False)
    assert not any(op.group.value == "tp" for op in analyse(job).ops)


def _mtp_job(recompute: str = "selective") -> Plannable:
    return job_of(
        {
            "model": {"preset": "llama3-8b", "mtp_layers": 1},
            "hardware": {"gpu": "b200", "nodes": 1, "hosts": ["a"]},
            "parallelism": {"tensor": T, "pipeline": 2, "sequence_parallel": True},
            "training": {
                "precision": "fp8",
                "fp8": {"recipe": "current"},
                "recompute": recompute,
            },
        }
    )


@pytest.mark.parametrize("recompute", ["selective", "full"])
def test_a_multi_token_prediction_module_embeds_projects_and_predicts_again(recompute: str) -> None:
    job = _mtp_job(recompute)
    m = job.m
    again = 2 if recompute == "full" else 1  # full recompute runs the forward gathers again
    # current scaling on Blackwell gathers the 2h input in FP8 (1 byte an element, one
    # per-tensor scale, no block scales), after an fp32 amax all-reduce
    fp8_wide = B * S * 2 * H
    assert _tp(job, 1, "MTP eh_proj input") == Counter(
        {
            ("all_gather", fp8_wide): again * m + m,  # forward (again), the weight gradient's
            ("reduce_scatter", 2 * HIDDEN): m,
            ("all_reduce", 4): again * m,  # the amax before each forward gather
        }
    )
    assert _tp(job, 1, "MTP eh_proj output") == Counter({("all_gather", HIDDEN): (again + 1) * m})
    # the module's embedding, and its head pass beside the model's
    assert _tp(job, 1, "word embedding") == Counter(
        {("reduce_scatter", HIDDEN): m, ("all_gather", HIDDEN): m}
    )
    assert _tp(job, 1, "LM head")[("reduce_scatter", HIDDEN)] == 2 * m


@pytest.mark.parametrize("recompute", ["selective", "full"])
def test_verify_recounts_the_ends_and_catches_a_missing_call(recompute: str) -> None:
    text = plan_json(compile_job(analyse(_mtp_job(recompute))))
    report = verify_text(text)
    assert report.ok, render(report)
    plan = json.loads(text)
    for op in plan["communication"]["ops"]:
        if "LM head's input gradient" in op["phase"]:
            op["calls"] -= 1
            break
    else:
        pytest.fail("no LM head reduce-scatter in the plan")
    broken = verify_text(json.dumps(plan))
    assert not broken.ok
    assert "tp reduce_scatter" in render(broken)


def test_the_loss_kernels_are_in_the_plan_for_verify() -> None:
    plan = json.loads(plan_json(compile_job(analyse(_job({"cross_entropy_fusion": "te"})))))
    assert plan["training"]["cross_entropy_fusion"] == "te"
    assert verify_text(json.dumps(plan)).ok
    plan["training"].pop("cross_entropy_fusion")
    assert not verify_text(json.dumps(plan)).ok


def _one(hides: Hides, backward: bool = True, linear: Linear = Linear.HEAD) -> EndCollective:
    return EndCollective(Collective.ALL_GATHER, "x", 1, backward, "f", hides, linear)


def test_what_hides_behind_the_head_s_gemms() -> None:
    gemms = {Linear.HEAD: GemmTimes(2.0, 3.0), Linear.PROJECTION: GemmTimes(0.5, 0.25)}
    ends = Ends(
        ((_one(Hides.EXPOSED, backward=False), 1),),
        (
            (_one(Hides.WGRAD), 2),  # 4 s beside a 3 s weight gradient: 1 s shows, twice
            (_one(Hides.DGRAD), 1),  # 4 s beside a 2 s data gradient: 2 s show
            (_one(Hides.WGRAD, linear=Linear.PROJECTION), 1),  # beside 0.25 s: 3.75 s show
            (_one(Hides.EXPOSED, backward=False), 3),
        ),
    )
    times = ends_times(ends, lambda one: 4.0, gemms, asynchronous=True)
    assert (times.first_forward_s, times.first_backward_s) == (4.0, 0.0)
    assert times.last_forward_s == 12.0
    assert times.last_backward_s == 2 * 1.0 + 2.0 + 3.75
    assert times.hidden_s == 2 * 3.0 + 2.0 + 0.25
    # a synchronous reduction hides nothing
    sync = ends_times(ends, lambda one: 4.0, gemms, asynchronous=False)
    assert sync.last_backward_s == 2 * 4.0 + 2.0 + 4.0
    assert sync.hidden_s == 2.0


def test_the_last_stage_pays_its_exposed_ends() -> None:
    from planc.perf.inputs import ends_tp_times, tp_link
    from planc.presets.efficiency import for_gpu

    job = _job()
    ops = analyse(job).ops
    eff = for_gpu(job.cluster.gpu.name)
    first = ends_tp_times(job, eff, 0, tp_link(ops, 0))
    last = ends_tp_times(job, eff, 1, tp_link(ops, 1))
    assert first.first_forward_s > 0 and first.first_backward_s > 0
    assert (first.last_forward_s, first.last_backward_s) == (0.0, 0.0)
    assert last.last_forward_s > 0 and (last.first_forward_s, last.first_backward_s) == (0.0, 0.0)
