"""planc search's shortcuts change no result: the judge's reused sub-results and its single pass
over the rules give what `planc check` and a fresh analysis give, for every candidate."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from planc.analysis import analyse
from planc.check import evaluate
from planc.plannable import plannable
from planc.rules import REGISTRY
from planc.rules.base import Needs
from planc.search import run
from planc.search.evaluate import (
    candidate_job,
    judge,
    make_judge,
    shared_analysis,
    shared_candidate,
    step_lower_bound,
)

from conftest import search_setup

# Llama 3 8B on 16 H100 at a global batch of 4,096 sequences: m = 4,096 / (b·d) runs to the
# hundreds, and pipelines of 1 to 16 stages, interleaved or not, evenly split or not
# (virtual_stages 3 on 32 layers), every ZeRO stage and recompute mode.
LARGE_BATCH = """\
version: 1
name: large-batch-small
model: {preset: llama3-8b}
hardware: {gpu: h100-sxm, nodes: 2}
training: {seq_len: 4096, global_batch: 4096}
search: {context: [1], virtual_stages: [1, 2, 3], micro_batch: [1, 4]}
"""


# Llama 3 8B under FSDP2 on 16 H100: every ZeRO stage, HSDP shard group and offload, and the
# rank orders, over two tensor degrees and two recompute modes; reducing in bf16 with torch's
# foreach Adam (the reduce-scatter's bytes and input buffer read the reduce dtype).
SHARDED = """\
version: 1
name: sharded-small
model: {preset: llama3-8b}
hardware: {gpu: h100-sxm, nodes: 2}
training: {seq_len: 4096, global_batch: 512, framework: fsdp2, reduce_dtype: bf16, optimizer_implementation: foreach}
search: {tensor: [1, 2], pipeline: [1, 2], context: [1, 2], micro_batch: [1], recompute: [none, full]}
"""


# Spaces whose candidates the preconditions refuse for the micro-batch (the batch split), the
# degrees and the expert grid's rank order.
REFUSED_SPACES = {
    "refused-dense": """\
version: 1
name: refused-dense
model: {preset: llama3-8b, layers: 8}
hardware: {gpu: h100-sxm, nodes: 2}
training: {seq_len: 4096, global_batch: 96}
search: {tensor: [1, 2], pipeline: [1, 2, 4], virtual_stages: [1, 2], context: [1, 2], micro_batch: [1, 2, 4], recompute: [none], zero_stage: [1]}
""",
    "refused-moe": """\
version: 1
name: refused-moe
model: {preset: qwen3-30b-a3b, layers: 4}
hardware: {gpu: h100-sxm, nodes: 4}
training: {seq_len: 4096, global_batch: 256}
search: {tensor: [1, 2], pipeline: [1, 2], context: [1], expert: [2, 4], micro_batch: [1], recompute: [full], zero_stage: [1]}
""",
}


_setup = search_setup


@pytest.mark.parametrize("text", [LARGE_BATCH, REFUSED_SPACES["refused-dense"]])
def test_every_verdict_is_what_check_finds(text: str) -> None:
    # The refused space: the judge shares refusals between candidates (the batch split).
    setup = _setup(text)
    judged = make_judge(setup)
    feasible = 0
    for index in range(setup.space.size):
        verdict = judge(judged, index)
        job = candidate_job(judged.base, judged.space, judged.space.candidate(index))
        found = evaluate(job, suggest=False)  # check's own path: every rule on one context
        # Errors, and by default a framework rule's warnings (FRAMEWORK_RULES), reject.
        errors = sorted(
            {rule for rule, sev, _ in found.violations if (rule, sev) in judged.rejectors}
        )
        # A rule that reads no analysis rejects first: then the analysis is not built and the
        # verdict names those rules only.
        early = [rule for rule in errors if REGISTRY[rule].needs is not Needs.ANALYSIS]
        if errors:
            assert sorted(verdict.rejected) == (early or errors), index
            continue
        if found.context.plan is None:  # a refusal the spec does not level as an error
            assert verdict.rejected, index
            continue
        feasible += 1
        assert verdict.rejected == ()
        assert verdict.warnings == tuple(sorted({rule for rule, _, _ in found.violations}))
    assert 0 < feasible < setup.space.size


def test_judging_with_the_rejecting_rules_only_leaves_out_warnings_alone() -> None:
    # The search judges every candidate with only the rules that can reject it and judges
    # the ones it lists again with every rule: the verdicts are the same but for warnings.
    setup = _setup(LARGE_BATCH)
    judged = make_judge(setup)
    warned = 0
    for index in range(setup.space.size):
        verdict = judge(judged, index)
        assert judge(judged, index, every=False) == dataclasses.replace(verdict, warnings=())
        warned += bool(verdict.warnings)
    assert warned > 0


def test_no_precondition_rule_fires_on_a_job_without_refusals() -> None:
    # The judge runs no precondition rule on a candidate `refusals` passes (`planned_rules`):
    # each reports what its precondition finds, and `refusals` ran them all on the same job.
    from planc.check import context_of
    from planc.rules.base import RuleKind

    preconditions = [r for r in REGISTRY.values() if r.kind is RuleKind.PRECONDITION and r.check]
    assert len(preconditions) >= 10
    planned = refused = 0
    for text in SHARED_SPACES.values():
        judged = make_judge(_setup(text))
        for index in range(0, judged.space.size, 5):
            job = candidate_job(judged.base, judged.space, judged.space.candidate(index))
            ctx = context_of(job, (), suggest=False)
            fired = {r.id for r in preconditions if next(iter(r.check(ctx)), None) is not None}
            assert fired == {r.rule for r in ctx.refusals}, index
            planned += not ctx.refusals
            refused += bool(ctx.refusals)
    assert planned > 100 and refused > 100


# A mixture of experts in bf16 and fp8 (the FP8 terms read the micro-batch), every ZeRO stage
# and shard group: tensor, expert and expert-tensor degrees, sequence parallelism.
MOE_FP8 = """\
version: 1
name: shared-moe-fp8
model: {preset: mixtral-8x7b, layers: 4}
hardware: {gpu: h100-sxm, nodes: 2}
training: {seq_len: 4096, global_batch: 256}
search: {tensor: [1, 2], pipeline: [1], context: [1], expert: [1, 2], micro_batch: [1, 2], recompute: [none, full], precision: [bf16, fp8]}
"""

# Pipelines of 2 and 4 stages, interleaved or not, context parallelism of every type and the
# rank orders that place it; tied embeddings (their gradient all-reduced between the ends);
# Transformer Engine's loss (the last stage keeps its logits alone) and no gradient
# accumulation fusion (every stage's accumulation priced).
PIPELINES = """\
version: 1
name: shared-pipelines
model: {preset: llama3-8b, layers: 8, tied_embeddings: true}
hardware: {gpu: h100-sxm, nodes: 2}
training: {seq_len: 4096, global_batch: 256, cross_entropy_fusion: te, grad_accum_fusion: false}
search: {tensor: [2], pipeline: [2, 4], virtual_stages: [1, 2], context: [1, 2], zero_stage: [1], micro_batch: [1, 2], recompute: [selective, full]}
"""

# DeepSpeed: every offload with every ZeRO stage.
OFFLOADED = """\
version: 1
name: shared-offload
model: {preset: llama3-8b, layers: 8}
hardware: {gpu: h100-sxm, nodes: 2}
training: {seq_len: 4096, global_batch: 256, framework: deepspeed}
search: {tensor: [1, 2], pipeline: [1], context: [1], micro_batch: [1, 2], recompute: [none, full]}
"""

# Expert parallelism of 8 to 32 over a model of 128 experts on four nodes of 8: a dispatcher's
# all-to-all inside the NVLink domain and across it (the cross-domain part's rounds), by the
# alltoall dispatcher and by DeepEP's kernels (their measured throughput).
MOE_NETWORK = """\
version: 1
name: shared-moe-network
model: {preset: qwen3-30b-a3b, layers: 4}
hardware: {gpu: h100-sxm, nodes: 4}
parallelism: {expert_dispatcher: DISPATCHER}
training: {seq_len: 4096, global_batch: 256}
search: {tensor: [1, 2], pipeline: [1], context: [1], expert: [8, 16, 32], expert_tensor: [1], zero_stage: [1, 2, 3], data_shard: [all], micro_batch: [1, 2], recompute: [selective, full]}
"""

# A pipeline on GB200 NVL72 in two NVLink domains of 64: under tp-cp-dp-pp a stage is 8·t
# consecutive ranks and half the boundaries leave the domain, under tp-cp-pp-dp none does. The
# stage classes, and what is kept per class, differ between the orders (`planc.sends`).
PIPELINES_NVL72 = """\
version: 1
name: shared-pipelines-nvl72
model: {preset: llama3-8b, layers: 8}
hardware: {gpu: gb200-nvl72, nodes: 32, gpus_per_node: 4, nvlink_domain: 64}
training: {seq_len: 4096, global_batch: 256}
search: {tensor: [4, 8], pipeline: [4], virtual_stages: [1, 2], context: [1], zero_stage: [1], micro_batch: [1, 2], recompute: [none, selective, full]}
"""

SHARED_SPACES = {
    "pipelines-nvl72": PIPELINES_NVL72,
    "moe-alltoall": MOE_NETWORK.replace("DISPATCHER", "alltoall"),
    "moe-deepep": MOE_NETWORK.replace("DISPATCHER", "deepep"),
    "large-batch": LARGE_BATCH,
    "sharded": SHARDED,
    "moe-fp8": MOE_FP8,
    "pipelines": PIPELINES,
    "offload": OFFLOADED,
}


def _candidates_equal_fresh(text: str) -> int:
    setup = _setup(text)
    judged = make_judge(setup)
    for index in range(setup.space.size):
        values = judged.space.candidate(index)
        assert shared_candidate(judged, values) == candidate_job(judged.base, judged.space, values)
    return setup.space.size


@pytest.mark.parametrize("name", sorted(SHARED_SPACES))
def test_shared_candidates_equal_fresh_ones(name: str) -> None:
    # The judge shares a candidate's layout between candidates that differ only in the
    # training axes and its training section between those that differ only in the others.
    assert _candidates_equal_fresh(SHARED_SPACES[name]) > 50


@pytest.mark.parametrize(("names", "axis"), [("TRAINING_AXES", "pipeline"), ("LAYOUT_AXES", "micro_batch")])
def test_a_candidate_key_that_misses_an_axis_is_caught(
    names: str, axis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import planc.search.evaluate as evaluate

    monkeypatch.setattr(evaluate, names, getattr(evaluate, names) | {axis})
    with pytest.raises(AssertionError):
        _candidates_equal_fresh(SHARED_SPACES["large-batch"])


def _refusals_equal_fresh(text: str) -> int:
    """Every candidate's refusals as the judge shares them, each compared with `refusals` of
    the candidate: the number of candidates refused."""
    from planc.plannable import refusals
    from planc.search.evaluate import _refusals_of

    judged = make_judge(_setup(text))
    refused = 0
    for index in range(judged.space.size):
        values = judged.space.candidate(index)
        job = candidate_job(judged.base, judged.space, values)
        found = _refusals_of(judged, values)(job)
        assert found == refusals(job), index
        refused += bool(found)
    return refused


@pytest.mark.parametrize("name", sorted({**SHARED_SPACES, **REFUSED_SPACES}))
def test_shared_refusals_equal_fresh_ones(name: str) -> None:
    # The preconditions' refusals are shared by the axes they read (UNREAD_BY_REFUSALS).
    _refusals_equal_fresh({**SHARED_SPACES, **REFUSED_SPACES}[name])


def test_the_refused_spaces_refuse() -> None:
    assert all(_refusals_equal_fresh(text) > 0 for text in REFUSED_SPACES.values())


def _plans_equal_fresh(text: str) -> int:
    """Every candidate's plannable job as the judge builds it (its number formats and dims
    shared, `_derived_of`), each compared with `plannable` of the candidate: the number
    compared."""
    from planc.check import context_of
    from planc.search.evaluate import _derived_of

    judged = make_judge(_setup(text))
    compared = 0
    for index in range(judged.space.size):
        values = judged.space.candidate(index)
        job = candidate_job(judged.base, judged.space, values)
        plan = context_of(job, (), suggest=False, derived_of=_derived_of(judged, values)).plan
        fresh = plannable(job)
        assert plan == (None if isinstance(fresh, tuple) else fresh), index
        compared += plan is not None
    return compared


@pytest.mark.parametrize("name", sorted(SHARED_SPACES))
def test_shared_plans_equal_fresh_ones(name: str) -> None:
    # The number formats and a rank's dims are shared by the axes they read (UNREAD_BY_DERIVED).
    assert _plans_equal_fresh(SHARED_SPACES[name]) > 50


def _varied(text: str) -> set[str]:
    return {axis.name for axis in _setup(text).space.axes if len(axis.values) > 1}


def test_the_shared_spaces_vary_every_axis() -> None:
    # Each sub-result the judge shares is keyed by the axes it reads; a key that missed one
    # would hand a candidate the result of another that differs in it. Between them, the
    # spaces below vary every axis search has, so that the comparison with a fresh analysis
    # sees every such difference.
    from planc.search.space import AXES

    varied = set().union(*(_varied(text) for text in SHARED_SPACES.values()))
    assert varied == {axis.name for axis in AXES}


def _shared_equals_fresh(text: str, backwards: bool = False) -> tuple[int, set[str]]:
    """Every candidate of one judge's space analysed with the judge's shared sub-results, each
    compared with a fresh analysis: the number compared and the kinds of sub-result shared.
    `backwards`: the candidates in reverse order (the last rank order first)."""
    setup = _setup(text)
    judged = make_judge(setup)
    compared = 0
    indices = range(setup.space.size)
    for index in reversed(indices) if backwards else indices:
        job = candidate_job(judged.base, judged.space, judged.space.candidate(index))
        plan = plannable(job)
        if isinstance(plan, tuple):
            continue
        # Fresh on a plannable job of its own: the shared analysis leaves what it computed
        # on its job instance (the stage classes), which a fresh one would otherwise take.
        again = plannable(job)
        assert not isinstance(again, tuple)
        shared, fresh = shared_analysis(judged, index, plan), analyse(again)
        assert shared == fresh, index
        # PLC073's bound: each class's bytes summed by kind of op as the ops are shared.
        assert shared.wire_bytes_bound == fresh.wire_bytes_bound, index
        compared += 1
    return compared, {key[0] for key in judged.memo}


@pytest.mark.parametrize("name", sorted(SHARED_SPACES))
def test_reused_sub_results_equal_a_fresh_analysis(name: str) -> None:
    # One judge over the whole space, so that each candidate reuses what the candidates before
    # it left in its memo when they differ only in axes a sub-result does not read (its
    # activations with their lines and in-flight counts, times, parameters, static memory
    # terms (each stage's, and each class's with the FP8 terms), the budget's peak, tables, each kind of op, each call's seconds, the stage classes;
    # "mask" is the keys' own bookkeeping); each analysis equals one computed afresh.
    compared, kinds = _shared_equals_fresh(SHARED_SPACES[name])
    assert compared > 50
    assert kinds == {
        "activations", "unexchanged", "lines", "layer", "held", "times", "parameters", "engine", "tables",
        "call", "classes", "ops", "budget", "statics", "mask",
    }


@pytest.mark.parametrize(
    ("unread", "axis", "name"),
    [
        ("UNREAD_BY_SHARED", "micro_batch", "large-batch"),
        ("UNREAD_BY_TIMES", "recompute", "large-batch"),
        ("UNREAD_BY_TP_OPS", "recompute", "large-batch"),
        ("UNREAD_BY_PP_OPS", "micro_batch", "pipelines"),
        ("UNREAD_BY_CP_OPS", "cp_comm_type", "pipelines"),
        ("UNREAD_BY_DP_OPS", "zero_stage", "large-batch"),
        ("UNREAD_BY_EMBEDDING_OPS", "order", "pipelines"),
        ("UNREAD_BY_PARAMETERS", "pipeline", "pipelines"),
        ("UNREAD_BY_ENGINE", "zero_stage", "offload"),
        ("UNREAD_BY_ENGINE", "offload", "offload"),
        ("UNREAD_BY_STATICS", "micro_batch", "moe-fp8"),
        ("UNREAD_BY_STATICS", "zero_stage", "offload"),
        ("UNREAD_BY_BUDGET", "data_shard", "sharded"),
        ("UNREAD_BY_BUDGET", "recompute", "large-batch"),
        ("UNREAD_BY_PARAMETERS", "expert", "moe-fp8"),
        # The refusals and the plannable job's formats and dims (`_refusals_equal_fresh`,
        # `_plans_equal_fresh`).
        ("UNREAD_BY_REFUSALS", "pipeline", "large-batch"),
        ("UNREAD_BY_REFUSALS", "context", "sharded"),
        ("UNREAD_BY_REFUSALS", "data_shard", "sharded"),
        ("UNREAD_BY_REFUSALS", "micro_batch", "refused-dense"),
        ("UNREAD_BY_REFUSALS", "tensor", "refused-moe"),
        ("UNREAD_BY_REFUSALS", "expert", "refused-moe"),
        ("UNREAD_BY_REFUSALS", "order", "refused-moe"),
        ("UNREAD_BY_DERIVED", "micro_batch", "large-batch"),
        ("UNREAD_BY_DERIVED", "sequence_parallel", "large-batch"),
        ("UNREAD_BY_DERIVED", "context", "sharded"),
        ("UNREAD_BY_DERIVED", "precision", "moe-fp8"),
        ("UNREAD_BY_DERIVED", "expert", "moe-fp8"),
    ],
)
def test_a_key_that_misses_an_axis_is_caught(
    unread: str, axis: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The comparison above can fail: a sub-result keyed without an axis it reads hands some
    # candidate another's result, and its analysis then differs from a fresh one.
    import planc.search.evaluate as evaluate

    names = getattr(evaluate, unread)
    # An unread axis added, or a read one taken away.
    monkeypatch.setattr(evaluate, unread, names - {axis} if axis in names else names | {axis})
    compared = {"UNREAD_BY_REFUSALS": _refusals_equal_fresh, "UNREAD_BY_DERIVED": _plans_equal_fresh}
    with pytest.raises(AssertionError):
        compared.get(unread, _shared_equals_fresh)({**SHARED_SPACES, **REFUSED_SPACES}[name])


def test_sub_results_kept_per_class_without_the_send_tiers_are_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The sub-results kept per stage class read the rank order through the tiers the pipeline
    # sends cross: keyed without them, a candidate under another order takes classes that do
    # not fit its stages.
    import planc.search.evaluate as evaluate

    # Backwards, tp-cp-pp-dp (every boundary on NVLink: the interior stages one class) comes
    # before tp-cp-dp-pp (half of them on the network: every stage its own class).
    assert _shared_equals_fresh(PIPELINES_NVL72, backwards=True)[0] > 50
    monkeypatch.setattr(evaluate, "boundary_names", lambda plan: ())
    with pytest.raises(AssertionError):
        _shared_equals_fresh(PIPELINES_NVL72, backwards=True)


def _bounds_equal_fresh(text: str) -> int:
    """Every feasible candidate of one judge's space judged with the bounds the judge shares,
    each compared with the lower bound of its step from a fresh analysis: the number compared."""
    setup = _setup(text)
    judged = make_judge(setup)
    compared = 0
    for index in range(setup.space.size):
        verdict = judge(judged, index, every=False)
        if not verdict.feasible:
            continue
        plan = plannable(candidate_job(judged.base, judged.space, judged.space.candidate(index)))
        assert not isinstance(plan, tuple)
        assert verdict.step_bound_s == step_lower_bound(analyse(plan)), index
        compared += 1
    return compared


@pytest.mark.parametrize("name", ["sharded", "large-batch", "offload", "moe-fp8"])
def test_shared_step_bounds_equal_fresh_ones(name: str) -> None:
    # Candidates that differ only in the context-parallel type share their step's lower bound
    # (UNREAD_BY_BOUND); the sharded space has feasible layouts under two of the types (the
    # pipelines space, which runs all four, has none: PLC048 rejects TE's loss there).
    assert _bounds_equal_fresh(SHARED_SPACES[name]) > 20


@pytest.mark.parametrize("axis", ["micro_batch", "zero_stage", "offload"])
def test_a_bound_key_that_misses_an_axis_is_caught(
    axis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import planc.search.evaluate as evaluate

    monkeypatch.setattr(evaluate, "UNREAD_BY_BOUND", evaluate.UNREAD_BY_BOUND | {axis})
    space = "offload" if axis == "offload" else "large-batch"
    with pytest.raises(AssertionError):
        _bounds_equal_fresh(SHARED_SPACES[space])


@pytest.mark.parametrize(("axis", "space"), [("zero_stage", "large-batch"), ("data_shard", "sharded")])
def test_an_after_step_key_that_misses_an_axis_is_caught(
    axis: str, space: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bound's after-step part is shared by the axes it reads (UNREAD_BY_AFTER) and each
    # class's forward seconds: a key without one of them hands a candidate another's.
    import planc.search.evaluate as evaluate

    monkeypatch.setattr(evaluate, "UNREAD_BY_AFTER", evaluate.UNREAD_BY_AFTER | {axis})
    with pytest.raises(AssertionError):
        _bounds_equal_fresh(SHARED_SPACES[space])


def test_an_after_step_key_without_the_forward_seconds_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # ZeRO-1/2's parameter all-gather hides behind the next forward (overlap_param_gather, on
    # by default): candidates that differ only in sequence parallelism differ in it.
    import planc.search.evaluate as evaluate

    monkeypatch.setattr(evaluate, "forward_by_class", lambda analysis: ())
    with pytest.raises(AssertionError):
        _bounds_equal_fresh(SHARED_SPACES["large-batch"])


def test_jobs_give_byte_identical_json_with_every_zero_stage(tmp_path: Path) -> None:
    # Over 1,024 candidates (two judging tasks or more), the ZeRO stages of one layout on both
    # sides of a task boundary: each task reuses only its own sub-results.
    spec = tmp_path / "spec.yaml"
    spec.write_text(LARGE_BATCH.replace("micro_batch: [1, 4]", "micro_batch: [1, 2, 4]"))
    assert _setup(spec.read_text()).space.size > 1024
    outputs = [
        subprocess.run(
            [sys.executable, "-m", "planc", "search", str(spec), "--format", "json", "-j", jobs],
            capture_output=True,
            check=True,
        ).stdout
        for jobs in ("1", "2")
    ]
    assert outputs[0] == outputs[1]
    assert json.loads(outputs[0])["feasible"] > 0


def test_each_op_is_priced_as_on_its_own() -> None:
    # op_seconds prices each distinct (collective, group kind, size, bytes, tier) once: every
    # op's seconds are still its calls × one call of it on its tier, over its group's rails.
    from planc.comm.schedule import ring_rails
    from planc.perf.inputs import comm_time_s

    setup = _setup(LARGE_BATCH)
    judged = make_judge(setup)
    ops = 0
    for index in range(0, setup.space.size, 7):
        job = candidate_job(judged.base, judged.space, judged.space.candidate(index))
        plan = plannable(job)
        if isinstance(plan, tuple):
            continue
        analysis = analyse(plan)
        for op, seconds in analysis.op_seconds.items():
            one = comm_time_s(
                plan,
                analysis.efficiency,
                str(op.op),
                op.group_size,
                op.buffer_bytes,
                op.link,
                rails=ring_rails(plan, op.group),
            )
            assert seconds == op.calls * one
            ops += 1
    assert ops > 1000


def test_a_task_judges_enough_candidates_to_share_and_few_enough_to_balance() -> None:
    # Small spaces keep the 512 a task of before; large ones take up to 4,096, and every
    # process gets TASKS_PER_JOB tasks or more where the space allows.
    assert run.judge_chunk(100, 2) == 512
    assert run.judge_chunk(16 * 512, 2) == 512
    assert run.judge_chunk(16 * 1000, 2) == 1000
    assert run.judge_chunk(185_160, 2) == 4096
    assert run.judge_chunk(185_160, 1) == 4096
    for size in (1, 511, 5_000, 40_000, 70_000, 10**6):
        for jobs in (1, 2, 8):
            chunk = run.judge_chunk(size, jobs)
            assert 512 <= chunk <= 4096
            tasks = -(-size // chunk)
            assert tasks >= min(run.TASKS_PER_JOB * jobs, -(-size // 4096))


def test_the_tasks_change_no_result(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same space judged in tasks of 512 and of 1,536 candidates and estimated in tasks of
    # one candidate and of a whole round (each task's judge sharing only its own sub-results)
    # lists the same layouts, counts and estimates.
    setup = _setup(LARGE_BATCH.replace("micro_batch: [1, 4]", "micro_batch: [1, 2, 4]"))
    assert setup.space.size > 1536
    whole_rounds = run._groups  # in one process: one task a round
    results = []
    for chunk, groups in ((512, lambda verdicts, jobs: [[v] for v in verdicts]), (1536, whole_rounds)):
        monkeypatch.setattr(run, "JUDGE_CHUNK", chunk)
        monkeypatch.setattr(run, "JUDGE_CHUNK_MAX", chunk)
        monkeypatch.setattr(run, "_groups", groups)
        results.append(run.search(setup, 5))
    assert results[0] == results[1]
    assert results[0].feasible > 0 and results[0].estimated > 5
