"""Framework configs in the plan directory (planc.compile.frameworks): Megatron-LM arguments, a
DeepSpeed config and torchtitan settings, read back and compared with plan.json.

The frameworks' own readers decide acceptance where they are installed: Megatron-LM's argument
parser (megatron-core needs Python >= 3.12), `DeepSpeedConfig` and torchtitan's
`ConfigManager`. Each runs in the interpreter named by PLANC_MEGATRON_PYTHON,
PLANC_DEEPSPEED_PYTHON or PLANC_TORCHTITAN_PYTHON (default: this one) and the test skips, saying
why, when that interpreter cannot import the framework.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion

from planc.compile import render_files
from planc.compile.frameworks import deepspeed_config, megatron_arguments
from planc.compile.frameworks import torchtitan_settings as torchtitan_settings_of
from planc.compile.plan import Plan

from conftest import check_overlay, compiled, job_of

# Layouts that exercise every branch: virtual stages, uneven stages, context parallelism,
# ZeRO stages, precisions, recompute modes, GPT-style models.
CASES: dict[str, tuple[dict[str, Any] | None, str]] = {
    "llama3-8b": (None, "llama3-8b-1node.yaml"),
    "llama3-70b": (None, "llama3-70b-8x8.yaml"),
    "gpt3-175b": (None, "gpt3-175b-gb200-nvl72.yaml"),
    "interleaved": (
        {"parallelism": {"tensor": 2, "pipeline": 4, "virtual_stages": 2}},
        "llama3-8b-1node.yaml",
    ),
    # Megatron interleaves over two stages with its overlapped p2p (the default) only.
    "interleaved-two-stages": (
        {"parallelism": {"tensor": 4, "pipeline": 2, "virtual_stages": 2}},
        "llama3-8b-1node.yaml",
    ),
    "interleaved-blocking-p2p": (
        {
            "parallelism": {"tensor": 2, "pipeline": 4, "virtual_stages": 2},
            "training": {"overlap_p2p_comm": False},
        },
        "llama3-8b-1node.yaml",
    ),
    # Megatron-Core's combined 1F1B without a pipeline (combined_1f1b_schedule_for_no_pipelining):
    # TransformerConfig asserts virtual stages only when pipeline > 1.
    "combined-no-pipeline": (
        {
            "parallelism": {"pipeline": 1, "data": 64, "pipeline_schedule": "combined-1f1b"},
            "training": {"global_batch": 512},
        },
        "mixtral-8x7b-64xh100.yaml",
    ),
    "uneven": (
        {"parallelism": {"tensor": 2, "pipeline": 4, "stage_layers": [7, 9, 9, 7]}},
        "llama3-8b-1node.yaml",
    ),
    # The embedding and the loss counted as layers: (30 + 2) / (4 × 2) = 4 a chunk.
    "accounted": (
        {
            "model": {"layers": 30},
            "parallelism": {
                "tensor": 2,
                "pipeline": 4,
                "virtual_stages": 2,
                "embedding_in_pipeline_split": True,
                "loss_in_pipeline_split": True,
            },
        },
        "llama3-8b-1node.yaml",
    ),
    # Megatron's layout string, chunks of 3, 4 × 6 and 5 layers (32 in all).
    "layout": (
        {
            "parallelism": {
                "tensor": 2,
                "pipeline": 4,
                "virtual_stages": 2,
                "pipeline_layout": "Et*3|(t*4|)*6,t*5L",
            }
        },
        "llama3-8b-1node.yaml",
    ),
    "context-zero3-fp16-full": (
        {
            "parallelism": {"tensor": 2, "context": 2, "zero_stage": 3},
            "training": {"precision": "fp16", "recompute": "full", "attention": "eager"},
        },
        "llama3-8b-1node.yaml",
    ),
    # Megatron's --cp-comm-type: Ulysses all-to-all, and a2a over 2 ranks with p2p across 2
    # (--hierarchical-context-parallel-sizes 2 2).
    "context-a2a": (
        {"parallelism": {"tensor": 2, "context": 4, "cp_comm_type": "a2a"}},
        "llama3-8b-1node.yaml",
    ),
    "context-a2a-p2p": (
        {"parallelism": {"tensor": 2, "context": 4, "cp_comm_type": "a2a+p2p"}},
        "llama3-8b-1node.yaml",
    ),
    # Megatron's --recompute-modules (nargs '+'), the dense MLP beside the attention core.
    "recompute-modules": (
        {
            "parallelism": {"tensor": 2},
            "training": {"recompute": "selective", "recompute_modules": ["core_attn", "mlp"]},
        },
        "llama3-8b-1node.yaml",
    ),
    # Megatron's optimizer CPU offload: --optimizer-cpu-offload with the precision-aware
    # optimizer validate_args requires.
    "megatron-optimizer-offload": (
        {
            "parallelism": {"tensor": 2, "zero_stage": 1},
            "training": {"offload": {"optimizer": True}},
        },
        "llama3-8b-1node.yaml",
    ),
    # Megatron-Core's activation offload of the first 8 layers (--cpu-offloading-num-layers,
    # which validate_args turns into cpu_offloading): one stage, no recompute.
    "megatron-activation-offload": (
        {"training": {"recompute": "none", "offload": {"activations": 8}}},
        "llama3-8b-1node.yaml",
    ),
    # torchtitan's one offload switch (enable_cpu_offload: parameters, gradients, optimizer).
    "fsdp2-offload": (
        {
            "parallelism": {"tensor": 2, "zero_stage": 3},
            "training": {
                "framework": "fsdp2",
                "offload": {"optimizer": True, "parameters": True},
            },
        },
        "llama3-8b-1node.yaml",
    ),
    # FSDP2 reducing in bf16 (AutoModel's default) with torch's foreach Adam (torchtitan's
    # 2024 default): torchtitan reads both back.
    "fsdp2-bf16-reduce-foreach": (
        {
            "parallelism": {"tensor": 2, "zero_stage": 3},
            "training": {
                "framework": "fsdp2",
                "reduce_dtype": "bf16",
                "optimizer_implementation": "foreach",
            },
        },
        "llama3-8b-1node.yaml",
    ),
    # torchtitan's form of TP overlap: async TP, a compile pass (compile.enable_async_tensor_parallel).
    "fsdp2-async-tp": (
        {
            "parallelism": {"tensor": 2, "zero_stage": 3, "sequence_parallel": True},
            "training": {"framework": "fsdp2", "kernels": "compiled", "overlap_tp": True},
        },
        "llama3-8b-1node.yaml",
    ),
    "deepspeed-zero3-offload": (
        {
            "parallelism": {"tensor": 2, "zero_stage": 3},
            "training": {
                "framework": "deepspeed",
                "offload": {"optimizer": True, "parameters": True},
            },
        },
        "llama3-8b-1node.yaml",
    ),
    # Megatron-LM's --no-gradient-accumulation-fusion (its default fuses the accumulation into
    # the weight-gradient GEMM).
    "no-grad-accum-fusion": (
        {"training": {"grad_accum_fusion": False}},
        "llama3-8b-1node.yaml",
    ),
    "hsdp-zero1": (
        {"parallelism": {"tensor": 2, "zero_stage": 1, "data_shard": 2}},
        "llama3-8b-1node.yaml",
    ),
    "gpt2-fp32-ddp": (
        {
            "model": {"preset": "gpt2-small"},
            "parallelism": {
                "tensor": 1,
                "pipeline": 1,
                "zero_stage": 0,
                "sequence_parallel": False,
            },
            "training": {
                "precision": "fp32",
                "recompute": "none",
                "seq_len": 1024,
                "global_batch": 64,
                "grad_accum_fp32": True,
            },
        },
        "llama3-8b-1node.yaml",
    ),
}


@cache
def plan_of(case: str) -> Plan:
    overlay, base = CASES[case]
    return compiled(job_of(overlay, base))


@cache
def files_of(case: str) -> dict[str, str]:
    return render_files(plan_of(case))


def plan_record(case: str) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(files_of(case)["plan.json"])
    return record


def flags(text: str) -> dict[str, str | None]:
    """args.txt as {flag: value or None}, each line one flag."""
    out: dict[str, str | None] = {}
    for line in text.splitlines():
        flag, _, value = line.partition(" ")
        assert flag.startswith("--") and flag not in out, line
        out[flag] = value or None
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_cases_are_specs_planc_check_passes(case: str) -> None:
    overlay, base = CASES[case]
    errors = [f for f in check_overlay(overlay, base).findings if f.severity.rank >= 2]
    assert errors == []


@pytest.mark.parametrize("case", sorted(CASES))
def test_megatron_readme_names_the_environment_validate_args_needs(case: str) -> None:
    layout = plan_of(case).job.layout
    readme = files_of(case)["megatron/README.md"]
    needed = layout.t > 1 or layout.c > 1
    assert ("CUDA_DEVICE_MAX_CONNECTIONS=1" in readme) == needed


@pytest.mark.parametrize("case", sorted(CASES))
def test_files_are_listed_in_the_manifest(case: str) -> None:
    files = files_of(case)
    for name in (
        "megatron/args.txt",
        "megatron/README.md",
        "deepspeed/ds_config.json",
        "deepspeed/README.md",
        "torchtitan/planc_config.py",
    ):
        assert name in files and f"\n{name}\n" in files[".planc-plan"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_megatron_arguments_agree_with_plan_json(case: str) -> None:
    record, args = plan_record(case), flags(files_of(case)["megatron/args.txt"])
    degrees, model, training = (
        record["layout"]["degrees"],
        record["model"],
        record["training"],
    )
    assert args["--tensor-model-parallel-size"] == str(degrees["tp"])
    assert args["--pipeline-model-parallel-size"] == str(degrees["pp"])
    assert args["--context-parallel-size"] == str(degrees["cp"])
    assert args["--num-layers"] == str(model["layers"])
    assert args["--hidden-size"] == str(model["hidden"])
    assert args["--ffn-hidden-size"] == str(model["ffn_hidden"])
    assert args["--num-attention-heads"] == str(model["heads"])
    assert args["--kv-channels"] == str(model["head_dim"])
    assert args.get("--num-query-groups", str(model["heads"])) == str(model["kv_heads"])
    assert ("--swiglu" in args) == (model["mlp"] == "swiglu")
    assert (
        args["--normalization"] == {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}[model["norm"]]
    )
    assert ("--disable-bias-linear" in args) == (not model["bias"])
    assert ("--untie-embeddings-and-output-weights" in args) == (not model["tied_embeddings"])
    assert args["--position-embedding-type"] == (
        "rope" if model["position_embedding"] == "rope" else "learned_absolute"
    )
    assert args["--seq-length"] == str(training["seq_len"])
    assert args["--micro-batch-size"] == str(training["micro_batch"])
    assert args["--global-batch-size"] == str(training["global_batch"])
    assert ("--sequence-parallel" in args) == record["layout"]["sequence_parallel"]
    zero = record["layout"]["zero_stage"]
    assert ("--use-distributed-optimizer" in args) == (zero in (1, 2))
    recompute = training["recompute"]
    assert args.get("--recompute-granularity") == (None if recompute == "none" else recompute)
    v = record["layout"]["virtual_stages"]
    stages = record["layout"]["stage_layers"]
    sizes = {last - first for stage in stages for first, last in stage}
    if v > 1 and len(sizes) == 1:
        assert args["--num-layers-per-virtual-pipeline-stage"] == str(sizes.pop())
    precision = training["precision"]
    assert ("--bf16" in args, "--fp16" in args) == (precision == "bf16", precision == "fp16")


@pytest.mark.parametrize("case", sorted(CASES))
def test_deepspeed_batch_and_zero_agree_with_plan_json(case: str) -> None:
    record = plan_record(case)
    config = json.loads(files_of(case)["deepspeed/ds_config.json"])
    d = record["layout"]["degrees"]["dp"]
    training = record["training"]
    assert config["train_batch_size"] == training["global_batch"]
    assert config["train_micro_batch_size_per_gpu"] == training["micro_batch"]
    assert config["gradient_accumulation_steps"] == training["micro_batches"]
    # DeepSpeed's own identity (DeepSpeedConfig._batch_assertion), with the data-parallel size.
    assert config["train_batch_size"] == (
        config["train_micro_batch_size_per_gpu"] * config["gradient_accumulation_steps"] * d
    )
    assert config["zero_optimization"]["stage"] == record["layout"]["zero_stage"]
    precision = training["precision"]
    assert config.get("bf16", {}).get("enabled", False) == (precision == "bf16")
    assert config.get("fp16", {}).get("enabled", False) == (precision == "fp16")


def torchtitan_settings(case: str) -> SimpleNamespace:
    """Run the case's emitted module's `apply` on a stand-in config and return it."""
    return applied(files_of(case)["torchtitan/planc_config.py"])


def applied(source: str) -> SimpleNamespace:
    """Run the emitted module `source`'s `apply` on a stand-in config and return it."""
    namespace: dict[str, Any] = {}
    exec(compile(source, "planc_config.py", "exec"), namespace)
    # torchtitan's policy classes are not importable here: the stand-in keeps the mode's name
    # (the real classes are built in test_torchtitan_reads_the_module).
    namespace["checkpointing"] = lambda mode: mode
    config = SimpleNamespace(
        parallelism=SimpleNamespace(),
        training=SimpleNamespace(),
        optimizer=SimpleNamespace(),
        compile=SimpleNamespace(),
    )
    result: SimpleNamespace = namespace["apply"](config)
    return result


@pytest.mark.parametrize("case", sorted(CASES))
def test_torchtitan_degrees_agree_with_plan_json(case: str) -> None:
    record = plan_record(case)
    degrees, training = record["layout"]["degrees"], record["training"]
    config = torchtitan_settings(case)
    par, tr = config.parallelism, config.training
    assert par.data_parallel_replicate_degree * par.data_parallel_shard_degree == degrees["dp"]
    assert par.tensor_parallel_degree == degrees["tp"]
    assert par.pipeline_parallel_degree == degrees["pp"]
    assert par.context_parallel_degree == degrees["cp"]
    world = (
        par.data_parallel_replicate_degree
        * par.data_parallel_shard_degree
        * par.context_parallel_degree
        * par.tensor_parallel_degree
        * par.pipeline_parallel_degree
    )
    assert world == record["world_size"]
    # torchtitan: global = local × dp × gradient-accumulation steps; with pipeline parallelism
    # the local batch is split into micro-batches of pipeline_parallel_microbatch_size.
    accumulation = tr.global_batch_size // (tr.local_batch_size * degrees["dp"])
    assert tr.global_batch_size == tr.local_batch_size * degrees["dp"] * accumulation
    per_step = tr.local_batch_size * accumulation // par.pipeline_parallel_microbatch_size
    assert per_step == training["micro_batches"]
    assert tr.seq_len == training["seq_len"]
    # Any offload of state the spec asks for turns on FSDP2's one switch (activations stay).
    offload = ((CASES[case][0] or {}).get("training") or {}).get("offload") or {}
    state = (offload.get("optimizer", False), offload.get("parameters", False))
    assert bool(getattr(tr, "enable_cpu_offload", False)) == any(state)
    if degrees["pp"] > 1:
        parts = getattr(par, "module_fqns_per_model_part", None)
        if parts is None:
            v = record["layout"]["virtual_stages"]
            assert (
                par.pipeline_parallel_layers_per_stage * degrees["pp"] * v
                == (record["model"]["layers"])
            )
        else:
            layers = [name for part in parts for name in part if name.startswith("layers.")]
            assert layers == [f"layers.{i}" for i in range(record["model"]["layers"])]


def test_torchtitan_needs_a_base_for_a_model_it_has_no_config_of() -> None:
    namespace: dict[str, Any] = {}
    source = files_of("gpt2-fp32-ddp")["torchtitan/planc_config.py"]
    exec(compile(source, "planc_config.py", "exec"), namespace)
    assert namespace["BASE"] is None
    with pytest.raises(RuntimeError, match="PLANC_TORCHTITAN_BASE"):
        namespace["planc"]()


def test_uneven_stages_name_every_chunk_in_stage_order() -> None:
    parts = torchtitan_settings("uneven").parallelism.module_fqns_per_model_part
    assert [len([n for n in part if n.startswith("layers.")]) for part in parts] == [7, 9, 9, 7]
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]


def with_data_shard(plan: Plan, shard: int) -> Plan:
    """The plan with parallelism.data_shard set (HSDP): the layout the framework files read."""
    return replace(plan, job=replace(plan.job, layout=replace(plan.job.layout, data_shard=shard)))


def test_data_shard_is_hsdp_in_every_framework() -> None:
    plan = plan_of("context-zero3-fp16-full")  # t=2, c=2, d=2: d·c = 4 ranks shard ZeRO-3
    assert plan.job.layout.shard_group == 4
    hsdp = with_data_shard(plan, 2)
    notes = deepspeed_config(hsdp)[1]
    assert any("data_shard 2" in note and "every data-parallel rank" in note for note in notes)
    parallelism = torchtitan_settings_of(hsdp)[0]
    # torchtitan shards over dp_shard × cp = 2: dp_shard 1, and the 2 data ranks replicate.
    assert (
        parallelism["data_parallel_shard_degree"],
        parallelism["data_parallel_replicate_degree"],
    ) == (1, 2)
    zero1 = replace(plan.job.layout, zero=1, data_shard=2)
    args, _ = megatron_arguments(replace(plan, job=replace(plan.job, layout=zero1)))
    assert "--num-distributed-optimizer-instances 2" in args
    assert "--num-distributed-optimizer-instances 2" not in megatron_arguments(plan)[0]


@pytest.mark.parametrize("case", ["llama3-70b", "uneven", "gpt2-fp32-ddp"])
def test_framework_files_snapshot(case: str, snapshot: SnapshotAssertion) -> None:
    files = files_of(case)
    shown = [
        "megatron/args.txt",
        "megatron/README.md",
        "deepspeed/ds_config.json",
        "deepspeed/README.md",
        "torchtitan/planc_config.py",
    ]
    assert {name: files[name] for name in shown} == snapshot


def test_deepspeed_readme_says_pipelines_take_zero_0_or_1_only() -> None:
    plan = plan_of("uneven")  # p = 4
    for zero in (0, 1, 2, 3):
        layout = replace(plan.job.layout, zero=zero)
        notes = deepspeed_config(replace(plan, job=replace(plan.job, layout=layout)))[1]
        refused = any("PipelineEngine refuses it" in note for note in notes)
        assert refused == (zero >= 2)


def test_output_is_deterministic() -> None:
    again = render_files(compiled(job_of(*CASES["interleaved"])))
    for name in ("megatron/args.txt", "deepspeed/ds_config.json", "torchtitan/planc_config.py"):
        assert again[name] == files_of("interleaved")[name]


# ----------------------------------------------------------------------------- the frameworks


def _interpreter(variable: str, module: str) -> str | None:
    """An interpreter that imports `module`: $variable, else this one."""
    candidate = os.environ.get(variable) or sys.executable
    try:
        run = subprocess.run(
            [candidate, "-c", f"import {module}"], capture_output=True, timeout=300, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return candidate if run.returncode == 0 else None


def _run(python: str, script: str, payload: Any, cwd: Path | None = None) -> Any:
    run = subprocess.run(
        [python, "-c", script],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


# The start of every script that parses a plan's Megatron-LM arguments in the reference venv:
# Megatron-LM's parser, validated as on Hopper, and what a run adds besides the plan's arguments.
MEGATRON_PARSER = """
import argparse, json, os, sys
import megatron.training.arguments as arguments
# No GPU here: validate as on the plans' Hopper GPUs (compute capability 9).
arguments.get_device_arch_version = lambda: 9
parser = arguments.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
# What a run adds besides the plan's arguments: a tokenizer, data, iterations, a learning rate.
extra = ["--tokenizer-type", "NullTokenizer", "--mock-data", "--train-iters", "10", "--lr", "1e-4"]
"""
# What megatron/README.md tells a run with tensor or context parallelism on Hopper to set.
MEGATRON_TP_ENV = """os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
"""


def megatron_python() -> str:
    """The interpreter with Megatron-LM's argument parser (PLANC_MEGATRON_PYTHON), or a skip."""
    python = _interpreter("PLANC_MEGATRON_PYTHON", "megatron.training.arguments")
    if python is None:
        pytest.skip(
            "megatron.training.arguments is not importable (pip install megatron-core on "
            "Python >= 3.12, and point PLANC_MEGATRON_PYTHON at that interpreter)"
        )
    return python


def megatron_case(plan: Plan) -> list[Any]:
    """One case of a Megatron-LM argument script's stdin: the plan's argument lines, its world
    size and its vocabulary."""
    return [megatron_arguments(plan)[0], plan.world, plan.job.model.V]


# The head of a script that validates Megatron-LM's arguments on CPU (no GPU, no Transformer
# Engine: Megatron-Core's local layers and no fusions) for cases read from stdin as
# `megatron_case`s; gradient-accumulation fusion is left as each plan says. The script goes on
# with its own loop over the cases, `parsed` giving each one's arguments.
MEGATRON_ARGUMENTS = MEGATRON_PARSER + MEGATRON_TP_ENV + r"""
import warnings
warnings.filterwarnings("ignore")
from megatron.training.argument_utils import core_transformer_config_from_args
extra += ["--use-cpu-initialization", "--no-rope-fusion", "--transformer-impl", "local",
          "--no-persist-layer-norm", "--no-masked-softmax-fusion",
          "--no-bias-dropout-fusion", "--no-bias-swiglu-fusion"]


def parsed(lines, world, vocab):
    words = [word for line in lines for word in line.split()]
    args = parser.parse_args(words + extra + ["--vocab-size", str(vocab)])
    args.world_size, args.rank = world, 0
    return args
"""


MEGATRON_PARSE = MEGATRON_PARSER + MEGATRON_TP_ENV + """out = {}
for case, (lines, world, vocab) in json.load(sys.stdin).items():
    words = [word for line in lines for word in line.split()]
    args = parser.parse_args(words)
    parsed = {k: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v))
              for k, v in vars(args).items()}
    full = parser.parse_args(words + extra + ["--vocab-size", str(vocab)])
    full.world_size, full.rank = world, 0
    arguments.validate_args(full)
    parsed["validated_data_parallel_size"] = full.data_parallel_size
    parsed["validated_virtual_stages"] = full.virtual_pipeline_model_parallel_size
    parsed["validated_cpu_offloading"] = getattr(full, "cpu_offloading", False)
    parsed["validated_layer_wise"] = getattr(full, "use_layer_wise_distributed_optimizer", False)
    parsed["validated_distributed_optimizer"] = full.use_distributed_optimizer
    out[case] = parsed
print(json.dumps(out))
"""


def test_megatron_parser_accepts_the_arguments() -> None:
    python = megatron_python()
    payload = {
        case: [
            files_of(case)["megatron/args.txt"].splitlines(),
            plan_record(case)["world_size"],
            plan_record(case)["model"]["vocab"],
        ]
        for case in CASES
    }
    parsed = _run(python, MEGATRON_PARSE, payload)
    for case in CASES:
        record, args = plan_record(case), parsed[case]
        degrees, model, training = record["layout"]["degrees"], record["model"], record["training"]
        assert args["tensor_model_parallel_size"] == degrees["tp"]
        assert args["pipeline_model_parallel_size"] == degrees["pp"]
        assert args["context_parallel_size"] == degrees["cp"]
        # --cp-comm-type (nargs '+': one type for every layer), parsed and validated.
        kind = CASES[case][0] or {}
        wanted = {"a2a": "['a2a']", "a2a+p2p": "['a2a+p2p']"}
        cp_type = kind.get("parallelism", {}).get("cp_comm_type", "p2p")
        assert args["cp_comm_type"] == wanted.get(cp_type, "['p2p']"), case
        if cp_type == "a2a+p2p":
            assert args["hierarchical_context_parallel_sizes"] == "[2, 2]"
        assert (args["num_layers"], args["hidden_size"], args["ffn_hidden_size"]) == (
            model["layers"],
            model["hidden"],
            model["ffn_hidden"],
        )
        assert args["num_attention_heads"] == model["heads"]
        assert args["kv_channels"] == model["head_dim"]
        if model["kv_heads"] != model["heads"]:
            assert args["group_query_attention"] and args["num_query_groups"] == model["kv_heads"]
        assert args["add_bias_linear"] == model["bias"]
        assert args["untie_embeddings_and_output_weights"] == (not model["tied_embeddings"])
        assert args["swiglu"] == (model["mlp"] == "swiglu")
        assert args["seq_length"] == training["seq_len"]
        assert args["micro_batch_size"] == training["micro_batch"]
        assert args["global_batch_size"] == training["global_batch"]
        assert args["sequence_parallel"] == record["layout"]["sequence_parallel"]
        # Megatron-LM fuses gradient accumulation into the weight-gradient GEMM unless the spec
        # says not to; a plan for DeepSpeed or FSDP2, which have no such fusion, is priced and
        # written without it.
        written = (CASES[case][0] or {}).get("training", {})
        engine = written.get("framework", "megatron")
        fused = written.get("grad_accum_fusion", engine in ("megatron", "megatron-fsdp"))
        assert args["gradient_accumulation_fusion"] == fused, case
        assert args["recompute_modules"] == (
            "['core_attn', 'mlp']" if case == "recompute-modules" else None
        ), case
        assert args["bf16"] == (training["precision"] == "bf16")
        assert args["fp16"] == (training["precision"] == "fp16")
        v = record["layout"]["virtual_stages"]
        if v > 1:
            given = args["num_layers_per_virtual_pipeline_stage"]
            chunks = args["num_virtual_stages_per_pipeline_rank"]
            # A layout string sets the chunks itself (validate_args takes v from it).
            layout = args.get("pipeline_model_parallel_layout")
            assert given is not None or chunks == v or layout is not None
        # validate_args derives the data-parallel degree from the world size: planc's d.
        assert args["validated_data_parallel_size"] == degrees["dp"]
        assert args["validated_virtual_stages"] == (v if v > 1 else None)
        # Activation offload: the layer count, and validate_args turning the offload on.
        offloaded = 8 if case == "megatron-activation-offload" else 0
        assert args["cpu_offloading_num_layers"] == offloaded, case
        assert args["validated_cpu_offloading"] == bool(offloaded), case
        # --no-overlap-p2p-communication only when the spec turns the overlap off.
        assert args["overlap_p2p_comm"] == (case != "interleaved-blocking-p2p"), case


DEEPSPEED_CONFIG = """
import json, os, sys, tempfile
os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
import deepspeed
import deepspeed.comm as dist
from deepspeed.runtime.config import DeepSpeedConfig
# A one-process gloo group on a file store (no port); DeepSpeedConfig reads the data-parallel
# size from the mpu only once torch.distributed is up.
store = os.path.join(tempfile.mkdtemp(), "store")
dist.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False,
                      init_method=f"file://{store}", rank=0, world_size=1)
out = {}
for case, (config, d) in json.load(sys.stdin).items():
    class Mpu:  # DeepSpeed takes the data-parallel size from the model-parallel unit
        def get_data_parallel_world_size(self):
            return d
    parsed = DeepSpeedConfig(config, mpu=Mpu())
    zero = parsed.zero_config
    out[case] = {
        "version": deepspeed.__version__,
        "train_batch_size": parsed.train_batch_size,
        "micro": parsed.train_micro_batch_size_per_gpu,
        "accumulation": parsed.gradient_accumulation_steps,
        "stage": int(parsed.zero_optimization_stage),
        "bf16": parsed.bfloat16_config.enabled,
        "fp16": parsed.float16_config.enabled,
        "clipping": parsed.gradient_clipping,
        "reduce_bucket_size": zero.reduce_bucket_size,
        "offload_optimizer": str(getattr(zero.offload_optimizer, 'device', None)),
        "offload_param": str(getattr(zero.offload_param, 'device', None)),
    }
print(json.dumps(out))
"""


def _deepspeed_offload(case: str) -> tuple[str, str]:
    """The devices DeepSpeed should read for the case's offload, from the spec as written: the
    optimizer state goes to the CPU whenever the spec offloads it (offload_optimizer, any ZeRO
    stage DeepSpeed offloads at), parameters only under ZeRO-3 (offload_param is ZeRO-3's)."""
    overlay = CASES[case][0] or {}
    offload = overlay.get("training", {}).get("offload", {})
    zero3 = overlay.get("parallelism", {}).get("zero_stage") == 3
    optimizer = "cpu" if offload.get("optimizer") else "None"
    parameters = "cpu" if offload.get("parameters") and zero3 else "None"
    return optimizer, parameters


def test_deepspeed_config_class_accepts_the_config() -> None:
    python = _interpreter("PLANC_DEEPSPEED_PYTHON", "deepspeed.runtime.config")
    if python is None:
        pytest.skip(
            "deepspeed is not importable (pip install 'deepspeed>=0.19,<0.20', and point "
            "PLANC_DEEPSPEED_PYTHON at that interpreter)"
        )
    payload = {
        case: [
            json.loads(files_of(case)["deepspeed/ds_config.json"]),
            plan_record(case)["layout"]["degrees"]["dp"],
        ]
        for case in CASES
    }
    parsed = _run(python, DEEPSPEED_CONFIG, payload)
    for case in CASES:
        record, got = plan_record(case), parsed[case]
        training = record["training"]
        assert got["train_batch_size"] == training["global_batch"]
        assert got["micro"] == training["micro_batch"]
        assert got["accumulation"] == training["micro_batches"]
        assert got["stage"] == record["layout"]["zero_stage"]
        assert (got["bf16"], got["fp16"]) == (
            training["precision"] == "bf16",
            training["precision"] == "fp16",
        )
        assert got["clipping"] == 1.0
        config = payload[case][0]["zero_optimization"]
        assert got["reduce_bucket_size"] == config["reduce_bucket_size"]
        assert (got["offload_optimizer"], got["offload_param"]) == _deepspeed_offload(case)
    # data_shard has no DeepSpeed 0.19 form (MiCS was removed): the config stays valid and the
    # README says so.
    hsdp = deepspeed_config(with_data_shard(plan_of("context-zero3-fp16-full"), 2))
    assert "mics_shard_size" not in hsdp[0]["zero_optimization"]
    _run(python, DEEPSPEED_CONFIG, {"hsdp": [hsdp[0], 2]})


TORCHTITAN_READ = """
import json, sys
sys.path.insert(0, ".")
from torchtitan.config import ConfigManager
out = {}
import importlib, os
for module in json.load(sys.stdin):
    # A model without a registered torchtitan config needs one named; any parses.
    if importlib.import_module(module).BASE is None:
        os.environ["PLANC_TORCHTITAN_BASE"] = "torchtitan.models.llama3.config_registry:llama3_8b"
    else:
        os.environ.pop("PLANC_TORCHTITAN_BASE", None)
    config = ConfigManager().parse_args(["--module", module, "--config", "planc"])
    par, tr = config.parallelism, config.training
    out[module] = {
        "replicate": par.data_parallel_replicate_degree,
        "shard": par.data_parallel_shard_degree,
        "tp": par.tensor_parallel_degree,
        "pp": par.pipeline_parallel_degree,
        "cp": par.context_parallel_degree,
        "sp": par.enable_sequence_parallel,
        "local": tr.local_batch_size,
        "global": tr.global_batch_size,
        "seq_len": tr.seq_len,
        "checkpoint": None if config.activation_checkpoint is None
        else type(config.activation_checkpoint).__qualname__,
        "compile": config.compile.enable,
        "async_tp": config.compile.enable_async_tensor_parallel,
        "reduce": tr.mixed_precision_reduce,
        "optimizer": config.optimizer.implementation,
    }
print(json.dumps(out))
"""


def test_torchtitan_reads_the_module(tmp_path: Path) -> None:
    python = _interpreter("PLANC_TORCHTITAN_PYTHON", "torchtitan.models.llama3.config_registry")
    if python is None:
        pytest.skip(
            "torchtitan is not importable (pip install torchtitan==0.3.0 with torch, and point "
            "PLANC_TORCHTITAN_PYTHON at that interpreter)"
        )
    modules = {f"planc_case_{i}": case for i, case in enumerate(sorted(CASES))}
    for module, case in modules.items():
        (tmp_path / f"{module}.py").write_text(files_of(case)["torchtitan/planc_config.py"])
    parsed = _run(python, TORCHTITAN_READ, list(modules), tmp_path)
    for module, case in modules.items():
        record, got = plan_record(case), parsed[module]
        degrees = record["layout"]["degrees"]
        assert got["replicate"] * got["shard"] == degrees["dp"]
        assert (got["tp"], got["pp"], got["cp"]) == (degrees["tp"], degrees["pp"], degrees["cp"])
        assert got["sp"] == record["layout"]["sequence_parallel"]
        assert got["global"] == record["training"]["global_batch"]
        assert got["seq_len"] == record["training"]["seq_len"]
        # The plan's recompute as torchtitan's policy (FullAC whole blocks, SelectiveAC its
        # per-op policy, none: no checkpointing), whatever the registered config sets.
        policy = {"none": None, "full": "FullAC.Config"}.get(
            record["training"]["recompute"], "SelectiveAC.Config"
        )
        assert got["checkpoint"] == policy, case
        # FSDP2's reduce dtype and the optimizer's implementation, as planc prices them.
        training = (CASES[case][0] or {}).get("training") or {}
        reduce = {"fp32": "float32", "bf16": "bfloat16"}[training.get("reduce_dtype", "fp32")]
        assert got["reduce"] == reduce, case
        assert got["optimizer"] == training.get("optimizer_implementation", "fused"), case
        # TP overlap as torchtitan runs it: async TP, which its CompileConfig accepts only with
        # the model compiled (it raises otherwise, so parsing is the check).
        async_tp = plan_of(case).job.training.overlap_tp and degrees["tp"] > 1 and got["compile"]
        assert got["async_tp"] == async_tp, case


@pytest.mark.parametrize(
    ("reduce_dtype", "implementation", "written"),
    [("fp32", "fused", "float32"), ("bf16", "foreach", "bfloat16")],
)
def test_torchtitan_runs_the_plans_reduce_dtype_and_optimizer(
    reduce_dtype: str, implementation: str, written: str
) -> None:
    """torchtitan's training.mixed_precision_reduce is FSDP2's reduce_dtype and its
    optimizer.implementation the Adam planc prices; a bf16 reduce, which torchtitan 0.3.0
    declares no value for, gets a note."""
    overlay = {
        "parallelism": {"tensor": 1, "sequence_parallel": False, "order": None},
        "training": {
            "framework": "fsdp2",
            "reduce_dtype": reduce_dtype,
            "optimizer_implementation": implementation,
        },
    }
    source = render_files(compiled(job_of(overlay)))["torchtitan/planc_config.py"]
    config = applied(source)
    assert config.training.mixed_precision_reduce == written
    assert config.optimizer.implementation == implementation
    assert ("mixed_precision_reduce's only value" in source) == (reduce_dtype == "bf16")


@pytest.mark.parametrize(
    ("recompute", "kernels", "policy", "compile_fields"),
    [
        ("selective-op", "compiled", "selective", {"enable": True, "components": ["model"]}),
        ("full", "unfused", "full", {"enable": False}),
        ("none", "fused", None, {}),
    ],
)
def test_torchtitan_runs_the_plans_recompute_and_kernels(
    recompute: str, kernels: str, policy: str | None, compile_fields: dict[str, Any]
) -> None:
    """torchtitan's Trainer.Config defaults to its per-op SelectiveAC and each registered model
    config sets its own: the emitted module always sets the plan's policy (torchtitan 0.3.0
    FullAC, SelectiveAC or none), and compiles each block for `kernels: compiled` (the loss
    stays eager, as planc prices it) or runs eager for `unfused`."""
    overlay = {
        "parallelism": {"tensor": 1, "sequence_parallel": False, "order": None},
        "training": {"framework": "fsdp2", "recompute": recompute, "kernels": kernels},
    }
    config = applied(render_files(compiled(job_of(overlay)))["torchtitan/planc_config.py"])
    assert config.activation_checkpoint == policy
    assert vars(config.compile) == compile_fields
