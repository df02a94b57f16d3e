"""The compiled plan (planc.compile.plan): plan.json against its schema, the shape of the
shipped examples' plans (snapshots) and their numbers (by hand), per-rank content, memory
budgets against planc.memory, and determinism."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.json import JSONSnapshotExtension

from planc.compile import render_files
from planc.compile.plan import MEMORY_FIELDS, Plan, coords_json, plan_json
from planc.findings import Severity
from planc.memory import budget, rank_memory
from planc.plannable import Plannable, plannable, refusals
from planc.spec.load import load_path, load_text

from conftest import EXAMPLES, ROOT, check_text, compiled, job_of, resolved_of, spec_text

SMALL = ["llama3-8b-1node.yaml", "llama3-70b-8x8.yaml", "gpt3-175b-gb200-nvl72.yaml"]
LARGE = "gpt3-175b-1024xa100.yaml"
ALL = [*SMALL, LARGE]


def example_job(name: str) -> Plannable:
    job = load_path(str(EXAMPLES / name)).job
    assert job is not None
    plan = plannable(job)
    assert not isinstance(plan, tuple), plan
    return plan


def parsed(plan: Plan) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(plan_json(plan))
    return data


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / "schemas" / "plan.schema.json").read_text("utf-8"))
    return data


# ----------------------------------------------------------------------------- examples


@pytest.mark.parametrize("name", ALL)
def test_plan_json_valid_against_schema(name: str, schema: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(parsed(compiled(example_job(name))))


def test_the_moe_record_states_padding_only_when_padded(schema: dict[str, Any]) -> None:
    # Drop and pad writes pad_to_capacity: true; drop only and dropless write no key, so their
    # plans keep the bytes they had before the field.
    mixtral = "mixtral-8x7b-64xh100.yaml"
    records = {}
    for case, moe in {
        "padded": {"capacity_factor": 1.0, "pad_to_capacity": True},
        "drop only": {"capacity_factor": 1.0},
        "dropless": {},
    }.items():
        data = parsed(compiled(job_of({"model": {"moe": moe}}, mixtral)))
        jsonschema.Draft202012Validator(schema).validate(data)
        records[case] = data["model"]["moe"]
    assert records["padded"]["pad_to_capacity"] is True
    assert "pad_to_capacity" not in records["drop only"]
    assert "pad_to_capacity" not in records["dropless"]
    assert {**records["drop only"], "pad_to_capacity": True} == records["padded"]


def plan_shape(plan: Plan) -> dict[str, Any]:
    """What a reviewer can read in a diff: the layout, each group kind's count, size and first
    and last members, the communication ops (stage, group, collective) and the files written.
    The numbers are asserted against hand derivations below."""
    data = parsed(plan)
    return {
        **{key: data[key] for key in ("world_size", "layout")},
        "groups": {
            kind: {"count": len(groups), "size": len(groups[0]), "first": groups[0], "last": groups[-1]}
            for kind, groups in data["groups"].items()
        },
        "ops": [f"{op['stage']} {op['group']} {op['op']}" for op in data["communication"]["ops"]],
        "files": sorted(render_files(plan)),
    }


@pytest.mark.parametrize("name", SMALL)
def test_plan_shape_snapshot(name: str, snapshot: SnapshotAssertion) -> None:
    assert plan_shape(compiled(example_job(name))) == snapshot.use_extension(JSONSnapshotExtension)


def ops_of(data: dict[str, Any], stage: int, group: str, op: str) -> list[dict[str, Any]]:
    return [
        found
        for found in data["communication"]["ops"]
        if (found["stage"], found["group"], found["op"]) == (stage, group, op)
    ]


# Hand derivations for the shipped examples (model sizes from their presets; Megatron-LM's
# layout: Shoeybi et al. 2019 §3 for the TP split, Korthikanti et al. 2022 §4.2.2 for SP).


def llama_layer_parameters(h: int, kv_width: int, ffn: int) -> int:
    """One Llama layer: Q and O are h×h, K and V h×(kv_heads·head_dim), SwiGLU three h×ffn
    matrices, two RMSNorm weights of h; no biases."""
    return 2 * h * h + 2 * h * kv_width + 3 * h * ffn + 2 * h


def test_llama3_8b_rank_by_hand() -> None:
    """Llama 3 8B (L = 32, h = 4,096, 8 KV heads of 128, ffn 14,336, V = 128,256, untied) at
    t = 2, d = 4, p = 1, ZeRO-1, bf16, s = 8,192, b = 1, B = 64 (m = 16 micro-batches)."""
    data = parsed(compiled(example_job("llama3-8b-1node.yaml")))
    L, h, kv, ffn, V, t, d, s, b, m = 32, 4096, 8 * 128, 14336, 128256, 2, 4, 8192, 1, 16
    total = L * llama_layer_parameters(h, kv, ffn) + 2 * V * h + h  # + embedding, head, final norm
    assert data["summary"]["parameters"] == total == 8_030_261_248
    # Per TP rank: every matrix and the vocabulary split over t, the norms whole.
    norms = 2 * h * L + h
    per_rank = (total - norms) // t + norms
    assert data["model"]["stage_parameters"] == [per_rank]
    memory = data["ranks"][0]["memory"]
    assert memory["weights"] == memory["gradients"] == 2 * per_rank  # bf16 weights and gradients
    # ZeRO-1 (Rajbhandari et al. 2020 §5.1): fp32 master, momentum and variance, K = 12 bytes a
    # parameter, split over the d data-parallel ranks.
    assert memory["optimizer"] == 12 * per_rank // d
    # SP all-gather and reduce-scatter of the b·s·h activation (bf16): before and after attention
    # and MLP, forward and again in backward, every layer and micro-batch; and the QKV and fc1
    # inputs gathered once more in backward for their weight gradients (Megatron keeps only
    # the rank's shard of them). Each rank sends (t−1)/t of the buffer.
    # At the model's ends (one stage holds both), once a micro-batch: the word embedding's
    # output gradient gathered, the LM head's input gathered and gathered again.
    gathers = ops_of(data, 0, "tp", "all_gather")
    assert [(g["calls"], g["buffer_bytes"], g["bytes_sent_per_call"]) for g in gathers] == [
        (2 * 2 * L * m, b * s * h * 2, (t - 1) * b * s * h * 2 // t),
        (2 * L * m, b * s * h * 2, (t - 1) * b * s * h * 2 // t),
    ] + [(m, b * s * h * 2, (t - 1) * b * s * h * 2 // t)] * 3
    # The ZeRO gradient reduce-scatter moves each rank's bf16 gradients once, in buckets.
    scatters = ops_of(data, 0, "dp_cp", "reduce_scatter")
    assert sum(op["calls"] * op["buffer_bytes"] for op in scatters) == 2 * per_rank
    # Every wire stays inside the node's NVLink: TP's gather and scatter, ZeRO's scatter and
    # gather, each sending (group − 1)/group of what it moves.
    tp_sent = (2 + 2 + 1) * (2 * L * m) * (t - 1) * b * s * h * 2 // t
    # the ends: the embedding's and the head's reduce-scatters and their three gathers above,
    # and the loss's three fp32 all-reduces of the s rows (2·(t − 1)/t of each)
    tp_sent += (2 + 3) * m * (t - 1) * b * s * h * 2 // t + 3 * m * 2 * (t - 1) * b * s * 4 // t
    dp_sent = 2 * (d - 1) * (2 * per_rank) // d
    assert data["ranks"][0]["wire"] == {
        "nvlink": {"sent": tp_sent + dp_sent, "received": tp_sent + dp_sent},
        "network": {"sent": 0, "received": 0},
    }


def test_llama3_70b_stages_by_hand() -> None:
    """Llama 3 70B (L = 80, h = 8,192, 8 KV heads of 128, ffn 28,672, V = 128,256, untied) at
    t = 8, p = 4 (20 layers a stage), SP, s = 8,192, b = 1."""
    data = parsed(compiled(example_job("llama3-70b-8x8.yaml")))
    h, kv, ffn, V, t, s, b = 8192, 8 * 128, 28672, 128256, 8, 8192, 1
    # Megatron pads the vocabulary to a multiple of 128·t (make-vocab-size-divisible-by 128).
    padded = -(-V // (128 * t)) * (128 * t)
    assert data["model"]["vocab_padded"] == padded == 129_024
    layers = 20 * ((llama_layer_parameters(h, kv, ffn) - 2 * h) // t + 2 * h)
    embedding = padded // t * h
    assert data["model"]["stage_parameters"] == [
        layers + embedding,  # the first stage holds the embedding
        layers,
        layers,
        layers + embedding + h,  # the last the output layer and the final norm
    ]
    # The activation a stage sends on is scattered over the TP ranks (b·s·h/t, bf16), once per
    # micro-batch each way.
    sends = ops_of(data, 1, "pp", "send_recv")
    assert [(op["direction"], op["calls"], op["buffer_bytes"]) for op in sends] == [
        ("fwd", 256, b * s * h * 2 // t),
        ("bwd", 256, b * s * h * 2 // t),
    ]


def test_gpt3_175b_tp_all_reduce_by_hand() -> None:
    """GPT-3 175B (h = 12,288) at t = 24 without SP, s = 2,048, b = 1, 32 layers a stage, m = 256:
    one all-reduce after attention and one after the MLP in forward, and their mirrors in
    backward, of the b·s·h activation (bf16); a ring all-reduce sends 2·(t−1)/t of the buffer."""
    data = parsed(compiled(example_job("gpt3-175b-gb200-nvl72.yaml")))
    h, t, s, b, layers, m = 12288, 24, 2048, 1, 32, 256
    reduces = ops_of(data, 0, "tp", "all_reduce")
    # and the first stage's word embedding, all-reduced once a micro-batch
    assert [(op["calls"], op["buffer_bytes"], op["bytes_sent_per_call"]) for op in reduces] == [
        (2 * layers * m, b * s * h * 2, 2 * (t - 1) * b * s * h * 2 // t)
    ] * 2 + [(m, b * s * h * 2, 2 * (t - 1) * b * s * h * 2 // t)]


@pytest.mark.parametrize("name", ALL)
def test_coords_json_snapshot(name: str, snapshot: SnapshotAssertion) -> None:
    assert coords_json(compiled(example_job(name))) == snapshot


def test_large_plan_excerpt_snapshot(snapshot: SnapshotAssertion) -> None:
    """1,024 ranks: the head, the first and last ranks and the group shapes, not every rank."""
    data = parsed(compiled(example_job(LARGE)))
    excerpt = {
        **{key: data[key] for key in ("world_size", "layout", "summary")},
        "hosts": data["cluster"]["hosts"][:3],
        "groups": {name: [len(groups), groups[0], groups[-1]] for name, groups in data["groups"].items()},
        "ranks": [data["ranks"][r] for r in (0, 1, 8, 127, 128, 1023)],
    }
    assert excerpt == snapshot.use_extension(JSONSnapshotExtension)


def test_plan_summary_matches_memory_budget() -> None:
    job = example_job("llama3-70b-8x8.yaml")
    plan, found = compiled(job), budget(job)
    assert plan.summary.parameters == found.parameters
    assert plan.summary.parameters_padded == found.parameters_padded
    assert plan.summary.peak_memory_bytes == found.peak.memory.total
    assert plan.summary.peak_rank == found.peak.rank
    assert plan.summary.micro_batches == 256
    assert plan.summary.bubble_fraction == round(3 / (256 + 3), 6)


def test_ranks_hold_their_stage() -> None:
    data = parsed(compiled(example_job("llama3-70b-8x8.yaml")))
    ranks = data["ranks"]
    assert [r["rank"] for r in ranks] == list(range(64))
    assert ranks[17]["coords"] == {"tp": 1, "cp": 0, "dp": 0, "pp": 1}
    assert ranks[17]["layers"] == [[20, 40]]
    assert ranks[17]["host"] == "gpu-002" and ranks[17]["local_rank"] == 1
    assert {r["embedding"] for r in ranks if r["coords"]["pp"] == 0} == {True}
    assert {r["lm_head"] for r in ranks if r["coords"]["pp"] == 3} == {True}
    assert not any(r["embedding"] or r["lm_head"] for r in ranks if r["coords"]["pp"] in (1, 2))
    assert not any(r["embedding_copy"] for r in ranks)  # Llama 3 70B unties its embeddings


def test_tied_embeddings_last_stage_holds_a_copy() -> None:
    job = job_of({"model": {"tied_embeddings": True}, "parallelism": {"pipeline": 2, "tensor": 2}})
    ranks = parsed(compiled(job))["ranks"]
    assert [r["embedding_copy"] for r in ranks if r["coords"]["pp"] == 1] == [True] * 4
    assert [r["embedding_copy"] for r in ranks if r["coords"]["pp"] == 0] == [False] * 4


def test_virtual_stages_give_interleaved_chunks() -> None:
    job = job_of({"parallelism": {"virtual_stages": 2}}, base="llama3-70b-8x8.yaml")
    data = parsed(compiled(job))
    assert data["ranks"][16]["layers"] == [[10, 20], [50, 60]]
    assert data["layout"]["stage_layers"][3] == [[30, 40], [70, 80]]


def test_uneven_stage_layers() -> None:
    job = job_of({"parallelism": {"stage_layers": [19, 21, 21, 19]}}, base="llama3-70b-8x8.yaml")
    assert parsed(compiled(job))["layout"]["stage_layers"] == [[[0, 19]], [[19, 40]], [[40, 61]], [[61, 80]]]


def test_memory_matches_rank_memory_for_every_shard() -> None:
    """The bisection over shard indices agrees with calling planc.memory for each one."""
    job = job_of({"parallelism": {"tensor": 1, "zero_stage": 3}, "model": {"vocab": 128257}})
    plan = compiled(job)
    for pp in range(job.layout.p):
        for shard in range(plan.memory.shape[1]):
            mem = rank_memory(job, pp, shard)
            assert plan.memory[pp, shard].tolist() == [getattr(mem, f) for f in MEMORY_FIELDS]


def test_render_is_deterministic() -> None:
    text = spec_text(base="gpt3-175b-gb200-nvl72.yaml")
    first = render_files(compiled(job_from(text)))
    second = render_files(compiled(job_from(text)))
    assert first == second
    assert "/work" not in first["plan.json"] and str(Path.cwd()) not in first["README.md"]


# ----------------------------------------------------------------------------- errors


def job_from(text: str) -> Plannable:
    loaded = load_text("spec.yaml", text)
    assert loaded.job is not None, loaded.findings
    plan = plannable(loaded.job)
    assert not isinstance(plan, tuple), plan
    return plan


def refused(overlay: dict[str, Any], base: str = "llama3-8b-1node.yaml") -> list[tuple[str, str]]:
    return [(r.rule, r.violation.message) for r in refusals(resolved_of(overlay, base))]


def test_world_mismatch_has_no_plan() -> None:
    found = refused({"parallelism": {"data": 3}, "training": {"global_batch": 63}})
    assert [rule for rule, _ in found] == ["PLC001"]
    assert "2 × 1 × 3 × 1 = 6, but the cluster has 1 × 8 = 8 GPUs" in found[0][1]


def test_underivable_data_degree_has_no_plan() -> None:
    found = refused({"parallelism": {"tensor": 3, "sequence_parallel": False}})
    assert found[0][0] == "PLC001" and "data cannot be derived" in found[0][1]


def test_host_names_that_break_hostfiles_have_no_plan() -> None:
    found = refused({"hardware": {"hosts": ["gpu a01"]}})
    assert found == [("PLC014", "host name 'gpu a01' cannot go into a hostfile or rankfile")]


def test_layers_that_do_not_split_have_no_plan() -> None:
    found = refused({"parallelism": {"stage_layers": [20, 20, 20, 19]}}, "llama3-70b-8x8.yaml")
    assert found == [("PLC004", "stage_layers sums to 79, but the model has 80 layers")]


# ----------------------------------------------------------------------------- properties

AXIS_ORDERS = ["tp-cp-dp-pp", "tp-cp-pp-dp", "dp-tp-cp-pp", "cp-tp-dp-pp", "tp-dp-cp-pp"]


@st.composite
def overlays(draw: st.DrawFn) -> dict[str, Any]:
    """Small specs over varied node sizes, NVLink domains, degrees and orders."""
    per_node = draw(st.sampled_from([2, 4, 8]))
    nodes = draw(st.sampled_from([1, 2, 4]))
    domain = draw(st.sampled_from([per_node // 2 or 1, per_node, per_node * 2]))
    t, p, c = (draw(st.sampled_from([1, 2, 4])) for _ in range(3))
    world = per_node * nodes
    assume(world % (t * p * c) == 0)
    d = world // (t * p * c)
    return {
        "model": {"preset": None, "layers": 8, "hidden": 512, "heads": 8, "vocab": 32000},
        "hardware": {"nodes": nodes, "gpus_per_node": per_node, "nvlink_domain": domain,
                     "hosts": f"n-{{000..{nodes - 1:03d}}}"},
        "parallelism": {"tensor": t, "pipeline": p, "context": c, "data": d, "sequence_parallel": False,
                        "zero_stage": 1, "order": draw(st.sampled_from(AXIS_ORDERS))},
        "training": {"seq_len": 1024, "global_batch": d * 8 * p},
        "rules": {"ignore": ["PLC006", "PLC007", "PLC018"]},
    }


def topologies() -> st.SearchStrategy[str]:
    return overlays().map(spec_text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(topologies())
def test_checked_specs_keep_tp_inside_nvlink(text: str) -> None:
    result = check_text(text)
    assume(not any(f.severity.rank >= Severity.ERROR.rank for f in result.findings))
    plan = compiled(job_from(text))
    domains = plan.placement.nvlink_domain[plan.groups.tp]
    assert (domains == domains[:, :1]).all()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(topologies())
def test_plan_schema_valid_and_deterministic(text: str) -> None:
    job = job_from(text)
    assume(job.layout.d is not None)
    first = plan_json(compiled(job))
    assert first == plan_json(compiled(job_from(text)))
    schema = json.loads((ROOT / "schemas" / "plan.schema.json").read_text("utf-8"))
    data = json.loads(first)
    jsonschema.Draft202012Validator(schema).validate(data)
    peak = data["ranks"][data["summary"]["peak_rank"]]
    assert peak["memory"]["total"] == data["summary"]["peak_memory_bytes"]
    assert max(r["memory"]["total"] for r in data["ranks"]) == data["summary"]["peak_memory_bytes"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(topologies())
def test_nvlink_rule_and_plan_agree(text: str) -> None:
    """PLC002 fires exactly when some TP group of the compiled plan spans two NVLink domains."""
    fired = "PLC002" in {f.rule for f in check_text(text).findings}
    plan = compiled(job_from(text))
    domains = plan.placement.nvlink_domain[plan.groups.tp]
    assert fired == bool((domains != domains[:, :1]).any())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(overlays(), st.sampled_from([0, 1, 2, 3]), st.sampled_from([32000, 32001, 50257]))
def test_memory_bisection_matches_every_shard(overlay: dict[str, Any], zero: int, vocab: int) -> None:
    """Bisecting over shard indices gives what planc.memory gives for each (pp, shard)."""
    overlay["parallelism"]["zero_stage"] = zero
    overlay["model"]["vocab"] = vocab
    job = job_from(spec_text(overlay))
    plan = compiled(job)
    for pp in range(job.layout.p):
        for shard in range(plan.memory.shape[1]):
            mem = rank_memory(job, pp, shard)
            assert plan.memory[pp, shard].tolist() == [getattr(mem, f) for f in MEMORY_FIELDS]
