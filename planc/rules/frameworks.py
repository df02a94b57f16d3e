"""Rules on what each training framework runs (issue 28): the layouts Megatron-LM, Megatron-FSDP,
DeepSpeed and torchtitan refuse to start with, each with the framework's own reason, and the settings a
framework runs otherwise than planned.

Each rule is a table: one small check per refusal, its source in its docstring (file, function,
version read). The versions read are megatron-core 0.19.2 (PyPI, its `megatron/training` and
`megatron/core`), DeepSpeed 0.19.6 (deepspeedai/DeepSpeed edaa722, 2026-08-22) and torchtitan
0.3.0 (PyPI). Refusals other rules already make are theirs: PLC011 (ZeRO-2/3 with a pipeline,
as a cost), PLC017 (context parallelism on eager attention), PLC027 (Megatron-Core's orders),
PLC029 (Megatron's MoE without sequence parallelism), PLC030 (schedules) and PLC044 (FP8
options).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from planc.comm.schedule import DEEPEP_DOMAIN_RANKS, domain_members
from planc.findings import Severity
from planc.plannable import Plannable
from planc.rules.base import Context, Violation, rule
from planc.rules.cuda_graphs import cuda_graph_elsewhere, megatron_cuda_graph
from planc.spec.job import DENSE_ORDER, Job, dispatcher_of
from planc.vocab import ScheduleKind, gated

Check = Callable[[Job], Iterator[Violation]]
NAMES = {"megatron": "Megatron-LM", "deepspeed": "DeepSpeed", "fsdp2": "torchtitan (FSDP2)"}


def _run(ctx: Context, framework: str, checks: tuple[Check, ...]) -> Iterator[Violation]:
    if ctx.job.training.framework != framework:
        return
    for check in checks:
        yield from check(ctx.job)


# ----------------------------------------------------------------------------- Megatron-LM


def _megatron_parameter_offload(job: Job) -> Iterator[Violation]:
    """Megatron-LM offloads the optimizer only (--optimizer-cpu-offload, HybridDeviceOptimizer
    in megatron/core/optimizer/__init__.py); it has no flag that keeps parameters in host
    memory (megatron/training/arguments.py)."""
    if job.training.offload_parameters:
        yield Violation(
            "training.offload.parameters",
            "Megatron-LM has no parameter offload: its --optimizer-cpu-offload moves only the "
            "optimizer state and step to the host",
            "set offload.parameters: false, or training.framework: deepspeed (ZeRO-3 "
            "offload_param) or fsdp2 (CPUOffloadPolicy)",
            ("training.framework",),
        )


def _megatron_optimizer_offload(job: Job) -> Iterator[Violation]:
    """validate_args: "The optimizer cpu offload must be used in conjunction with
    `--use-precision-aware-optimizer`" (megatron/training/arguments.py), and OptimizerConfig
    __post_init__: "--use-precision-aware-optimizer only supported with adam" and "... only
    supported with distributed optimizer" (megatron/core/optimizer/optimizer_config.py): the
    optimizer offload needs adam and zero_stage ≥ 1. Under Megatron-FSDP every stage runs the
    distributed optimizer (validate_args sets use_distributed_optimizer), no_shard too."""
    tr, zero = job.training, job.layout.zero
    distributed = zero >= 1 or tr.megatron_fsdp
    if not tr.offload_optimizer or (distributed and tr.optimizer == "adam"):
        return
    if not distributed:
        yield Violation(
            "training.offload.optimizer",
            "Megatron-LM offloads the optimizer only through its precision-aware optimizer, "
            "which its distributed optimizer runs ('--use-precision-aware-optimizer only "
            "supported with distributed optimizer'); zero_stage is 0",
            "set parallelism.zero_stage: 1 (the distributed optimizer), or offload.optimizer: "
            "false",
            ("parallelism.zero_stage",),
        )
    if tr.optimizer != "adam":
        yield Violation(
            "training.offload.optimizer",
            "Megatron-LM offloads the optimizer only through its precision-aware optimizer "
            f"('--use-precision-aware-optimizer only supported with adam'); optimizer is "
            f"{tr.optimizer}",
            "set training.optimizer: adam, or offload.optimizer: false",
            ("training.optimizer",),
        )


def _megatron_te_cross_entropy(job: Job) -> Iterator[Violation]:
    """validate_args: "Transformer Engine cross entropy loss fusion is disabled due to stability
    issues. Use --cross-entropy-fusion-impl native, or omit --cross-entropy-loss-fusion."
    (megatron/training/arguments.py, megatron-core 0.19.2; ModelParallelConfig warns the same).
    Megatron-Core before it ran it: NeMo 25.04's (7094270c), 25.09's (23e00ed09, 0.14.0), 25.11's
    (0d8e0714, 0.16.0rc0), 26.02's and 26.02.01's (b0cc2706, 55ac7082, core_r0.16.0) and
    26.04.01's (2edffadb, 0.17.1), whose validate_args have no such check, so a spec that states
    any training.framework_release but latest passes."""
    if job.training.loss_fusion == "te" and job.training.framework_release == "latest":
        yield Violation(
            "training.cross_entropy_fusion",
            "Megatron-LM refuses Transformer Engine's fused cross-entropy ('disabled due to "
            "stability issues', validate_args of megatron-core 0.19.2); older Megatron-Core, "
            "as NeMo 25.04 shipped it, ran it",
            "set cross_entropy_fusion: native (Megatron-Core's fused loss) or none",
        )


def _megatron_recompute_modules(job: Job) -> Iterator[Violation]:
    """TransformerConfig.__post_init__ (Megatron-Core cd4afffa): "mla_up_proj in
    recompute_modules is only supported with multi_latent_attention" and "moe_act in
    recompute_modules is only supported with moe_grouped_gemm" (a MoE model's grouped experts;
    a dense model has none)."""
    modules = job.training.recompute_modules
    if "mla_up_proj" in modules and job.model.mla is None:
        yield Violation(
            f"training.recompute_modules[{modules.index('mla_up_proj')}]",
            "recompute_modules mla_up_proj recomputes latent attention's up projections, and "
            "the model has none (Megatron-Core: 'mla_up_proj in recompute_modules is only "
            "supported with multi_latent_attention')",
            "take mla_up_proj out of recompute_modules (core_attn recomputes the attention core)",
            ("model",),
        )
    if "moe_act" in modules and job.model.moe is None:
        yield Violation(
            f"training.recompute_modules[{modules.index('moe_act')}]",
            "recompute_modules moe_act recomputes the experts' activation, and the model has no "
            "experts (Megatron-Core: 'moe_act in recompute_modules is only supported with "
            "moe_grouped_gemm')",
            "take moe_act out of recompute_modules (mlp recomputes a dense MLP)",
            ("model",),
        )


def _megatron_activation_offload(job: Job) -> Iterator[Violation]:
    """TransformerConfig.__post_init__ (Megatron-Core cd4afffa and 2edffadb) with
    --cpu-offloading-num-layers N > 0 (validate_args then sets cpu_offloading): "CPU offloading
    can be done only for layers less than {num_layers}", "Currently there is no support for
    Pipeline parallelism with CPU offloading" and "CPU offloading does not work when
    activation recomputation is enabled"."""
    tr, lay = job.training, job.layout
    n = tr.offload_activation_layers
    if not n:
        return
    where = "training.offload.activations"
    if n >= job.model.L:
        yield Violation(
            where,
            f"offload.activations {n} of {job.model.L} layers: Megatron-Core offloads fewer "
            f"than all ('CPU offloading can be done only for layers less than {job.model.L}'; "
            "Transformer Engine keeps the last layer's)",
            f"set offload.activations to at most {job.model.L - 1}",
            ("model",),
        )
    if lay.p > 1:
        yield Violation(
            where,
            f"offload.activations {n} with pipeline = {lay.p}: Megatron-Core offloads "
            "activations on one pipeline stage only ('Currently there is no support for "
            "Pipeline parallelism with CPU offloading')",
            "set parallelism.pipeline: 1, or offload.activations: 0",
            ("parallelism.pipeline",),
        )
    if tr.recompute != "none":
        yield Violation(
            where,
            f"offload.activations {n} with recompute {tr.recompute}: Megatron-Core offloads "
            "or recomputes, not both ('CPU offloading does not work when activation "
            "recomputation is enabled')",
            "set training.recompute: none, or offload.activations: 0",
            ("training.recompute",),
        )


def _megatron_repeated_kv(job: Job) -> Iterator[Violation]:
    """Megatron-Core's flash attention, TEDotProductAttention, passes the grouped heads to
    Transformer Engine (num_gqa_groups), which reads them as they are; only its local
    DotProductAttention (planc's attention: eager) repeats K and V to every query head
    (key.repeat_interleave, megatron/core/transformer/dot_product_attention.py, Megatron-LM
    d98e8a64), which planc counts under eager attention without the field."""
    tr = job.training
    if tr.repeat_kv and tr.attention == "flash":
        yield Violation(
            "training.repeat_kv",
            "Megatron-LM's flash attention (Transformer Engine's DotProductAttention) reads the "
            "grouped key/value heads; it does not repeat them to every query head",
            "set repeat_kv: false; Megatron's local attention, which repeats them, is "
            "attention: eager",
            ("training.attention",),
        )


def _megatron_windowed_context(job: Job) -> Iterator[Violation]:
    """Transformer Engine's context parallelism (dot_product_attention/context_parallel.py
    attn_forward_func_with_cp, TE 2.14.1 366798ef): "Context parallelism does not support
    sliding window attention with cp_comm_type" other than a2a and all_gather, and "only
    supports softmax_type='learnable' with cp_comm_type = 'a2a'", not with FP8 attention."""
    lay, model, tr = job.layout, job.model, job.training
    if lay.c == 1:
        return
    kind = lay.cp_comm
    if model.window and kind not in ("a2a", "allgather"):
        yield Violation(
            "parallelism.cp_comm_type",
            f"Transformer Engine's context parallelism runs a sliding window only with the a2a or "
            f"all_gather exchange ('does not support sliding window attention with "
            f"cp_comm_type={kind}')",
            "set parallelism.cp_comm_type: a2a or allgather",
            ("model.sliding_window",),
        )
    if model.sinks and (kind != "a2a" or tr.fp8_attention is not None):
        yield Violation(
            "parallelism.cp_comm_type",
            "Transformer Engine's context parallelism runs attention sinks (softmax_type "
            "learnable) only with the a2a exchange and 16-bit attention ('only supports "
            f"softmax_type with cp_comm_type = a2a'); cp_comm_type is {kind}"
            + (", with FP8 attention" if tr.fp8_attention is not None else ""),
            "set parallelism.cp_comm_type: a2a, and leave training.fp8.attention off",
            ("model.attention_sinks",),
        )


# The releases whose Megatron-Core has no Transformer Engine op-fuser path for the experts
# (use_transformer_engine_op_fuser arrived in 0.18: not at 23e00ed09, 0d8e0714, b0cc2706,
# 55ac7082 or 2edffadb, 0.14.0 to 0.17.1).
BEFORE_OP_FUSER = frozenset({"nemo-25.09", "nemo-25.11", "nemo-26.02", "nemo-26.04"})
# The graph modules Megatron-Core 0.14 captures (external_cuda_graph with cuda_graph_scope
# 'attn'); its scope 'full' is a whole layer, planc's impl without modules.
CORE_014_GRAPH_MODULES = frozenset({"attn"})


def _megatron_014(job: Job) -> Iterator[Violation]:
    """What Megatron-Core 0.14.0 (NeMo 25.09, core_v0.14.0 at 23e00ed09) does not have:
    attention sinks (no softmax_type in TransformerConfig), the HybridEP backend of the flex
    dispatcher (no moe_flex_dispatcher_backend), and CUDA graphs of parts of a layer other than
    attention (cuda_graph_scope 'full', 'attn' or 'full_iteration'; no cuda_graph_impl or
    per-module scopes)."""
    tr, model = job.training, job.model
    if tr.framework_release != "nemo-25.09":
        return
    missing = []
    if model.sinks:
        missing.append("attention sinks (it has no softmax_type)")
    if dispatcher_of(job) == "hybridep":
        missing.append("the HybridEP dispatcher (it has no moe_flex_dispatcher_backend)")
    other = sorted(set(tr.cuda_graph_modules) - CORE_014_GRAPH_MODULES)
    if other:
        missing.append(f"CUDA graphs of {', '.join(other)} (its scopes: full, attn, full_iteration)")
    if missing:
        yield Violation(
            "training.framework_release",
            "Megatron-Core 0.14.0 (NeMo 25.09) lacks what the spec uses: " + "; ".join(missing),
            "state a later training.framework_release, or leave those out",
            ("model.attention_sinks", "parallelism.expert_dispatcher", "training.cuda_graph"),
        )


def _megatron_fused_grouped_mlp(job: Job) -> Iterator[Violation]:
    """TEGroupedMLP takes Transformer Engine's op fuser only where _is_fused_impl_supported
    says so, and asserts it (megatron/core/transformer/moe/experts.py, Megatron-Core 0.19): the
    experts' tensor-parallel group of one, a gated SwiGLU or quick-GEGLU; Megatron-Core before
    0.18 has no such path (framework_release nemo-25.09 to nemo-26.04)."""
    tr, model = job.training, job.model
    if not tr.fused_grouped_mlp:
        return
    problems = []
    if tr.framework_release in BEFORE_OP_FUSER:
        problems.append(f"Megatron-Core of {tr.framework_release} has no op-fuser path for them")
    if model.moe is None:
        problems.append("the model has no routed experts")
    elif not gated(model.mlp):
        problems.append(f"its MLP is {model.mlp}, not a GLU")
    if job.layout.et > 1:
        problems.append(
            f"expert_tensor is {job.layout.et} ('Tensor parallelism is not supported')"
        )
    if problems:
        yield Violation(
            "training.fused_grouped_mlp",
            "Megatron-Core runs the experts through Transformer Engine's op fuser only with a "
            "gated MLP and expert_tensor 1 (TEGroupedMLP._is_fused_impl_supported, asserted): "
            + "; ".join(problems),
            "leave fused_grouped_mlp out, or state a release and layout that take it",
            ("model.moe", "parallelism.expert_tensor", "training.framework_release"),
        )


def _megatron_deferral(job: Job) -> Iterator[Violation]:
    """ModelParallelConfig.__post_init__ (megatron/core/model_parallel_config.py, core_v0.14.0 to
    0.19): "Cannot defer embedding wgrad compute when pipeline model parallel is not used" and
    "... when gradient accumulation fusion is not used"."""
    tr = job.training
    if not tr.defer_embedding_wgrad:
        return
    if job.layout.p == 1:
        yield Violation(
            "training.defer_embedding_wgrad_compute",
            "Megatron-Core defers the LM head's weight gradients into the pipeline flush only "
            "with a pipeline: pipeline = 1 has no flush ('Cannot defer embedding wgrad compute "
            "when pipeline model parallel is not used')",
            "leave defer_embedding_wgrad_compute out, or set pipeline: 2 or more",
            ("parallelism.pipeline",),
        )
    if tr.fp8_output_proj:
        yield Violation(
            "training.defer_embedding_wgrad_compute",
            "Transformer Engine's MXFP8 LM head (fp8.output_proj) keeps no buffers to defer its "
            "weight gradients ('TE MXFP8 output projection does not support "
            "defer_embedding_wgrad_compute', megatron/core/extensions/transformer_engine.py)",
            "leave defer_embedding_wgrad_compute out, or set fp8.output_proj: false",
            ("training.fp8.output_proj",),
        )
    if not tr.grad_accum_fusion:
        yield Violation(
            "training.defer_embedding_wgrad_compute",
            "Megatron-Core defers the LM head's weight gradients only when they accumulate "
            "straight into the main-grad buffer ('Cannot defer embedding wgrad compute when "
            "gradient accumulation fusion is not used')",
            "leave defer_embedding_wgrad_compute out, or set grad_accum_fusion: true",
            ("training.grad_accum_fusion",),
        )


def _state_given(job: Job) -> bool:
    """Whether training.optimizer_state keeps anything out of fp32."""
    tr = job.training
    return tr.master_format != "fp32" or tr.moments_dtype not in (None, "fp32")


def _megatron_optimizer_state(job: Job) -> Iterator[Violation]:
    """Megatron-Core's precision-aware optimizer (training.optimizer_state): "--use-precision-
    aware-optimizer only supported with distributed optimizer" (optimizer/__init__.py) and
    "only supported with adam" (OptimizerConfig.__post_init__), megatron-core d98e8a64; an fp32
    master kept as remainders needs bf16 weights (the 16 bits a bf16 weight lacks of an fp32
    one; Transformer Engine's FusedAdam store_param_remainders)."""
    tr, lay = job.training, job.layout
    if not _state_given(job):
        return
    if lay.zero == 0 and not tr.megatron_fsdp:
        yield Violation(
            "training.optimizer_state",
            "Megatron-Core keeps the optimizer state in 16 bits only in its distributed "
            "optimizer ('--use-precision-aware-optimizer only supported with distributed "
            "optimizer'); zero_stage is 0",
            "set parallelism.zero_stage: 1, or leave training.optimizer_state out",
            ("parallelism.zero_stage",),
        )
    if tr.optimizer != "adam":
        yield Violation(
            "training.optimizer_state",
            f"Megatron-Core's precision-aware optimizer is Adam's ('--use-precision-aware-"
            f"optimizer only supported with adam'); optimizer is {tr.optimizer}",
            "set training.optimizer: adam, or leave training.optimizer_state out",
            ("training.optimizer",),
        )
    if tr.master_format == "remainders" and tr.precision not in ("bf16", "fp8", "fp4"):
        yield Violation(
            "training.optimizer_state.master",
            f"remainders keep an fp32 master as the 16 bits its bf16 weight lacks; the weights "
            f"are {tr.precision}",
            "set master: fp32 (or fp16), or training.precision: bf16",
            ("training.precision",),
        )


MEGATRON: tuple[Check, ...] = (
    _megatron_deferral,
    _megatron_optimizer_state,
    _megatron_fused_grouped_mlp,
    _megatron_014,
    megatron_cuda_graph,
    _megatron_parameter_offload,
    _megatron_optimizer_offload,
    _megatron_activation_offload,
    _megatron_te_cross_entropy,
    _megatron_recompute_modules,
    _megatron_repeated_kv,
    _megatron_windowed_context,
)

# The group sizes DeepEP's legacy Buffer has a dispatch and combine config for
# (deep_ep/buffers/legacy.py Buffer.get_dispatch_config: "Unsupported number of EP ranks"),
# deepseek-ai/DeepEP dd758ca (v2.1.0), the Buffer megatron-core 0.19.2's fused_a2a imports.
DEEPEP_RANKS = (2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144, 160)


def megatron_dispatcher_refusals(plan: Plannable) -> Iterator[Violation]:
    """The expert dispatcher Megatron-Core runs (parallelism.expert_dispatcher):
    TransformerConfig.__post_init__ refuses --overlap-moe-expert-parallel-comm (the
    combined-1f1b schedule) with the allgather dispatcher ('supported with alltoall/flex token
    dispatcher', megatron/core/transformer/transformer_config.py, 0.19.2); the flex dispatcher's
    DeepEP backend asserts 'DeepEP dispatcher requires TPxEP > 1' (token_dispatcher.py
    MoEFlexTokenDispatcher) and DeepEP's Buffer has configs for the group sizes DEEPEP_RANKS
    only, takes 8 consecutive ranks of its group as one node's NVLink peers beyond 8 ranks and
    the whole group up to 8 (legacy internode.cu rdma_rank = rank / NUM_MAX_NVL_PEERS, the
    Buffer's CUDA IPC handles within them); HybridEP's buffer asserts that the group divides
    into its NVLink domains ('The number of ranks ... should be divisible by the number of ranks
    per node', hybrid-ep deep_ep/hybrid_ep_buffer.py HybridEPBuffer.__init__)."""
    lay = plan.layout
    if plan.model.moe is None:
        return
    where = "parallelism.expert_dispatcher"
    if lay.dispatcher == "allgather" and lay.schedule is ScheduleKind.COMBINED_1F1B:
        yield Violation(
            where,
            "the allgather dispatcher with the combined-1f1b schedule: Megatron-Core refuses "
            "--overlap-moe-expert-parallel-comm unless the dispatcher is alltoall or flex",
            "set parallelism.expert_dispatcher: alltoall (or deepep, hybridep)",
            ("parallelism.pipeline_schedule",),
        )
    yield from library_dispatcher_refusals(plan)


def dispatcher_refusals(plan: Plannable) -> Iterator[Violation]:
    """The refusals of the job's expert dispatcher by its framework: Megatron-Core's
    (`megatron_dispatcher_refusals`), torchtitan's DeepEP and HybridEP limits
    (`library_dispatcher_refusals`); none under DeepSpeed, whose only dispatcher PLC049 checks."""
    framework = plan.training.framework
    if framework == "megatron":
        yield from megatron_dispatcher_refusals(plan)
    elif framework == "fsdp2":
        yield from library_dispatcher_refusals(plan)


def library_dispatcher_refusals(plan: Plannable) -> Iterator[Violation]:
    """DeepEP's and HybridEP's own limits on their group (`megatron_dispatcher_refusals` says
    which), whichever framework runs them: Megatron-Core's flex dispatcher and torchtitan's
    deepep and hybridep comm backends build the same buffers."""
    lay = plan.layout
    if plan.model.moe is None:
        return
    where = "parallelism.expert_dispatcher"
    n = lay.ep * lay.et
    if lay.dispatcher == "deepep":
        yield from _deepep_group(plan, n)
    if lay.dispatcher == "hybridep" and n > 1:
        g = domain_members(plan)
        if n % g:
            yield Violation(
                where,
                f"HybridEP over {n} ranks with {g} in each NVLink domain: its buffer refuses a "
                "group that does not divide into its domains",
                "choose expert (× expert_tensor) a multiple of the members per domain, or "
                "another order",
                ("parallelism.expert", "parallelism.order"),
            )


def _deepep_group(plan: Plannable, n: int) -> Iterator[Violation]:
    """DeepEP's limits on its group of n = ETP·EP ranks (`_megatron_dispatcher`)."""
    where = "parallelism.expert_dispatcher"
    if n == 1 and plan.training.framework == "megatron":
        yield Violation(
            where,
            "the deepep dispatcher with expert × expert_tensor = 1: Megatron-Core asserts "
            "'DeepEP dispatcher requires TPxEP > 1'",
            "set parallelism.expert above 1, or expert_dispatcher: alltoall",
            ("parallelism.expert",),
        )
        return
    if n not in DEEPEP_RANKS:
        yield Violation(
            where,
            f"DeepEP over {n} ranks (expert × expert_tensor): its buffer has configs for "
            f"{', '.join(map(str, DEEPEP_RANKS))} ranks only ('Unsupported number of EP ranks')",
            "choose expert × expert_tensor among those, or expert_dispatcher: hybridep",
            ("parallelism.expert",),
        )
        return
    need = min(n, DEEPEP_DOMAIN_RANKS)
    found = domain_members(plan)
    if found < need:
        yield Violation(
            where,
            f"DeepEP takes {need} consecutive ranks of its group as NVLink peers, but the "
            f"group has {found} in each NVLink domain (expert × expert_tensor = {n} in this "
            "order)",
            "put ep (and expert tensor) fastest after tp in the order, or expert_dispatcher: "
            "hybridep",
            ("parallelism.order", "parallelism.expert"),
        )


@rule("PLC048")
def megatron_refuses(ctx: Context) -> Iterator[Violation]:
    """Framework: a layout Megatron-LM starts with (training.framework: megatron).

    Read from megatron-core 0.19.2: Megatron-LM offloads the optimizer
    (--optimizer-cpu-offload; no parameter offload) only with its precision-aware
    optimizer, which needs adam and the distributed optimizer, zero_stage ≥ 1 (any stage under
    Megatron-FSDP, which always builds it) (megatron/training/arguments.py validate_args;
    megatron/core/optimizer/optimizer_config.py OptimizerConfig.__post_init__), and activations
    (offload.activations, --cpu-offloading-num-layers) of fewer than all layers, without a
    pipeline or recompute (TransformerConfig.__post_init__); it refuses
    Transformer Engine's fused cross-entropy (cross_entropy_fusion te), which older
    Megatron-Core ran (validate_args; a training.framework_release other than latest states one);
    training.recompute_modules asks for what the model has: mla_up_proj latent attention, moe_act
    experts (TransformerConfig.__post_init__); K/V repeated before flash attention (repeat_kv),
    which Transformer Engine's attention reads grouped (its local attention, attention: eager,
    repeats them); context parallelism with a sliding window other than a2a or all_gather, or
    with attention sinks other than a2a in 16 bits (Transformer Engine's
    attn_forward_func_with_cp); training.fused_grouped_mlp (Transformer Engine's op fuser for
    the experts) before Megatron-Core 0.18, without routed experts or a gated MLP, or with
    expert_tensor above 1 (TEGroupedMLP asserts _is_fused_impl_supported); under
    framework_release nemo-25.09 what Megatron-Core 0.14.0 lacks: attention sinks, the HybridEP
    dispatcher, CUDA graphs of modules other than attention; training.cuda_graph
    as TransformerConfig refuses it (planc.rules.cuda_graphs: modules with full_iteration,
    moe_preprocess without moe_router, router graphs without experts, mlp without a dense layer,
    moe_preprocess behind the alltoall dispatcher's host copies, full recompute without
    full_iteration, moe recompute with the router graph, dropout in a graphed recompute, activation
    offload with per-layer graphs); defer_embedding_wgrad_compute without a pipeline or without
    gradient-accumulation fusion (ModelParallelConfig.__post_init__); training.optimizer_state
    out of fp32 without the distributed optimizer or with an optimizer other than adam
    (optimizer/__init__.py, OptimizerConfig), or master remainders without bf16 weights. The expert
    dispatcher (parallelism.expert_dispatcher):
    not allgather with the combined-1f1b schedule (TransformerConfig); deepep over 2 to 160
    ranks of expert × expert_tensor that DeepEP has a config for, with 8 consecutive ones (or
    the whole group up to 8) in one NVLink domain; a hybridep group that divides into its NVLink
    domains. Megatron's other refusals are PLC027 (rank orders),
    PLC029 (MoE with tensor but no sequence parallelism), PLC030 (schedules) and PLC044 (FP8).
    ZeRO-2/3 with a pipeline runs (the distributed optimizer, Megatron-FSDP), at PLC011's cost.

    Passes:
        training: {framework: deepspeed, offload: {parameters: true}}
        parallelism: {zero_stage: 3}

    Fails:
        training: {offload: {parameters: true}}
        parallelism: {zero_stage: 3}
    """
    yield from _run(ctx, "megatron", MEGATRON)
    if ctx.job.training.framework == "megatron" and ctx.plan is not None:
        yield from megatron_dispatcher_refusals(ctx.plan)


# ----------------------------------------------------------------------------- Megatron-FSDP


def _megatron_fsdp_pipeline(job: Job) -> Iterator[Violation]:
    """FullyShardedDataParallel._init_dist_index builds its DeviceMesh with _get_dp_tp_mesh
    (or _get_hsdp_tp_mesh for HSDP), which rearranges torch.arange(world_size) as
    "(dp_cp ep tp)" (megatron/core/distributed/fsdp/mcore_fsdp_adapter.py, megatron-core
    0.19.2): the whole world is one data × context × tensor mesh, so a second pipeline stage
    has no place in it and the wrapper fails to build."""
    lay = job.layout
    if lay.p > 1:
        yield Violation(
            "parallelism.pipeline",
            f"pipeline = {lay.p}: Megatron-FSDP lays the whole world out as one data × context "
            "× tensor mesh (mcore_fsdp_adapter.py _get_dp_tp_mesh: '(dp_cp ep tp)' over "
            "torch.arange(world_size)), so it has no pipeline stages",
            "set parallelism.pipeline: 1, or training.framework: megatron (the distributed "
            "optimizer runs with a pipeline)",
            ("training.framework",),
        )


def _before(order: tuple[str, ...], fast: str, slow: str) -> bool:
    return fast not in order or slow not in order or order.index(fast) < order.index(slow)


def _megatron_fsdp_order(job: Job) -> Iterator[Violation]:
    """_get_dp_tp_mesh asserts that its mesh, tensor ranks fastest then data × context, is the
    process groups' ("[Megatron-FSDP] Tensor Parallel ranks in the mesh ... do not match the
    ranks in the TP group"), and the experts' mesh is "(expt_dp ep tp)": expert tensor fastest,
    then expert, then expert data (mcore_fsdp_adapter.py, megatron-core 0.19.2)."""
    lay = job.layout
    order = lay.order
    if lay.t > 1 and (lay.c > 1 or (lay.d or 1) > 1):
        slower = [axis for axis in ("cp", "dp") if not _before(order, "tp", axis)]
        if slower:
            yield Violation(
                "parallelism.order",
                f"order {'-'.join(order)}: Megatron-FSDP's mesh puts the tensor ranks fastest, "
                f"then data × context, and refuses process groups laid out otherwise ('Tensor "
                f"Parallel ranks in the mesh ... do not match the ranks in the TP group')",
                "put tp first in parallelism.order (tp-cp-dp-pp), or leave it out",
            )
    edp = lay.edp(job.cluster.world) or 1
    if job.model.moe is None or lay.ep == 1 or edp == 1:
        return
    expert = lay.expert_order
    if not _before(expert, "ep", "dp") or (lay.et > 1 and not _before(expert, "tp", "ep")):
        yield Violation(
            "parallelism.order",
            f"order {'-'.join(expert)}: Megatron-FSDP's expert mesh is expert tensor, then "
            "expert, then expert data ranks, fastest first ('(expt_dp ep tp)'), and refuses "
            "expert groups laid out otherwise",
            "write order: tp-cp-ep-dp-pp (Megatron-Core's default), or leave it out",
        )


MEGATRON_FSDP: tuple[Check, ...] = (_megatron_fsdp_pipeline, _megatron_fsdp_order)


@rule("PLC052")
def megatron_fsdp_refuses(ctx: Context) -> Iterator[Violation]:
    """Framework: a layout Megatron-FSDP starts with (training.framework: megatron-fsdp).

    Read from megatron-core 0.19.2: Megatron-LM's --use-megatron-fsdp wraps the model in
    FullyShardedDataParallel (megatron/core/distributed/fsdp/mcore_fsdp_adapter.py), whose
    DeviceMesh is the whole world as data × context × tensor ranks, tensor fastest (experts:
    expert data × expert × expert tensor): no pipeline parallelism, and no rank order other
    than tensor first and, with experts, ep before dp. zero_stage 0–3 is its
    --data-parallel-sharding-strategy (no_shard, optim, optim_grads, optim_grads_params), all
    of which run. validate_args (megatron/training/arguments.py) also requires --ckpt-format
    fsdp_dtensor (checkpoint.format torch-dcp, PLC110 otherwise), adam or sgd, and
    CUDA_DEVICE_MAX_CONNECTIONS unset or above 1 (megatron/README.md says so). Megatron-LM's
    own refusals (PLC027, PLC029, PLC030, PLC044, PLC048) apply too.

    Passes:
        training: {framework: megatron-fsdp}
        parallelism: {pipeline: 1, zero_stage: 3}

    Fails:
        training: {framework: megatron-fsdp}
        parallelism: {pipeline: 2, zero_stage: 3}
    """
    if ctx.job.training.megatron_fsdp:
        for check in MEGATRON_FSDP:
            yield from check(ctx.job)


# ----------------------------------------------------------------------------- DeepSpeed


def _deepspeed_zero_with_pipeline(job: Job) -> Iterator[Violation]:
    """PipelineEngine.__init__ asserts `zero_optimization_stage() < ZeroStageEnum.gradients`:
    "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
    (deepspeed/runtime/pipe/engine.py)."""
    lay = job.layout
    if lay.zero >= 2 and lay.p > 1:
        yield Violation(
            "parallelism.zero_stage",
            f"zero_stage {lay.zero} with pipeline = {lay.p}: DeepSpeed's PipelineEngine refuses "
            "to start ('ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism')",
            "use zero_stage: 0 or 1 with DeepSpeed's pipeline, or pipeline: 1",
            ("parallelism.pipeline",),
        )


def _deepspeed_expert_tensor(job: Job) -> Iterator[Violation]:
    """AutoEP's validate_folding_global: "expert_parallel.expert_tensor_parallel_size={etp} is
    reserved for expert-internal tensor parallelism and is not supported yet"
    (deepspeed/module_inject/auto_ep_folding.py)."""
    lay = job.layout
    if job.model.moe is not None and lay.et != 1:
        yield Violation(
            "parallelism.expert_tensor",
            f"expert_tensor = {lay.et}: DeepSpeed's AutoEP refuses an expert tensor-parallel "
            "size other than 1 ('reserved for expert-internal tensor parallelism and is not "
            "supported yet')",
            "set parallelism.expert_tensor: 1",
            ("parallelism.tensor",),
        )


def _deepspeed_expert_with_tensor(job: Job) -> Iterator[Violation]:
    """AutoEP folds experts over DeepSpeed's own AutoTP only, and validate_folding_global
    refuses the folding with pp_size > 1, with Ulysses sequence parallelism, with
    autoep_size 1, with ZeRO stage 3, and with optimizer or parameter offload
    (deepspeed/module_inject/auto_ep_folding.py)."""
    lay, tr = job.layout, job.training
    if job.model.moe is None or lay.t == 1:
        return
    offload = tr.offload_optimizer or tr.offload_parameters
    reasons = (
        (
            lay.p > 1,
            f"pipeline = {lay.p} ('currently supports pp_size=1 only')",
            "parallelism.pipeline",
        ),
        (
            lay.c > 1,
            f"context = {lay.c} ('autotp_size and Ulysses sequence parallelism are "
            "mutually exclusive')",
            "parallelism.context",
        ),
        (
            lay.ep == 1,
            "expert = 1 ('requires expert_parallel.autoep_size > 1')",
            "parallelism.expert",
        ),
        (
            lay.zero == 3,
            "zero_stage 3 ('reserved for the separate ZeRO-3 composition lane')",
            "parallelism.zero_stage",
        ),
        (offload, "offload ('not validated yet')", "training.offload"),
    )
    for hit, why, field in reasons:
        if hit:
            yield Violation(
                "parallelism.tensor",
                f"tensor = {lay.t} with experts: DeepSpeed's AutoEP folds expert parallelism "
                f"over its AutoTP and refuses it with {why}",
                f"set parallelism.tensor: 1, or change {field}",
                (field,),
            )


def _deepspeed_ulysses_heads(job: Job) -> Iterator[Violation]:
    """DeepSpeed-Ulysses (deepspeed/sequence/layer.py single_all_to_all) scatters each rank's
    attention heads over the sequence-parallel group: a head count that does not divide takes
    the uneven path, which asserts "Number of heads ({n}) must be larger than sequence parallel
    size ({sp})"."""
    lay, model = job.layout, job.model
    heads = model.n // lay.t if model.n % lay.t == 0 else 0
    if lay.c == 1 or heads == 0 or heads % lay.c == 0 or heads > lay.c:
        return
    yield Violation(
        "parallelism.context",
        f"context = {lay.c} over {heads} attention heads per tensor rank: DeepSpeed-Ulysses "
        f"splits heads over the context ranks and refuses fewer heads than ranks ('Number of "
        f"heads ({heads}) must be larger than sequence parallel size ({lay.c})')",
        f"choose context dividing {heads}, or a smaller tensor degree",
        ("parallelism.tensor",),
    )


def _deepspeed_dispatcher(job: Job) -> Iterator[Violation]:
    """DeepSpeed MoE exchanges tokens with its all-to-all only (deepspeed/moe/sharded_moe.py
    _AllToAll in MOELayer.forward; AutoEP's expert-parallel layers likewise): no allgather,
    DeepEP or HybridEP dispatcher."""
    dispatcher = dispatcher_of(job)
    if job.model.moe is not None and dispatcher != "alltoall":
        yield Violation(
            "parallelism.expert_dispatcher",
            f"expert_dispatcher {dispatcher}: DeepSpeed's MoE layers exchange tokens with their "
            "own all-to-all only",
            "set parallelism.expert_dispatcher: alltoall, or training.framework: megatron",
            ("training.framework",),
        )


DEEPSPEED: tuple[Check, ...] = (
    _deepspeed_zero_with_pipeline,
    _deepspeed_dispatcher,
    _deepspeed_expert_tensor,
    _deepspeed_expert_with_tensor,
    _deepspeed_ulysses_heads,
)


@rule("PLC049")
def deepspeed_refuses(ctx: Context) -> Iterator[Violation]:
    """Framework: a layout DeepSpeed starts with (training.framework: deepspeed).

    Read from DeepSpeed 0.19.6 (deepspeedai/DeepSpeed edaa722): PipelineEngine.__init__ refuses
    ZeRO-2 and ZeRO-3 with pipeline parallelism (deepspeed/runtime/pipe/engine.py); AutoEP
    (deepspeed/module_inject/auto_ep_folding.py validate_folding_global) refuses an expert
    tensor-parallel size other than 1, and folds experts over tensor parallelism only with one
    pipeline stage, no Ulysses context parallelism, expert > 1, ZeRO ≤ 2 and no offload;
    DeepSpeed-Ulysses (deepspeed/sequence/layer.py) refuses fewer attention heads per rank
    than context-parallel ranks when they do not divide; its MoE layers exchange tokens with
    an all-to-all only (deepspeed/moe/sharded_moe.py). Its schedules are PLC030's.

    Base: llama3-70b-8x8.yaml

    Passes:
        training: {framework: deepspeed}
        parallelism: {zero_stage: 1}

    Fails:
        training: {framework: deepspeed}
        parallelism: {zero_stage: 2}
    """
    yield from _run(ctx, "deepspeed", DEEPSPEED)


# ----------------------------------------------------------------------------- torchtitan


def _torchtitan_fp16(job: Job) -> Iterator[Violation]:
    """TrainingConfig.mixed_precision_param: Literal["bfloat16", "float32"] and dtype likewise
    (torchtitan/config/configs.py): torchtitan has no fp16 training."""
    if job.training.precision == "fp16":
        yield Violation(
            "training.precision",
            "torchtitan trains in bfloat16 or float32 only (mixed_precision_param: bfloat16 | "
            "float32): it has no fp16",
            "set training.precision: bf16, or training.framework: megatron or deepspeed",
            ("training.framework",),
        )


def _torchtitan_sequence(job: Job) -> Iterator[Violation]:
    """Trainer.__init__ (torchtitan/trainer.py): "Training sequence length ({s}) must be
    divisible by {divisor}", divisor = (tp with sequence parallelism, else 1) × (2·cp with
    context parallelism, else 1): its load-balanced context parallelism cuts the sequence into
    2·cp chunks. The splits without the factor 2 are PLC009's and PLC013's."""
    lay, s = job.layout, job.training.s
    if lay.c == 1:
        return
    tp = lay.t if lay.sp else 1
    if s % lay.c or (s // lay.c) % tp:
        return  # PLC009, PLC013
    divisor = tp * 2 * lay.c
    if s % divisor:
        yield Violation(
            "training.seq_len",
            f"seq_len = {s} with context = {lay.c}: torchtitan cuts the sequence into 2 × "
            f"context load-balanced chunks and refuses a length not divisible by {divisor} "
            "('Training sequence length ... must be divisible')",
            f"make seq_len a multiple of {divisor}",
            ("parallelism.context",),
        )


def _torchtitan_expert_tensor(job: Job) -> Iterator[Violation]:
    """torchtitan 0.3.0's ParallelismConfig has no expert tensor-parallel degree (ETP was
    removed, pytorch/torchtitan #3167): each expert is whole on its expert-parallel rank."""
    lay = job.layout
    if job.model.moe is not None and lay.et != 1:
        yield Violation(
            "parallelism.expert_tensor",
            f"expert_tensor = {lay.et}: torchtitan has no expert tensor parallelism (each "
            "expert is whole on its expert-parallel rank)",
            "set parallelism.expert_tensor: 1",
            ("parallelism.tensor",),
        )


def _torchtitan_dispatcher(job: Job) -> Iterator[Violation]:
    """torchtitan 0.3.0's token dispatchers are 'standard' (all-to-all), 'deepep', 'hybridep'
    and 'minimal_async_ep' (models/common/config_utils.py make_token_dispatcher_config: "Unknown
    comm_backend ... Must be one of"): no all-gather dispatcher."""
    if job.model.moe is not None and dispatcher_of(job) == "allgather":
        yield Violation(
            "parallelism.expert_dispatcher",
            "expert_dispatcher allgather: torchtitan's token dispatchers are all-to-all "
            "('standard'), DeepEP and HybridEP; it has no all-gather dispatcher",
            "set parallelism.expert_dispatcher: alltoall, deepep or hybridep",
            ("training.framework",),
        )


TORCHTITAN: tuple[Check, ...] = (
    _torchtitan_fp16,
    _torchtitan_dispatcher,
    _torchtitan_sequence,
    _torchtitan_expert_tensor,
)


@rule("PLC050")
def torchtitan_refuses(ctx: Context) -> Iterator[Violation]:
    """Framework: a layout torchtitan starts with (training.framework: fsdp2).

    Read from torchtitan 0.3.0: it trains in bfloat16 or float32 only (TrainingConfig
    mixed_precision_param, torchtitan/config/configs.py); its Trainer refuses a sequence not
    divisible by (tensor with sequence parallelism) × 2 × context (torchtitan/trainer.py); it
    has no expert tensor parallelism, and no all-gather token dispatcher
    (models/common/config_utils.py make_token_dispatcher_config). Its ParallelDims builds the expert mesh out of dp_shard ×
    context × tensor, which expert must divide (torchtitan/distributed/parallel_dims.py); with
    whole experts that is PLC022's condition (the replicas of the shards divide EDP), so it is
    not checked twice. Its schedules are PLC030's, its FP8 recipes PLC044's. Its deepep and
    hybridep backends build DeepEP's and HybridEP's buffers, with their limits on the group
    (the group sizes DeepEP has configs for, 8 consecutive NVLink peers, a group that divides
    into HybridEP's domains: `library_dispatcher_refusals`, as under Megatron).

    Passes:
        training: {framework: fsdp2, precision: bf16}

    Fails:
        training: {framework: fsdp2, precision: fp16}
    """
    yield from _run(ctx, "fsdp2", TORCHTITAN)
    if ctx.job.training.framework == "fsdp2" and ctx.plan is not None:
        yield from dispatcher_refusals(ctx.plan)


# ----------------------------------------------------------------------------- run otherwise


def _deepspeed_offload_stage(job: Job) -> Iterator[Violation]:
    """DeepSpeedZeroConfig (deepspeed/runtime/zero/config.py): offload_param is "Valid only
    with stage 3", offload_optimizer "Valid for ZeRO stage 1, 2, 3"; a lower stage builds no
    optimizer that reads them."""
    tr, zero = job.training, job.layout.zero
    if tr.offload_parameters and zero < 3:
        yield Violation(
            "training.offload.parameters",
            f"DeepSpeed offloads parameters with ZeRO-3 only (offload_param: 'Valid only with "
            f"stage 3'); with zero_stage {zero} they stay in HBM",
            "set parallelism.zero_stage: 3, or offload.parameters: false",
            ("parallelism.zero_stage",),
        )
    if tr.offload_optimizer and zero == 0:
        yield Violation(
            "training.offload.optimizer",
            "DeepSpeed offloads the optimizer with ZeRO-1, 2 or 3 only (offload_optimizer: "
            "'Valid for ZeRO stage 1, 2, 3'); with zero_stage 0 it stays in HBM",
            "set parallelism.zero_stage: 1 or more, or offload.optimizer: false",
            ("parallelism.zero_stage",),
        )


def _deepspeed_shard_group(job: Job) -> Iterator[Violation]:
    """DeepSpeed 0.19 shards ZeRO over the whole data-parallel group: MiCS, its sub-group
    sharding, was removed, and ZeRO++'s zero_hpz_partition_size only keeps a second copy of
    ZeRO-3 parameters (deepspeed/runtime/zero/config.py)."""
    lay = job.layout
    if lay.d is None or lay.data_shard is None or lay.zero == 0:
        return
    if lay.data_shard < lay.d * lay.c:
        yield Violation(
            "parallelism.data_shard",
            f"data_shard = {lay.data_shard}: DeepSpeed shards ZeRO-{lay.zero} over the whole "
            f"data-parallel group ({lay.d * lay.c} ranks), not over sub-groups, so each rank "
            "holds less than planned",
            "leave data_shard out, or training.framework: megatron or fsdp2 (HSDP)",
            ("training.framework",),
        )


def _torchtitan_order(job: Job) -> Iterator[Violation]:
    """torchtitan's ParallelDims lays its mesh out as pp, dp_replicate, dp_shard, cp, tp,
    slowest first (torchtitan/distributed/parallel_dims.py build_mesh): tp-cp-dp-pp, fastest
    first; it takes no other order."""
    order = "-".join(job.layout.order)
    if order != DENSE_ORDER:
        yield Violation(
            "parallelism.order",
            f"order {order}: torchtitan lays ranks out as {DENSE_ORDER} (fastest first) and "
            "takes no other order, so its groups are not the plan's",
            f"write order: {DENSE_ORDER} (with experts, tp-cp-ep-dp-pp), or leave it out",
            ("training.framework",),
        )


def _torchtitan_offload(job: Job) -> Iterator[Violation]:
    """torchtitan's training.enable_cpu_offload applies FSDP2's CPUOffloadPolicy, which
    offloads "parameters, gradients, and optimizer states" together (torchtitan/config/
    configs.py, torchtitan/distributed/fsdp.py)."""
    tr = job.training
    if tr.offload_optimizer != tr.offload_parameters:
        one = "optimizer" if tr.offload_optimizer else "parameters"
        yield Violation(
            f"training.offload.{one}",
            f"offload.{one} alone: torchtitan's enable_cpu_offload (FSDP2 CPUOffloadPolicy) "
            "offloads parameters, gradients and optimizer state together, never one of them",
            "set both offload.optimizer and offload.parameters, or neither",
        )


def _per_op_checkpointing(job: Job) -> Iterator[Violation]:
    """recompute: selective-op is torchtitan's per-op policy (selective_ac_option 'op',
    torchtitan parallelize_llama.py); Megatron-LM's selective recompute is its core_attn module
    list (--recompute-granularity selective, megatron/training/arguments.py) and DeepSpeed's
    activation checkpointing wraps whole layers (deepspeed/runtime/activation_checkpointing)."""
    if job.training.recompute == "selective-op":
        name = NAMES[job.training.framework]
        yield Violation(
            "training.recompute",
            f"recompute selective-op is torchtitan's per-op checkpointing policy: {name} has "
            "none, so the memory and recompute planned are not what it runs",
            "set recompute: selective or full, or training.framework: fsdp2",
            ("training.framework",),
        )


def _recompute_modules_unused(job: Job) -> Iterator[Violation]:
    """training.recompute_modules is Megatron-LM's --recompute-modules, which it reads only with
    --recompute-granularity selective (TransformerConfig.__post_init__); DeepSpeed's and
    torchtitan's checkpointing has no module list. Written elsewhere it is not what runs (the
    plan recomputes as training.recompute says)."""
    tr = job.training
    if tr.recompute_modules_given is None:
        return
    if tr.framework != "megatron":
        yield Violation(
            "training.recompute_modules",
            f"recompute_modules is Megatron-LM's --recompute-modules: "
            f"{NAMES[tr.framework]} has no module list, so it is not what runs",
            "leave recompute_modules out, or training.framework: megatron",
            ("training.framework",),
        )
    elif tr.recompute != "selective":
        yield Violation(
            "training.recompute_modules",
            f"recompute_modules is read only with recompute selective (Megatron-LM's "
            f"--recompute-granularity selective); recompute is {tr.recompute}",
            "set training.recompute: selective, or leave recompute_modules out",
            ("training.recompute",),
        )


def _gradient_accumulation_fusion(job: Job) -> Iterator[Violation]:
    """training.grad_accum_fusion is Megatron-LM's --gradient-accumulation-fusion (the weight-
    gradient GEMM adds into the main-grad buffer); DeepSpeed's engines accumulate in param.grad
    or in BF16_Optimizer's fp32 gradients after the backward, and FSDP2 on its gradient shard
    (planc.perf.grad_accum), so true there is not what runs (it resolves to false unless
    written)."""
    if job.training.grad_accum_fusion:
        name = NAMES[job.training.framework]
        yield Violation(
            "training.grad_accum_fusion",
            f"grad_accum_fusion true: {name} has no gradient-accumulation fusion, it adds each "
            "micro-batch's gradients after the backward, which planc prices",
            "leave grad_accum_fusion out, or training.framework: megatron",
            ("training.framework",),
        )


def _activation_offload_elsewhere(job: Job) -> Iterator[Violation]:
    """offload.activations is Megatron-Core's --cpu-offloading-num-layers (Transformer Engine's
    CPU offload around each TransformerLayer): DeepSpeed's engines and torchtitan have no
    setting that planc maps it to, so their activations stay in HBM, as planc prices them."""
    tr = job.training
    if tr.offload_activation_layers:
        yield Violation(
            "training.offload.activations",
            f"offload.activations {tr.offload_activation_layers} is Megatron-Core's "
            f"--cpu-offloading-num-layers: under {NAMES[tr.framework]} the activations stay in "
            "HBM, as planc prices them",
            "leave offload.activations out (0), or training.framework: megatron",
            ("training.framework",),
        )


def _async_tp_needs_compile(job: Job) -> Iterator[Violation]:
    """overlap_tp under torchtitan is its async TP (compile.enable_async_tensor_parallel), a
    torch.compile pass that pipelines each tensor-parallel collective with its matmul; torchtitan
    refuses it without compiling the model, so with eager kernels the collectives run exposed,
    as planc then prices them."""
    tr, lay = job.training, job.layout
    if lay.t > 1 and tr.overlap_tp and not tr.tp_overlap_runs:
        yield Violation(
            "training.overlap_tp",
            f"overlap_tp is torchtitan's async TP, a torch.compile pass: with kernels "
            f"{tr.kernels} torchtitan refuses it and the tensor-parallel collectives run "
            "exposed, as planc prices them",
            "set kernels: compiled, or leave overlap_tp out",
            ("training.kernels",),
        )


def _megatron_loss_elsewhere(job: Job) -> Iterator[Violation]:
    """cross_entropy_fusion is Megatron-Core's (TransformerConfig.cross_entropy_loss_fusion,
    read by GPTModel.compute_language_model_loss): DeepSpeed's Megatron models call
    Megatron's eager vocab_parallel_cross_entropy and torchtitan runs F.cross_entropy, as does
    Megatron-LM with kernels unfused or compiled in planc's terms (training.loss_fusion)."""
    tr = job.training
    if tr.cross_entropy_fusion != "none" and tr.loss_fusion == "none":
        where = NAMES[tr.framework] if tr.framework != "megatron" else f"kernels {tr.kernels}"
        yield Violation(
            "training.cross_entropy_fusion",
            f"cross_entropy_fusion {tr.cross_entropy_fusion} is Megatron-Core's fused loss: "
            f"under {where} the loss runs eager, as planc prices it",
            "leave cross_entropy_fusion out (none), or training.framework: megatron with "
            "kernels: fused",
            ("training.framework", "training.kernels"),
        )


def _attention_backend_unused(job: Job) -> Iterator[Violation]:
    """attention_backend picks the kernel of fused attention (Megatron --attention-backend,
    Transformer Engine's DotProductAttention): eager attention runs none of them, and unfused or
    compiled kernels run PyTorch's scaled_dot_product_attention."""
    tr = job.training
    if tr.attention_backend == "auto":
        return
    if tr.attention == "eager":
        yield Violation(
            "training.attention_backend",
            f"attention_backend {tr.attention_backend} names a fused attention kernel, but "
            "attention is eager: no fused kernel runs",
            "leave attention_backend out (auto), or set attention: flash",
            ("training.attention",),
        )
    elif tr.kernels != "fused":
        yield Violation(
            "training.attention_backend",
            f"attention_backend {tr.attention_backend} is Transformer Engine's choice of "
            f"kernel: with kernels {tr.kernels} attention runs PyTorch's SDPA, as planc prices it",
            "leave attention_backend out (auto), or set kernels: fused",
            ("training.kernels",),
        )


def _fused_grouped_mlp_elsewhere(job: Job) -> Iterator[Violation]:
    """fused_grouped_mlp is Megatron-Core's (use_transformer_engine_op_fuser): DeepSpeed's and
    torchtitan's experts run their own kernels."""
    tr = job.training
    if tr.fused_grouped_mlp:
        yield Violation(
            "training.fused_grouped_mlp",
            f"fused_grouped_mlp is Megatron-Core's Transformer Engine op-fuser path: "
            f"{NAMES[tr.framework]} runs its own expert kernels",
            "leave fused_grouped_mlp out, or training.framework: megatron",
            ("training.framework",),
        )


def _dispatcher_sms_unused(job: Job) -> Iterator[Violation]:
    """dispatcher_sms is the flex dispatchers' SM count (TransformerConfig.
    moe_flex_dispatcher_num_sms: 'for all backends (deepep, hybridep, ncclep)'): the alltoall and
    allgather dispatchers run NCCL's collectives, which take no such setting."""
    lay = job.layout
    dispatcher = dispatcher_of(job)
    if lay.dispatcher_sms is not None and dispatcher not in ("deepep", "hybridep"):
        yield Violation(
            "parallelism.dispatcher_sms",
            f"dispatcher_sms {lay.dispatcher_sms} is the flex dispatchers' SM count: the "
            f"{dispatcher} dispatcher runs NCCL's collectives, which take no such setting",
            "leave dispatcher_sms out, or set expert_dispatcher: deepep or hybridep",
            ("parallelism.expert_dispatcher",),
        )


def _deferral_elsewhere(job: Job) -> Iterator[Violation]:
    """defer_embedding_wgrad_compute is Megatron-Core's (ModelParallelConfig): DeepSpeed's and
    torchtitan's LM heads compute their weight gradients in each backward."""
    tr = job.training
    if tr.defer_embedding_wgrad:
        yield Violation(
            "training.defer_embedding_wgrad_compute",
            f"defer_embedding_wgrad_compute is Megatron-Core's: {NAMES[tr.framework]} computes "
            "the LM head's weight gradient in each micro-batch's backward, as planc then prices it",
            "leave defer_embedding_wgrad_compute out, or training.framework: megatron",
            ("training.framework",),
        )


def _optimizer_state_elsewhere(job: Job) -> Iterator[Violation]:
    """training.optimizer_state is Megatron-Core's precision-aware optimizer (and NeMo 1.0's
    Apex DistributedFusedAdam): DeepSpeed's optimizers and torch.optim under FSDP2 keep fp32
    state (FSDP2's on its fp32 parameter shards)."""
    if _state_given(job):
        yield Violation(
            "training.optimizer_state",
            f"optimizer_state is Megatron-Core's precision-aware optimizer: "
            f"{NAMES[job.training.framework]} keeps the master weights and moments in fp32, "
            "more than planc counts",
            "leave training.optimizer_state out (under FSDP2 training.model_dtype: bf16 keeps "
            "parameters and Adam state in bf16), or training.framework: megatron",
            ("training.framework",),
        )


def _model_dtype_elsewhere(job: Job) -> Iterator[Violation]:
    """training.model_dtype is the dtype FSDP2's sharded parameters are stored in: Megatron-LM
    and DeepSpeed keep 16-bit weights beside an fp32 master in their optimizer
    (training.optimizer_state states Megatron's formats)."""
    tr = job.training
    if tr.model_dtype != "fp32":
        yield Violation(
            "training.model_dtype",
            f"model_dtype is FSDP2's parameter storage: {NAMES[tr.framework]} keeps 16-bit "
            "weights and its optimizer's own master, which model_dtype does not change",
            "leave training.model_dtype out (under Megatron-LM, training.optimizer_state "
            "states the master's and moments' formats), or training.framework: fsdp2",
            ("training.framework",),
        )


def _remainders_with_fp8(job: Job) -> Iterator[Violation]:
    """Megatron-Core hands the master weights to Transformer Engine's FusedAdam, which keeps
    them as remainders, only in 16-bit training or with the delayed recipe
    (OptimizerConfig.use_precision_aware_optimizer_no_fp8_or_ds_fp8); with another FP8 recipe
    its distributed optimizer keeps an fp32 master of its own (distrib_optimizer.py)."""
    tr = job.training
    recipe = tr.fp8_recipe
    if tr.master_format == "remainders" and recipe is not None and recipe.value != "delayed":
        yield Violation(
            "training.optimizer_state.master",
            f"with the {recipe.value} recipe Megatron-Core's distributed optimizer keeps an "
            "fp32 master of its own (use_precision_aware_optimizer_no_fp8_or_ds_fp8 is false): "
            "4 bytes a parameter, not the remainders' 2",
            "set master: fp32",
            ("training.fp8.recipe",),
        )


def _deferral_limit_unused(job: Job) -> Iterator[Violation]:
    """wgrad_deferral_limit is read only with defer_embedding_wgrad_compute (ModelParallelConfig:
    'this argument is invalid if defer_embedding_wgrad_compute is False')."""
    tr = job.training
    if tr.wgrad_deferral_limit and not tr.defer_embedding_wgrad:
        yield Violation(
            "training.wgrad_deferral_limit",
            f"wgrad_deferral_limit {tr.wgrad_deferral_limit} limits what "
            "defer_embedding_wgrad_compute defers, which is off: nothing is deferred",
            "leave wgrad_deferral_limit out, or set defer_embedding_wgrad_compute: true",
            ("training.defer_embedding_wgrad_compute",),
        )


COMMON: tuple[Check, ...] = (
    _deferral_limit_unused,
    _dispatcher_sms_unused,
    _megatron_loss_elsewhere,
    _attention_backend_unused,
    _recompute_modules_unused,
)
OTHERWISE: dict[str, tuple[Check, ...]] = {
    # _fused_grouped_mlp_elsewhere: PLC048's
    "megatron": (_per_op_checkpointing, _remainders_with_fp8, _model_dtype_elsewhere, *COMMON),
    "deepspeed": (
        _deepspeed_offload_stage,
        _deepspeed_shard_group,
        _per_op_checkpointing,
        _gradient_accumulation_fusion,
        _activation_offload_elsewhere,
        _fused_grouped_mlp_elsewhere,
        _deferral_elsewhere,
        _optimizer_state_elsewhere,
        _model_dtype_elsewhere,
        cuda_graph_elsewhere,
        *COMMON,
    ),
    "fsdp2": (
        _torchtitan_order,
        _torchtitan_offload,
        _gradient_accumulation_fusion,
        _activation_offload_elsewhere,
        _async_tp_needs_compile,
        _fused_grouped_mlp_elsewhere,
        _deferral_elsewhere,
        _optimizer_state_elsewhere,
        cuda_graph_elsewhere,
        *COMMON,
    ),
}


@rule("PLC051", Severity.WARNING)
def framework_runs_otherwise(ctx: Context) -> Iterator[Violation]:
    """Framework: training.framework runs the plan as planned, not with a setting ignored.

    These start, but not as the plan: DeepSpeed offloads parameters with ZeRO-3 only and the
    optimizer with ZeRO ≥ 1 (deepspeed/runtime/zero/config.py: offload_param "Valid only with
    stage 3") and shards ZeRO over the whole data-parallel group, not data_shard (DeepSpeed
    0.19.6); torchtitan 0.3.0 lays its ranks out as tp-cp-dp-pp only (torchtitan/distributed/
    parallel_dims.py) and offloads parameters, gradients and optimizer together
    (training.enable_cpu_offload); recompute selective-op is torchtitan's per-op policy, which
    Megatron-LM and DeepSpeed do not run; grad_accum_fusion is Megatron-LM's, which DeepSpeed
    and FSDP2 do not have; cross_entropy_fusion is Megatron-Core's fused loss, which DeepSpeed,
    torchtitan and unfused kernels do not run; attention_backend names a fused attention kernel,
    which eager attention and unfused kernels do not run; recompute_modules is Megatron-LM's
    --recompute-modules, read only with recompute selective and by no other framework;
    offload.activations is Megatron-Core's --cpu-offloading-num-layers, which DeepSpeed and
    torchtitan do not run; fused_grouped_mlp is Megatron-Core's op-fuser path for the experts,
    which DeepSpeed and torchtitan do not have; dispatcher_sms is the flex dispatchers' SM count,
    which the alltoall and allgather dispatchers do not read; cuda_graph is Megatron-LM's --cuda-graph-impl,
    which DeepSpeed and torchtitan do not run; defer_embedding_wgrad_compute is Megatron-Core's,
    which DeepSpeed and torchtitan do not have, and wgrad_deferral_limit is read only with it;
    optimizer_state is Megatron-Core's precision-aware optimizer, which DeepSpeed and torchtitan
    do not have, and its master remainders are Transformer Engine's, which Megatron-Core uses
    only in 16 bits or with the delayed recipe; model_dtype is FSDP2's parameter storage, which
    Megatron-LM and DeepSpeed do not read;
    overlap_tp under torchtitan is async TP, a torch.compile pass it
    refuses with eager kernels (compile.enable_async_tensor_parallel). Memory,
    traffic and time would not be what planc planned.

    Passes:
        training: {framework: fsdp2, offload: {optimizer: true, parameters: true}}

    Fails:
        training: {framework: fsdp2, offload: {optimizer: true}}
    """
    framework = ctx.job.training.framework
    yield from _run(ctx, framework, OTHERWISE.get(framework, ()))
