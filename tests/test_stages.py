"""Per-stage results computed once per stage class (`planc.stages`) are every stage's own: the
analysis, the memory budget, the wire bytes, the step inputs and the step estimate of each
example, of each validation run (between them every per-stage term: the loss's kernels under
Megatron-Core's and Transformer Engine's fusion, FSDP2's reduce dtype and torch optimizer,
DeepSpeed's pipeline engine, gradient accumulation with and without Megatron's fusion) and of
candidates that vary every search axis equal those computed stage by stage, and a class key
that leaves out something a stage's terms read is caught."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from test_search_speed import SHARED_SPACES

from planc.analysis import Analysis, analyse, estimate_step
from planc.comm.schedule import schedule, wire_budget
from planc.memory.budget import budget, rank_memory
from planc.memory.fp8 import quantized_share
from planc.perf.grad_accum import accumulation
from planc.perf.inputs import after_step_s, build_inputs
from planc.perf.pipe_engine import runs_pipe_engine
from planc.plannable import Plannable, plannable
from planc.search.evaluate import candidate_job, make_judge
from planc.spec.load import load_path
from planc.stages import StageClasses, stage_classes

from conftest import EXAMPLES, ROOT, job_of, search_setup

# Every `STRIDE`-th candidate of each shared space (between them they vary every search axis);
# the large-batch space's steps run hundreds of micro-batches, so fewer of them.
STRIDE = {"large-batch": 53}
EVERY = 11


def stagewise(plan: Plannable) -> Plannable:
    """`plan` with every stage a class of its own: everything computed stage by stage."""
    copy = dataclasses.replace(plan)
    p = plan.layout.p
    copy.__dict__["_stage_classes"] = StageClasses(tuple(range(p)), tuple(range(p)))
    return copy


def _examples() -> Iterator[tuple[str, Plannable]]:
    runs = ROOT / "validation" / "runs"
    for path in [*sorted(EXAMPLES.glob("*.yaml")), *sorted(runs.glob("*.yaml"))]:
        job = load_path(path).job
        plan = None if job is None else plannable(job)
        if isinstance(plan, Plannable):
            yield path.name, plan


def _candidates() -> Iterator[tuple[str, Plannable]]:
    for name, text in sorted(SHARED_SPACES.items()):
        setup = search_setup(text)
        judged = make_judge(setup)
        for index in range(0, setup.space.size, STRIDE.get(name, EVERY)):
            job = candidate_job(judged.base, judged.space, judged.space.candidate(index))
            plan = plannable(job)
            if isinstance(plan, Plannable):
                yield f"{name}[{index}]", plan


def _cases() -> list[tuple[str, Plannable]]:
    return [*_examples(), *_candidates()]


def _inputs(analysis: Analysis, every_op: bool) -> object:
    params = [share.total for share in analysis.parameters]
    experts = [share.expert_total for share in analysis.parameters]
    ops = analysis.ops if every_op else analysis.schedule.first_ops
    return build_inputs(analysis.plan, params, experts, analysis.efficiency, ops)


def differences(plan: Plannable) -> list[str]:
    """What of `plan`'s analysis differs between class-wise and stage-by-stage computation."""
    mine, theirs = analyse(plan), analyse(stagewise(plan))
    p = plan.layout.p
    shares = mine.parameters
    quantized = (
        [(q.dense, q.experts) for q in (quantized_share(plan, r) for r in range(p))]
        if plan.numerics.quantized is not None
        else []
    )
    direct = schedule(
        plan, [s.dense_total for s in shares], [s.expert_total for s in shares], quantized
    )
    params = [share.total for share in shares]
    checks = {
        "parameters": mine.parameters == theirs.parameters,
        "ops": mine.ops == theirs.ops == direct,
        "op seconds": dict(mine.op_seconds) == dict(theirs.op_seconds),
        "wires": mine.wires == theirs.wires == wire_budget(plan, direct),
        "most wire bytes": mine.most_wire_bytes
        == max(max(w.sent, w.received) for b in mine.wires for w in b.tiers.values()),
        # the rule's shortcut (PLC073) is an upper bound on it
        "wire bytes bound": mine.most_wire_bytes <= mine.wire_bytes_bound,
        "memory": mine.memory.stages == theirs.memory.stages
        == tuple(budget(stagewise(plan)).stages),
        "rank memory": all(
            stage.memory == rank_memory(plan, stage.stage) for stage in mine.memory.stages
        ),
        "peak": mine.memory.peak == theirs.memory.peak,
        # What a stage's activations add up to, counted without writing their terms out.
        "activation bytes": all(
            held.bytes == sum(t.bytes for part in held.terms for t in part)
            for held in mine.memory.staged.activations
        ),
        "host": mine.memory.most_host == max(s.memory.host for s in theirs.memory.stages),
        "times": mine.times == theirs.times,
        "inputs": _inputs(mine, False) == _inputs(mine, True) == _inputs(theirs, True),
        "after step": after_step_s(
            plan, mine.efficiency, mine.schedule.first_ops, params, mine.times
        )
        == after_step_s(stagewise(plan), theirs.efficiency, theirs.ops, params, theirs.times),
        "step": estimate_step(mine) == estimate_step(theirs),
    }
    return [name for name, same in checks.items() if not same]


CASES = _cases()


def test_the_cases_have_what_sets_stages_apart() -> None:
    # Uneven splits, interleaved and V-placed chunks, MoE layers among dense ones, BF16 layers
    # under FP8, tied embeddings: what makes stages differ appears among the cases, and most
    # pipelines have fewer classes than stages.
    plans = [plan for _, plan in CASES]
    assert any(len(set(p.layout.stage_layers)) > 1 for p in plans)
    assert any(p.layout.last_stage == 0 and p.layout.p > 1 for p in plans)
    assert any(p.model.moe is not None and p.layout.p > 1 for p in plans)
    assert any(p.numerics.quantized is not None and p.layout.p > 1 for p in plans)
    # main's per-stage terms: the loss's kernels on the last stage, DeepSpeed's pipeline
    # engine's blocking sends, gradient accumulation of the first stage's embedding alone.
    staged = [p for p in plans if p.layout.p > 1]
    assert {p.training.loss_fusion for p in staged} >= {"none", "native", "te"}
    assert any(runs_pipe_engine(p) for p in staged)
    fused = [p for p in staged if (path := accumulation(p)) is not None and not path.whole]
    assert fused and any(not p.training.grad_accum_fusion for p in staged)
    assert any(p.training.framework == "fsdp2" and p.training.reduce_dtype == "bf16" for p in plans)
    deep = [p for p in plans if p.layout.p >= 4]
    assert sum(len(stage_classes(p).first) < p.layout.p for p in deep) > len(deep) // 2


@pytest.mark.parametrize(("name", "plan"), CASES, ids=[name for name, _ in CASES])
def test_classwise_equals_stage_by_stage(name: str, plan: Plannable) -> None:
    assert differences(plan) == []


# Each part of the key (dropped), and a case whose classes need it: the ends of the pipeline
# (the last rank and the LM head's rank are one but in the V placement), each chunk's layers
# (an uneven split), its MoE layers (dense layers reaching past the first stage), its BF16
# layers under FP8 (more at each end than the first stage holds) and its sliding-window layers.
WEAKENED = [
    ("first stage", (1,), "llama3-70b-8x8.yaml", None),
    ("last rank and LM head", (2, 3), "llama3-70b-8x8.yaml", None),
    ("last rank", (2,), "deepseek-v3-2048xh800.yaml", None),
    ("chunk layers", (0,), "llama3-70b-8x8.yaml", {"parallelism": {"stage_layers": [20, 24, 16, 20]}}),
    ("MoE layers", (0, 1), "mixtral-8x7b-64xh100.yaml", {"model": {"moe": {"first_dense_layers": 12}}}),
    ("BF16 layers", (0, 2), "llama3-70b-64xh100-fp8.yaml", {"training": {"fp8": {"first_last_bf16": 3}}}),
    # GPT-OSS's alternating windowed layers over 4 stages of 9: 5, 4, 5 and 4 windowed
    ("windowed layers", (4,), "mixtral-8x7b-64xh100.yaml", {"model": {"preset": "gpt-oss-120b"}}),
]


@pytest.mark.parametrize(
    ("what", "parts", "example", "overlay"), WEAKENED, ids=[w[0] for w in WEAKENED]
)
def test_a_key_without_a_part_is_caught(
    what: str,
    parts: tuple[int, ...],
    example: str,
    overlay: dict[str, object] | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import planc.stages as stages

    plan = job_of(overlay, example)
    assert differences(plan) == []
    key = stages.stage_key

    def weakened(job: Plannable, stage: int) -> object:
        whole = key(job, stage)
        assert isinstance(whole, tuple)
        if len(parts) == 2 and parts[0] == 0:  # one count of each chunk
            drop = parts[1]
            chunks = tuple(chunk[:drop] + chunk[drop + 1 :] for chunk in whole[0])
            return (chunks, *whole[1:])
        return tuple(part for at, part in enumerate(whole) if at not in parts)

    monkeypatch.setattr(stages, "stage_key", weakened)
    assert differences(job_of(overlay, example)), what
