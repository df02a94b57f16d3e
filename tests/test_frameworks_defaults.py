"""Defaults that run (issue 28): what planc fills in for a field the spec leaves out is a layout
the chosen framework accepts.

The rank order: with `expert: 8` and no `order`, planc takes Megatron-Core's default,
tp-cp-ep-dp-pp (megatron/core/parallel_state.py initialize_model_parallel, order=
"tp-cp-ep-dp-pp", which megatron/training/initialize.py passes), so the spec compiles. Where
PLANC_MEGATRON_PYTHON names an interpreter with megatron-core, Megatron-LM's validate_args reads
the emitted arguments and Megatron-Core's RankGenerator builds the groups of that order, which
must be plan.json's.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_frameworks import MEGATRON_PARSE, _interpreter, _run

from planc.check import evaluate
from planc.compile import render_files
from planc.findings import Severity
from planc.rules import FRAMEWORK_RULES
from planc.spec.load import load_text

from conftest import check_text, compiled, example_data, job_of, spec_text

BASE = "mixtral-8x7b-64xh100.yaml"


def without_order(overlay: dict[str, Any] | None = None) -> str:
    """The Mixtral example (expert 8, pipeline 4) with its `order:` line removed."""
    data = example_data(BASE)
    del data["parallelism"]["order"]
    for key, value in (overlay or {}).items():
        data[key] = {**data.get(key, {}), **value}
    return yaml.safe_dump(data, sort_keys=False)


def test_expert_parallel_spec_without_an_order_checks_clean() -> None:
    result = check_text(without_order())
    assert [f.rule for f in result.findings if f.severity.rank >= 1] == []


def test_expert_parallel_spec_without_an_order_compiles_with_megatrons_order() -> None:
    data = yaml.safe_load(without_order())
    plan = compiled(job_of(data, BASE))
    record = json.loads(render_files(plan)["plan.json"])
    assert record["layout"]["expert"]["order"] == ["tp", "cp", "ep", "dp", "pp"]
    assert record["layout"]["order"] == ["tp", "cp", "dp", "pp"]
    # EP 8 of 64 ranks, tp = cp = 1: with ep fastest after tp and cp, each EP group is 8
    # consecutive ranks (by hand: stride of ep = tp·cp = 1).
    assert record["groups"]["ep"][0] == list(range(8))
    assert record["groups"]["ep"][1] == list(range(8, 16))


def test_a_dense_spec_without_an_order_keeps_tp_cp_dp_pp() -> None:
    job = job_of(None, "llama3-70b-8x8.yaml")
    assert [axis.value for axis in job.layout.order] == ["tp", "cp", "dp", "pp"]
    # ep is appended with size 1 (RankGenerator's rule for an axis the order leaves out).
    assert job.layout.expert_order == ("tp", "cp", "dp", "pp", "ep")


def test_a_written_order_is_kept() -> None:
    data = yaml.safe_load(without_order({"parallelism": {"order": "tp-ep-cp-dp-pp"}}))
    plan = compiled(job_of(data, BASE))
    assert plan.job.layout.expert_order == ("tp", "ep", "cp", "dp", "pp")


RANKS = """
import json, sys
from megatron.core.parallel_state import RankGenerator
out = {}
for case, (sizes, edp, order) in json.load(sys.stdin).items():
    dense = RankGenerator(tp=sizes["tp"], ep=1, dp=sizes["dp"], pp=sizes["pp"], cp=sizes["cp"],
                          order=order)
    expert = RankGenerator(tp=sizes["etp"], ep=sizes["ep"], dp=edp, pp=sizes["pp"], cp=1,
                           order=order)
    out[case] = {"tp": dense.get_ranks("tp"), "dp": dense.get_ranks("dp"),
                 "pp": dense.get_ranks("pp"), "ep": expert.get_ranks("ep"),
                 "expert_pp": expert.get_ranks("pp")}
print(json.dumps(out))
"""

# Default-order expert layouts: EP inside a node, EP with TP/ETP, EP with CP.
ORDERLESS: dict[str, dict[str, Any]] = {
    "ep8-pp4": {},
    "ep4-tp2-sp": {"parallelism": {"tensor": 2, "data": 8, "expert": 4, "sequence_parallel": True}},
    "ep8-cp2": {"parallelism": {"context": 2, "data": 8, "pipeline": 4}},
}


def test_megatron_accepts_the_default_order() -> None:
    python = _interpreter("PLANC_MEGATRON_PYTHON", "megatron.training.arguments")
    if python is None:
        pytest.skip(
            "megatron.training.arguments is not importable (pip install megatron-core on "
            "Python >= 3.12, and point PLANC_MEGATRON_PYTHON at that interpreter)"
        )
    plans = {
        case: compiled(job_of(yaml.safe_load(without_order(overlay)), BASE))
        for case, overlay in ORDERLESS.items()
    }
    records = {case: json.loads(render_files(plan)["plan.json"]) for case, plan in plans.items()}
    parsed = _run(
        python,
        MEGATRON_PARSE,
        {
            case: [
                render_files(plan)["megatron/args.txt"].splitlines(),
                plan.world,
                plan.job.model.V,
            ]
            for case, plan in plans.items()
        },
    )
    payload = {}
    for case, plan in plans.items():
        lay = plan.job.layout
        sizes = {"tp": lay.t, "cp": lay.c, "dp": lay.d, "pp": lay.p, "ep": lay.ep, "etp": lay.et}
        payload[case] = [sizes, lay.edp, "-".join(lay.expert_order)]
    groups = _run(python, RANKS, payload)
    for case, plan in plans.items():
        lay, record = plan.job.layout, records[case]
        assert "-".join(lay.expert_order) == "tp-cp-ep-dp-pp"
        assert parsed[case]["validated_data_parallel_size"] == lay.d
        assert parsed[case]["expert_model_parallel_size"] == lay.ep
        for kind in ("tp", "dp", "pp", "ep"):
            assert record["groups"][kind] == groups[case][kind], (case, kind)
        # Megatron-Core requires the dense and expert pipeline groups equal.
        assert groups[case]["pp"] == groups[case]["expert_pp"]


# ----------------------------------------------------------------------------- every default

# What planc fills in that these specs leave out: the rank order, the ZeRO stage, the pipeline
# schedule (from virtual_stages), the FP8 recipe, expert_tensor. A framework's refusal of such a
# spec must be located at a field the spec writes (the user's choice), never at a default.
FILLED = ("order", "zero_stage", "virtual_stages", "pipeline_schedule", "expert_tensor")


def written_fields(data: Any, prefix: str = "") -> set[str]:
    """Every dotted path the spec data writes (mappings' keys, at every depth)."""
    if not isinstance(data, dict):
        return set()
    out = set()
    for key, value in data.items():
        path = f"{prefix}{key}"
        out |= {path} | written_fields(value, f"{path}.")
    return out


@st.composite
def default_specs(draw: st.DrawFn) -> str:
    """A dense (Llama 3 8B on 8 GPUs, 8B on 64) or mixture-of-experts (Mixtral on 64 GPUs) spec
    with random degrees, framework and precision, and none of FILLED written."""
    base, world = draw(
        st.sampled_from(
            [("llama3-8b-1node.yaml", 8), ("llama3-70b-8x8.yaml", 64), (BASE, 64)]
        )
    )
    data = example_data(base)
    for name in FILLED:
        data["parallelism"].pop(name, None)
    t = draw(st.sampled_from([1, 2, 8]))
    p = draw(st.sampled_from([1, 2, 4]))
    c = draw(st.sampled_from([1, 2]))
    assume(world % (t * p * c) == 0)
    par = data["parallelism"]
    par.update(tensor=t, pipeline=p, context=c, data=world // (t * p * c))
    par["sequence_parallel"] = t > 1
    if base == BASE:
        par["expert"] = draw(st.sampled_from([1, 2, 4, 8]))
    training = data["training"]
    training["framework"] = draw(
        st.sampled_from(["megatron", "megatron-fsdp", "deepspeed", "fsdp2"])
    )
    training["precision"] = draw(st.sampled_from(["bf16", "fp8"]))
    return yaml.safe_dump(data, sort_keys=False)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(default_specs())
def test_no_framework_refusal_comes_from_a_default(text: str) -> None:
    loaded = load_text("spec.yaml", text)
    assume(loaded.job is not None)
    assert loaded.job is not None
    written = written_fields(yaml.safe_load(text))
    for rule_id, severity, violation in evaluate(loaded.job, suggest=False).violations:
        if rule_id in FRAMEWORK_RULES and severity is Severity.ERROR:
            assert violation.field in written, (rule_id, violation.field, violation.message)


def test_the_fp8_default_is_the_frameworks_recipe() -> None:
    # Megatron's --fp8-recipe default is delayed; torchtitan 0.3.0's Float8LinearConverter
    # defaults to rowwise (torchao), which it runs, where delayed is Transformer Engine's.
    for framework, recipe in (("megatron", "delayed"), ("deepspeed", "delayed"), ("fsdp2", "rowwise")):
        text = spec_text({"training": {"precision": "fp8", "framework": framework}})
        result = check_text(text)
        assert not [f for f in result.findings if f.rule in FRAMEWORK_RULES], framework
        job = load_text("spec.yaml", text).job
        assert job is not None and job.training.fp8_recipe is not None
        assert job.training.fp8_recipe.value == recipe


TORCHTITAN_DIMS = """
import json, sys
sys.path.insert(0, ".")
from torchtitan.config import ConfigManager
from torchtitan.distributed.parallel_dims import ParallelDims
module, world = json.load(sys.stdin)
config = ConfigManager().parse_args(["--module", module, "--config", "planc"])
dims = ParallelDims.from_config(config.parallelism, world)  # __post_init__ validates the world
print(json.dumps({"ep": dims.ep, "dp_shard": dims.dp_shard, "cp": dims.cp, "tp": dims.tp,
                  "dp_replicate": dims.dp_replicate, "pp": dims.pp}))
"""


def test_torchtitan_takes_the_default_expert_layout(tmp_path: Any) -> None:
    """Qwen3-30B-A3B (torchtitan has its config) on 64 GPUs under fsdp2 with tensor 2, pipeline
    4, expert 8 and no order or expert_tensor: planc plans whole experts (expert_tensor 1, as
    torchtitan runs them) and the emitted module is one torchtitan reads, whose ParallelDims
    validates and whose dense region dp_shard × cp × tp = 8 × 1 × 2 = 16 holds expert 8."""
    python = _interpreter("PLANC_TORCHTITAN_PYTHON", "torchtitan.models.qwen3.config_registry")
    if python is None:
        pytest.skip(
            "torchtitan is not importable (pip install torchtitan==0.3.0 with torch, and point "
            "PLANC_TORCHTITAN_PYTHON at that interpreter)"
        )
    text = without_order(
        {
            "model": {"preset": "qwen3-30b-a3b"},
            "parallelism": {"tensor": 2, "data": 8, "sequence_parallel": True},
            "training": {"framework": "fsdp2"},
        }
    )
    found = check_text(text).findings
    assert not [f for f in found if f.rule in FRAMEWORK_RULES or f.severity is Severity.ERROR]
    plan = compiled(job_of(yaml.safe_load(text), BASE))
    assert plan.job.layout.et == 1
    (tmp_path / "planc_qwen.py").write_text(render_files(plan)["torchtitan/planc_config.py"])
    dims = _run(python, TORCHTITAN_DIMS, ["planc_qwen", plan.world], tmp_path)
    assert (dims["ep"], dims["tp"], dims["pp"], dims["cp"]) == (8, 2, 4, 1)
    assert dims["dp_replicate"] * dims["dp_shard"] == 8
    assert dims["dp_shard"] * dims["cp"] * dims["tp"] % dims["ep"] == 0
