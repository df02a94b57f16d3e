"""planc verify: an untouched plan passes; every kind of corruption of a compiled plan fails,
named; random valid specs compile to plans that verify."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from planc.compile.plan import plan_json
from planc.plannable import Plannable, plannable
from planc.rules.frameworks import dispatcher_refusals
from planc.verify import render, verify_text
from planc.verify.plandata import PlanFormatError

from conftest import ROOT, compiled, job_of, resolved_of

Plan = dict[str, Any]


@pytest.fixture(scope="module")
def plan70() -> Plan:
    """Llama 3 70B on 64 H100s: t = 8, p = 4, d = 2, ZeRO-1, sequence parallel."""
    data: Plan = json.loads(plan_json(compiled(job_of(None, "llama3-70b-8x8.yaml"))))
    return data


def verified(plan: Plan) -> tuple[bool, str]:
    result = verify_text(json.dumps(plan))
    return result.ok, render(result)


def test_the_untouched_plan_verifies(plan70: Plan) -> None:
    ok, text = verified(plan70)
    assert ok, text
    assert "verified" in text.splitlines()[-1]


def _op(plan: Plan, group: str, op: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = next(
        o for o in plan["communication"]["ops"] if o["group"] == group and op in (None, o["op"])
    )
    return found


def _swap_between_tp_groups(p: Plan) -> None:
    tp = p["groups"]["tp"]
    tp[0][1], tp[1][1] = tp[1][1], tp[0][1]


def _duplicate_rank(p: Plan) -> None:
    p["groups"]["dp"][0][1] = p["groups"]["dp"][0][0]


def _drop_group(p: Plan) -> None:
    p["groups"]["pp"].pop()


def _halve_groups(p: Plan) -> None:
    p["groups"]["tp"] = [half for g in p["groups"]["tp"] for half in (g[:4], g[4:])]


def _change_coordinate(p: Plan) -> None:
    p["ranks"][5]["coords"]["tp"] = 6


def _wrong_node(p: Plan) -> None:
    p["ranks"][3]["node"] = 1


def _wire_one_element(p: Plan) -> None:
    p["ranks"][0]["wire"]["nvlink"]["sent"] -= 2  # one bf16 element


def _calls_times_ten(p: Plan) -> None:
    _op(p, "tp", "all_gather")["calls"] *= 10


def _buffer_times_three(p: Plan) -> None:
    _op(p, "dp_cp", "reduce_scatter")["buffer_bytes"] *= 3


def _world_size(p: Plan) -> None:
    p["world_size"] = 128


def _wrong_link(p: Plan) -> None:
    _op(p, "dp_cp")["link"] = "nvlink"


def _wrong_send_tier(p: Plan) -> None:
    _op(p, "pp")["link"] = "nvlink"


def _pipeline_warmup(p: Plan) -> None:
    p["communication"]["pipeline"]["stages"][1]["warmup"] += 1


def _stage_parameters(p: Plan) -> None:
    p["model"]["stage_parameters"][2] += 1


def _optimizer_shard(p: Plan) -> None:
    p["ranks"][0]["optimizer_shard"] = 1


def _layers_of_a_rank(p: Plan) -> None:
    p["ranks"][20]["layers"] = [[0, 20]]


MUTATIONS: dict[str, tuple[Callable[[Plan], None], str]] = {
    "a rank moved between groups": (_swap_between_tp_groups, "groups.tp group 0"),
    "a duplicated rank": (_duplicate_rank, "groups.dp: rank"),
    "a missing group": (_drop_group, "groups.pp: 15 groups of 4"),
    "a wrong group size": (
        _halve_groups,
        "groups.tp: 16 groups of 4 ranks, expected 8 groups of 8",
    ),
    "a coordinate changed": (_change_coordinate, "rank 5: coordinate tp = 6"),
    "a rank on the wrong node": (_wrong_node, "rank 3: node = 1"),
    "wire bytes off by one element": (_wire_one_element, "rank 0: wire nvlink sent"),
    "an op's calls ×10": (_calls_times_ten, "stage 0 tp all_gather"),
    "a buffer ×3": (_buffer_times_three, "dp_cp reduce_scatter"),
    "world size changed": (_world_size, "world_size 128"),
    "a link class changed": (_wrong_link, "link nvlink, but its groups are on network"),
    "a pipeline send's tier changed": (
        _wrong_send_tier,
        "stage 0 pp send_recv fwd on nvlink: the plan has 256 calls per step, the pipeline "
        "groups' boundaries give 0",
    ),
    "a pipeline warm-up changed": (_pipeline_warmup, "pipeline stage 1"),
    "a stage's parameters changed": (_stage_parameters, "model.stage_parameters[2]"),
    "an optimizer shard changed": (_optimizer_shard, "rank 0: optimizer_shard 1"),
    "a rank's layers changed": (_layers_of_a_rank, "rank 20: layers"),
}


@pytest.mark.parametrize("kind", sorted(MUTATIONS))
def test_every_corruption_fails_and_is_named(plan70: Plan, kind: str) -> None:
    mutate, named = MUTATIONS[kind]
    plan = copy.deepcopy(plan70)
    mutate(plan)
    ok, text = verified(plan)
    assert not ok, f"{kind} was not detected:\n{text}"
    assert named in text, text
    assert "verification FAILED" in text


def test_not_a_plan_is_a_format_error() -> None:
    with pytest.raises(PlanFormatError, match="not a planc plan"):
        verify_text('{"format": "something-else"}')
    with pytest.raises(PlanFormatError, match="not JSON"):
        verify_text("{")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "planc", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_verifies_a_directory_and_refuses_a_corrupted_one(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    assert _cli("compile", "examples/llama3-8b-1node.yaml", "-o", str(out)).returncode == 0
    done = _cli("verify", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((out / "plan.json").read_text())
    data["communication"]["ops"][0]["calls"] *= 10
    (out / "plan.json").write_text(json.dumps(data))
    done = _cli("verify", str(out))
    assert done.returncode == 1 and "tensor shapes give" in done.stdout
    (out / "plan.json").write_text("[]")
    done = _cli("verify", str(out))
    assert done.returncode == 2 and "not a planc plan" in done.stderr


def test_cli_verifies_a_spec() -> None:
    done = _cli("verify", "examples/gpt3-175b-gb200-nvl72.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ring all_reduce" in done.stdout and "verified" in done.stdout


# --- random valid specs --------------------------------------------------------------------


@st.composite
def layouts(draw: st.DrawFn) -> dict[str, Any]:
    """Small specs over the layout space: degrees, orders, ZeRO, SP, CP and its type, virtual
    and uneven stages, tied embeddings, recompute and the number format (FP8 recipes with their
    quantized SP gathers and layers kept in BF16 included)."""
    per_node = draw(st.sampled_from([4, 8]))
    nodes = draw(st.sampled_from([1, 2, 4]))
    t, p, c = (draw(st.sampled_from([1, 2, 4])) for _ in range(3))
    world = per_node * nodes
    assume(world % (t * p * c) == 0)
    d = world // (t * p * c)
    v = draw(st.sampled_from([1, 2])) if p > 2 else 1
    b = draw(st.sampled_from([1, 2]))
    m = p * draw(st.integers(1, 3))
    order = draw(st.sampled_from(["tp-cp-dp-pp", "tp-cp-pp-dp", "tp-dp-cp-pp", "cp-tp-dp-pp"]))
    uneven = p > 1 and v == 1 and draw(st.booleans())
    parallelism: dict[str, Any] = {
        "tensor": t,
        "pipeline": p,
        "context": c,
        "virtual_stages": v,
        "sequence_parallel": t > 1 and draw(st.booleans()),
        "zero_stage": draw(st.sampled_from([0, 1, 2, 3])) if d * c > 1 else 0,
        "order": order,
    }
    shards = [n for n in (1, 2, 4, 8) if (d * c) % n == 0 and n < d * c]
    if parallelism["zero_stage"] and shards and draw(st.booleans()):
        parallelism["data_shard"] = draw(st.sampled_from(shards))  # HSDP: the rest replicate
    if uneven:
        parallelism["stage_layers"] = [
            8 + (1 if i == 0 else -1 if i == p - 1 else 0) for i in range(p)
        ]
    framework = draw(st.sampled_from(["megatron", "deepspeed", "fsdp2"]))
    if c > 1:
        parallelism["cp_comm_type"] = draw(st.sampled_from(["p2p", "allgather"]))
    training: dict[str, Any] = {
        "seq_len": 64 * c,
        "micro_batch": b,
        "global_batch": b * d * m,
        "recompute": draw(
            st.sampled_from(
                ["none", "selective", "full"] + (["selective-op"] if framework == "fsdp2" else [])
            )
        ),
        "precision": draw(st.sampled_from(["bf16", "fp32", "fp8"])),
        "grad_accum_fp32": draw(st.booleans()),
        "framework": framework,
    }
    if framework == "fsdp2" and draw(st.booleans()):
        training["repeat_kv"] = True  # torchtitan's Llama before v0.2.2: K/V at every head
    if training["precision"] == "fp8":
        # Hopper's per-tensor recipes: Transformer Engine's under Megatron and DeepSpeed
        # (Megatron optionally keeping the first and last layers in BF16), torchao's under
        # torchtitan
        recipes = ["tensorwise", "rowwise"] if framework == "fsdp2" else ["delayed", "current"]
        fp8: dict[str, Any] = {"recipe": draw(st.sampled_from(recipes))}
        if framework == "megatron" and draw(st.booleans()):
            fp8["first_last_bf16"] = 1
        training["fp8"] = fp8
    return {
        "model": {
            "preset": None,
            "layers": 8 * p,
            "hidden": 256,
            "heads": 8,
            "kv_heads": draw(st.sampled_from([2, 8])),
            "vocab": 1000,
            "mlp": draw(st.sampled_from(["gelu", "swiglu", "quick_geglu"])),
            "tied_embeddings": draw(st.booleans()),
            "bias": draw(st.booleans()),
        },
        "hardware": {
            "gpus_per_node": per_node,
            "nvlink_domain": per_node,
            "nodes": nodes,
            "hosts": f"n{{1..{nodes}}}",
        },
        "parallelism": parallelism,
        "training": training,
        "rules": {"ignore": ["PLC006", "PLC011", "PLC017", "PLC018", "PLC019", "PLC020"]},
    }


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(overlay=layouts())
def test_compiled_plans_of_random_specs_verify(overlay: dict[str, Any]) -> None:
    overlay = copy.deepcopy(overlay)
    overlay["model"].pop("preset")
    plan = compiled(job_of(overlay))
    result = verify_text(plan_json(plan))
    assert result.ok, render(result)


def test_a_plan_above_the_records_limit_is_compact_and_verifies() -> None:
    """131,584 ranks: columns and starts + offsets, about 50 bytes a rank, verified as written."""
    from planc.compile.plan import RECORDS_LIMIT

    job = job_of(
        {
            "model": {"layers": 64},
            "hardware": {
                "nodes": 16448,
                "gpus_per_node": 8,
                "nvlink_domain": 8,
                "hosts": "n{00001..16448}",
            },
            "parallelism": {"tensor": 8, "pipeline": 16, "zero_stage": 1},
            "training": {"global_batch": 16448},
            "rules": {"ignore": ["PLC006", "PLC007"]},
        }
    )
    assert job.world > RECORDS_LIMIT
    text = plan_json(compiled(job))
    data = json.loads(text)
    assert data["ranks"]["encoding"] == "columns" and set(data["groups"]["tp"]) == {
        "starts",
        "offsets",
    }
    assert len(text) < 60 * job.world
    assert verify_text(text).ok
    # Corrupt one start: a group moves by one rank and the partition breaks.
    data["groups"]["dp"]["starts"][3] += 1
    result = verify_text(json.dumps(data))
    assert not result.ok and "groups.dp" in render(result)


# --- mixture of experts ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixtral() -> Plan:
    """Mixtral 8x7B on 64 H100s: EP = 8 inside each node, EDP = 2 across nodes, p = 4."""
    data: Plan = json.loads(plan_json(compiled(job_of(None, "mixtral-8x7b-64xh100.yaml"))))
    return data


def _all_to_all(plan: Plan) -> dict[str, Any]:
    return _op(plan, "ep", "all_to_all")


def test_the_mixtral_plan_verifies_and_simulates_its_exchange(mixtral: Plan) -> None:
    ok, text = verified(mixtral)
    assert ok, text
    assert "exchange all_to_all" in text and "groups.ep: 4 of 8 groups of 8" in text


MOE_MUTATIONS: dict[str, tuple[Callable[[Plan], None], str]] = {
    "an all-to-all's calls + 1": (
        lambda p: _all_to_all(p).__setitem__("calls", _all_to_all(p)["calls"] + 1),
        "stage 0 ep all_to_all",
    ),
    "an all-to-all's buffer + 2 bytes": (
        lambda p: _all_to_all(p).__setitem__("buffer_bytes", _all_to_all(p)["buffer_bytes"] + 2),
        "stage 0 ep all_to_all",
    ),
    "an all-to-all's bytes per call": (
        lambda p: _all_to_all(p).__setitem__("bytes_sent_per_call", _all_to_all(p)["buffer_bytes"]),
        "ep all_to_all: bytes_sent_per_call",
    ),
    "an expert gradient bucket": (
        lambda p: _op(p, "edp", "reduce_scatter").__setitem__("calls", 34),
        "stage 0 edp reduce_scatter",
    ),
    "two ranks swapped between ep groups": (
        lambda p: _swap(p["groups"]["ep"]),
        "groups.ep",
    ),
}


def _swap(groups: list[list[int]]) -> None:
    groups[0][1], groups[1][1] = groups[1][1], groups[0][1]


def _fails_naming(plan: Plan, mutation: tuple[Callable[[Plan], None], str]) -> None:
    """A copy of `plan` with `mutation` applied fails verify, naming what it names."""
    mutate, named = mutation
    corrupted = copy.deepcopy(plan)
    mutate(corrupted)
    ok, text = verified(corrupted)
    assert not ok and named in text, text


@pytest.mark.parametrize("kind", sorted(MOE_MUTATIONS))
def test_every_expert_corruption_fails_and_is_named(mixtral: Plan, kind: str) -> None:
    _fails_naming(mixtral, MOE_MUTATIONS[kind])


def test_cli_exits_1_naming_a_wrong_all_to_all(mixtral: Plan, tmp_path: Path) -> None:
    plan = copy.deepcopy(mixtral)
    _all_to_all(plan)["calls"] *= 2
    (tmp_path / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    done = _cli("verify", str(tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "stage 0 ep all_to_all" in done.stdout


@pytest.fixture(scope="module")
def mixtral_flex() -> Plan:
    """Mixtral 8x7B with HybridEP and EDP before ep: each EP group has 4 members on each of 2
    nodes, so the plan lists ep_domain and ep_peers and splits each exchange between them."""
    overlay = {"parallelism": {"order": "tp-cp-dp-ep-pp", "expert_dispatcher": "hybridep"}}
    data: Plan = json.loads(plan_json(compiled(job_of(overlay, "mixtral-8x7b-64xh100.yaml"))))
    return data


def test_a_flex_plan_verifies_and_simulates_its_parts(mixtral_flex: Plan) -> None:
    assert mixtral_flex["layout"]["expert"]["dispatcher"] == "hybridep"
    assert mixtral_flex["groups"]["ep_domain"][0] == [0, 2, 4, 6]
    assert mixtral_flex["groups"]["ep_peers"][0] == [0, 8]
    ok, text = verified(mixtral_flex)
    assert ok, text
    assert "groups.ep_peers" in text and "groups.ep_domain" in text


FLEX_MUTATIONS: dict[str, tuple[Callable[[Plan], None], str]] = {
    "the network part's rows + 1 byte": (
        lambda p: _op(p, "ep_peers", "all_to_all").__setitem__(
            "buffer_bytes", _op(p, "ep_peers", "all_to_all")["buffer_bytes"] + 1
        ),
        "stage 0 ep_peers all_to_all",
    ),
    "the plan claims DeepEP": (
        lambda p: p["layout"]["expert"].__setitem__("dispatcher", "deepep"),
        "ep_peers all_to_all",
    ),
    "two ranks swapped between domain slices": (
        lambda p: _swap(p["groups"]["ep_domain"]),
        "groups.ep_domain",
    ),
}


@pytest.mark.parametrize("kind", sorted(FLEX_MUTATIONS))
def test_every_flex_corruption_fails_and_is_named(mixtral_flex: Plan, kind: str) -> None:
    _fails_naming(mixtral_flex, FLEX_MUTATIONS[kind])


@pytest.fixture(scope="module")
def mixtral_padded() -> Plan:
    """Mixtral 8x7B padded to capacity at CF 1.3: each of the E = 8 experts takes
    C = ⌈(4,096·2/8)·1.3⌉ = ⌈1,331.2⌉ = 1,332 rows from every rank, E·C = 10,656 rows sent where
    the balanced T·k is 8,192."""
    overlay = {"model": {"moe": {"capacity_factor": 1.3, "pad_to_capacity": True}}}
    data: Plan = json.loads(plan_json(compiled(job_of(overlay, "mixtral-8x7b-64xh100.yaml"))))
    return data


def test_a_padded_plan_verifies_without_the_token_count_gather(mixtral_padded: Plan) -> None:
    assert mixtral_padded["model"]["moe"]["pad_to_capacity"] is True
    ok, text = verified(mixtral_padded)
    assert ok, text
    ops = mixtral_padded["communication"]["ops"]
    ep = [o for o in ops if o["stage"] == 0 and o["group"] == "ep"]
    # Tokens and outputs 10,656 rows of h = 4,096 bf16 values, probabilities 10,656 of 2 bytes,
    # and no all-gather of the counts.
    assert sorted((o["op"], o["buffer_bytes"]) for o in ep) == [
        ("all_to_all", 10_656 * 2),
        ("all_to_all", 10_656 * 4096 * 2),
        ("all_to_all", 10_656 * 4096 * 2),
    ]


def _gather_counts(p: Plan) -> None:
    """The token counts' all-gather a drop-only plan lists (EP·E longs, 7/8 of them sent, once
    per MoE layer and micro-batch forward), added to the padded one."""
    counts = {"op": "all_gather", "calls": 8 * 32, "buffer_bytes": 8 * 8 * 8}
    counts["bytes_sent_per_call"] = 448
    p["communication"]["ops"].append({**_all_to_all(p), **counts})


PADDED_MUTATIONS: dict[str, tuple[Callable[[Plan], None], str]] = {
    "the plan says drop only": (
        lambda p: p["model"]["moe"].pop("pad_to_capacity"),
        "stage 0 ep all_to_all",
    ),
    "another capacity factor": (
        lambda p: p["model"]["moe"].__setitem__("capacity_factor", 1.25),
        "stage 0 ep all_to_all",
    ),
    "an all-to-all at the balanced rows": (
        lambda p: _all_to_all(p).__setitem__("buffer_bytes", 8192 * 4096 * 2),
        "stage 0 ep all_to_all",
    ),
    "the token counts gathered": (_gather_counts, "stage 0 ep all_gather"),
}


@pytest.mark.parametrize("kind", sorted(PADDED_MUTATIONS))
def test_every_padded_corruption_fails_and_is_named(mixtral_padded: Plan, kind: str) -> None:
    _fails_naming(mixtral_padded, PADDED_MUTATIONS[kind])


@st.composite
def moe_layouts(draw: st.DrawFn) -> dict[str, Any]:
    """The dense layouts above with experts: E, k, EP, ETP, dense first layers, a layer
    frequency and offset, shared experts and ep placed in the order; only plannable ones are
    kept."""
    overlay = draw(layouts())
    par = overlay["parallelism"]
    experts = draw(st.sampled_from([4, 8]))
    par["expert"] = draw(st.sampled_from([e for e in (1, 2, 4, 8) if experts % e == 0]))
    par["expert_tensor"] = draw(st.sampled_from([1, 2]))
    dense = par["order"].split("-")
    dense.insert(draw(st.integers(0, len(dense))), "ep")
    par["order"] = "-".join(dense)
    overlay["model"]["moe"] = {
        "experts": experts,
        "top_k": draw(st.sampled_from([1, 2])),
        "expert_ffn_hidden": draw(st.sampled_from([128, 320])),
        "shared_experts": draw(st.sampled_from([0, 1])),
        "first_dense_layers": draw(st.sampled_from([0, 1, 3])),
        "layer_frequency": draw(st.sampled_from([1, 2])),
    }
    # The experts in the odd layers (Llama 4 Maverick's pattern) when every second layer has them.
    if overlay["model"]["moe"]["layer_frequency"] == 2:
        overlay["model"]["moe"]["layer_offset"] = draw(st.sampled_from([0, 1]))
    # Every dispatcher, and group-limited routing (2 groups, top_k from k_G of them).
    par["expert_dispatcher"] = draw(st.sampled_from(["alltoall", "allgather", "deepep", "hybridep"]))
    top_k = overlay["model"]["moe"]["top_k"]
    if draw(st.booleans()):
        overlay["model"]["moe"]["router_groups"] = 2
        overlay["model"]["moe"]["router_group_top_k"] = draw(
            st.sampled_from([g for g in (1, 2) if top_k % g == 0])
        )
    # Token drop on the alltoall dispatcher, padded to capacity or not (PLC031 refuses padding
    # on the others); k·CF ≤ 2·1.3 stays below E.
    if par["expert_dispatcher"] == "alltoall" and draw(st.booleans()):
        overlay["model"]["moe"]["capacity_factor"] = draw(st.sampled_from([1.0, 1.3]))
        overlay["model"]["moe"]["pad_to_capacity"] = draw(st.booleans())
    # The gate's choice: uniform, or NeMo AutoModel's round robin (training.expert_routing).
    overlay["training"]["expert_routing"] = draw(st.sampled_from(["uniform", "round_robin"]))
    overlay["rules"]["ignore"] = [*overlay["rules"]["ignore"], "PLC007", "PLC021"]
    # Megatron's --recompute-modules: the collectives of a recomputed MLP, shared experts or
    # MoE block run again in backward, and verify recounts them from the plan.
    training = overlay["training"]
    if training["recompute"] == "selective" and training["framework"] == "megatron":
        modules = ["core_attn", "layernorm", "mlp", "moe_act", "moe", "shared_experts"]
        training["recompute_modules"] = draw(st.lists(st.sampled_from(modules), unique=True))
    return overlay


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(overlay=moe_layouts())
def test_compiled_plans_of_random_moe_specs_verify(overlay: dict[str, Any]) -> None:
    """The schedule's expert ops and every rank's wire bytes equal verify's recount from
    tensor shapes, and the exchanges simulate, on random mixture-of-experts layouts."""
    overlay = copy.deepcopy(overlay)
    overlay["model"].pop("preset")
    job = plannable(resolved_of(overlay))
    assume(not isinstance(job, tuple))
    assert not isinstance(job, tuple)
    # What planc check refuses for the dispatcher (PLC048, PLC050: DeepEP's peers beyond one
    # NVLink domain; PLC049: DeepSpeed's all-to-all only) is never compiled; the test above
    # says what verify finds in it.
    assume(not megatron_dispatcher_findings(job))
    result = verify_text(plan_json(compiled(job)))
    assert result.ok, render(result)


# Found by the random MoE plans: on 4 nodes of 4, order ep-cp-tp-dp-pp puts two members of each
# dp_cp group in a node and one of each expert-data group, so the dense gradients' ring spreads
# over two NICs (planc.comm.tiers.railed_ring_gbs) and its larger buffer takes less time.
RAILED_OVERLAY: dict[str, Any] = {
    "model": {
        "layers": 8, "hidden": 256, "heads": 8, "kv_heads": 2, "vocab": 1000, "mlp": "gelu",
        "tied_embeddings": False, "bias": False,
        "moe": {"experts": 4, "top_k": 1, "expert_ffn_hidden": 128, "shared_experts": 0,
                "first_dense_layers": 0, "layer_frequency": 1},
    },
    "hardware": {"gpus_per_node": 4, "nvlink_domain": 4, "nodes": 4, "hosts": "n{1..4}"},
    "parallelism": {
        "tensor": 4, "pipeline": 1, "context": 2, "virtual_stages": 1,
        "sequence_parallel": False, "zero_stage": 0, "order": "ep-cp-tp-dp-pp", "expert": 2,
        "expert_tensor": 2,
    },
    "training": {
        "seq_len": 128, "micro_batch": 1, "global_batch": 2, "recompute": "none",
        "precision": "bf16", "grad_accum_fp32": False, "framework": "megatron",
    },
    "rules": {"ignore": ["PLC006", "PLC011", "PLC017", "PLC018", "PLC019", "PLC020", "PLC007",
                         "PLC021"]},
}


def megatron_dispatcher_findings(job: Plannable) -> list[str]:
    """The framework's refusals of the job's dispatcher (PLC048 under Megatron-LM, PLC050's
    DeepEP and HybridEP limits under torchtitan, PLC049 under DeepSpeed: its all-to-all only),
    their messages."""
    if job.training.framework == "deepspeed":
        return [] if job.layout.dispatcher == "alltoall" else ["DeepSpeed runs its all-to-all"]
    return [violation.message for violation in dispatcher_refusals(job)]


def _railed_plan() -> Plan:
    job = plannable(resolved_of(copy.deepcopy(RAILED_OVERLAY)))
    assert not isinstance(job, tuple)
    plan: Plan = json.loads(plan_json(compiled(job)))
    return plan


def test_rings_over_more_nics_are_not_held_to_one_nic_rings_times() -> None:
    plan = _railed_plan()
    reduces = {op["group"]: op for op in plan["communication"]["ops"] if op["group"] in ("dp_cp", "edp")}
    # The premise: the larger dp_cp buffer is the faster per call, on the same tier and n.
    assert reduces["dp_cp"]["buffer_bytes"] > reduces["edp"]["buffer_bytes"]
    assert reduces["dp_cp"]["time_s"] < reduces["edp"]["time_s"]
    assert reduces["dp_cp"]["link"] == reduces["edp"]["link"] == "network"
    result = verify_text(json.dumps(plan))
    assert result.ok, render(result)


# Found by the random MoE plans: DeepEP takes 8 consecutive members of its 16-rank tp × ep group
# as NVLink peers, on domains of 4, a layout PLC048 refuses. Compiled all the same, the plan
# prices its ep_domain exchange on the tier its groups lie on, and verify names the one thing
# wrong: DeepEP's peers are not in one NVLink domain.
DEEPEP_OVER_DOMAINS: dict[str, Any] = {
    **RAILED_OVERLAY,
    "model": {
        **RAILED_OVERLAY["model"],
        "moe": {**RAILED_OVERLAY["model"]["moe"], "experts": 8},
    },
    "parallelism": {
        "tensor": 1, "pipeline": 1, "context": 1, "virtual_stages": 1,
        "sequence_parallel": False, "zero_stage": 0, "order": "ep-tp-cp-dp-pp", "expert": 8,
        "expert_tensor": 2, "expert_dispatcher": "deepep",
    },
    "training": {**RAILED_OVERLAY["training"], "seq_len": 64, "global_batch": 16,
                 "expert_routing": "uniform"},
}


def test_deepep_peers_beyond_one_domain_are_priced_where_they_lie() -> None:
    job = plannable(resolved_of(copy.deepcopy(DEEPEP_OVER_DOMAINS)))
    assert not isinstance(job, tuple)
    plan: Plan = json.loads(plan_json(compiled(job)))
    domain = [op for op in plan["communication"]["ops"] if op["group"] == "ep_domain"]
    assert domain and {op["link"] for op in domain} == {"network"}
    (refusal,) = megatron_dispatcher_findings(job)
    assert "DeepEP takes 8 consecutive ranks" in refusal
    result = verify_text(json.dumps(plan))
    failed = [c for c in result.checks if getattr(c, "problems", ())]
    assert [c.name for c in failed] == ["process groups"], render(result)
    assert "groups.ep_domain group 0" in failed[0].problems[0]
    assert "spans NVLink domains" in failed[0].problems[0]


def test_deepep_slices_follow_the_rank_order_of_their_group() -> None:
    # The same group on 2 nodes of 8: with ep before tp in the order, its members vary fastest on
    # ep, so each slice of 8 is one node's ep ranks, and its exchange stays on NVLink.
    overlay = copy.deepcopy(DEEPEP_OVER_DOMAINS)
    overlay["hardware"] = {"gpus_per_node": 8, "nvlink_domain": 8, "nodes": 2, "hosts": "n{1..2}"}
    job = plannable(resolved_of(overlay))
    assert not isinstance(job, tuple)
    assert not megatron_dispatcher_findings(job)
    plan: Plan = json.loads(plan_json(compiled(job)))
    domain = [op for op in plan["communication"]["ops"] if op["group"] == "ep_domain"]
    assert domain and {op["link"] for op in domain} == {"nvlink"}
    assert plan["groups"]["ep_domain"][0] == list(range(8))
    result = verify_text(json.dumps(plan))
    assert result.ok, render(result)


# Found by the random MoE plans: on 2 nodes of 8, order cp-tp-dp-ep-pp with c = t = 4 puts a
# TP group on two nodes, two members on each, as the allgather dispatcher's tp_ep group. A ring
# over either spreads its cross-node hops over two NICs: planc had railed only the data-parallel
# and expert groups, so the TP ring of the same bytes cost more than the tp_ep one.
TP_ACROSS_DOMAINS = {
    "model": RAILED_OVERLAY["model"],  # the same small MoE model
    "hardware": {"gpus_per_node": 8, "nvlink_domain": 8, "nodes": 2, "hosts": "n{1..2}"},
    "parallelism": {
        "tensor": 4, "pipeline": 1, "context": 4, "virtual_stages": 1, "sequence_parallel": True,
        "zero_stage": 0, "order": "cp-tp-dp-ep-pp", "expert": 2, "expert_tensor": 2,
        "expert_dispatcher": "allgather",
    },
    "training": {"seq_len": 256, "micro_batch": 1, "global_batch": 1, "recompute": "none",
                 "precision": "bf16", "framework": "megatron", "expert_routing": "uniform"},
    "rules": {"ignore": ["PLC006", "PLC007", "PLC011", "PLC017", "PLC018", "PLC019", "PLC020",
                         "PLC021"]},
}


def test_every_ring_group_across_domains_is_railed_alike() -> None:
    job = plannable(resolved_of(copy.deepcopy(TP_ACROSS_DOMAINS)))
    assert not isinstance(job, tuple)
    plan: Plan = json.loads(plan_json(compiled(job)))
    assert plan["groups"]["tp"][0] == [0, 4, 8, 12]  # two members on each node
    ops = plan["communication"]["ops"]
    per_call = {
        (op["group"], op["op"]): op["time_s"] / op["calls"]
        for op in ops
        if op["buffer_bytes"] == 32768 and op["link"] == "network"
    }
    # equal up to time_s's rounding to 1e-9 s over each op's calls
    tp, tp_ep = per_call[("tp", "all_gather")], per_call[("tp_ep", "all_gather")]
    assert tp == pytest.approx(tp_ep, rel=1e-5)
    result = verify_text(json.dumps(plan))
    assert result.ok, render(result)


def test_a_railed_ring_slower_than_a_smaller_one_of_its_kind_fails() -> None:
    plan = _railed_plan()
    ops = plan["communication"]["ops"]
    edp = next(op for op in ops if op["group"] == "edp")
    # Another one-NIC ring of the edp group, twice the buffer in less time: not the α-β model.
    faster = {**edp, "buffer_bytes": 2 * edp["buffer_bytes"], "time_s": edp["time_s"] / 2}
    ops.append(faster)
    result = verify_text(json.dumps(plan))
    timed = [c for c in result.checks if getattr(c, "name", "") == "op times"]
    assert len(timed) == 1
    assert any("edp all_reduce on network" in problem for problem in timed[0].problems)


# Llama 3 8B on 16 H100, t2 c4: Ulysses (a2a), all-gather, and a2a over 2 with a ring across 2.
CP_TYPES = ("p2p", "a2a", "allgather", "a2a+p2p")


def _cp_plan(kind: str) -> Plan:
    overlay = {
        "hardware": {"nodes": 2, "hosts": ["gpu-a01", "gpu-a02"]},
        "parallelism": {"tensor": 2, "context": 4, "cp_comm_type": kind},
        "training": {"seq_len": 8192, "global_batch": 64},
    }
    plan: Plan = json.loads(plan_json(compiled(job_of(overlay))))
    return plan


@pytest.mark.parametrize("kind", CP_TYPES)
def test_every_context_parallel_type_verifies(kind: str) -> None:
    plan = _cp_plan(kind)
    assert plan["layout"].get("cp_comm_type", "p2p") == kind
    ok, text = verified(plan)
    assert ok, text


def test_a_plan_claiming_another_context_parallel_type_fails() -> None:
    # The ops are Ulysses' all-to-alls; the layout says ring attention: the ring's K/V blocks,
    # 3·(c − 1) per layer and micro-batch, are missing, and the all-to-alls are not expected.
    plan = _cp_plan("a2a")
    del plan["layout"]["cp_comm_type"]
    ok, text = verified(plan)
    assert not ok
    assert "cp send_recv" in text and "cp all_to_all" in text


def test_the_inner_all_to_all_groups_are_blocks_of_the_context_groups() -> None:
    # a2a+p2p: a = 2 (a·t = 4 ranks within the NVLink domain, the 4 kv heads per TP rank split
    # by 2), so each CP group of 4 holds two all-to-all groups of 2 and a ring of 2 across them.
    plan = _cp_plan("a2a+p2p")
    assert plan["layout"]["cp_a2a_size"] == 2
    ops = {(o["op"], o["group_size"]) for o in plan["communication"]["ops"] if o["group"] == "cp"}
    assert ops == {("all_to_all", 2), ("send_recv", 2)}
