"""The framework rules (PLC048-PLC050) against the frameworks' own code, where it is installed.

Megatron-LM (PLANC_MEGATRON_PYTHON, megatron-core 0.19.2): the plan's arguments with the flags
an optimizer offload needs (--optimizer-cpu-offload --use-precision-aware-optimizer) go through
validate_args and then Megatron-Core's OptimizerConfig; Megatron refuses exactly the specs
PLC048 refuses; and the plan's arguments with training.cuda_graph go through validate_args and
Megatron-Core's TransformerConfig, which refuse exactly the graphs PLC048 refuses, each for its
CUDA-graph check. DeepSpeed (PLANC_DEEPSPEED_PYTHON): PipelineEngine.__init__ holds the ZeRO check
PLC049 quotes. torchtitan (PLANC_TORCHTITAN_PYTHON, 0.3.0): its TrainingConfig's
mixed_precision_param admits no float16, and ParallelDims refuses a world the degrees do not
fill. Each test skips, saying why, without the framework.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_frameworks import MEGATRON_ARGUMENTS, _interpreter, _run, megatron_case, megatron_python

from conftest import check_overlay, compiled, job_of

MEGATRON_OFFLOAD = r"""
import argparse, json, os, sys
import megatron.training.arguments as arguments
from megatron.core.optimizer.optimizer_config import OptimizerConfig
os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
arguments.get_device_arch_version = lambda: 9
parser = arguments.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
extra = ["--tokenizer-type", "NullTokenizer", "--mock-data", "--train-iters", "10", "--lr", "1e-4",
         "--optimizer-cpu-offload", "--use-precision-aware-optimizer"]
out = {}
for case, (lines, world, vocab) in json.load(sys.stdin).items():
    words = [word for line in lines for word in line.split()]
    args = parser.parse_args(words + extra + ["--vocab-size", str(vocab)])
    args.world_size, args.rank = world, 0
    try:
        arguments.validate_args(args)
        OptimizerConfig(optimizer=args.optimizer, lr=1e-4,
                        use_distributed_optimizer=args.use_distributed_optimizer,
                        use_precision_aware_optimizer=True, optimizer_cpu_offload=True)
        out[case] = None
    except (AssertionError, ValueError) as refused:
        out[case] = str(refused)
print(json.dumps(out))
"""

# Llama 3 8B on 8 GPUs with the optimizer offloaded, by ZeRO stage and optimizer.
OFFLOAD_CASES: dict[str, dict[str, Any]] = {
    "zero1-adam": {"parallelism": {"zero_stage": 1}, "training": {"optimizer": "adam"}},
    "zero0-adam": {"parallelism": {"zero_stage": 0}, "training": {"optimizer": "adam"}},
    "zero1-sgd": {"parallelism": {"zero_stage": 1}, "training": {"optimizer": "sgd"}},
}


def _offloaded(overlay: dict[str, Any]) -> dict[str, Any]:
    training = {**overlay["training"], "offload": {"optimizer": True}}
    return {**overlay, "training": training}


def test_megatron_refuses_the_optimizer_offloads_plc048_refuses() -> None:
    python = megatron_python()
    payload = {}
    for case, overlay in OFFLOAD_CASES.items():
        # The plan is the layout without offload (the arguments planc emits do not name it).
        plan = compiled(job_of(overlay))
        payload[case] = megatron_case(plan)
    refused = _run(python, MEGATRON_OFFLOAD, payload)
    for case, overlay in OFFLOAD_CASES.items():
        fired = any(f.rule == "PLC048" for f in check_overlay(_offloaded(overlay)).findings)
        assert fired == (refused[case] is not None), (case, refused[case])
    assert refused["zero1-adam"] is None


DEEPSPEED_PIPE = """
import inspect, json
from deepspeed.runtime.pipe.engine import PipelineEngine
print(json.dumps(inspect.getsource(PipelineEngine.__init__)))
"""


def test_deepspeed_pipeline_engine_holds_the_zero_check() -> None:
    python = _interpreter("PLANC_DEEPSPEED_PYTHON", "deepspeed.runtime.pipe.engine")
    if python is None:
        pytest.skip(
            "deepspeed is not importable (pip install deepspeed, and point "
            "PLANC_DEEPSPEED_PYTHON at that interpreter)"
        )
    source = _run(python, DEEPSPEED_PIPE, {})
    quoted = "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
    assert "ZeroStageEnum.gradients" in source and quoted in source
    overlay = {"parallelism": {"zero_stage": 2}, "training": {"framework": "deepspeed"}}
    (finding,) = [
        f for f in check_overlay(overlay, "llama3-70b-8x8.yaml").findings if f.rule == "PLC049"
    ]
    assert quoted in finding.message


TORCHTITAN_PRECISION = """
import json, typing
from torchtitan.config.configs import TrainingConfig
hints = typing.get_type_hints(TrainingConfig)
print(json.dumps(list(typing.get_args(hints["mixed_precision_param"]))))
"""


def test_torchtitan_has_no_fp16_as_plc050_says() -> None:
    python = _interpreter("PLANC_TORCHTITAN_PYTHON", "torchtitan.config.configs")
    if python is None:
        pytest.skip(
            "torchtitan is not importable (pip install torchtitan, and point "
            "PLANC_TORCHTITAN_PYTHON at that interpreter)"
        )
    dtypes = _run(python, TORCHTITAN_PRECISION, {})
    assert "float16" not in dtypes and "bfloat16" in dtypes
    fp16 = {"training": {"framework": "fsdp2", "precision": "fp16"}}
    assert any(f.rule == "PLC050" for f in check_overlay(fp16).findings)


MEGATRON_GRAPHS = MEGATRON_ARGUMENTS + r"""
# As in the model-build test, and without gradient-accumulation fusion (no CUDA kernels); none
# of these flags is one TransformerConfig's CUDA-graph checks read.
extra.append("--no-gradient-accumulation-fusion")
out = {}
for case, (lines, world, vocab) in json.load(sys.stdin).items():
    args = parsed(lines, world, vocab)
    try:
        arguments.validate_args(args)
        core_transformer_config_from_args(args)
        out[case] = None
    except (AssertionError, ValueError) as refused:
        out[case] = str(refused)
print(json.dumps(out))
"""

PARTIAL = ["attn", "moe_router", "moe_preprocess"]
DENSE, MOE, TE = "llama3-8b-1node.yaml", "mixtral-8x7b-64xh100.yaml", "transformer_engine"
# (base example, overlay, Megatron refuses): Llama 3 8B (dense, selective recompute of core
# attention) and Mixtral 8x7B (experts in every layer, the alltoall dispatcher), each refusal of
# TransformerConfig's CUDA-graph checks once and a case beside it that passes.
GRAPH_CASES: dict[str, tuple[str, dict[str, Any], bool]] = {
    "dense-attn": (DENSE, {"impl": TE, "modules": ["attn"]}, False),
    "dense-router": (DENSE, {"impl": TE, "modules": ["moe_router"]}, True),
    "dense-iteration-modules": (DENSE, {"impl": "full_iteration", "modules": ["attn"]}, True),
    "dense-iteration": (DENSE, {"impl": "full_iteration"}, False),
    "moe-partial": (MOE, {"impl": TE, "modules": PARTIAL}, False),
    "moe-preprocess-alone": (MOE, {"impl": TE, "modules": ["moe_preprocess"]}, True),
    "moe-local-preprocess-alone": (MOE, {"impl": "local", "modules": ["moe_preprocess"]}, False),
    "moe-mlp": (MOE, {"impl": TE, "modules": ["mlp"]}, True),
}
# Settings beside the graphs: full recompute (full_iteration only), dropout in a graphed
# recompute, moe recompute with the router graph, the alltoall dispatcher's host copies with a
# capacity factor (none when padded to capacity), and activation offload with per-layer graphs.
LAYERS, ITERATION = {"impl": "local"}, {"impl": "full_iteration"}
DROPOUT = {"dropout": 0.1}
CAPACITY = {"moe": {"capacity_factor": 1.0}}
PADDED = {"moe": {"capacity_factor": 1.0, "pad_to_capacity": True}}
OFFLOAD = {"recompute": "none", "offload": {"activations": 1}}
ONE_GPU_LAYERS = {"tensor": 1, "sequence_parallel": False}


def _setting(
    base: str,
    graph: dict[str, Any],
    refused: bool,
    model: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
    parallelism: dict[str, Any] | None = None,
) -> tuple[str, dict[str, Any], bool]:
    """A case: `base` with the graphs and the settings beside them."""
    overlay: dict[str, Any] = {"training": {**(training or {}), "cuda_graph": graph}}
    if model:
        overlay["model"] = model
    if parallelism:
        overlay["parallelism"] = parallelism
    return base, overlay, refused


FULL = {"recompute": "full"}
SETTING_CASES: dict[str, tuple[str, dict[str, Any], bool]] = {
    "dense-full-recompute-layers": _setting(DENSE, LAYERS, True, training=FULL),
    "dense-full-recompute-iteration": _setting(DENSE, ITERATION, False, training=FULL),
    "dense-dropout-graphed-attn": _setting(
        DENSE, {"impl": TE, "modules": ["attn"]}, True, model=DROPOUT
    ),
    "dense-dropout-ungraphed-attn": _setting(
        DENSE,
        {"impl": TE, "modules": ["attn"]},
        False,
        model=DROPOUT,
        training={"recompute_modules": ["mlp"]},
    ),
    "moe-recompute-moe-router": _setting(
        MOE, {"impl": TE, "modules": ["moe_router"]}, True, training={"recompute_modules": ["moe"]}
    ),
    "moe-capacity-preprocess": _setting(MOE, {"impl": TE, "modules": PARTIAL}, True, CAPACITY),
    "moe-capacity-router": _setting(MOE, {"impl": TE, "modules": ["moe_router"]}, False, CAPACITY),
    "moe-padded-preprocess": _setting(MOE, {"impl": TE, "modules": PARTIAL}, False, PADDED),
    "dense-offload-layers": _setting(DENSE, LAYERS, True, None, OFFLOAD, ONE_GPU_LAYERS),
    "dense-offload-iteration": _setting(DENSE, ITERATION, False, None, OFFLOAD, ONE_GPU_LAYERS),
}


def _graph_cases() -> dict[str, tuple[str, dict[str, Any], bool]]:
    cases = {n: (b, {"training": {"cuda_graph": g}}, r) for n, (b, g, r) in GRAPH_CASES.items()}
    return {**cases, **SETTING_CASES}


def test_megatron_refuses_the_cuda_graphs_plc048_refuses() -> None:
    # Megatron-Core's own validate_args and TransformerConfig on the arguments planc emits:
    # it refuses exactly the graphs PLC048 refuses, and the cases are those the table says.
    python = megatron_python()
    cases = _graph_cases()
    payload = {}
    for case, (base, overlay, _) in cases.items():
        plan = compiled(job_of(overlay, base))
        payload[case] = megatron_case(plan)
    refused = _run(python, MEGATRON_GRAPHS, payload)
    for case, (base, overlay, expected) in cases.items():
        findings = check_overlay(overlay, base).findings
        fired = any(f.rule == "PLC048" and "CUDA graphs" in f.message for f in findings)
        assert (refused[case] is not None) == expected, (case, refused[case])
        # Megatron's reason is its CUDA-graph check, not another refusal of the layout.
        assert refused[case] is None or "graph" in refused[case].lower(), refused[case]
        assert fired == expected, (case, [f.message for f in findings])
