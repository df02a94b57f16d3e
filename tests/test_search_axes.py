"""planc search's axes beyond the dense degrees (issue 28): expert, expert_tensor, data_shard,
order, cp_comm_type, offload, precision, pipeline_schedule; results a user can act on
(framework warnings left out, the winner checks clean, the spec's own layout placed, the
nearest rejected layout per rule); context-parallel communication types priced."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planc.analysis import analyse, estimate_step
from planc.check import check_loaded
from planc.cli.main import main
from planc.compile.launchers import megatron_args
from planc.compile.plan import compile_job
from planc.findings import Severity
from planc.plannable import plannable
from planc.rules import FRAMEWORK_RULES
from planc.search.evaluate import Setup
from planc.search.rank import SearchResult
from planc.search.run import search
from planc.spec.load import load_text

from conftest import loaded_spec, search_setup

MIB = 2**20

# Llama 3 8B on one node (n = 32 heads, g = 8 kv heads, k = 128, L = 32).
ONE_NODE = """\
version: 1
name: one-node
model: {preset: llama3-8b}
hardware: {gpu: h100-sxm, nodes: 1}
training: {seq_len: 8192, global_batch: 64}
"""


_loaded = loaded_spec
_setup = search_setup


def _axes(text: str) -> dict[str, tuple[Any, ...]]:
    return {axis.name: axis.values for axis in _setup(text).space.axes}


def _pinned(text: str) -> set[str]:
    return {axis.name for axis in _setup(text).space.axes if axis.pinned}


def _search(text: str, top: int = 10**6, **request: Any) -> SearchResult:
    return search(_setup(text, **request), top)


# --- each axis pinned by the spec and narrowed by search: ----------------------------------------

PINS = {
    "expert": ("parallelism: {expert: 1}", 1),
    "expert_tensor": ("parallelism: {expert_tensor: 1}", 1),
    "data_shard": ("parallelism: {zero_stage: 3, data_shard: 4}", 4),
    "order": ("parallelism: {order: tp-dp-cp-pp}", "tp-dp-cp-pp"),
    "cp_comm_type": ("parallelism: {cp_comm_type: a2a}", "a2a"),
    "offload": ("training: {offload: {optimizer: true}, framework: deepspeed}", "optimizer"),
    "precision": ("training: {precision: fp8}", "fp8"),
    "pipeline_schedule": ("parallelism: {pipeline_schedule: interleaved-1f1b}", "interleaved-1f1b"),
}


def _with(text: str, overlay: str) -> str:
    """ONE_NODE with a `section: {...}` overlay merged into its own section."""
    section, _, body = overlay.partition(": ")
    inner = body.strip()[1:-1]
    if f"{section}: {{" in text:
        return text.replace(f"{section}: {{", f"{section}: {{{inner}, ", 1)
    return text + f"{section}: {{{inner}}}\n"


@pytest.mark.parametrize("axis", sorted(PINS))
def test_a_field_the_spec_writes_pins_its_axis(axis: str) -> None:
    overlay, value = PINS[axis]
    text = _with(ONE_NODE, overlay)
    assert axis in _pinned(text)
    assert _axes(text)[axis] == (value,)


NARROW = {
    "expert": "[1]",
    "expert_tensor": "[2]",
    "data_shard": "[all]",
    "order": "[tp-cp-pp-dp]",
    "cp_comm_type": "[p2p, allgather]",
    "offload": "[none]",
    "precision": "[bf16]",
    "pipeline_schedule": "[1f1b]",
}


@pytest.mark.parametrize("axis", sorted(NARROW))
def test_the_search_section_narrows_each_axis(axis: str) -> None:
    text = ONE_NODE + f"search: {{{axis}: {NARROW[axis]}}}\n"
    values = _axes(text)[axis]
    assert axis not in _pinned(text)
    wanted = NARROW[axis][1:-1].split(", ")
    assert {str(v) for v in values} <= set(wanted)
    assert values  # something of the narrowed range is tried


def test_allow_narrows_a_new_axis_from_the_command_line() -> None:
    setup = _setup(ONE_NODE, allow=("cp_comm_type=a2a,p2p", "precision=bf16"))
    axes = {axis.name: axis.values for axis in setup.space.axes}
    assert axes["precision"] == ("bf16",)
    assert set(axes["cp_comm_type"]) <= {"p2p", "a2a"}


# --- the space: axes that cannot differ collapse -----------------------------------------------


def test_a_dense_model_has_one_expert_layout() -> None:
    axes = _axes(ONE_NODE)
    assert axes["expert"] == (1,)
    # ETP follows tensor on a dense model: every candidate has expert_tensor == tensor.
    setup = _setup(ONE_NODE)
    names = [axis.name for axis in setup.space.axes]
    for values in setup.space.candidates():
        v = dict(zip(names, values, strict=True))
        assert v["expert_tensor"] == v["tensor"]


def test_megatron_offloads_nothing_and_precision_is_compared_only_when_asked() -> None:
    axes = _axes(ONE_NODE.replace("h100-sxm", "a100-80gb"))
    assert axes["offload"] == ("none",)
    assert axes["precision"] == ("bf16",)
    # A number format changes what the run converges to: the spec's, unless the search lists fp8.
    assert _axes(ONE_NODE)["precision"] == ("bf16",)
    assert _axes(ONE_NODE + "search: {precision: [bf16, fp8]}\n")["precision"] == ("bf16", "fp8")


def test_context_types_and_orders_only_where_they_differ() -> None:
    setup = _setup(ONE_NODE)
    names = [axis.name for axis in setup.space.axes]
    seen: set[tuple[Any, ...]] = set()
    for values in setup.space.candidates():
        v = dict(zip(names, values, strict=True))
        if v["context"] == 1:
            assert v["cp_comm_type"] == "p2p"
            # tp-dp-cp-pp places the same groups as tp-cp-dp-pp when c = 1
            assert v["order"] != "tp-dp-cp-pp"
        if v["pipeline"] == 1:
            assert v["order"] != "tp-cp-pp-dp"
            assert v["virtual_stages"] == 1
        if v["context"] == 2:  # 2 has no divisor strictly between 1 and 2
            assert v["cp_comm_type"] != "a2a+p2p"
        if v["zero_stage"] != 3:
            assert v["data_shard"] == "all"
        assert values not in seen
        seen.add(values)


def test_schedules_are_the_frameworks_and_fit_the_virtual_stages() -> None:
    fsdp = ONE_NODE.replace("training: {", "training: {framework: fsdp2, ")
    setup = _setup(fsdp + "search: {pipeline: [4], context: [1]}\n")
    names = [axis.name for axis in setup.space.axes]
    pairs = set()
    for values in setup.space.candidates():
        v = dict(zip(names, values, strict=True))
        pairs.add((v["virtual_stages"], v["pipeline_schedule"]))
    # torchtitan runs 1F1B, interleaved 1F1B, GPipe, DualPipeV and ZBV (registry runs_on);
    # the V-shaped ones need exactly two chunks, 1F1B and GPipe one.
    assert (1, "1f1b") in pairs and (1, "gpipe") in pairs
    assert (2, "dualpipev") in pairs and (2, "zbv") in pairs
    assert not any(s in ("dualpipev", "zbv") and v != 2 for v, s in pairs)
    assert not any(s in ("1f1b", "gpipe") and v != 1 for v, s in pairs)
    megatron = {v["pipeline_schedule"] for v in _named(_setup(ONE_NODE))}
    assert megatron == {"1f1b", "interleaved-1f1b"}  # a dense model: no combined 1F1B


def _named(setup: Setup) -> list[dict[str, Any]]:
    names = [axis.name for axis in setup.space.axes]
    return [dict(zip(names, values, strict=True)) for values in setup.space.candidates()]


def test_a_moe_model_searches_expert_layouts_with_ep_in_the_order() -> None:
    moe = """\
version: 1
name: mixtral
model: {preset: mixtral-8x7b}
hardware: {gpu: h100-sxm, nodes: 2}
training: {seq_len: 4096, global_batch: 64}
search: {pipeline: [1], context: [1], micro_batch: [1], recompute: [full], precision: [bf16]}
"""
    axes = _axes(moe)
    assert axes["expert"] == (1, 2, 4, 8)  # the divisors of E = 8 (dividing 16 GPUs)
    assert all("ep-dp" in str(order) for order in axes["order"])
    named = _named(_setup(moe))
    for v in named:
        assert v["expert_tensor"] in (1, v["tensor"])
    # Without a pipeline Megatron runs its combined 1F1B too (the expert all-to-all of one
    # micro-batch beside the other's compute): a layout of its own, the other schedules not.
    schedules = {v["pipeline_schedule"] for v in named}
    assert schedules == {"1f1b", "combined-1f1b"}


# --- context-parallel types priced --------------------------------------------------------------

CP = """\
version: 1
name: cp
model: {preset: llama3-8b}
hardware: {gpu: h100-sxm, nodes: 1}
parallelism: {tensor: 2, context: 4, sequence_parallel: true, cp_comm_type: KIND}
training: {seq_len: 8192, micro_batch: 1, global_batch: 64}
"""


def _analysis(kind: str) -> Any:
    plan = plannable(_loaded(CP.replace("KIND", kind)).job)
    assert not isinstance(plan, tuple), plan
    return analyse(plan)


def _cp_ops(kind: str) -> list[Any]:
    return [op for op in _analysis(kind).ops if op.group == "cp" and op.stage == 0]


def test_each_context_type_moves_what_its_implementation_moves() -> None:
    # By hand, per rank: t = 2 leaves n/t = 16 query and g/t = 4 kv heads of k = 128 channels;
    # c = 4 leaves s/c = 2,048 tokens; bf16 2 bytes; d = 8/(2·4) = 1, m = 64; 32 layers.
    # The default selective recompute (core_attn) runs the attention core's forward again in
    # backward, its exchange inside it (TE's attention with CP under Megatron's core-attention
    # checkpoint): a pass more of the forward's exchanges.
    block = 2048 * 4 * (128 + 128) * 2  # K and V of one rank: 4 MiB
    assert block == 4 * MIB
    (ring,) = _cp_ops("p2p")
    # forward, forward again, and backward's K/V and dK/dV: c − 1 = 3 steps each
    assert (ring.op, ring.buffer_bytes, ring.calls) == ("send_recv", block, 4 * 3 * 32 * 64)
    qkv = 2048 * (16 * 128 + 4 * 128 + 4 * 128) * 2  # q, k, v: 12 MiB
    out = 2048 * 16 * 128 * 2  # the output: 8 MiB
    a2a = _cp_ops("a2a")
    assert [(op.op, op.buffer_bytes, op.calls, op.group_size) for op in a2a] == [
        ("all_to_all", qkv, 3 * 32 * 64, 4),
        ("all_to_all", out, 3 * 32 * 64, 4),
    ]
    gathered = _cp_ops("allgather")
    assert [(op.op, op.buffer_bytes, op.calls) for op in gathered] == [
        ("all_gather", 4 * block, 3 * 32 * 64),
        ("reduce_scatter", 4 * block, 32 * 64),
    ]
    # a2a+p2p: a = 2 (the largest divisor of 4 below it with a·t = 4 ≤ 8 GPUs of NVLink that
    # divides 16 and 4 heads), a ring of 4/2 = 2 ranks: one step per pass.
    hier = _cp_ops("a2a+p2p")
    assert [(op.op, op.group_size) for op in hier] == [
        ("all_to_all", 2),
        ("all_to_all", 2),
        ("send_recv", 2),
    ]
    assert hier[2].calls == 4 * 1 * 32 * 64


def test_all_to_all_is_exposed_and_the_ring_hides_behind_attention() -> None:
    def exposed(kind: str) -> float:
        return estimate_step(_analysis(kind)).step_time_s

    # The same bytes would cost the ring nothing extra where attention covers them; the
    # all-to-all's ~20 MiB per layer and pass is paid in full: a2a is slower here.
    assert exposed("a2a") > exposed("p2p")


def test_megatron_gets_the_cp_comm_type() -> None:
    def args(kind: str) -> list[str]:
        return megatron_args(compile_job(_analysis(kind)))[0]

    assert not any(a.startswith("--cp-comm-type") for a in args("p2p"))  # Megatron's default
    assert "--cp-comm-type all_gather" in args("allgather")
    assert "--cp-comm-type a2a" in args("a2a")
    hier = args("a2a+p2p")
    assert "--cp-comm-type a2a+p2p" in hier
    assert "--hierarchical-context-parallel-sizes 2 2" in hier


def test_allgather_holds_every_ranks_k_and_v() -> None:
    def buffers(kind: str) -> dict[str, int]:
        stage = _analysis(kind).memory.stages[0]
        return {t.name: t.bytes for t in stage.memory.terms if "context-parallel" in t.name}

    assert buffers("p2p") == {}
    assert list(buffers("allgather").values()) == [16 * MIB]  # 4 ranks × 4 MiB
    assert list(buffers("a2a").values()) == [12 * MIB + 8 * MIB]


# --- results a user can act on ------------------------------------------------------------------

REORDERED = """\
version: 1
name: torchtitan-reordered
model: {preset: llama3-8b}
hardware: {gpu: h100-sxm, nodes: 2}
parallelism: {tensor: 2, pipeline: 2, order: tp-cp-pp-dp}
training: {seq_len: 4096, global_batch: 64, recompute: full, framework: fsdp2}
search: {context: [1], micro_batch: [1], precision: [bf16]}
"""


def test_a_framework_warning_leaves_a_layout_out_unless_allowed() -> None:
    # torchtitan lays ranks out as tp-cp-dp-pp only: under another order PLC051 warns that its
    # groups are not the plan's, on every candidate.
    strict = _search(REORDERED)
    assert not strict.results
    assert strict.rejected_by_rule["PLC051"] == strict.evaluated
    allowed = _search(REORDERED, framework_warnings=True)
    assert allowed.results
    assert all("PLC051" in r.verdict.warnings for r in allowed.results)


def test_a_cost_warning_does_not_leave_a_layout_out() -> None:
    # ZeRO-2 with a pipeline under Megatron: PLC011 says what it costs (gradients reduce-scattered
    # every micro-batch), but Megatron runs it; only DeepSpeed refuses it, as PLC049's error.
    text = REORDERED.replace("order: tp-cp-pp-dp", "zero_stage: 2").replace(
        ", framework: fsdp2", ""
    )
    result = _search(text)
    assert result.results
    assert all("PLC011" in r.verdict.warnings for r in result.results)
    refused = _search(text.replace("recompute: full", "recompute: full, framework: deepspeed"))
    assert not refused.results and refused.rejected_by_rule["PLC049"] == refused.evaluated


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["search", *args])
    return result.exit_code, result.stdout, result.stderr


WINNERS = {
    "dense": ONE_NODE + "search: {micro_batch: [1, 2], recompute: [selective, full]}\n",
    "moe": """\
version: 1
name: mixtral
model: {preset: mixtral-8x7b}
hardware: {gpu: h100-sxm, nodes: 2}
training: {seq_len: 4096, global_batch: 64}
search: {pipeline: [1, 2], context: [1], micro_batch: [1], recompute: [full]}
""",
    "fsdp2": ONE_NODE.replace("training: {", "training: {framework: fsdp2, ")
    + "search: {pipeline: [1], context: [1, 2], micro_batch: [1, 2], recompute: [full]}\n",
    "deepspeed": ONE_NODE.replace("training: {", "training: {framework: deepspeed, ")
    + "search: {pipeline: [1], context: [1], micro_batch: [1], recompute: [full]}\n",
}


@pytest.mark.parametrize("case", sorted(WINNERS))
def test_the_written_winner_checks_clean(case: str, tmp_path: Path) -> None:
    spec, best = tmp_path / "spec.yaml", tmp_path / "best.yaml"
    spec.write_text(WINNERS[case])
    code, _, _ = _run(str(spec), "--top", "1", "--write", str(best))
    assert code == 0
    loaded = load_text(str(best), best.read_text())
    result = check_loaded(loaded)
    severe = [f for f in result.findings if f.severity.rank >= Severity.ERROR.rank]
    framework = [f for f in result.findings if f.rule in FRAMEWORK_RULES]
    assert not severe and not framework, result.findings


def test_the_specs_own_layout_is_placed_and_the_best_ones_changes_said(tmp_path: Path) -> None:
    text = ONE_NODE.replace("training: {", "parallelism: {tensor: 8}\ntraining: {")
    text += "search: {micro_batch: [1], recompute: [full], precision: [bf16]}\n"
    spec = tmp_path / "own.yaml"
    spec.write_text(text)
    code, out, _ = _run(str(spec), "--top", "3", "--format", "json")
    code_text, text_out, _ = _run(str(spec), "--top", "3")
    assert code == 0 and code_text == 0
    data = json.loads(out)
    own = data["your_layout"]
    assert own is not None and not own["rejected_by"]
    # tensor 8 is pinned, so every result keeps it; the spec's own layout (the defaults for the
    # rest: context 1, zero 0, ...) ranks among them or below, and the diff has its step time.
    rows = {row["row"]: row for row in own["diff"]}
    assert "step time" in rows and "peak memory per GPU (stage 0)" in rows
    # The spec's own recompute (selective, the default) is not among the searched [full]: its
    # layout is outside the space and has no rank, however fast it is.
    assert own["outside_space"] == [{"axis": "recompute", "yours": "selective"}]
    assert own["rank"] is None
    assert "your layout is outside the searched space (recompute selective" in text_out


def test_the_specs_own_layout_inside_the_space_ranks_behind_no_faster_one(
    tmp_path: Path,
) -> None:
    text = ONE_NODE.replace("training: {", "parallelism: {tensor: 8}\ntraining: {")
    text += "search: {micro_batch: [1], precision: [bf16]}\n"
    spec = tmp_path / "own.yaml"
    spec.write_text(text)
    code, out, _ = _run(str(spec), "--top", "3", "--format", "json")
    assert code == 0
    data = json.loads(out)
    own = data["your_layout"]
    assert own["outside_space"] == []
    steps = [r["step_time_s"] for r in data["results"]]
    faster = sum(1 for step in steps if step < own["step_time_s"])
    assert own["rank"] == (faster + 1 if faster < len(steps) else None)
    assert own["step_time_s"] >= steps[0]


def test_the_nearest_rejected_layout_per_rule_is_named_with_the_rules_message() -> None:
    text = ONE_NODE + "search: {micro_batch: [1, 8], recompute: [full], precision: [bf16]}\n"
    result = _search(text, top=1)
    assert result.nearest
    assert set(result.nearest) == set(result.rejected_by_rule)
    from planc.search.advice import nearest

    found = {n.rule: n for n in nearest(_setup(text), result)}
    for rule, n in found.items():
        assert n.changes, rule  # a rejected layout differs from the winner somewhere
        assert n.message, rule
    # The nearest is the fewest changes: no rejected candidate of that rule changes fewer axes.
    space = result.space
    best = space.candidate(result.results[0].verdict.index)
    verdicts = search_verdicts(text)
    for rule, index in result.nearest.items():
        distance = _distance(space.candidate(index), best)
        for v in verdicts:
            if rule in v.rejected:
                assert _distance(space.candidate(v.index), best) >= distance


def search_verdicts(text: str) -> list[Any]:
    from planc.search.evaluate import judge_range

    setup = _setup(text)
    return list(judge_range(setup, 0, setup.space.size))


def _distance(a: tuple[Any, ...], b: tuple[Any, ...]) -> int:
    return sum(1 for x, y in zip(a, b, strict=True) if x != y)


# --- no result carries an error or a framework warning ------------------------------------------


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(
    nodes=st.sampled_from([1, 2]),
    framework=st.sampled_from(["megatron", "megatron-fsdp", "deepspeed", "fsdp2"]),
    seq=st.sampled_from([2048, 8192]),
    batch=st.sampled_from([16, 64]),
    zero=st.sampled_from([[1, 2], [2, 3], [0, 3]]),
)
def test_no_result_carries_an_error_or_a_framework_warning(
    nodes: int, framework: str, seq: int, batch: int, zero: list[int]
) -> None:
    text = f"""\
version: 1
name: random
model: {{preset: llama3-8b}}
hardware: {{gpu: h100-sxm, nodes: {nodes}}}
training: {{seq_len: {seq}, global_batch: {batch}, framework: {framework}}}
search: {{micro_batch: [1, 2], recompute: [full], zero_stage: {zero}, virtual_stages: [1, 2]}}
"""
    result = _search(text, top=5)
    for ranked in result.results:
        assert not set(ranked.verdict.warnings) & FRAMEWORK_RULES
        values = result.values(ranked)
        job = _candidate(text, result, ranked)
        from planc.check import evaluate

        found = evaluate(job, suggest=False).violations
        errors = [r for r, sev, _ in found if sev.rank >= Severity.ERROR.rank]
        framework_warnings = [r for r, _, _ in found if r in FRAMEWORK_RULES]
        assert not errors and not framework_warnings, (values, found)


def _candidate(text: str, result: SearchResult, ranked: Any) -> Any:
    from planc.search.evaluate import candidate_job, make_judge

    judged = make_judge(_setup(text))
    return candidate_job(judged.base, judged.space, judged.space.candidate(ranked.verdict.index))


def test_the_winner_that_is_the_specs_own_layout_changes_nothing(tmp_path: Path) -> None:
    # Every axis pinned to the spec's own values: the one candidate is the spec's layout, so
    # the advice names no change (the context exchange the spec leaves to the framework's
    # default included, which the result writes out).
    text = ONE_NODE.replace(
        "training: {", "parallelism: {tensor: 8, sequence_parallel: true}\ntraining: {"
    )
    text += (
        "search: {tensor: [8], pipeline: [1], context: [1], sequence_parallel: [true],"
        " zero_stage: [0], micro_batch: [1], recompute: [selective], precision: [bf16]}\n"
    )
    spec = tmp_path / "own.yaml"
    spec.write_text(text)
    code, out, _ = _run(str(spec), "--top", "3", "--format", "json")
    code_text, text_out, _ = _run(str(spec), "--top", "3")
    assert code == 0 and code_text == 0
    own = json.loads(out)["your_layout"]
    assert own["rank"] == 1 and own["outside_space"] == []
    assert own["best_changes"] == []
    assert "the best layout changes: nothing" in text_out
