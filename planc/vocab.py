"""Closed vocabularies: the parallel axes, process-group kinds, collectives, pipeline
directions, pipeline schedules and number formats, one name each across the spec, the plan and the
code.

The members are `str` enums, so a member equals its plain name (`Axis.TP == "tp"`), serialises
as that name in JSON, and reads back with `Axis("tp")`. Behaviour keys on the member, never on a
description string.

One name per axis (`Axis`), and the one documented mapping to the spec's field names:

| axis | spec field (`parallelism.`) | symbol | plan.json (`layout.degrees`, `coords`) |
|------|-----------------------------|--------|----------------------------------------|
| tp   | tensor                      | t      | tp                                     |
| cp   | context                     | c      | cp                                     |
| dp   | data                        | d      | dp                                     |
| pp   | pipeline                    | p      | pp                                     |
| ep   | expert                      | EP     | layout.expert.degrees.ep               |

`ep` places expert parallelism in an order string; the dense grid (AXES) does not hold it.
The expert layers use their own grid over the same ranks, in the same order, with tp =
expert_tensor (ETP), cp = 1, ep = expert (EP), dp = EDP = W/(ETP·EP·PP) and the same pp
(Megatron-Core's expert RankGenerator, parallel_state.py).
"""

from __future__ import annotations

from enum import Enum
from typing import Literal


class Axis(str, Enum):
    """A parallel axis of the rank grid. `order` strings name these, fastest-varying first."""

    TP = "tp"
    CP = "cp"
    DP = "dp"
    PP = "pp"
    EP = "ep"

    def __str__(self) -> str:
        return self.value


AXES: tuple[Axis, ...] = (Axis.TP, Axis.CP, Axis.DP, Axis.PP)


class GroupKind(str, Enum):
    """A kind of process group in the plan.

    `dp_cp` is the data × context group (ranks sharing tp and pp); `dp_shard` the ranks ZeRO or
    FSDP shards over (`parallelism.data_shard` contiguous members of a dp_cp group; the whole
    dp_cp group by default) and `dp_replicate` the ranks holding the same shard (HSDP; groups of
    one by default); `embedding` pairs the first and last pipeline rank (tied-embedding
    gradients); `model_parallel` is tp × pp. With experts, `ep`, `etp` and `edp` are the
    expert grid's ep, tp and dp groups (expert-parallel all-to-all, expert tensor parallelism,
    expert data parallelism: Megatron-Core's expert RankGenerator). `tp_ep` is the expert grid's
    tp × ep group, the one the allgather and flex dispatchers exchange over (Megatron's
    tp_ep_group; listed when ETP > 1, where it differs from ep). Where the dispatcher's group
    spans several NVLink domains with several members in each, `ep_domain` holds its members
    inside one domain and `ep_peers` its members at the same place in every domain (one per
    domain: the ranks DeepEP and HybridEP send to over the network,
    `planc.comm.schedule.dispatch_group`).
    """

    TP = "tp"
    CP = "cp"
    DP = "dp"
    PP = "pp"
    DP_CP = "dp_cp"
    DP_SHARD = "dp_shard"
    DP_REPLICATE = "dp_replicate"
    EMBEDDING = "embedding"
    MODEL_PARALLEL = "model_parallel"
    EP = "ep"
    ETP = "etp"
    EDP = "edp"
    TP_EP = "tp_ep"
    EP_DOMAIN = "ep_domain"
    EP_PEERS = "ep_peers"

    def __str__(self) -> str:
        return self.value


class Collective(str, Enum):
    """A communication primitive. `send_recv` is a point-to-point message; `all_to_all` sends
    each member of the group its own chunk of the buffer (the expert-parallel token exchange)."""

    ALL_REDUCE = "all_reduce"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_GATHER = "all_gather"
    SEND_RECV = "send_recv"
    ALL_TO_ALL = "all_to_all"

    @property
    def ring(self) -> bool:
        """A ring collective (all-reduce, reduce-scatter, all-gather), not a p2p message or an
        all-to-all exchange."""
        return self not in (Collective.SEND_RECV, Collective.ALL_TO_ALL)

    def __str__(self) -> str:
        return self.value


class Direction(str, Enum):
    """Which way a pipeline message goes: activations forward to the next stage, activation
    gradients backward to the previous one."""

    FORWARD = "fwd"
    BACKWARD = "bwd"

    def __str__(self) -> str:
        return self.value


class DType(str, Enum):
    """A number format: what a tensor is stored, sent or multiplied in. fp8 and fp4 are the
    formats of a low-precision recipe's GEMM operands (`Fp8Recipe`); the weights, activations
    and gradients around them stay 16-bit."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    FP4 = "fp4"

    @property
    def bits(self) -> int:
        return _BITS[self.value]

    def __str__(self) -> str:
        return self.value


class Fp8Recipe(str, Enum):
    """A low-precision training recipe (`training.fp8.recipe`): how the GEMM operands are
    quantized and scaled. Transformer Engine's (`transformer_engine.common.recipe`):
    `delayed` (DelayedScaling, one fp32 scale per tensor from an amax history; Megatron's
    default), `current` (Float8CurrentScaling, the scale from the tensor's own amax; Megatron
    `--fp8-recipe tensorwise`), `blockwise` (Float8BlockScaling, 1×128 and 128×128 blocks,
    DeepSeek-V3's), `mxfp8` (MXFP8BlockScaling, one E8M0 scale per 32 values) and `nvfp4`
    (NVFP4BlockScaling, FP4 E2M1). torchao's (`Float8LinearRecipeName`, torchtitan's float8
    converter): `tensorwise`, `rowwise` and `rowwise_with_gw_hp` (rowwise with the weight
    gradient in high precision). planc/presets/fp8.json holds what each one keeps, moves and
    costs, with its sources."""

    DELAYED = "delayed"
    CURRENT = "current"
    BLOCKWISE = "blockwise"
    MXFP8 = "mxfp8"
    NVFP4 = "nvfp4"
    TENSORWISE = "tensorwise"
    ROWWISE = "rowwise"
    ROWWISE_WITH_GW_HP = "rowwise_with_gw_hp"

    def __str__(self) -> str:
        return self.value


# torchao's rowwise recipes: axiswise scales, 16-bit gathers, casts along each axis per GEMM.
ROWWISE_RECIPES = frozenset({Fp8Recipe.ROWWISE, Fp8Recipe.ROWWISE_WITH_GW_HP})


class ScheduleKind(str, Enum):
    """A pipeline schedule by name (`parallelism.pipeline_schedule`, plan.json's
    `communication.pipeline.schedule`); `planc.pipeline.registry` holds what each one is.

    `1f1b` is PipeDream-Flush (Narayanan et al. 2021 §2.2; Megatron-LM
    `forward_backward_pipelining_without_interleaving`), `interleaved-1f1b` the interleaved
    schedule over v model chunks per stage (§2.2.1; `forward_backward_pipelining_with_interleaving`),
    `gpipe` all forwards, then all backwards (Huang et al. 2019; PyTorch `ScheduleGPipe`),
    `zb-h1` 1F1B with the weight-gradient backward deferred (Qi et al. 2024 §2.1), `zbv` its
    V-shaped two-chunk form (§6; PyTorch `ScheduleZBVZeroBubble`),
    `dualpipev` DeepSeek's V-shaped DualPipe (deepseek-ai/DualPipe `dualpipev.py`; PyTorch
    `ScheduleDualPipeV`), `combined-1f1b` Megatron-Core's interleaved 1F1B that pairs one
    micro-batch's forward with another's backward to hide the expert all-to-all
    (`--overlap-moe-expert-parallel-comm`).
    """

    ONE_F_ONE_B = "1f1b"
    INTERLEAVED_1F1B = "interleaved-1f1b"
    GPIPE = "gpipe"
    ZB_H1 = "zb-h1"
    DUALPIPE_V = "dualpipev"
    ZB_V = "zbv"
    COMBINED_1F1B = "combined-1f1b"

    @classmethod
    def default(cls, v: int) -> ScheduleKind:
        """The schedule a spec that names none runs: 1F1B with one model chunk per stage,
        interleaved 1F1B with v > 1 (Megatron picks the same from its virtual pipeline size)."""
        return cls.ONE_F_ONE_B if v == 1 else cls.INTERLEAVED_1F1B

    def __str__(self) -> str:
        return self.value


_BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "fp4": 4}

# The closed choices of a spec, one spelling shared by the pydantic models (planc.spec.models)
# and the resolved job (planc.spec.job), so that mypy sees every comparison against them.
Precision = Literal["bf16", "fp16", "fp32", "fp8", "fp4"]
# parallelism.cp_comm_type (Megatron --cp-comm-type): ring p2p, Ulysses all-to-all, all-gather
# of K/V, or a2a within a sub-group and p2p across (planc.perf.context prices each).
CpCommType = Literal["p2p", "a2a", "allgather", "a2a+p2p"]
CP_COMM_TYPES: tuple[CpCommType, ...] = ("p2p", "a2a", "allgather", "a2a+p2p")
# parallelism.expert_dispatcher: how a MoE layer's tokens reach their experts (Megatron-Core
# --moe-token-dispatcher-type alltoall | allgather, or flex with --moe-flex-dispatcher-backend
# deepep | hybridep; planc.comm.schedule prices each).
ExpertDispatcher = Literal["alltoall", "allgather", "deepep", "hybridep"]
EXPERT_DISPATCHERS: tuple[ExpertDispatcher, ...] = ("alltoall", "allgather", "deepep", "hybridep")
# The flex dispatcher's backends (DeepEP's kernels: a token crosses to each NVLink domain once).
FLEX_BACKENDS: tuple[ExpertDispatcher, ...] = ("deepep", "hybridep")
# The offload choices of `planc search` (training.offload's two switches as one axis).
OffloadChoice = Literal["none", "optimizer", "parameters", "optimizer+parameters"]
OFFLOADS: tuple[OffloadChoice, ...] = ("none", "optimizer", "parameters", "optimizer+parameters")
Fp8RecipeName = Literal[
    "delayed", "current", "blockwise", "mxfp8", "nvfp4", "tensorwise", "rowwise", "rowwise_with_gw_hp"
]
# training.fp8.attention: the FP8 recipe of the attention core (Transformer Engine's fp8_dpa),
# the recipes TE's FusedAttention runs in FP8 (dot_product_attention.py, TE 2.18).
AttentionFp8Name = Literal["delayed", "current", "mxfp8"]
OptimizerName = Literal["adam", "sgd", "muon"]
# The formats Adam's moments can be kept in (training.optimizer_state.moments): fp32, or 16 bits
# (Megatron's precision-aware optimizer: bf16 or fp16; Apex's DistributedFusedAdam: its dtype).
StateDtype = Literal["fp32", "bf16", "fp16"]
# The master weights' formats (training.optimizer_state.master): fp32; remainders, an fp32
# master kept as the 16 bits its bf16 weight lacks (Transformer Engine's FusedAdam with
# store_param_remainders, which Megatron's precision-aware optimizer turns on); fp16 (Megatron
# --main-params-dtype fp16); bf16 (Apex's DistributedFusedAdam with dtype bf16, NeMo 1.0).
MasterFormat = Literal["fp32", "remainders", "bf16", "fp16"]
# Bytes per parameter of each master format.
MASTER_BYTES: dict[str, int] = {"fp32": 4, "remainders": 2, "bf16": 2, "fp16": 2}
# training.muon.tp_mode: how Muon orthogonalizes a tensor-parallel matrix (Megatron-Core
# --muon-tp-mode, emerging_optimizers newton_schulz_tp): blockwise (Megatron's default) iterates
# on each rank's shard alone, duplicated gathers the whole momentum on every TP rank, distributed
# splits the iteration over TP with an all-reduce of each Gram matrix.
MuonTpMode = Literal["duplicated", "blockwise", "distributed"]
Recompute = Literal["none", "selective", "selective-op", "full"]
# training.recompute_modules: the parts of each layer Megatron-Core's selective recompute
# checkpoints (--recompute-modules, TransformerConfig.recompute_modules, Megatron-Core cd4afffa;
# default core_attn). core_attn, mlp, moe and shared_experts keep their module's input and run
# it again in backward; mla_up_proj, layernorm and moe_act discard their outputs after use and
# re-create them (CheckpointWithoutOutput).
RecomputeModule = Literal[
    "core_attn", "mla_up_proj", "layernorm", "mlp", "moe_act", "moe", "shared_experts"
]
RECOMPUTE_MODULES: tuple[RecomputeModule, ...] = (
    "core_attn", "mla_up_proj", "layernorm", "mlp", "moe_act", "moe", "shared_experts"
)
# Megatron-Core's default module list (recompute_granularity selective, recompute_modules None).
DEFAULT_RECOMPUTE_MODULES: tuple[RecomputeModule, ...] = ("core_attn",)
AttentionKind = Literal["flash", "eager"]
# The fused attention kernel under Megatron-LM (--attention-backend): auto, Transformer Engine's
# choice (cuDNN's FusedAttention on Hopper and newer, flash-attn before); flash, the flash-attn
# package (FlashAttention-2); fused, cuDNN's FusedAttention.
AttentionBackend = Literal["auto", "flash", "fused"]
Kernels = Literal["fused", "unfused", "compiled"]
# The LM loss's kernels under Megatron-LM (TransformerConfig.cross_entropy_loss_fusion and
# cross_entropy_fusion_impl): none, Megatron's eager _VocabParallelCrossEntropy; native,
# Megatron-Core's compiled fused_vocab_parallel_cross_entropy; te, Transformer Engine's Triton
# parallel_cross_entropy (planc.perf.ops prices each).
CrossEntropyFusion = Literal["none", "native", "te"]
# FSDP2's MixedPrecisionPolicy.reduce_dtype: the data type its gradient reduce-scatter moves.
ReduceDtype = Literal["fp32", "bf16"]
# How the optimizer's update runs over the rank's parameters (torch.optim's implementations,
# torchtitan 0.3.0 optimizer.implementation): one fused kernel, or foreach kernels per operator.
OptimizerImplementation = Literal["fused", "foreach"]
# How a token's experts are chosen when the step is priced (training.expert_routing): uniform, a
# uniformly random top-k subset per token (Megatron's --moe-router-force-load-balancing, planc's
# model of a balanced router); round_robin, NeMo AutoModel's FakeBalancedGate (token t to experts
# t·k … t·k + k − 1 mod E).
ExpertRouting = Literal["uniform", "round_robin"]
# The software the run uses (training.framework_release): latest, the Megatron-Core and
# Transformer Engine planc targets (one grouped kernel per expert linear, nothing per expert on
# the host); or one of NVIDIA's NeMo containers, whose MoE layers spend a time per local expert
# that planc.presets.releases holds:
# - nemo-25.09: Megatron-Bridge 0.1.0rc3, Megatron-Core 0.14.0, Transformer Engine 2.7.0;
# - nemo-25.11: Megatron-Bridge 0.2.1, Megatron-Core 0.16.0rc0, Transformer Engine 2.10;
# - nemo-26.02 (26.02 and 26.02.01): Megatron-Bridge 0.3.0 and 0.3.1, Megatron-Core 0.16 of
#   core_r0.16.0 at b0cc2706 and 55ac7082, Transformer Engine 2.12;
# - nemo-26.04 (26.04.01): Megatron-Bridge 0.4.2, Megatron-Core 0.17.1 at 2edffadb.
FrameworkRelease = Literal["latest", "nemo-25.09", "nemo-25.11", "nemo-26.02", "nemo-26.04"]
# How Megatron-Core captures CUDA graphs (training.cuda_graph.impl, --cuda-graph-impl, megatron-core
# 0.19.2 TransformerConfig.cuda_graph_impl): local, Megatron-Core's own per-layer graphs;
# transformer_engine, Transformer Engine's make_graphed_callables per layer (the partial graphs of
# NVIDIA's MoE recipes); full_iteration, one graph of the whole forward and backward.
CudaGraphImpl = Literal["local", "transformer_engine", "full_iteration"]
# What a per-layer implementation captures (training.cuda_graph.modules, --cuda-graph-modules;
# CudaGraphModule of megatron/core/transformer/enums.py): attn, the attention; mlp, a dense layer's
# MLP; moe_router, the router (and the shared experts unless they overlap the dispatch);
# moe_preprocess, the dispatcher's preprocessing (needs moe_router). Megatron's moe (drop-and-pad
# MoE layers only, model.moe.pad_to_capacity) and mamba are not stated: planc has no graph of a
# whole MoE block yet, and prices no Mamba layers.
CudaGraphModuleName = Literal["attn", "mlp", "moe_router", "moe_preprocess"]
# megatron-fsdp: Megatron-LM with Megatron-Core's own FSDP (--use-megatron-fsdp), which planc
# models as Megatron with zero_stage naming --data-parallel-sharding-strategy.
Framework = Literal["megatron", "megatron-fsdp", "deepspeed", "fsdp2"]
# The MLP: gelu, two matrices (fc1, GeLU, fc2); swiglu, a gated linear unit of three matrices
# with a SiLU gate (Megatron --swiglu); quick_geglu, a gated linear unit whose gate is quick-GELU,
# x·σ(1.702·x) (Megatron --quick-geglu, activation_func quick_gelu; GPT-OSS's experts).
Mlp = Literal["gelu", "swiglu", "quick_geglu"]
GATED_MLPS: tuple[Mlp, ...] = ("swiglu", "quick_geglu")


def gated(mlp: str) -> bool:
    """A gated linear unit: fc1 writes a gate and an up projection, three matrices in all."""
    return mlp in GATED_MLPS


Norm = Literal["layernorm", "rmsnorm"]
Position = Literal["rope", "learned"]
# RoPE frequency scaling for long context: YaRN (Peng et al. 2023; DeepSeek-V3) or Llama 3.1's.
RopeScalingKind = Literal["yarn", "llama3"]
# How a router turns its logits into expert weights (Megatron --moe-router-score-function).
RouterScore = Literal["softmax", "sigmoid"]
# checkpoint.format: the saver whose files planc sizes (auto: training.framework's own).
CheckpointFormat = Literal["auto", "megatron-dist", "deepspeed-zero", "torch-dcp"]
# planc search --objective: what the search ranks by; and the two kinds of fallback plan.
SearchObjective = Literal["step", "time-to-train", "cost"]
FallbackKind = Literal["keep", "re-layout"]

# Least to most recomputation (the order PLC007's fixes try them in, and search's axis).
RECOMPUTE_MODES: tuple[Recompute, ...] = ("none", "selective", "full")
# torchtitan's per-op selective checkpointing (planc.perf.sac): a spec states it, search and
# PLC007's fixes do not offer it (it keeps less than selective, more than full).
SELECTIVE_OP: Recompute = "selective-op"


def recompute_mode(value: object) -> Recompute:
    """`value` as a recompute mode (ValueError for anything else)."""
    for mode in (*RECOMPUTE_MODES, SELECTIVE_OP):
        if value == mode:
            return mode
    raise ValueError(f"unknown recompute mode {value!r}")


class ChunkPlacement(str, Enum):
    """Which virtual stages a pipeline rank's model chunks hold (p ranks, v chunks).

    `loop`: chunk j of rank r is virtual stage j·p + r (Megatron's interleaved assignment,
    torchtitan's "loop" style); `v`: two chunks, rank r holds virtual stages r and 2p − 1 − r
    (the zero-bubble paper's V shape, DualPipeV; torchtitan's "v" style); `dual`: DualPipe's two
    directions, chunk 0 the stage r of the pipeline that runs rank 0 → p − 1 and chunk 1 the stage
    p − 1 − r of the one that runs back, each micro-batch on one of them."""

    LOOP = "loop"
    V = "v"
    DUAL = "dual"

    def __str__(self) -> str:
        return self.value


class ScheduleNeed(str, Enum):
    """A condition a schedule puts on the layout (p stages, m micro-batches, v chunks).

    Each schedule lists its needs in `planc.pipeline.registry`, and `planc.plannable` turns a
    failed one into a located finding (PLC010). A schedule's needs are tried in order and only
    the first failed one is reported, since the later ones assume the earlier.
    """

    ONE_CHUNK = "v == 1"
    CHUNKS = "v > 1"
    SEVERAL_STAGES = "p > 1"
    WHOLE_ROUNDS = "m % p == 0"
    TWO_CHUNKS = "v == 2"
    TWICE_THE_STAGES = "m >= 2p"
    FILLED_V = "m >= 2p - 1"
    ALONE_OR_CHUNKS = "p == 1 or v > 1"
    STAGES_FOR_CHUNKS = "v == 1 or p > 1"

    def holds(self, p: int, m: int | None, v: int) -> bool:
        """Whether the layout meets this need; a need on m holds while m is unknown (PLC005
        reports an m that is not whole)."""
        if self is ScheduleNeed.ONE_CHUNK:
            return v == 1
        if self is ScheduleNeed.CHUNKS:
            return v > 1
        if self is ScheduleNeed.SEVERAL_STAGES:
            return p > 1
        if self is ScheduleNeed.TWO_CHUNKS:
            return v == 2
        if self is ScheduleNeed.TWICE_THE_STAGES:
            return m is None or m >= 2 * p
        if self is ScheduleNeed.FILLED_V:
            return m is None or m >= 2 * p - 1
        if self is ScheduleNeed.ALONE_OR_CHUNKS:
            return p == 1 or v > 1
        if self is ScheduleNeed.STAGES_FOR_CHUNKS:
            return v == 1 or p > 1
        return m is None or m % p == 0


class RunRole(str, Enum):
    """What a published run in `validation/runs.json` is for: `fit` runs may inform a parameter
    of the step model; `validation` runs must not (issue 24: fit and validation kept apart)."""

    FIT = "fit"
    VALIDATION = "validation"

    def __str__(self) -> str:
        return self.value


class FitTarget(str, Enum):
    """Which parameter of the step model a `fit` run of `validation/runs.json` informs (its
    `fits`): the GEMM curve of its GPU (`planc.fitting.FITTED`), the time per local expert of
    its software release and FP8 recipe (`planc.presets.releases`), or the sustained clock of a
    GPU that is another's die at its own clock (`planc.fitting.CLOCKED`)."""

    GEMM = "gemm"
    EXPERT_HOST = "expert_host"
    CLOCK = "clock"

    def __str__(self) -> str:
        return self.value


class Generation(str, Enum):
    """A GPU generation, as the validation corpus groups its runs."""

    AMPERE = "ampere"
    HOPPER = "hopper"
    BLACKWELL = "blackwell"

    def __str__(self) -> str:
        return self.value


class Unpriced(str, Enum):
    """A cost planc knows a run spends and does not price (`planc.perf.unpriced`): the host's
    kernel launches of a Megatron MoE run whose routed experts no CUDA graph holds; the GPU's
    share of a release's per-expert kernels where a graph holds them; torchao's rowwise FP8
    forward GEMM and casts beyond what planc prices; torch's ring attention at four or more
    context-parallel ranks. The corpus's error on the runs that have each is quoted beside the
    estimate."""

    HOST_LAUNCHES = "megatron-moe-host-launches"
    GRAPHED_EXPERT_KERNELS = "megatron-graphed-expert-kernels"
    ROWWISE = "torchao-rowwise"
    WIDE_TORCH_RING = "torch-ring-cp4+"

    def __str__(self) -> str:
        return self.value


# The validation corpus's "unpriced" group of the runs that have none of `Unpriced`'s costs: what
# planc's error is where it prices everything it knows the run spends.
NONE_UNPRICED = "none"


class RunCategory(str, Enum):
    """What dominates a published run's layout: plain tensor/data parallelism, a large pipeline,
    context parallelism, mixture of experts, or fully sharded data parallelism."""

    DENSE = "dense"
    PIPELINE = "pipeline"
    CONTEXT = "context"
    MOE = "moe"
    FSDP = "fsdp"

    def __str__(self) -> str:
        return self.value


class RunFramework(str, Enum):
    """The software a published run was measured with."""

    MEGATRON = "megatron"
    DEEPSPEED = "deepspeed"
    TORCHTITAN = "torchtitan"
    OTHER = "other"

    def __str__(self) -> str:
        return self.value
