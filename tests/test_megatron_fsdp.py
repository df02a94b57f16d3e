"""training.framework: megatron-fsdp (issue 28): Megatron-LM with Megatron-Core's FSDP.

zero_stage is the --data-parallel-sharding-strategy; the arguments planc writes go through
Megatron-LM's own parser and validate_args (megatron-core 0.19.2, PLANC_MEGATRON_PYTHON);
PLC052's refusals (no pipeline, tensor ranks fastest) are held against the DeviceMesh that
Megatron-FSDP's adapter builds (einops over torch.arange(world_size), mcore_fsdp_adapter.py)
and Megatron-Core's own RankGenerator groups. Each comparison skips, saying why, without
megatron-core.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_frameworks import MEGATRON_PARSER, _run, megatron_python

from planc.analysis import estimate_step
from planc.compile.frameworks import megatron_arguments, megatron_files
from planc.memory.budget import budget
from planc.outputs.memory import render_text, to_json
from planc.search.run import search

from conftest import analysis_of, check_overlay, compiled, job_of, search_setup

FSDP = {"framework": "megatron-fsdp"}
# ZeRO-0 (no_shard) keeps every weight, gradient and moment: it fits with full recompute.
FULL = {"framework": "megatron-fsdp", "recompute": "full"}

# Llama 3 8B on one node of 8 H100s: tensor 2, data 4, by ZeRO stage, and HSDP (shards over
# 2 ranks, 2 replicas).
CASES: dict[str, dict[str, Any]] = {
    **{
        f"zero{stage}": {"parallelism": {"tensor": 2, "zero_stage": stage}, "training": FULL}
        for stage in range(4)
    },
    "hsdp": {"parallelism": {"tensor": 2, "zero_stage": 3, "data_shard": 2}, "training": FSDP},
}

MEGATRON_FSDP_PARSE = MEGATRON_PARSER + r"""
from megatron.core.distributed.fsdp.src.megatron_fsdp.fully_shard import ShardingStrategy
# What megatron/README.md tells a Megatron-FSDP run: CUDA_DEVICE_MAX_CONNECTIONS unset.
os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
out = {}
for case, (lines, world, vocab) in json.load(sys.stdin).items():
    words = [word for line in lines for word in line.split()]
    args = parser.parse_args(words + extra + ["--vocab-size", str(vocab)])
    args.world_size, args.rank = world, 0
    arguments.validate_args(args)
    out[case] = {
        "use_megatron_fsdp": args.use_megatron_fsdp,
        "strategy": args.data_parallel_sharding_strategy,
        "ckpt_format": args.ckpt_format,
        "distributed_optimizer": args.use_distributed_optimizer,
        "instances": args.num_distributed_optimizer_instances,
        "data_parallel_size": args.data_parallel_size,
        "pipeline": args.pipeline_model_parallel_size,
        # Megatron-FSDP's own names of its strategies, 0-3 (fully_shard.py ShardingStrategy).
        "strategies": [s.name.lower() for s in sorted(ShardingStrategy)],
    }
print(json.dumps(out))
"""

CONNECTIONS = r"""
import argparse, json, os, sys
import megatron.training.arguments as arguments
os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
arguments.get_device_arch_version = lambda: 9
parser = arguments.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
lines, world, vocab = json.load(sys.stdin)
words = [word for line in lines for word in line.split()]
args = parser.parse_args(words + ["--tokenizer-type", "NullTokenizer", "--mock-data",
                                  "--train-iters", "10", "--lr", "1e-4", "--vocab-size", str(vocab)])
args.world_size, args.rank = world, 0
try:
    arguments.validate_args(args)
    print(json.dumps(None))
except AssertionError as refused:
    print(json.dumps(str(refused)))
"""

# The adapter's meshes (mcore_fsdp_adapter.py _get_dp_tp_mesh, megatron-core 0.19.2), built the
# same way from the process-group sizes, beside Megatron-Core's tensor-parallel groups for the
# order (RankGenerator, as initialize_model_parallel makes them).
MESH = r"""
import json, sys
import einops, torch
from megatron.core.parallel_state import RankGenerator
out = {}
for case, (t, c, d, p, order) in json.load(sys.stdin).items():
    world = t * c * d * p
    try:
        mesh = einops.rearrange(torch.arange(world), "(dp_cp ep tp) -> ep dp_cp tp",
                                dp_cp=d * c, tp=t, ep=1)
    except Exception as refused:  # einops.EinopsError: the world is not dp_cp x tp
        out[case] = {"built": False, "why": str(refused).splitlines()[0]}
        continue
    rows = einops.rearrange(mesh, "ep dp_cp tp -> (dp_cp ep) tp", tp=t).tolist()
    groups = RankGenerator(tp=t, ep=1, dp=d, pp=p, cp=c, order=order).get_ranks("tp")
    out[case] = {"built": True, "tp_match": sorted(map(sorted, rows)) == sorted(map(sorted, groups))}
print(json.dumps(out))
"""




def _payload(overlay: dict[str, Any]) -> list[Any]:
    plan = compiled(job_of(overlay))
    return [megatron_arguments(plan)[0], plan.world, plan.job.model.V]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_cases_pass_planc_check(case: str) -> None:
    errors = [f for f in check_overlay(CASES[case]).findings if f.severity.rank >= 2]
    assert errors == []


def test_megatron_runs_each_zero_stage_as_its_sharding_strategy() -> None:
    python = megatron_python()
    parsed = _run(python, MEGATRON_FSDP_PARSE, {case: _payload(o) for case, o in CASES.items()})
    for case, overlay in CASES.items():
        got = parsed[case]
        stage = overlay["parallelism"]["zero_stage"]
        # Megatron-FSDP's strategy k shards what ZeRO-k does (ShardingStrategy's docstring).
        assert got["strategy"] == got["strategies"][stage], case
        assert got["use_megatron_fsdp"] and got["distributed_optimizer"], case
        assert got["ckpt_format"] == "fsdp_dtensor"
        assert got["pipeline"] == 1
        assert got["data_parallel_size"] == 4  # 8 GPUs / tensor 2
    # HSDP: 4 data-parallel ranks sharded in groups of 2, so 2 optimizer instances.
    assert parsed["hsdp"]["instances"] == 2
    assert parsed["zero3"]["instances"] == 1
    assert parsed["zero3"]["strategy"] == "optim_grads_params"


def test_the_readme_says_what_megatron_fsdp_wants_of_cuda_device_max_connections() -> None:
    files = megatron_files(compiled(job_of(CASES["zero3"])))
    readme = files["megatron/README.md"]
    assert "requires CUDA_DEVICE_MAX_CONNECTIONS=1" not in readme
    assert "leave it unset" in readme
    python = megatron_python()
    refused = _run(python, CONNECTIONS, _payload(CASES["zero3"]))
    assert refused is not None and "CUDA_DEVICE_MAX_CONNECTIONS" in refused


def _plc052(overlay: dict[str, Any]) -> list[Any]:
    return [f for f in check_overlay(overlay).findings if f.rule == "PLC052"]


def test_plc052_refuses_a_pipeline_and_a_tensor_axis_that_is_not_fastest() -> None:
    piped = {"parallelism": {"tensor": 2, "pipeline": 2, "zero_stage": 3}, "training": FSDP}
    (finding,) = _plc052(piped)
    assert finding.severity.rank >= 2 and "pipeline = 2" in finding.message
    reordered = {"parallelism": {"tensor": 2, "order": "cp-dp-tp-pp"}, "training": FSDP}
    (finding,) = _plc052(reordered)
    assert "order cp-dp-tp-pp" in finding.message
    # Megatron-LM's distributed optimizer runs both: the rule is Megatron-FSDP's alone.
    for overlay in (piped, reordered):
        assert _plc052({**overlay, "training": {"framework": "megatron"}}) == []
    python = megatron_python()
    mesh = _run(
        python,
        MESH,
        {
            "default": [2, 1, 4, 1, "tp-cp-dp-pp"],
            "piped": [2, 1, 2, 2, "tp-cp-dp-pp"],
            "reordered": [2, 1, 4, 1, "cp-dp-tp-pp"],
        },
    )
    assert mesh["default"] == {"built": True, "tp_match": True}
    assert mesh["piped"]["built"] is False
    assert mesh["reordered"] == {"built": True, "tp_match": False}


def test_each_strategy_is_priced_as_its_zero_stage() -> None:
    # Megatron-FSDP's strategy k keeps what ZeRO-k keeps: the same bytes and step time as
    # Megatron's own ZeRO-k at the same layout (the priced terms are shared).
    for stage in range(4):
        layout = {"tensor": 2, "zero_stage": stage}
        fsdp = analysis_of({"parallelism": layout, "training": FSDP})
        megatron = analysis_of({"parallelism": layout})
        assert fsdp.memory.peak.memory == megatron.memory.peak.memory
        assert estimate_step(fsdp).step_time_s == estimate_step(megatron).step_time_s
        assert fsdp.ops == megatron.ops


SEARCHED = """\
version: 1
name: megatron-fsdp-search
model: {preset: llama3-8b}
hardware: {gpu: h100-sxm, nodes: 2}
training: {seq_len: 4096, global_batch: 64, recompute: full, framework: megatron-fsdp}
search: {context: [1], micro_batch: [1], precision: [bf16]}
"""


def test_search_under_megatron_fsdp_keeps_one_pipeline_stage() -> None:
    result = search(search_setup(SEARCHED), 10**6)
    names = [axis.name for axis in result.space.axes]
    assert "pipeline" in names and result.results
    pipelines = {
        dict(zip(names, result.space.candidate(r.verdict.index), strict=True))["pipeline"]
        for r in result.results
    }
    assert pipelines == {1}
    # Every candidate with a pipeline was Megatron-FSDP's refusal, not a result.
    assert result.rejected_by_rule["PLC052"] > 0


OFFLOAD = r"""
import argparse, json, os, sys
os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
import megatron.training.arguments as arguments
from megatron.core.optimizer.optimizer_config import OptimizerConfig
arguments.get_device_arch_version = lambda: 9
parser = arguments.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
lines, world, vocab = json.load(sys.stdin)
words = [word for line in lines for word in line.split()]
args = parser.parse_args(words + ["--tokenizer-type", "NullTokenizer", "--mock-data",
                                  "--train-iters", "10", "--lr", "1e-4", "--vocab-size", str(vocab)])
args.world_size, args.rank = world, 0
try:
    arguments.validate_args(args)
    OptimizerConfig(optimizer=args.optimizer, lr=1e-4,
                    use_distributed_optimizer=args.use_distributed_optimizer,
                    use_precision_aware_optimizer=True, optimizer_cpu_offload=True)
    print(json.dumps(None))
except (AssertionError, ValueError) as refused:
    print(json.dumps(str(refused)))
"""


def test_an_optimizer_offload_at_no_shard_runs_under_megatron_fsdp_only() -> None:
    # Megatron-FSDP always builds the distributed optimizer, so the precision-aware optimizer
    # that offloads it starts at zero_stage 0 too; Megatron's own distributed optimizer needs 1.
    offload = {"recompute": "full", "offload": {"optimizer": True}}
    fsdp = {"parallelism": {"tensor": 2, "zero_stage": 0}, "training": {**FSDP, **offload}}
    plain = {"parallelism": {"tensor": 2, "zero_stage": 0}, "training": offload}
    assert not [f for f in check_overlay(fsdp).findings if f.rule == "PLC048"]
    assert [f for f in check_overlay(plain).findings if f.rule == "PLC048"]
    python = megatron_python()
    args = _payload(fsdp)
    assert "--optimizer-cpu-offload" in args[0]
    assert _run(python, OFFLOAD, args) is None


def test_megatron_fsdp_saves_torch_dcp_and_refuses_megatrons_own_format() -> None:
    # validate_args: "Megatron-FSDP requires the `fsdp_dtensor` checkpointing format", which
    # torch.distributed.checkpoint writes; Megatron's torch_dist format is refused.
    storage = {"hardware": {"storage": {"write_gbs": 100, "node_write_gbs": 10}}}
    layout = {"parallelism": {"tensor": 2, "zero_stage": 3}, "training": FSDP}

    def rules(fmt: str) -> set[str]:
        overlay = {**layout, **storage, "checkpoint": {"format": fmt, "interval": 1000}}
        return {f.rule for f in check_overlay(overlay).findings if f.severity.rank >= 2}

    assert "PLC110" in rules("megatron-dist")
    assert "PLC110" not in rules("torch-dcp") and "PLC110" not in rules("auto")


def test_one_pipeline_stage_needs_no_tp_pp_dp_mapping_flag() -> None:
    # tp-cp-pp-dp and tp-cp-dp-pp are one grid with one pipeline stage; Megatron-Bridge refuses
    # --use-tp-pp-dp-mapping with Megatron-FSDP, so the flag is left out.
    overlay = {"parallelism": {"tensor": 2, "zero_stage": 3, "order": "tp-cp-pp-dp"}}
    fsdp = megatron_arguments(compiled(job_of({**overlay, "training": FSDP})))[0]
    plain = megatron_arguments(compiled(job_of(overlay)))[0]
    assert "--use-tp-pp-dp-mapping" not in fsdp
    assert "--use-tp-pp-dp-mapping" in plain


def test_the_memory_report_names_megatron_fsdp_as_the_spec_does() -> None:
    # Priced as Megatron-LM, but reported as what the spec asked for: a user reading
    # "framework megatron" under training.framework: megatron-fsdp would think it was ignored.
    analysis = analysis_of({"parallelism": {"tensor": 2, "zero_stage": 3}, "training": FSDP})
    plan = analysis.plan
    memory = budget(plan)
    assert "Modelled stack: framework megatron-fsdp: Megatron-Core's FSDP" in render_text(
        plan, memory
    )
    assert to_json(plan, memory)["stack"]["framework"] == "megatron-fsdp"
    assert plan.training.framework == "megatron"  # the engine the terms are priced as
