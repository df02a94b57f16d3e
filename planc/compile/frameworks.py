"""Framework configurations of a plan: Megatron-LM arguments, a DeepSpeed config and torchtitan
settings, each from the same plan as plan.json, so the numbers agree by construction.

Versions followed (each file says so too):

- Megatron-LM: `megatron/training/arguments.py` of megatron-core 0.19.2 (PyPI), whose parser
  (`add_megatron_arguments`) accepts every flag written here; the flags are the same at
  NVIDIA/Megatron-LM d98e8a64 (2026-08-22).
- DeepSpeed 0.19.8: `deepspeed/runtime/config.py` (`DeepSpeedConfig`: batch triple, bf16/fp16,
  gradient_clipping, data_types, expert_parallel), `deepspeed/runtime/zero/config.py`
  (`DeepSpeedZeroConfig`: stage, buckets, offload; MiCS is gone, so no sub-group sharding) and
  `deepspeed/module_inject/auto_ep_config.py` (AutoEP: autoep_size, preset_model).
- torchtitan 0.3.0 (PyPI): `torchtitan/config/configs.py` (`ParallelismConfig`,
  `TrainingConfig`) and `config/manager.py`, which reads a Python function returning
  `Trainer.Config` (`--module M --config F`); the TOML files of earlier releases are gone.

Every function returns {relative path: text}; nothing here touches the file system.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from planc.comm.schedule import layer_wise_all_reduce
from planc.compile.launchers import megatron_args
from planc.compile.plan import Plan
from planc.dims import padded_vocab
from planc.pipeline.placement import virtual_stage
from planc.pipeline.registry import definition
from planc.presets.fp8 import recipe_table
from planc.spec.job import Model, preset_model
from planc.vocab import DEFAULT_RECOMPUTE_MODULES, DType, Fp8Recipe, ScheduleKind

MEGATRON = "megatron-core 0.19.2, megatron/training/arguments.py (NVIDIA/Megatron-LM d98e8a64)"
DEEPSPEED = "DeepSpeed 0.19.8, deepspeed/runtime/config.py and deepspeed/runtime/zero/config.py"
TORCHTITAN = "torchtitan 0.3.0, torchtitan/config/configs.py"
# Megatron's --clip-grad default and the usual DeepSpeed gradient_clipping; the spec has no
# field for it, so the three frameworks get the same value.
CLIP_GRAD = 1.0
# torchtitan's mesh, slowest axis first (torchtitan/distributed/parallel_dims.py): the ranks
# run tp fastest, then cp, dp and pp, which is planc's default order.
TORCHTITAN_ORDER = "tp-cp-dp-pp"
# The registry's key for torchtitan's names of a schedule (its pipeline_parallel_schedule, which
# torch.distributed.pipelining get_schedule_class resolves: 1F1B, Interleaved1F1B, GPipe).
TORCHTITAN_FRAMEWORK = "fsdp2"

Files = dict[str, str]

# torchtitan's training.mixed_precision_param for each precision it can run (it has no fp16).
TORCH_DTYPES = {DType.FP32: "float32", DType.BF16: "bfloat16", DType.FP16: "bfloat16"}
REDUCE_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}

# offload.activations under another framework's files (PLC051 says the same of the spec).
ACTIVATION_OFFLOAD_ELSEWHERE = (
    "offload.activations is Megatron-Core's --cpu-offloading-num-layers: {name} has no setting "
    "planc maps it to, so these files keep every layer's activations in HBM"
)


def _framework_schedule(plan: Plan, framework: str, notes: list[str]) -> str:
    """The framework's name for the plan's pipeline schedule; when it has none, its default
    schedule's name and a note (PLC030 refuses such a plan when the spec's framework is this
    one)."""
    kind = plan.job.layout.schedule
    names = definition(kind).runs_on
    if framework in names:
        return names[framework]
    fallback = definition(ScheduleKind.default(plan.job.layout.v))
    notes.append(
        f"this framework has no {definition(kind).title} schedule: it runs {fallback.title}, "
        "whose activation memory and bubble differ from the plan's"
    )
    return fallback.runs_on.get(framework, "")


def _shard_group(plan: Plan) -> int:
    """N: the ranks ZeRO/FSDP shards over (parallelism.data_shard; d·c when not set)."""
    return plan.job.layout.shard_group


# ----------------------------------------------------------------------------- Megatron-LM


def attention_kind_arguments(mod: Model) -> list[str]:
    """The sliding window and attention sinks (TransformerConfig window_size: w − 1 tokens
    back and none ahead, window_attn_skip_freq, softmax_type learnable; the arguments
    arguments.py and its ArgumentGroupFactory read, megatron-core 0.19.2)."""
    args = []
    if mod.window:
        args.append(f"--window-size {mod.window - 1},0")
        if mod.full_every:
            args.append(f"--window-attn-skip-freq {mod.full_every}")
    if mod.sinks:
        args.append("--softmax-type learnable")
    return args


def optimizer_arguments(plan: Plan) -> list[str]:
    """--optimizer, and Muon's options where they are not Megatron's defaults
    (megatron/training/arguments.py: --muon-tp-mode blockwise, --muon-num-ns-steps 5, QKV
    split unless --muon-no-split-qkv; 2edffadb and 0.19 alike). Megatron-Core before 0.18 names the layer-wise
    distributed optimizer dist_muon and refuses Muon with --use-distributed-optimizer
    (`planc.comm.schedule.layer_wise_all_reduce`); from 0.18 it is muon with
    --use-distributed-optimizer."""
    tr = plan.job.training
    if tr.optimizer != "muon":
        return [f"--optimizer {tr.optimizer}"]
    before_018 = layer_wise_all_reduce(plan.job)
    args = ["--optimizer dist_muon" if before_018 else "--optimizer muon"]
    if tr.muon_tp_mode != "blockwise":
        args.append(f"--muon-tp-mode {tr.muon_tp_mode}")
    if tr.muon_ns_steps != 5:
        args.append(f"--muon-num-ns-steps {tr.muon_ns_steps}")
    if not tr.muon_split_qkv:
        args.append("--muon-no-split-qkv")
    return args


def optimizer_state_arguments(plan: Plan, notes: list[str]) -> list[str]:
    """The optimizer state's formats (training.optimizer_state, training.fp8.moments) as
    Megatron-LM's precision-aware optimizer (megatron-core 0.19.2 arguments.py
    --use-precision-aware-optimizer, --main-params-dtype fp32|fp16, --exp-avg-dtype and
    --exp-avg-sq-dtype fp32|fp16|bf16|fp8; the master's remainders are its default,
    OptimizerConfig.store_param_remainders); nothing where the state is fp32. A bf16 master has
    no flag: it is NeMo 1.0's Apex DistributedFusedAdam (optim.dtype), said in a note."""
    num = plan.job.numerics
    args = []
    if num.master and num.master_format == "fp16":
        args.append("--main-params-dtype fp16")
    elif num.master and num.master_format == "bf16":
        notes.append(
            "training.optimizer_state.master bf16: Megatron-LM's --main-params-dtype takes fp32 "
            "or fp16; bf16 master weights are NeMo 1.0's distributed_fused_adam with optim.dtype: "
            "bf16 (Apex DistributedFusedAdam), so these arguments keep them in fp32"
        )
    if num.moment_format is not DType.FP32:
        fmt = num.moment_format.value
        args += [f"--exp-avg-dtype {fmt}", f"--exp-avg-sq-dtype {fmt}"]
    remainders = bool(num.master) and num.master_format == "remainders"
    if (args or remainders) and not plan.job.training.offload_optimizer:
        # The optimizer offload's flags (launchers.megatron_args) name the optimizer already.
        args.insert(0, "--use-precision-aware-optimizer")
    return args


def megatron_arguments(plan: Plan) -> tuple[list[str], list[str]]:
    """Every Megatron-LM argument of the plan (layout, model, step), and notes on what no
    argument expresses. The layout part is `launchers.megatron_args`, the README's recipe."""
    args, notes = megatron_args(plan)
    job, lay = plan.job, plan.job.layout
    mod, tr = job.model, job.training
    args += [
        f"--hidden-size {mod.h}",
        f"--ffn-hidden-size {mod.f}",
        f"--num-attention-heads {mod.n}",
    ]
    if mod.mla is None:
        args.append(f"--kv-channels {mod.k}")
    args += megatron_mla_arguments(plan)
    if mod.g != mod.n:
        args += ["--group-query-attention", f"--num-query-groups {mod.g}"]
    args += [
        f"--max-position-embeddings {mod.max_seq_len}",
        "--position-embedding-type " + _position_type(plan),
        *([f"--rotary-base {_rotary_base(mod.rope_theta)}"] if mod.position == "rope" else []),
        *megatron_rope_arguments(plan, notes),
        "--normalization " + ("RMSNorm" if mod.norm == "rmsnorm" else "LayerNorm"),
    ]
    if mod.mlp in MEGATRON_GLU_FLAGS:
        args.append(MEGATRON_GLU_FLAGS[mod.mlp])
    if not mod.bias:
        args.append("--disable-bias-linear")
    args += attention_kind_arguments(mod)
    if not mod.tied:
        args.append("--untie-embeddings-and-output-weights")
    if mod.qk_norm or mod.mla is not None:
        # Under latent attention the flag builds the RMSNorms of the query and key/value
        # latents (q_layernorm, kv_layernorm of MLASelfAttention; DeepSeek-V3's q_a_layernorm
        # and kv_a_layernorm), which planc counts: without it Megatron-Core leaves them out.
        args.append("--qk-layernorm")
    args += megatron_moe_arguments(plan)
    if (
        mod.moe is not None
        and mod.moe.score == "sigmoid"
        and not mod.moe.normalize
        and mod.moe.k > 1
    ):
        notes.append(
            "Megatron-Core renormalises the top-k weights of a sigmoid router (router_utils.py "
            "topk_routing_with_score_function): this model's unnormalised weights "
            "(router_normalize false) are not what it will run"
        )
    args += [
        f"--hidden-dropout {float(mod.dropout)!r}",
        f"--attention-dropout {float(mod.dropout)!r}",
        "--make-vocab-size-divisible-by 128",
    ]
    notes.append(
        f"the vocabulary comes from the tokenizer: planc counts {mod.V:,} tokens, padded to "
        f"{padded_vocab(mod.V, lay.t):,} (a multiple of 128 × tensor parallel)"
    )
    if mod.position == "rope" and not mod.rope_theta.is_integer():
        notes.append(
            f"Megatron's --rotary-base is an integer: θ = {mod.rope_theta:g} is written as "
            f"{_rotary_base(mod.rope_theta)}"
        )
    if job.numerics.precision is not DType.FP32:  # --bf16 / --fp16: mixed precision
        args.append(f"--{job.numerics.precision.value}")
    args += megatron_fp8_arguments(plan, notes)
    args += optimizer_arguments(plan)
    args += optimizer_state_arguments(plan, notes)
    args.append(f"--clip-grad {CLIP_GRAD!r}")
    if tr.grad_accum_fp32:
        args.append("--accumulate-allreduce-grads-in-fp32")
    if not tr.grad_accum_fusion:
        # Megatron-LM fuses the accumulation into the weight-gradient GEMM by default.
        args.append("--no-gradient-accumulation-fusion")
    if tr.recompute == "selective" and tr.recompute_modules:
        # An empty module list recomputes nothing, as no recompute flag does: Megatron's
        # --recompute-modules takes one value or more (argument_utils.py nargs '+').
        args.append("--recompute-granularity selective")
        if tr.recompute_modules != DEFAULT_RECOMPUTE_MODULES:
            args.append(" ".join(("--recompute-modules", *tr.recompute_modules)))
    elif tr.recompute == "full":
        args += [
            "--recompute-granularity full",
            "--recompute-method uniform",
            "--recompute-num-layers 1",
        ]
    # Flash attention's kernel as training.attention_backend names it (Megatron's AttnBackend:
    # auto lets Transformer Engine choose); eager attention is Megatron's unfused backend.
    args.append(
        "--attention-backend " + (tr.attention_backend if tr.attention == "flash" else "unfused")
    )
    args += megatron_loss_arguments(plan)
    if tr.overlap_tp:
        args.append("--tp-comm-overlap")
    if not tr.async_tp_allreduce and lay.t > 1:
        notes.append(
            "training.async_tp_allreduce is false, but Megatron-LM has run the column-parallel "
            "input-gradient all-reduce asynchronously since 2021-09 and no longer has "
            "--no-async-tensor-model-parallel-allreduce: these arguments run it asynchronously"
        )
    if tr.overlap_grad_reduce and lay.d * lay.c > 1:
        args.append("--overlap-grad-reduce")
        # validate_args: --overlap-param-gather needs the distributed optimizer and
        # --overlap-grad-reduce (Megatron-LM megatron/training/arguments.py).
        if tr.overlap_param_gather and lay.zero in ((1, 2, 3) if tr.megatron_fsdp else (1, 2)):
            args.append("--overlap-param-gather")
    if tr.megatron_fsdp:
        notes.append(
            "Megatron-FSDP: validate_args refuses CUDA_DEVICE_MAX_CONNECTIONS=1 ('FSDP requires "
            "CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset'): leave it unset in every rank's "
            "environment"
        )
    elif lay.t > 1 or lay.c > 1:
        notes.append(
            "with tensor or context parallelism on GPUs before Blackwell, Megatron's "
            "validate_args requires CUDA_DEVICE_MAX_CONNECTIONS=1 in every rank's environment"
        )
    replicas = lay.d * lay.c // _shard_group(plan)
    # Megatron-FSDP's HSDP: the shards over data_shard ranks, replicated over the instances
    # (mcore_fsdp_adapter.py _init_dist_index: enable_hsdp when the instances exceed 1).
    if replicas > 1 and lay.zero in ((1, 2, 3) if tr.megatron_fsdp else (1, 2)):
        args.append(f"--num-distributed-optimizer-instances {replicas}")
    if lay.p > 1:  # Megatron picks its schedule from the virtual pipeline size, no flag
        _framework_schedule(plan, "megatron", notes)
    if tr.defer_embedding_wgrad:
        # TransformerConfig's fields as Megatron-LM's arguments (ArgumentGroupFactory).
        args.append("--defer-embedding-wgrad-compute")
        if tr.wgrad_deferral_limit:
            args.append(f"--wgrad-deferral-limit {tr.wgrad_deferral_limit}")
    if lay.v > 1 and not tr.overlap_p2p_comm:
        # Megatron-LM overlaps the interleaved schedule's p2p by default (store_false flag).
        args.append("--no-overlap-p2p-communication")
    if lay.schedule is ScheduleKind.COMBINED_1F1B:
        # The combined 1F1B schedule is chosen by this flag (Megatron-LM moe_a2a_overlap.md).
        args.append("--overlap-moe-expert-parallel-comm")
    args += megatron_cuda_graph_arguments(plan, notes)
    notes += megatron_config_only_notes(plan)
    return args, notes


def megatron_cuda_graph_arguments(plan: Plan, notes: list[str]) -> list[str]:
    """training.cuda_graph as Megatron-LM's arguments (megatron-core 0.19.2 arguments.py):
    --cuda-graph-impl and --cuda-graph-modules (empty: the whole layer); --te-rng-tracker,
    which validate_args turns on for any graphs of Transformer Engine layers; with full_iteration
    --no-check-for-nan-in-loss-and-grad, which validate_args requires ('should be set with
    --cuda-graph-impl=full_iteration for training')."""
    tr = plan.job.training
    if tr.cuda_graph_impl is None:
        return []
    args = [f"--cuda-graph-impl {tr.cuda_graph_impl}"]
    if tr.cuda_graph_modules:
        args.append(" ".join(("--cuda-graph-modules", *tr.cuda_graph_modules)))
    # What validate_args turns on itself under Transformer Engine layers (its default
    # --transformer-impl, which planc leaves): written so the arguments say what runs.
    args.append("--te-rng-tracker")
    if tr.cuda_graph_impl == "full_iteration":
        args.append("--no-check-for-nan-in-loss-and-grad")
    if tr.cuda_graph_impl == "transformer_engine":
        notes.append(
            "CUDA graphs by Transformer Engine: validate_args requires NCCL_GRAPH_REGISTER=0 in "
            "every rank's environment when PYTORCH_CUDA_ALLOC_CONF has expandable_segments:True"
        )
    return args


# A gated MLP's flag (megatron-core 0.19.2 arguments.py --swiglu, --quick-geglu; argument_utils
# core_transformer_config_from_args: gated_linear_unit with F.silu or quick_gelu).
MEGATRON_GLU_FLAGS = {"swiglu": "--swiglu", "quick_geglu": "--quick-geglu"}


def megatron_config_only_notes(plan: Plan) -> list[str]:
    """What the spec states that Megatron-LM's command line cannot (megatron-core 0.19.2
    arguments.py has no flag for any; Megatron-Bridge's model config sets them): a clamped GLU
    (TransformerConfig.activation_func_clamp_value), a GLU's linear offset (glu_linear_offset)
    and the experts through Transformer Engine's op fuser (use_transformer_engine_op_fuser,
    with NVTE_CUTEDSL_FUSED_GROUPED_MLP for its CuTe DSL kernel)."""
    notes = []
    clamp, offset = plan.job.model.glu_clamp, plan.job.model.glu_linear_offset
    if clamp:
        notes.append(
            f"model.glu_clamp {clamp:g}: Megatron-LM's command line has no flag for "
            f"TransformerConfig.activation_func_clamp_value; set activation_func_clamp_value: "
            f"{clamp:g} in the --yaml-cfg model section or Megatron-Bridge's model config"
        )
    if offset:
        notes.append(
            f"model.glu_linear_offset {offset:g}: Megatron-LM's command line has no flag for "
            f"TransformerConfig.glu_linear_offset; set glu_linear_offset: {offset:g} in the "
            "--yaml-cfg model section or Megatron-Bridge's model config"
        )
    if plan.job.training.fused_grouped_mlp:
        notes.append(
            "training.fused_grouped_mlp: Megatron-LM's command line has no flag for "
            "TransformerConfig.use_transformer_engine_op_fuser; set it true in the --yaml-cfg "
            "model section or Megatron-Bridge's model config (cutedsl_fused_grouped_mlp), and "
            "export NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 in every rank's environment"
        )
    return notes


def megatron_loss_arguments(plan: Plan) -> list[str]:
    """training.cross_entropy_fusion as Megatron-LM's arguments (megatron-core 0.19.2,
    ModelParallelConfig.cross_entropy_loss_fusion and cross_entropy_fusion_impl): nothing for
    the eager loss, --cross-entropy-loss-fusion for Megatron-Core's fused one, and with
    --cross-entropy-fusion-impl te for Transformer Engine's, which 0.19.2's validate_args
    refuses (PLC048 says so)."""
    fusion = plan.job.training.loss_fusion
    if fusion == "none":
        return []
    args = ["--cross-entropy-loss-fusion"]
    return [*args, "--cross-entropy-fusion-impl te"] if fusion == "te" else args


def _position_type(plan: Plan) -> str:
    """Megatron's --position-embedding-type: rope, yarn (GPTModel's YaRN branch; latent
    attention takes its RoPE kind from --rope-type instead) or learned_absolute."""
    mod = plan.job.model
    if mod.position != "rope":
        return "learned_absolute"
    scaling = mod.rope_scaling
    if scaling is not None and scaling.kind == "yarn" and mod.mla is None:
        return "yarn"
    return "rope"


# MLATransformerConfig's YaRN fields that no argument sets (arguments.py has no flag for them:
# core_transformer_config_from_args copies only fields of the same name), with their defaults.
_MLA_YARN_FIXED = (
    ("original", "original_max_position_embeddings", 4096.0),
    ("beta_fast", "beta_fast", 32.0),
    ("beta_slow", "beta_slow", 1.0),
)


def megatron_rope_arguments(plan: Plan, notes: list[str]) -> list[str]:
    """RoPE scaling as Megatron-LM's arguments (megatron-core 0.19.2), and notes on what they
    cannot say. Latent attention builds its own rotary embedding from --rope-type, yarn by
    default with MLATransformerConfig's DeepSeek-V3 values, so an MLA model states its kind
    either way. YaRN elsewhere is --position-embedding-type yarn with the --yarn-* flags
    (argument_utils._apply_yarn_config_from_args); Llama 3.1's scaling is --use-rope-scaling
    with its factor, the other three numbers fixed (RotaryEmbedding._apply_scaling: low 1,
    high 4, original 8192)."""
    mod = plan.job.model
    scaling = mod.rope_scaling
    if mod.position != "rope":
        return []
    if scaling is None:
        return ["--rope-type rope"] if mod.mla is not None else []
    if scaling.kind == "llama3":
        fixed = (scaling.low_freq_factor, scaling.high_freq_factor, scaling.original)
        if fixed != (1.0, 4.0, 8192):
            notes.append(
                "Megatron's Llama 3 RoPE scaling fixes low_freq_factor 1, high_freq_factor 4 and "
                f"8,192 original positions; this model's {fixed[0]:g}, {fixed[1]:g} and "
                f"{fixed[2]:,} are not what it will run"
            )
        return ["--use-rope-scaling", f"--rope-scaling-factor {scaling.factor!r}"]
    args = [f"--rotary-scaling-factor {scaling.factor!r}"]
    if mod.mla is not None:
        args.insert(0, "--rope-type yarn")
        for attr, name, default in _MLA_YARN_FIXED:
            value = float(getattr(scaling, attr))
            if value != default:
                notes.append(
                    f"YaRN {name} {value:g}: Megatron-LM has no argument for it under latent "
                    f"attention (MLATransformerConfig keeps {default:g})"
                )
    else:
        args += [
            f"--yarn-original-max-position-embeddings {scaling.original}",
            f"--yarn-beta-fast {scaling.beta_fast!r}",
            f"--yarn-beta-slow {scaling.beta_slow!r}",
        ]
    return [*args, f"--mscale {scaling.mscale!r}", f"--mscale-all-dim {scaling.mscale_all_dim!r}"]


# Megatron's --fp8-format per recipe (TransformerConfig.fp8: 'e4m3' or 'hybrid', E4M3 forward
# and E5M2 gradients): hybrid for per-tensor scaling (TE DelayedScaling's default format),
# E4M3 for block and MX scaling (TE docs: Float8BlockScaling and MXFP8BlockScaling use E4M3
# in both passes by default).
FP8_FORMATS = {"delayed": "hybrid", "current": "hybrid", "blockwise": "e4m3", "mxfp8": "e4m3"}


def megatron_fp8_arguments(plan: Plan, notes: list[str]) -> list[str]:
    """An FP8/FP4 recipe as Megatron-LM's arguments (transformer_config.py: --fp8-format,
    --fp8-recipe, --fp8-param-gather, --first-last-layers-bf16 with
    --num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16; --fp4-format e2m1,
    --fp4-recipe nvfp4, --fp4-param-gather); none for a 16/32-bit run."""
    q = plan.job.numerics.quantized
    if q is None:
        return []
    row = recipe_table(q.recipe)
    if row.megatron is None:
        notes.append(
            f"recipe {q.recipe.value} is torchao's: Megatron-LM runs Transformer Engine's "
            "recipes only, so these arguments train in bf16"
        )
        return []
    if q.recipe.value == "nvfp4":
        args = ["--fp4-format e2m1", "--fp4-recipe nvfp4"]
        if q.param_gather:
            args.append("--fp4-param-gather")
    else:
        args = [f"--fp8-format {FP8_FORMATS[q.recipe.value]}", f"--fp8-recipe {row.megatron}"]
        if q.param_gather:
            args.append("--fp8-param-gather")
            if q.recipe.value == "mxfp8":
                args.append("--reuse-grad-buf-for-mxfp8-param-ag")
    if q.bf16_layers:
        args += [
            "--first-last-layers-bf16",
            f"--num-layers-at-start-in-bf16 {q.bf16_layers}",
            f"--num-layers-at-end-in-bf16 {q.bf16_layers}",
        ]
    if q.attention is not None:
        notes.append(fp8_attention_note(q.recipe, q.attention.recipe))
    if q.output_proj:
        # TransformerConfig.fp8_output_proj, a flag of arguments.py's ArgumentGroupFactory
        args.append("--fp8-output-proj")
    return args


# Transformer Engine's NVTE_DPA_FP8_RECIPE value for each attention recipe (dot_product_attention.py,
# TE 2.18): what switches the attention core to a recipe other than the linear layers'.
DPA_RECIPES = {
    "delayed": "DelayedScaling",
    "current": "Float8CurrentScaling",
    "mxfp8": "MXFP8BlockScaling",
}


def fp8_attention_note(linear: Fp8Recipe, attention: Fp8Recipe) -> str:
    """How to turn on FP8 attention in `attention`'s recipe beside the linear layers' `linear`:
    Megatron-LM has no flag for it, and a different recipe is Transformer Engine's
    NVTE_DPA_FP8_RECIPE."""
    note = (
        f"attention in FP8 ({attention.value}): Megatron-LM's command line has no flag for "
        "TransformerConfig.fp8_dot_product_attention (arguments.py: 'no CLI argument exists "
        "for these'); set fp8_dot_product_attention: true in the --yaml-cfg model section or "
        "Megatron-Bridge's model config"
    )
    if attention is linear:
        return note
    return f"{note}, and export NVTE_DPA_FP8_RECIPE={DPA_RECIPES[attention.value]}"


def megatron_mla_arguments(plan: Plan) -> list[str]:
    """Multi-head latent attention and multi-token prediction as Megatron-LM's arguments
    (arguments.py _add_mla_args; --multi-latent-attention and --mtp-num-layers are
    TransformerConfig fields): none for standard attention without MTP."""
    mod = plan.job.model
    args: list[str] = []
    mla = mod.mla
    if mla is not None:
        args.append("--multi-latent-attention")
        if mla.q_lora is not None:
            args.append(f"--q-lora-rank {mla.q_lora}")
        args += [
            f"--kv-lora-rank {mla.kv_lora}",
            f"--qk-head-dim {mla.qk_nope}",
            f"--qk-pos-emb-head-dim {mla.qk_rope}",
            f"--v-head-dim {mla.v_head}",
        ]
    if mod.mtp:
        args.append(f"--mtp-num-layers {mod.mtp}")
    return args


def megatron_moe_arguments(plan: Plan) -> list[str]:
    """The experts and their layout as Megatron-LM's arguments (megatron/training/arguments.py
    _add_moe_args): none for a dense model. The MoE layer pattern is an integer frequency, or a
    list of 0/1 per layer when leading layers stay dense or the experts are not in the layers
    i % f == 0 (--moe-layer-freq [0,0,0,1,...]; Llama 4 Maverick [0,1,0,1,...])."""
    mod, lay = plan.job.model, plan.job.layout
    moe = mod.moe
    if moe is None:
        return []
    args = [
        f"--num-experts {moe.E}",
        f"--moe-router-topk {moe.k}",
        f"--moe-ffn-hidden-size {moe.f_e}",
        f"--expert-model-parallel-size {lay.ep}",
        f"--expert-tensor-parallel-size {lay.et}",
        *megatron_dispatcher_arguments(plan),
    ]
    if moe.first_dense or moe.offset:
        pattern = ",".join(str(int(moe.is_moe_layer(i))) for i in range(mod.L))
        args.append(f"--moe-layer-freq [{pattern}]")
    elif moe.frequency > 1:
        args.append(f"--moe-layer-freq {moe.frequency}")
    if moe.E_s:
        args.append(f"--moe-shared-expert-intermediate-size {moe.E_s * moe.f_s}")
    if moe.capacity_factor is not None:
        args.append(f"--moe-expert-capacity-factor {moe.capacity_factor!r}")
    if moe.padded:
        # Drop and pad: TransformerConfig refuses the flag without a capacity factor, which
        # PLC031 refuses too (moe.padded is false then).
        args.append("--moe-pad-expert-input-to-capacity")
    if moe.router_bias:
        # TransformerConfig refuses the expert bias with softmax scores (transformer_config.py:
        # "only supports 'sigmoid' and 'sqrtsoftplus'"), which job.py refuses too.
        args.append("--moe-router-enable-expert-bias")
    if moe.score == "sigmoid":
        args.append("--moe-router-score-function sigmoid")
    elif moe.k == 1 or not moe.normalize:
        # The softmax over all experts, then the top k, unnormalised (Hugging Face
        # norm_topk_prob false); with top-1 also the only choice, since the softmax over the one
        # expert picked would weigh it 1 and give the router no gradient (TransformerConfig:
        # "Please use --moe-router-pre-softmax when topk is 1"; Switch Transformer's routing).
        args.append("--moe-router-pre-softmax")
    if moe.groups is not None and moe.group_k is not None:
        # Group-limited routing (TransformerConfig moe_router_num_groups, moe_router_group_topk).
        args += [f"--moe-router-num-groups {moe.groups}", f"--moe-router-group-topk {moe.group_k}"]
    if moe.scaling is not None:
        args.append(f"--moe-router-topk-scaling-factor {moe.scaling!r}")
    return args


def megatron_dispatcher_arguments(plan: Plan) -> list[str]:
    """parallelism.expert_dispatcher as Megatron-LM's flags: --moe-token-dispatcher-type
    alltoall or allgather, or flex with --moe-flex-dispatcher-backend deepep or hybridep
    (TransformerConfig moe_token_dispatcher_type, moe_flex_dispatcher_backend, megatron-core
    0.19.2), and parallelism.dispatcher_sms as --moe-flex-dispatcher-num-sms. Under flex also
    --moe-router-dtype fp32: both backends take float32 routing
    probabilities and upcast others with a warning (token_dispatcher.py _DeepepManager.dispatch,
    _HybridEPManager.dispatch: 'please set --moe-router-dtype=fp32')."""
    dispatcher, sms = plan.job.layout.dispatcher, plan.job.layout.dispatcher_sms
    if dispatcher in ("alltoall", "allgather"):
        return [f"--moe-token-dispatcher-type {dispatcher}"]
    args = [
        "--moe-token-dispatcher-type flex",
        f"--moe-flex-dispatcher-backend {dispatcher}",
        "--moe-router-dtype fp32",
    ]
    # The SMs its kernels hold (TransformerConfig.moe_flex_dispatcher_num_sms; none: the
    # library's default).
    return [*args, f"--moe-flex-dispatcher-num-sms {sms}"] if sms is not None else args


def megatron_files(plan: Plan) -> Files:
    args, notes = megatron_arguments(plan)
    note_lines = "".join(f"- {note}.\n" for note in notes) or "- none.\n"
    readme = f"""# Megatron-LM arguments

`args.txt` holds every argument of this plan, one `--flag value` per line, as Megatron-LM's
argument parser reads them. Pass them to the training script:

    torchrun ... pretrain_gpt.py $(cat megatron/args.txt) --tokenizer-type ... --data-path ...

Data, tokenizer, learning rate, checkpoints and logging are yours to add.

Followed: {MEGATRON}.

Notes:

{note_lines}"""
    return {"megatron/args.txt": "".join(f"{arg}\n" for arg in args), "megatron/README.md": readme}


# ----------------------------------------------------------------------------- DeepSpeed


def deepspeed_config(plan: Plan) -> tuple[dict[str, Any], list[str]]:
    """The DeepSpeed config of the plan (train_batch_size = micro × accumulation × data
    parallel, as DeepSpeedConfig asserts), and notes on what it cannot express."""
    job, lay, tr = plan.job, plan.job.layout, plan.job.training
    notes: list[str] = []
    bucket = lay.bucket_elements
    zero: dict[str, Any] = {
        "stage": lay.zero,
        "contiguous_gradients": True,
        "overlap_comm": tr.overlap_grad_reduce,
        "reduce_bucket_size": bucket,
        "allgather_bucket_size": bucket,
    }
    shard = _shard_group(plan)
    if shard < lay.d * lay.c and lay.zero > 0:
        notes.append(
            f"data_shard {shard}: DeepSpeed 0.19 shards ZeRO-{lay.zero} over the whole data-"
            "parallel group (MiCS, its sub-group sharding, was removed, and ZeRO++'s "
            "zero_hpz_partition_size only keeps a second copy of ZeRO-3 parameters), so this "
            "config shards over every data-parallel rank, not over data_shard"
        )
    if tr.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if tr.offload_parameters:
        if lay.zero == 3:
            zero["offload_param"] = {"device": "cpu", "pin_memory": True}
        else:
            notes.append("offload.parameters needs ZeRO-3 in DeepSpeed (offload_param)")
    if tr.offload_activation_layers:
        notes.append(ACTIVATION_OFFLOAD_ELSEWHERE.format(name="DeepSpeed"))
    config: dict[str, Any] = {
        "train_batch_size": tr.B,
        "train_micro_batch_size_per_gpu": tr.b,
        "gradient_accumulation_steps": job.m,
        "gradient_clipping": CLIP_GRAD,
    }
    if job.numerics.precision is DType.BF16:
        config["bf16"] = {"enabled": True}
    elif tr.precision == "fp16":
        config["fp16"] = {"enabled": True, "loss_scale": 0}  # 0: dynamic loss scaling
    if tr.grad_accum_fp32:
        config["data_types"] = {"grad_accum_dtype": "fp32"}
    if job.numerics.quantized is not None:
        notes.append(
            f"precision {tr.precision} (recipe {job.numerics.quantized.recipe.value}): "
            "DeepSpeed's config has no FP8 setting; the model code must run Transformer "
            "Engine modules inside te.fp8_autocast with this recipe, and the config trains "
            "the rest in bf16"
        )
    config["zero_optimization"] = zero
    expert, expert_notes = deepspeed_expert_parallel(plan)
    if expert:
        config["expert_parallel"] = expert
    notes += expert_notes
    if lay.p > 1 and lay.zero >= 2:
        notes.append(
            f"ZeRO-{lay.zero} with pipeline parallelism: DeepSpeed's PipelineEngine refuses it "
            "(ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism; runtime/pipe/engine.py)"
        )
    if lay.t > 1 or lay.p > 1 or lay.c > 1:
        notes.append(
            f"tensor ({lay.t}), pipeline ({lay.p}) and context ({lay.c}) parallelism come from "
            "the model code (Megatron-DeepSpeed's mpu, DeepSpeed's PipelineModule, Ulysses): "
            "DeepSpeed's config has no degree for them; its data-parallel size must be "
            f"{lay.d} for these batch numbers"
        )
    if lay.p > 1 and lay.schedule in _SPLIT_OR_OVERLAPPED:
        notes.append(
            f"DeepSpeed's PipelineEngine runs its TrainSchedule, a 1F1B "
            f"(deepspeed/runtime/pipe/schedule.py), and no {definition(lay.schedule).title} "
            "schedule: its bubble and activation memory are not this plan's"
        )
    return config, notes


# The schedules from the zero-bubble, DualPipe and expert-overlap families, which DeepSpeed's
# pipeline engine does not run (its note; the flush schedules it lacks have none yet).
_SPLIT_OR_OVERLAPPED = (
    ScheduleKind.ZB_H1,
    ScheduleKind.ZB_V,
    ScheduleKind.DUALPIPE_V,
    ScheduleKind.COMBINED_1F1B,
)


# DeepSpeed AutoEP's model presets (deepspeed/module_inject/auto_ep_presets) of planc's presets.
_DEEPSPEED_EP_PRESETS = {
    "mixtral-8x7b": "mixtral",
    "mixtral-8x22b": "mixtral",
    "qwen3-30b-a3b": "qwen3_moe",
    "qwen3-235b-a22b": "qwen3_moe",
    "deepseek-v3": "deepseek_v3",
}


def deepspeed_expert_parallel(plan: Plan) -> tuple[dict[str, Any], list[str]]:
    """The `expert_parallel` section (DeepSpeed AutoEP, deepspeed/module_inject/auto_ep_config.py
    parse_autoep_config: it replaces a Hugging Face model's MoE layers with expert-parallel
    ones) for a model with experts, and notes on what it does not run as planned. Nothing for a
    dense model. AutoEP's checks (auto_ep_folding.py): expert_tensor_parallel_size must be 1,
    and ep·etp must divide world / pp."""
    job, lay = plan.job, plan.job.layout
    moe = job.model.moe
    if moe is None:
        return {}, []
    section: dict[str, Any] = {
        "enabled": True,
        "autoep_size": lay.ep,
        "expert_tensor_parallel_size": 1,
    }
    notes: list[str] = []
    preset = _DEEPSPEED_EP_PRESETS.get(job.model.preset or "")
    if preset is not None:
        section["preset_model"] = preset
    else:
        notes.append(
            "expert_parallel has no preset_model: AutoEP detects the MoE layers from the Hugging "
            "Face model_type (mixtral, qwen3_moe, deepseek_v2, deepseek_v3, ...)"
        )
    if lay.et != 1:
        notes.append(
            f"expert_tensor {lay.et}: DeepSpeed 0.19's AutoEP refuses "
            "expert_tensor_parallel_size > 1 (auto_ep_folding.py: reserved, not supported yet), "
            "so this config keeps each expert whole (1)"
        )
    if lay.t > 1:
        notes.append(
            f"tensor {lay.t} with experts: AutoEP folds only DeepSpeed's own AutoTP "
            "(tensor_parallel.autotp_size, with pipeline 1) and refuses a model-code tensor-"
            "parallel group of another size (validate_folding_global)"
        )
    return section, notes


def deepspeed_files(plan: Plan) -> Files:
    config, notes = deepspeed_config(plan)
    note_lines = "".join(f"- {note}.\n" for note in notes) or "- none.\n"
    readme = f"""# DeepSpeed

`ds_config.json` is this plan's DeepSpeed config. Use it as
`deepspeed.initialize(..., config="deepspeed/ds_config.json")`, or
`deepspeed --hostfile deepspeed/hostfile train.py --deepspeed_config deepspeed/ds_config.json`.
train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps × the
data-parallel size; the buckets are the elements planc's memory budget counts.

Followed: {DEEPSPEED}.

Notes:

{note_lines}"""
    return {
        "deepspeed/ds_config.json": json.dumps(config, indent=2) + "\n",
        "deepspeed/README.md": readme,
    }


# ----------------------------------------------------------------------------- torchtitan


def torchtitan_settings(plan: Plan) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """ParallelismConfig and TrainingConfig fields of the plan, and notes."""
    job, lay, tr = plan.job, plan.job.layout, plan.job.training
    notes: list[str] = []
    shard = _shard_group(plan)
    if lay.zero == 0:
        replicate, dp_shard = lay.d, 1
    elif shard % lay.c == 0:
        dp_shard = shard // lay.c  # torchtitan's FSDP group is dp_shard × cp
        replicate = lay.d // dp_shard
    else:
        replicate, dp_shard = 1, lay.d
        notes.append(
            f"data_shard {shard} is not a multiple of context {lay.c}: torchtitan shards over "
            "dp_shard × cp, so this shards over the whole data-parallel group"
        )
    if lay.zero in (1, 2):
        notes.append(
            f"ZeRO-{lay.zero}: torchtitan shards with FSDP2; without resharding after forward "
            "it keeps whole parameters from forward to backward, as ZeRO-2 does"
        )
    reshard = lay.zero == 3 and tr.reshard_after_forward
    parallelism: dict[str, Any] = {
        "data_parallel_replicate_degree": replicate,
        "data_parallel_shard_degree": dp_shard,
        "fsdp_reshard_after_forward": "always" if reshard else "never",
        "tensor_parallel_degree": lay.t,
        "enable_sequence_parallel": lay.sp,
        "pipeline_parallel_degree": lay.p,
        "pipeline_parallel_schedule": _framework_schedule(plan, TORCHTITAN_FRAMEWORK, notes),
        "pipeline_parallel_microbatch_size": tr.b,
        "context_parallel_degree": lay.c,
    }
    if lay.c > 1 and lay.cp_comm == "p2p":
        notes.append(
            "cp_comm_type p2p: torchtitan 0.3.0 leaves torch's ring attention at its default "
            "K/V all-gather and has no setting for it; call torch.distributed.tensor."
            "experimental._attention.set_rotate_method('alltoall') before training for the "
            "permute ring planc priced"
        )
    if tr.repeat_kv and job.model.g < job.model.n:
        notes.append(
            "repeat_kv: the plan prices K and V repeated to every query head before attention, "
            "as torchtitan's Llama did before v0.2.2; torchtitan 0.3.0 passes the grouped heads "
            "to SDPA (enable_gqa), so its memory and its context-parallel exchange are smaller "
            "than planned"
        )
    if job.model.moe is not None:
        parallelism["expert_parallel_degree"] = lay.ep
        notes += _torchtitan_expert_notes(plan, dp_shard)
    if lay.p > 1:
        chunks = [size for stage in range(lay.p) for size in lay.chunk_layers(stage)]
        if len(set(chunks)) == 1:
            parallelism["pipeline_parallel_layers_per_stage"] = chunks[0]
        else:
            parallelism["module_fqns_per_model_part"] = _model_parts(plan)
            notes.append(
                "module_fqns_per_model_part names torchtitan's decoder modules (tok_embeddings, "
                "layers.N, norm, output): other models need their own names"
            )
    order = "-".join(plan.placement.grid.order)
    if order != TORCHTITAN_ORDER:
        notes.append(
            f"torchtitan lays ranks out as {TORCHTITAN_ORDER} (fastest first); this plan's "
            f"order {order} is not what it will run"
        )
    if tr.precision == "fp16":
        notes.append("torchtitan trains in bfloat16 or float32 only: fp16 is not available")
    training: dict[str, Any] = {
        # With pipeline parallelism the local batch is one step's micro-batches, split by
        # pipeline_parallel_microbatch_size; without, the rest is gradient accumulation.
        "local_batch_size": tr.b * job.m if lay.p > 1 else tr.b,
        "global_batch_size": tr.B,
        "seq_len": tr.s,
        "max_norm": CLIP_GRAD,
        "mixed_precision_param": TORCH_DTYPES[job.numerics.precision],
        # FSDP2's MixedPrecisionPolicy.reduce_dtype (torchtitan 0.3.0 parallelize.py apply_fsdp)
        "mixed_precision_reduce": REDUCE_DTYPES[tr.reduce_dtype],
    }
    if tr.reduce_dtype != "fp32":
        notes.append(
            f"reduce_dtype {tr.reduce_dtype}: torchtitan 0.3.0 declares float32 as "
            "training.mixed_precision_reduce's only value; its config parser (tyro) takes "
            f"{REDUCE_DTYPES[tr.reduce_dtype]} from this module with a warning and FSDP2 then "
            "reduces in it"
        )
    if tr.model_dtype != "fp32":
        notes.append(
            f"model_dtype {tr.model_dtype}: these arguments build torchtitan's model in float32 "
            "(mixed_precision_param casts only the gathered copy to bf16), so its parameters and "
            "Adam state take twice the memory this plan counts; the plan's bf16 storage is "
            "what NeMo AutoModel's torch_dtype: bf16 keeps"
        )
    if tr.offload_optimizer or tr.offload_parameters:
        # FSDP2's CPUOffloadPolicy (torchtitan 0.3.0 configs.py enable_cpu_offload) moves the
        # parameters, gradients and optimizer state together: one switch, no halves (PLC051).
        training["enable_cpu_offload"] = True
        if not (tr.offload_optimizer and tr.offload_parameters):
            notes.append(
                "torchtitan's enable_cpu_offload offloads parameters, gradients and optimizer "
                "state together: more than this plan's offload, which is priced without it"
            )
    if tr.offload_activation_layers:
        notes.append(ACTIVATION_OFFLOAD_ELSEWHERE.format(name="torchtitan"))
    if lay.p > 1:
        # torchtitan 0.3.0's validation: "CUDA graphs do not support pipeline parallelism yet".
        training["disable_cuda_graphs"] = True
    notes += torchtitan_fp8_notes(plan)
    return parallelism, training, notes


# torchtitan 0.3.0's model converters (torchtitan/components/quantization): the float8
# converter takes torchao's rowwise recipes, the MXFP8 one the modules it converts; both leave
# the LM head ('output') in bf16 as torchtitan's float8 configs do.
TORCHTITAN_CONVERTERS = {
    "rowwise": (
        "torchtitan.components.quantization.float8:Float8LinearConverter",
        {"recipe_name": "rowwise", "filter_fqns": ["output"]},
    ),
    "rowwise_with_gw_hp": (
        "torchtitan.components.quantization.float8:Float8LinearConverter",
        {"recipe_name": "rowwise_with_gw_hp", "filter_fqns": ["output"]},
    ),
    "mxfp8": ("torchtitan.components.quantization.mx:MXFP8LinearConverter", {"fqns": ["layers"]}),
}


def torchtitan_converters(plan: Plan) -> list[list[Any]]:
    """The model converters of the plan's FP8 recipe, as [class path, Config fields]; none for
    a 16/32-bit run or a recipe torchtitan 0.3.0 has no converter of."""
    q = plan.job.numerics.quantized
    if q is None or q.recipe.value not in TORCHTITAN_CONVERTERS:
        return []
    path, fields = TORCHTITAN_CONVERTERS[q.recipe.value]
    return [[path, fields]]


def torchtitan_fp8_notes(plan: Plan) -> list[str]:
    """What torchtitan 0.3.0 cannot run of the plan's recipe."""
    q = plan.job.numerics.quantized
    if q is None:
        return []
    notes = []
    if q.recipe.value not in TORCHTITAN_CONVERTERS:
        notes.append(
            f"recipe {q.recipe.value}: torchtitan 0.3.0's Float8LinearConverter takes rowwise or "
            "rowwise_with_gw_hp and MXFP8LinearConverter mxfp8; no converter is applied, the "
            "model trains in bf16"
        )
    if q.param_gather:
        notes.append(
            "param_gather: torchtitan 0.3.0's converters have no FP8 all-gather option; FSDP2 "
            "gathers in bf16"
        )
    if q.bf16_layers:
        notes.append(
            f"first_last_bf16 {q.bf16_layers}: list those layers in the converter's "
            "filter_fqns (float8) or leave them out of fqns (mxfp8)"
        )
    return notes


def _torchtitan_expert_notes(plan: Plan, dp_shard: int) -> list[str]:
    """What torchtitan 0.3.0 runs differently from the plan's experts: it has no expert tensor
    parallelism (ETP was deprecated, pytorch/torchtitan #3167: experts are whole on each EP
    rank), carves EP out of dp_shard·cp·tp, which EP must divide (configs.py
    ParallelismConfig.expert_parallel_degree; distributed/parallel_dims.py), and takes a DeepEP
    or HybridEP dispatcher from how the model config was built, not from a setting."""
    lay = plan.job.layout
    notes = []
    if lay.et != 1:
        notes.append(
            f"expert_tensor {lay.et}: torchtitan 0.3.0 has no expert tensor parallelism (each "
            "expert is whole on its expert-parallel rank), so its experts are not split"
        )
    if lay.dispatcher in ("deepep", "hybridep"):
        notes.append(
            f"expert_dispatcher {lay.dispatcher}: torchtitan 0.3.0 picks its token dispatcher "
            "when the model config is built, from the model registry's moe_comm_backend (e.g. "
            f"torchtitan.models.qwen3.model_registry(flavor, moe_comm_backend='{lay.dispatcher}'"
            "), through models/common/config_utils.py make_token_dispatcher_config); the "
            "registered configs use 'standard' (all-to-all), so set PLANC_TORCHTITAN_BASE to a "
            f"config built with moe_comm_backend='{lay.dispatcher}'"
        )
    region = dp_shard * lay.c * lay.t
    if region % lay.ep:
        notes.append(
            f"expert {lay.ep} does not divide torchtitan's dense region dp_shard × cp × tp = "
            f"{region}: ParallelDims refuses it"
        )
    return notes


def _model_parts(plan: Plan) -> list[list[str]]:
    """The modules of every model chunk in stage order (chunk j of stage r is stage j·p + r, as
    torchtitan's looped schedules place them; stages r and 2p − 1 − r in its "v" style, for
    ZBVZeroBubble and DualPipeV)."""
    lay = plan.job.layout
    placement = definition(lay.schedule).placement
    blocks: dict[int, tuple[int, int]] = {}
    for stage in range(lay.p):
        for chunk, (first, last) in enumerate(lay.chunks[stage]):
            blocks[virtual_stage(lay.p, stage, chunk, placement)] = (first, last)
    parts = [[f"layers.{i}" for i in range(*blocks[b])] for b in sorted(blocks)]
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    return parts


_TORCHTITAN_MODULE = '''"""planc: the parallel layout of {name} for torchtitan.

Written by `planc compile` from the same plan as plan.json.
Followed: {version}.

torchtitan reads its configuration from a Python function returning Trainer.Config
(--module M --config F); `planc` below takes a registered config and sets this plan's
parallelism and batch:

    PYTHONPATH="$PWD/torchtitan" torchrun ... -m torchtitan.train --module planc_config --config planc

PLANC_TORCHTITAN_BASE=module:function names the registered config to start from
(default: {base_text}).
{notes}"""

import importlib
import os

BASE = {base}

PARALLELISM = {parallelism}

TRAINING = {training}

OPTIMIZER = {optimizer}

ACTIVATION_CHECKPOINT = {checkpoint}

COMPILE = {compile}


def checkpointing(mode):
    """torchtitan's activation-checkpointing policy config for `mode` (None: none)."""
    if mode is None:
        return None
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

    return {{"full": FullAC, "selective": SelectiveAC}}[mode].Config()


def apply(config):
    """Set this plan's parallelism, training, optimizer, activation checkpointing and compile
    fields on a Trainer.Config; return it."""
    for key, value in PARALLELISM.items():
        setattr(config.parallelism, key, value)
    for key, value in TRAINING.items():
        setattr(config.training, key, value)
    for key, value in OPTIMIZER.items():
        setattr(config.optimizer, key, value)
    config.activation_checkpoint = checkpointing(ACTIVATION_CHECKPOINT)
    for key, value in COMPILE.items():
        setattr(config.compile, key, value)
    return config


def planc():
    """The registered base config with this plan applied (--config planc)."""
    base = os.environ.get("PLANC_TORCHTITAN_BASE") or BASE
    if not base:
        raise RuntimeError(
            "set PLANC_TORCHTITAN_BASE=module:function to torchtitan's config of this model"
        )
    module, _, function = base.partition(":")
    return apply(getattr(importlib.import_module(module), function)())
'''

# torchtitan's registered configs of planc's presets (torchtitan/models/llama3/config_registry.py).
_TORCHTITAN_BASES = {
    "llama3-8b": "torchtitan.models.llama3.config_registry:llama3_8b",
    "llama3-70b": "torchtitan.models.llama3.config_registry:llama3_70b",
    "llama3-405b": "torchtitan.models.llama3.config_registry:llama3_405b",
    "qwen3-30b-a3b": "torchtitan.models.qwen3.config_registry:qwen3_30b_a3b",
    "deepseek-v3": "torchtitan.models.deepseek_v3.config_registry:deepseek_v3_671b",
}


def _python(value: Any, indent: int = 0) -> str:
    """A literal of plain data as Python source (True/False/None, dicts one key a line)."""
    if isinstance(value, dict) and not value:
        return "{}"
    if isinstance(value, dict):
        inner = "".join(
            f"{'    ' * (indent + 1)}{json.dumps(key)}: {_python(item, indent + 1)},\n"
            for key, item in value.items()
        )
        return "{\n" + inner + "    " * indent + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_python(item, indent) for item in value) + "]"
    if isinstance(value, bool) or value is None:
        return repr(value)
    return json.dumps(value)


_TORCHTITAN_CONVERT = '''

CONVERTERS = {converters}

_apply_layout = apply


def apply(config):
    """This plan's layout, and the model converted to its FP8 recipe (torchtitan's model
    converters, built as its float8 configs build them)."""
    config = _apply_layout(config)
    compiled = config.compile.enable and "model" in config.compile.components
    for path, fields in CONVERTERS:
        module, _, name = path.partition(":")
        converter = getattr(importlib.import_module(module), name)
        built = converter.Config(model_compile_enabled=compiled, **fields).build()
        config.model_spec.model = built.convert(config.model_spec.model)
    return config
'''


# The spec's names of the resolved model's fields (planc/spec/job.py Model).
_SPEC_FIELDS = {
    "L": "layers",
    "h": "hidden",
    "n": "heads",
    "g": "kv_heads",
    "k": "head_dim",
    "f": "ffn_hidden",
    "V": "vocab",
    "tied": "tied_embeddings",
    "position": "position_embedding",
    "mtp": "mtp_layers",
}


def _torchtitan_base(plan: Plan, notes: list[str]) -> str | None:
    """torchtitan's registered config of the plan's model: its preset's, when the spec changes
    none of the preset's fields (a registered config is that model and no other); else None and
    a note naming the fields that differ."""
    model = plan.job.model
    name = model.preset or ""
    base = _TORCHTITAN_BASES.get(name)
    if base is None:
        notes.append(
            "the model is not a planc preset with a torchtitan config: set "
            "PLANC_TORCHTITAN_BASE to torchtitan's config of your model"
        )
        return None
    own = preset_model(name, plan.job.training.s)
    changed = (
        []
        if own is None
        else [
            "model." + _SPEC_FIELDS.get(field.name, field.name)
            for field in dataclasses.fields(model)
            if getattr(model, field.name) != getattr(own, field.name)
        ]
    )
    if own is not None and not changed:
        return base
    notes.append(
        f"the spec changes {', '.join(changed) or 'fields'} of the {name} preset: "
        f"torchtitan's registered config of {name} ({base}) is not this model; set "
        "PLANC_TORCHTITAN_BASE to torchtitan's config of it"
    )
    return None


# torchtitan 0.3.0's policy for each recompute mode (torchtitan/distributed/
# activation_checkpoint.py: FullAC recomputes the whole block, SelectiveAC is the per-op policy
# planc calls selective-op; None checkpoints nothing). Its Trainer.Config defaults to SelectiveAC
# and the registered model configs set their own, so the plan's is always written.
TORCHTITAN_CHECKPOINT: dict[str, str | None] = {
    "none": None,
    "full": "full",
    "selective-op": "selective",
    "selective": "selective",
}


def torchtitan_recompute(plan: Plan, notes: list[str]) -> tuple[str | None, dict[str, Any]]:
    """torchtitan's activation-checkpointing policy and compile fields for the plan's recompute
    and kernels (CompileConfig: `kernels: compiled` compiles each block, as planc prices it, and
    leaves the loss eager; `unfused` runs eager)."""
    tr = plan.job.training
    if tr.recompute == "selective":
        notes.append(
            "recompute selective (the attention core only) has no torchtitan policy: its per-op "
            "SelectiveAC (planc's selective-op) runs instead, which saves and recomputes other "
            "tensors than this plan prices"
        )
    compile_fields: dict[str, Any] = {}
    if tr.kernels == "compiled":
        compile_fields = {"enable": True, "components": ["model"]}
    elif tr.kernels == "unfused":
        compile_fields = {"enable": False}
    if tr.overlap_tp and plan.job.layout.t > 1:
        compile_fields.update(torchtitan_async_tp(plan, notes))
    return TORCHTITAN_CHECKPOINT[tr.recompute], compile_fields


def torchtitan_async_tp(plan: Plan, notes: list[str]) -> dict[str, Any]:
    """torchtitan's form of the plan's TP overlap: async TP, which pipelines each tensor-parallel
    collective with its matmul (CompileConfig.enable_async_tensor_parallel, torchtitan 0.3.0
    config/configs.py). It is a compiler pass: torchtitan refuses it without torch.compile of
    the model ('Async TP requires 'model' in --compile.components and --compile.enable')."""
    if plan.job.training.tp_overlap_runs:
        return {"enable_async_tensor_parallel": True}
    notes.append(
        "training.overlap_tp: torchtitan's async TP (compile.enable_async_tensor_parallel) "
        "needs torch.compile of the model (kernels: compiled); without it the tensor-parallel "
        "collectives run exposed, not hidden as this plan prices them"
    )
    return {}


def torchtitan_optimizer(plan: Plan) -> dict[str, Any]:
    """torchtitan's OptimizersContainer.Config fields of the plan: the implementation of its
    Adam (torchtitan 0.3.0 components/optimizer/optimizer.py, implementation: fused | foreach,
    default fused), which planc prices (`planc.perf.ops.optimizer_step`)."""
    return {"implementation": plan.job.training.optimizer_implementation}


def torchtitan_files(plan: Plan) -> Files:
    parallelism, training, notes = torchtitan_settings(plan)
    checkpoint, compile_fields = torchtitan_recompute(plan, notes)
    base = _torchtitan_base(plan, notes)
    note_text = "".join(f"\nNote: {note}." for note in notes)
    text = _TORCHTITAN_MODULE.format(
        name=plan.job.name.replace('"', "'").replace("\\", "/"),
        version=TORCHTITAN,
        base=_python(base),
        base_text=base or "none: PLANC_TORCHTITAN_BASE must be set",
        notes=note_text + ("\n" if note_text else ""),
        parallelism=_python(parallelism),
        training=_python(training),
        optimizer=_python(torchtitan_optimizer(plan)),
        checkpoint=_python(checkpoint),
        compile=_python(compile_fields),
    )
    converters = torchtitan_converters(plan)
    if converters:
        text += _TORCHTITAN_CONVERT.format(converters=_python(converters))
    return {"torchtitan/planc_config.py": text}


def framework_files(plan: Plan) -> Files:
    """The framework files of the plan directory."""
    return {**megatron_files(plan), **deepspeed_files(plan), **torchtitan_files(plan)}


def _rotary_base(theta: float) -> int:
    """Megatron's --rotary-base takes an integer (arguments.py: type=int); every published θ is
    whole (10,000; 500,000; 1,000,000)."""
    return round(theta)
