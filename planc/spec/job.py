"""The resolved job: a valid spec with presets merged, defaults applied and degrees derived.

Plain frozen dataclasses of integers and strings, in the papers' symbols, passed between the
check, compile and verify stages. Nothing here fills itself in later.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any, overload

from planc.presets import MODEL_NAMES, fabric_preset, gpu_preset, model_preset
from planc.record import record
from planc.spec.fabric import Fabric, Tier, Topology
from planc.spec.rule_options import OPTIONS as RULE_OPTIONS
from planc.vocab import (
    DEFAULT_RECOMPUTE_MODULES,
    AttentionBackend,
    AttentionKind,
    CheckpointFormat,
    CpCommType,
    CrossEntropyFusion,
    CudaGraphImpl,
    CudaGraphModuleName,
    DType,
    ExpertDispatcher,
    ExpertRouting,
    Fp8Recipe,
    Framework,
    FrameworkRelease,
    Kernels,
    MasterFormat,
    Mlp,
    MuonTpMode,
    Norm,
    OptimizerImplementation,
    OptimizerName,
    Position,
    Precision,
    Recompute,
    RecomputeModule,
    ReduceDtype,
    RopeScalingKind,
    RouterScore,
    ScheduleKind,
    StateDtype,
)

GIB = 2**30
GB = 10**9
# PCIe Gen4 x16: 16 GT/s × 16 lanes × 128/130 ≈ 31.5 GB/s per direction (PCI-SIG PCIe 4.0 base
# specification), rounded; the host link of a custom GPU that gives none.
DEFAULT_HOST_BANDWIDTH_GBS = 32.0
MAX_NODES = 1_000_000  # as planc.spec.models bounds hardware.nodes; kept here so check need not import it

# What DeepSpeed hostfiles, Open MPI rankfiles and Slurm hostfiles all accept as a host; matched
# against the whole name (fullmatch), so a trailing newline is refused too.
HOST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._:-]*")

Data = Mapping[str, Any]  # a validated spec as plain data, every default filled in


@record
class Problem:
    """A spec that validated but cannot be resolved (a field no preset supplies, a bad pattern)."""

    rule: str
    field: str
    message: str
    fix: str = ""


@record
class MoE:
    """Mixture of experts, resolved (symbols of Megatron-Core's moe/README.md)."""

    E: int  # routed experts per MoE layer
    k: int  # experts per token (top-k)
    f_e: int  # one routed expert's MLP inner size
    E_s: int  # shared experts
    f_s: int  # one shared expert's MLP inner size
    first_dense: int  # leading layers with a dense MLP
    frequency: int  # layer i ≥ first_dense has experts when i % frequency == offset
    capacity_factor: float | None  # None: dropless
    router_bias: bool  # per-expert bias (auxiliary-loss-free balancing)
    offset: int = 0  # 0 ≤ offset < frequency; Llama 4 and Qwen MoE: frequency − 1
    groups: int | None = None  # group-limited routing: expert groups (DeepSeek-V3 n_group)
    group_k: int | None = None  # groups a token's experts come from (topk_group)
    scaling: float | None = None  # factor on the routed output (routed_scaling_factor)
    score: RouterScore = "softmax"  # how the router weighs the experts it picks
    normalize: bool = True  # the top-k weights renormalised to sum to 1 (norm_topk_prob)
    pad_to_capacity: bool = False  # --moe-pad-expert-input-to-capacity, as written

    @property
    def padded(self) -> bool:
        """Drop and pad: a capacity factor with pad_to_capacity, so every expert takes exactly
        C = ⌈T·k/E·CF⌉ rows from each rank (Megatron-Core's drop_and_pad). pad_to_capacity
        without a capacity factor pads nothing (PLC031 refuses it, as Megatron-Core does)."""
        return self.capacity_factor is not None and self.pad_to_capacity

    def is_moe_layer(self, i: int) -> bool:
        """Layer `i` (from 0) routes to experts: Megatron's moe_layer_freq pattern
        (i % f == 0), after the first_dense layers (DeepSeek-V3's first_k_dense_replace), shifted
        by `offset` (Hugging Face's Llama 4 interleave_moe_layer_step and Qwen's
        decoder_sparse_step s: (i + 1) % s == 0, so f = s and offset = s − 1)."""
        return i >= self.first_dense and i % self.frequency == self.offset

    def moe_layers(self, L: int) -> int:
        """How many of L layers have experts: those i ≡ offset (mod f) in [first_dense, L),
        ⌈(L − r)/f⌉ − ⌈(first_dense − r)/f⌉ with r the offset (closed form: L may be large)."""
        return self.moe_layers_between(0, L)

    def moe_layers_between(self, first: int, last: int) -> int:
        """How many of the layers [first, last) have experts (a stage's or a model chunk's
        range): the i ≡ r (mod f) in [a, last) with a = max(first, first_dense) and r the
        offset, ⌈(last − r)/f⌉ − ⌈(a − r)/f⌉ (the multiples of f in [a − r, last − r))."""
        start = max(first, self.first_dense)
        if start >= last:
            return 0
        f, r = self.frequency, self.offset
        return -(-(last - r) // f) - -(-(start - r) // f)


@record
class MLA:
    """Multi-head latent attention, resolved (DeepSeek-V2 report §2.1 symbols)."""

    q_lora: int | None  # d_c', the query latent; None: a direct h × n·(d_h + d_h^R) projection
    kv_lora: int  # d_c, the key/value latent
    qk_nope: int  # d_h, per-head query/key channels without RoPE
    qk_rope: int  # d_h^R, per-head RoPE channels (the key's shared by all heads)
    v_head: int  # per-head value channels

    @property
    def qk_head(self) -> int:
        """d_h + d_h^R: the channels each head's query and key carry into QKᵀ."""
        return self.qk_nope + self.qk_rope


@record
class RopeScaling:
    """RoPE frequency scaling, resolved (model.rope_scaling; Megatron's defaults filled in)."""

    kind: RopeScalingKind
    factor: float  # s
    original: int  # context length the frequencies were trained at
    beta_fast: float = 32.0  # yarn
    beta_slow: float = 1.0  # yarn
    mscale: float = 1.0  # yarn
    mscale_all_dim: float = 0.0  # yarn
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3

    @property
    def concentration(self) -> float:
        """YaRN's attention scale on the rotated queries and keys (Peng et al. 2023 §3.4,
        √(1/t) = 0.1·ln s + 1, with DeepSeek's mscale terms): m(s, mscale) / m(s, mscale_all_dim),
        m(s, μ) = 0.1·μ·ln s + 1 (1 where s ≤ 1), as Megatron-Core's
        _yarn_get_concentration_factor computes it; 1 for llama3 scaling, which scales no
        attention."""
        if self.kind != "yarn":
            return 1.0

        def m(mu: float) -> float:
            return 1.0 if self.factor <= 1 else 0.1 * mu * math.log(self.factor) + 1.0

        return m(self.mscale) / m(self.mscale_all_dim)


@record
class Model:
    """Architecture in Megatron/Korthikanti symbols."""

    L: int  # layers
    h: int  # hidden size
    n: int  # attention heads (a in Korthikanti et al.)
    g: int  # key/value heads (query groups)
    k: int  # channels per head
    f: int  # MLP inner size
    V: int  # vocabulary before padding
    mlp: Mlp
    norm: Norm
    bias: bool
    dropout: float
    tied: bool
    position: Position
    max_seq_len: int
    preset: str | None
    qk_norm: bool = False  # RMSNorm over each query and key head (Qwen3)
    moe: MoE | None = None  # None: a dense model
    mla: MLA | None = None  # None: multi-head / grouped-query attention
    mtp: int = 0  # multi-token prediction modules after the last layer (DeepSeek-V3)
    rope_theta: float = 10000.0  # RoPE base θ (no count depends on it; the frameworks need it)
    rope_scaling: RopeScaling | None = None  # None: unscaled RoPE (or learned positions)
    window: int = 0  # sliding-window attention: keys per query in a windowed layer (0: none)
    full_every: int = 0  # with a window: layer i (from 1) full when i % full_every == 0 (0: never)
    sinks: bool = False  # a learned softmax offset per head (GPT-OSS sinks)
    glu_clamp: float = 0.0  # a gated MLP's inputs clamped to ±this before the activation (0: none)
    glu_linear_offset: float = 0.0  # act(gate)·(up + this) in a gated MLP (GPT-OSS 1)

    def is_window_layer(self, i: int) -> bool:
        """Whether layer `i` (from 0) attends through the sliding window (Megatron-Core
        is_layer_window_attention: layer_number % window_attn_skip_freq != 0, from 1)."""
        return self.window > 0 and (self.full_every == 0 or (i + 1) % self.full_every != 0)

    def window_layers_between(self, a: int, b: int) -> int:
        """The windowed layers among layers a..b−1."""
        return sum(1 for i in range(a, b) if self.is_window_layer(i))


@record
class LinkSpeed:
    """One link's settings as the spec and the presets give them (hardware.intra_node or
    inter_node): what a tier of the default fabric is built from."""

    bandwidth_gbs: float
    latency_us: float


@record
class Gpu:
    name: str
    memory_bytes: int
    peaks: Mapping[DType, float]  # dense TFLOPS by data type; a type the GPU lacks is absent
    memory_bandwidth_gbs: float
    source: str

    @property
    def bf16_tflops(self) -> float:
        """The dense BF16 tensor peak (every GPU gives one), for display and MFU."""
        return self.peaks[DType.BF16]

    def peak_tflops(self, dtype: DType) -> float | None:
        """The dense peak for `dtype` in TFLOPS; None when the GPU has no units for it."""
        return self.peaks.get(dtype)


@record
class NodeNames(Sequence[str]):
    """The default host names node-0 … node-(n−1), made on demand: a spec with a million nodes
    must not build a million strings before a rule refuses it."""

    n: int

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if isinstance(index, slice):
            return [f"node-{i}" for i in range(*index.indices(self.n))]
        if not -self.n <= index < self.n:
            raise IndexError(index)
        return f"node-{index % self.n}"


@record
class Cluster:
    gpu: Gpu
    nodes: int
    gpus_per_node: int
    nvlink_domain: int
    fabric: Fabric  # the tiers of wire, innermost first (planc.spec.fabric)
    hosts: Sequence[str]  # a tuple of the spec's names, or NodeNames
    reserve_bytes: int
    host_memory_bytes: int = 0  # host (CPU) memory per node, the offload budget
    host_bandwidth_gbs: float = DEFAULT_HOST_BANDWIDTH_GBS  # host↔device per GPU per direction
    # hardware.calibration: the efficiency tables `planc calibrate` fitted, as read from the file
    # (plain JSON data; planc.presets.efficiency reads it). None: the GPU preset's entry.
    calibration: Mapping[str, Any] | None = None
    # hardware.topology: the Slurm topology the hosts were placed on (planc.spec.topology),
    # kept so that `compile --hosts` places its hosts the same way. None: no topology file.
    topology: Topology | None = None

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node


@record
class Layout:
    """Parallel degrees. `d` is None when it cannot be derived (world not divisible)."""

    t: int
    p: int
    d: int | None
    c: int
    v: int
    stage_layers: tuple[int, ...]
    sp: bool
    zero: int
    order: tuple[str, ...]
    d_given: bool
    data_shard: int | None = None  # ranks ZeRO/FSDP shards over; None: d·c
    ep: int = 1  # expert-parallel degree
    etp: int | None = None  # expert tensor-parallel degree; None: t
    # The order as written, ep included when the spec names it (`order` is the dense order,
    # without ep: Megatron-Core's dense RankGenerator runs with ep = 1).
    expert_order: tuple[str, ...] = ()
    # parallelism.pipeline_schedule as written; None: the default for v (`schedule`).
    named_schedule: ScheduleKind | None = None
    # parallelism.pipeline_layout as written (Megatron's layout string); None when not given.
    pipeline_layout: str | None = None
    # Megatron's --account-for-embedding/loss-in-pipeline-split: the even split counts them.
    embedding_in_split: bool = False
    loss_in_split: bool = False
    # parallelism.cp_comm_type: how the context-parallel ranks exchange attention.
    cp_comm: CpCommType = "p2p"
    # parallelism.expert_dispatcher as written; None: the framework's (`dispatcher_of`).
    named_dispatcher: ExpertDispatcher | None = None
    # parallelism.dispatcher_sms: the flex dispatcher's SMs as written; None: the default.
    dispatcher_sms: int | None = None

    @property
    def schedule(self) -> ScheduleKind:
        """The pipeline schedule: the one the spec names, else the default for v (1F1B with
        one chunk per stage, interleaved 1F1B with more)."""
        return self.named_schedule or ScheduleKind.default(self.v)

    @property
    def et(self) -> int:
        """ETP: the expert tensor-parallel degree (t unless the spec sets it)."""
        return self.t if self.etp is None else self.etp

    def edp(self, world: int) -> int | None:
        """EDP = W/(ETP·EP·PP), Megatron-Core's expert_data_parallel_size; None when the world
        does not divide."""
        inner = self.et * self.ep * self.p
        return world // inner if world % inner == 0 else None


@record
class Training:
    s: int  # sequence length
    b: int  # micro-batch size
    B: int  # global batch in sequences
    precision: Precision
    optimizer: OptimizerName
    grad_accum_fp32: bool
    recompute: Recompute
    attention: AttentionKind
    efficiency: float | None = None  # a flat GEMM efficiency; None: the per-operation curve
    overlap_tp: bool = False
    async_tp_allreduce: bool = True  # column-parallel input-gradient reduction behind the wgrad
    # the weight-gradient GEMMs accumulate into the main-grad buffer (Megatron's fusion)
    grad_accum_fusion: bool = True
    overlap_grad_reduce: bool = True  # DP reduction in buckets during the last backward
    overlap_param_gather: bool = True  # ZeRO-1/2 parameter all-gather behind the next forward
    overlap_p2p_comm: bool = True  # Megatron's asynchronous pipeline p2p (interleaved schedules)
    # Megatron's LM-head weight gradients held for the pipeline flush, and how many (0: all)
    defer_embedding_wgrad: bool = False
    wgrad_deferral_limit: int = 0
    kernels: Kernels = "fused"  # fused (Megatron-Core + TE/Apex) | unfused (plain PyTorch on CUDA)
    cross_entropy_fusion: CrossEntropyFusion = "none"  # training.cross_entropy_fusion as written
    attention_backend: AttentionBackend = "auto"  # Megatron's --attention-backend (flash attention)
    repeat_kv: bool = False  # K/V repeated to every query head before the attention kernel
    fused_grouped_mlp: bool = False  # routed experts through TE's op fuser (Megatron-Core 0.18+)
    # training.cuda_graph: Megatron's --cuda-graph-impl (None: none) and --cuda-graph-modules
    cuda_graph_impl: CudaGraphImpl | None = None
    cuda_graph_modules: tuple[CudaGraphModuleName, ...] = ()
    framework: Framework = "megatron"  # megatron | deepspeed | fsdp2 (megatron-fsdp: megatron)
    framework_release: FrameworkRelease = "latest"  # the software release (per-expert host time)
    # what recompute selective recomputes (Megatron's --recompute-modules); () otherwise
    recompute_modules: tuple[RecomputeModule, ...] = ()
    # training.recompute_modules as written (None: not given), for a change of recompute mode
    recompute_modules_given: tuple[RecomputeModule, ...] | None = None
    reshard_after_forward: bool = True  # FSDP2
    reduce_dtype: ReduceDtype = "fp32"  # FSDP2: MixedPrecisionPolicy.reduce_dtype
    model_dtype: ReduceDtype = "fp32"  # FSDP2: the parameters' (and Adam state's) storage dtype
    optimizer_implementation: OptimizerImplementation = "fused"  # FSDP2: torch.optim's Adam
    offload_optimizer: bool = False
    offload_parameters: bool = False
    # the first N layers' saved activations in host memory (Megatron --cpu-offloading-num-layers)
    offload_activation_layers: int = 0
    expert_imbalance: float = 1.0  # dropless MoE: peak tokens per EP rank over the balanced T·k
    expert_routing: ExpertRouting = "uniform"  # how a token's experts are chosen (flex bytes)
    # precision fp8/fp4 (training.fp8): the recipe (None: 16/32-bit GEMMs), FP8-only weights
    # gathered in FP8, and the transformer layers kept in BF16 at each end of the model
    fp8_recipe: Fp8Recipe | None = None
    param_gather: bool = False
    first_last_bf16: int = 0
    moments_bf16: bool = False  # training.fp8.moments: bf16 (Megatron's precision-aware optimizer)
    # training.optimizer_state: the master weights' and Adam moments' formats (fp32: the default)
    master_format: MasterFormat = "fp32"
    moments_dtype: StateDtype | None = None  # None: training.optimizer_state.moments not given

    @property
    def moments_format(self) -> StateDtype:
        """Adam's moments' format: training.optimizer_state.moments, else bf16 where
        training.fp8.moments says so, else fp32 (PLC044 reports the two disagreeing)."""
        if self.moments_dtype is not None:
            return self.moments_dtype
        return "bf16" if self.moments_bf16 else "fp32"

    # training.fp8.attention: the attention core's FP8 recipe (TE fp8_dpa); None: 16-bit
    fp8_attention: Fp8Recipe | None = None
    # training.fp8.output_proj: the LM head in MXFP8 (Megatron-Core fp8_output_proj)
    fp8_output_proj: bool = False
    fp8_given: bool = False  # the spec has a training.fp8 section
    recipe_named: bool = False  # ... which names the recipe
    # training.framework megatron-fsdp: Megatron-LM (framework megatron) whose data parallelism
    # is Megatron-Core's FSDP, zero_stage its sharding strategy
    megatron_fsdp: bool = False
    # optimizer muon (training.muon): Megatron-Core's --muon-tp-mode, --muon-num-ns-steps and
    # --muon-split-qkv
    muon_tp_mode: MuonTpMode = "blockwise"
    muon_ns_steps: int = 5
    muon_split_qkv: bool = True
    muon_given: bool = False  # the spec has a training.muon section

    def with_recompute(self, mode: Recompute, **changes: Any) -> Training:
        """This training section with recompute `mode` (and `changes`): its modules those the
        spec wrote where `mode` is selective, else Megatron's default (`recompute_modules_of`)."""
        modules = recompute_modules_of(mode, self.recompute_modules_given)
        return replace(self, recompute=mode, recompute_modules=modules, **changes)

    @property
    def framework_written(self) -> Framework:
        """training.framework as the spec names it (megatron-fsdp, where `framework` is the
        engine planc models it as, megatron)."""
        return "megatron-fsdp" if self.megatron_fsdp else self.framework

    @property
    def tp_overlap_runs(self) -> bool:
        """Whether the framework overlaps the TP collectives as `overlap_tp` asks: Megatron and
        DeepSpeed as stated; torchtitan's form, async TP (compile.enable_async_tensor_parallel),
        is a torch.compile pass it refuses without compiling the model, so under fsdp2 only
        with `kernels: compiled` (PLC051 warns otherwise)."""
        return self.overlap_tp and (self.framework != "fsdp2" or self.kernels == "compiled")

    @property
    def loss_fusion(self) -> CrossEntropyFusion:
        """The LM loss's kernels that run: training.cross_entropy_fusion under Megatron-LM with
        its fused kernels (GPTModel.compute_language_model_loss reads the config), none
        elsewhere: DeepSpeed's Megatron models call Megatron's vocab_parallel_cross_entropy and
        torchtitan F.cross_entropy, eager, whatever the field says (PLC051 warns)."""
        if self.framework == "megatron" and self.kernels == "fused":
            return self.cross_entropy_fusion
        return "none"


@record
class Rules:
    """The spec's `rules` section: each rule option's value by name (every option of
    `planc.spec.rule_options`, defaults filled in; a rule reads its own through
    `Context.option`), the ignored rules and the severity overrides."""

    options: Mapping[str, float]
    ignore: tuple[str, ...]
    severity: Mapping[str, str]


# Llama 3 405B's run (Dubey et al. 2024, "The Llama 3 Herd of Models", §3.3.4): 419 unexpected
# interruptions in a 54-day snapshot on 16,384 H100 GPUs. Per-GPU MTBF = 16,384 × 54 × 24 h / 419
# = 50,677 GPU-hours (about 5.8 years), the per-GPU rate planc assumes when the spec gives none.
LLAMA3_GPUS = 16_384
LLAMA3_HOURS = 54 * 24
LLAMA3_INTERRUPTIONS = 419
DEFAULT_GPU_MTBF_HOURS = LLAMA3_GPUS * LLAMA3_HOURS / LLAMA3_INTERRUPTIONS
# Minutes from an interruption to training again, the checkpoint load aside (Daly 2006's worked
# example takes R = 10 min; planc's assumption when the spec gives none).
DEFAULT_RESTART_MINUTES = 10.0
# checkpoint.format auto: each framework's own saver.
NATIVE_FORMAT: Mapping[Framework, CheckpointFormat] = MappingProxyType(
    {
        "megatron": "megatron-dist",
        # validate_args: "Megatron-FSDP requires the `fsdp_dtensor` checkpointing format", which
        # megatron/training/checkpointing.py saves with torch.distributed.checkpoint (0.19.2)
        "megatron-fsdp": "torch-dcp",
        "deepspeed": "deepspeed-zero",
        "fsdp2": "torch-dcp",
    }
)
# Megatron-FSDP is Megatron-LM with another data-parallel wrapper: everything but the wrapper
# (schedules, context-parallel types, FP8, the rules) is Megatron's.
MEGATRON_FSDP: Framework = "megatron-fsdp"


def engine(framework: Framework) -> Framework:
    """The framework planc models a spec's training.framework as: Megatron-LM for
    megatron-fsdp, the framework itself otherwise."""
    return "megatron" if framework == MEGATRON_FSDP else framework


@record
class Storage:
    """hardware.storage, resolved: aggregate and per-node bandwidths in GB/s (None: no per-node
    bound)."""

    write_gbs: float
    node_write_gbs: float | None
    read_gbs: float
    node_read_gbs: float | None


@record
class RampPhase:
    """One phase of training.batch_ramp: global batch B_i (sequences) for D_i tokens."""

    B: int
    tokens: int


@record
class Checkpointing:
    """The spec's checkpoint section, resolved (format never auto)."""

    format: CheckpointFormat
    interval: int | None  # steps between saves; None: Daly's optimum
    async_save: bool
    fully_parallel: bool
    model_only_exports: int


@record
class Reliability:
    """Interruptions and restarts: the per-GPU MTBF and the restart time besides loading."""

    gpu_mtbf_hours: float
    restart_s: float
    given: bool = False  # the spec has a reliability section


@record
class Cost:
    """The spec's cost section: price per GPU-hour, power per GPU (W), PUE."""

    price_per_gpu_hour: float | None
    gpu_power_w: float | None
    pue: float


@record
class RunInputs:
    """What the whole run needs beyond one step: its length (tokens or steps, the batch ramp),
    checkpointing, storage, reliability and cost. `asked` says whether the spec wants a run
    estimate at all (without it every output stays as it was)."""

    tokens: int | None = None
    steps: int | None = None
    ramp: tuple[RampPhase, ...] = ()
    checkpoint: Checkpointing | None = None
    storage: Storage | None = None
    reliability: Reliability = Reliability(DEFAULT_GPU_MTBF_HOURS, DEFAULT_RESTART_MINUTES * 60)
    cost: Cost | None = None

    @property
    def asked(self) -> bool:
        return (
            self.tokens is not None
            or self.steps is not None
            or self.checkpoint is not None
            or self.cost is not None
            or self.reliability.given
        )


NO_RUN = RunInputs()


@record
class Job:
    name: str
    model: Model
    cluster: Cluster
    layout: Layout
    training: Training
    rules: Rules
    run: RunInputs = NO_RUN

    @property
    def world(self) -> int:
        return self.cluster.world

    @property
    def m(self) -> int | None:
        """Micro-batches per data-parallel rank per step: B / (b·d), when whole."""
        d = self.layout.d
        if d is None or self.training.B % (self.training.b * d):
            return None
        return self.training.B // (self.training.b * d)


def _given(section: Data) -> dict[str, Any]:
    return {key: value for key, value in section.items() if value is not None}


def _model(spec: Data) -> Model | list[Problem]:
    given = _given(spec["model"])
    preset = given.pop("preset", None)
    base: dict[str, Any] = model_preset(preset) if preset else {}
    merged = {**base, **given}
    missing = [name for name in ("layers", "hidden", "heads", "vocab") if name not in merged]
    if missing:
        return [
            Problem(
                "PLC109",
                f"model.{name}",
                f"model.{name} is required: no preset supplies it",
                f"add model.{name}, or choose a model preset",
            )
            for name in missing
        ]
    h, n = merged["hidden"], merged["heads"]
    mlp = merged.get("mlp", "gelu")
    default_f = 4 * h if mlp == "gelu" else (8 * h // 3) // 64 * 64
    f = merged.get("ffn_hidden", default_f)
    moe = _moe({**base.get("moe", {}), **_given(spec["model"].get("moe") or {})}, f)
    if isinstance(moe, list):
        return moe
    mla = _mla({**base.get("mla", {}), **_given(spec["model"].get("mla") or {})})
    if isinstance(mla, list):
        return mla
    return Model(
        L=merged["layers"],
        h=h,
        n=n,
        # MLA up-projects a key and a value per query head: n key/value heads.
        g=merged.get("kv_heads", n),
        k=merged.get("head_dim", _head_dim(h, n, mla)),
        f=f,
        V=merged["vocab"],
        mlp=mlp,
        norm=merged.get("norm", "layernorm"),
        bias=merged.get("bias", False),
        dropout=float(merged.get("dropout", 0.0)),
        tied=merged.get("tied_embeddings", False),
        position=merged.get("position_embedding", "rope"),
        max_seq_len=merged.get("max_seq_len", spec["training"]["seq_len"]),
        preset=preset,
        qk_norm=merged.get("qk_norm", False),
        moe=moe,
        mla=mla,
        mtp=merged.get("mtp_layers", 0),
        rope_theta=float(merged.get("rope_theta", 10000.0)),
        rope_scaling=_rope_scaling(
            {**base.get("rope_scaling", {}), **_given(spec["model"].get("rope_scaling") or {})}
        ),
        window=merged.get("sliding_window") or 0,
        full_every=merged.get("full_attention_every") or 0,
        sinks=merged.get("attention_sinks") or False,
        glu_clamp=float(merged.get("glu_clamp") or 0.0),
        glu_linear_offset=float(merged.get("glu_linear_offset") or 0.0),
    )


# Megatron's context length of the unscaled frequencies, per scaling (MLATransformerConfig
# original_max_position_embeddings 4096; RotaryEmbedding._apply_scaling 8192).
_ROPE_ORIGINAL = {"yarn": 4096, "llama3": 8192}


def _rope_scaling(values: Mapping[str, Any]) -> RopeScaling | None:
    """model.rope_scaling over the preset's, resolved (a field left null takes its default)."""
    if not values:
        return None
    kind = values["type"]
    floats = (
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
        "low_freq_factor",
        "high_freq_factor",
    )
    return RopeScaling(
        kind=kind,
        factor=float(values["factor"]),
        original=values.get("original_max_position_embeddings", _ROPE_ORIGINAL[kind]),
        **{name: float(values[name]) for name in floats if name in values},
    )


def preset_model(name: str, seq_len: int) -> Model | None:
    """The model preset `name` resolved with nothing written beside it (what a framework's own
    config of that preset describes); None when it does not resolve."""
    model = _model({"model": {"preset": name}, "training": {"seq_len": seq_len}})
    return None if isinstance(model, list) else model


def matching_preset(model: Model, seq_len: int) -> str | None:
    """The model preset `model` is: the one the spec names, else the one whose resolved model it
    equals field for field (a Hugging Face config.json of that model reads so); None for any
    other model."""
    if model.preset is not None:
        return model.preset
    for name in MODEL_NAMES:
        if preset_model(name, seq_len) == replace(model, preset=name):
            return name
    return None


def _head_dim(h: int, n: int, mla: MLA | None) -> int:
    """k when the spec gives no head_dim: d_h + d_h^R under latent attention (the width of
    each head's query and key), else h/n (0 when n does not divide h: PLC012)."""
    if mla is not None:
        return mla.qk_head
    return h // n if h % n == 0 else 0


def _mla(given: Mapping[str, Any]) -> MLA | list[Problem] | None:
    """model.mla over the preset's, resolved; None without latent attention. Defaults are
    Hugging Face DeepseekV3Config's and Megatron's (d_h 128, d_h^R 64, v_head_dim 128)."""
    if not given:
        return None
    if "kv_lora_rank" not in given:
        return [
            Problem(
                "PLC109",
                "model.mla.kv_lora_rank",
                "model.mla.kv_lora_rank is required: no preset supplies it",
                "add model.mla.kv_lora_rank (DeepSeek-V2 and V3: 512)",
            )
        ]
    return MLA(
        q_lora=given.get("q_lora_rank"),
        kv_lora=given["kv_lora_rank"],
        qk_nope=given.get("qk_nope_head_dim", 128),
        qk_rope=given.get("qk_rope_head_dim", 64),
        v_head=given.get("v_head_dim", 128),
    )


def _moe(given: Mapping[str, Any], f: int) -> MoE | list[Problem] | None:
    """model.moe over the preset's, resolved; None for a dense model (neither gives experts)."""
    if not given:
        return None
    missing = [name for name in ("experts", "top_k") if name not in given]
    if missing:
        return [
            Problem(
                "PLC109",
                f"model.moe.{name}",
                f"model.moe.{name} is required: no preset supplies it",
                f"add model.moe.{name}",
            )
            for name in missing
        ]
    routing = _routing_problems(given)
    if given.get("router_bias") and given.get("router_score") == "softmax":
        routing.append(
            Problem(
                "PLC110",
                "model.moe.router_score",
                "model.moe.router_bias balances the experts with a bias on sigmoid scores "
                "(DeepSeek-V3's auxiliary-loss-free balancing); softmax scores have none "
                "(Megatron-Core's TransformerConfig refuses the pair)",
                "set model.moe.router_score: sigmoid, or router_bias: false",
            )
        )
    if routing:
        return routing
    f_e = given.get("expert_ffn_hidden", f)
    frequency, offset = given.get("layer_frequency", 1), given.get("layer_offset", 0)
    if offset >= frequency:
        return [
            Problem(
                "PLC110",
                "model.moe.layer_offset",
                f"model.moe.layer_offset {offset} is not below layer_frequency {frequency}: "
                f"layer i has experts when i % {frequency} == layer_offset, which no layer meets",
                f"give a layer_offset from 0 to {frequency - 1}",
            )
        ]
    return MoE(
        E=given["experts"],
        k=given["top_k"],
        f_e=f_e,
        E_s=given.get("shared_experts", 0),
        f_s=given.get("shared_expert_ffn_hidden", f_e),
        first_dense=given.get("first_dense_layers", 0),
        frequency=frequency,
        capacity_factor=given.get("capacity_factor"),
        router_bias=given.get("router_bias", False),
        offset=offset,
        groups=given.get("router_groups"),
        group_k=given.get("router_group_top_k"),
        scaling=given.get("router_scaling_factor"),
        score=given.get("router_score", "sigmoid" if given.get("router_bias") else "softmax"),
        normalize=given.get("router_normalize", True),
        pad_to_capacity=given.get("pad_to_capacity", False),
    )


def _routing_problems(given: Mapping[str, Any]) -> list[Problem]:
    """Group-limited routing that no router runs: E experts in G equal groups, the top k from
    k_G of them, each group scored by its top k/k_G experts, so a group holds at least that
    many (Megatron's group_limited_topk, megatron-core 0.19.2 moe_utils.py; TransformerConfig
    asserts E % G == 0 and k_G ≤ G; DeepSeek-V3: 256 in 8 groups, top 8 from 4 groups, 2
    each). Both fields or neither."""
    groups, group_k = given.get("router_groups"), given.get("router_group_top_k")
    if groups is None and group_k is None:
        return []
    field = "model.moe.router_groups" if groups is None else "model.moe.router_group_top_k"
    if groups is None or group_k is None:
        return [
            Problem(
                "PLC110",
                field,
                "group-limited routing needs both model.moe.router_groups and "
                "router_group_top_k",
                "give both (DeepSeek-V3: 8 and 4), or neither",
            )
        ]
    E, k = given["experts"], given["top_k"]
    reasons = [
        *([f"router_groups {groups} does not divide experts {E}"] if E % groups else []),
        *([f"router_group_top_k {group_k} is above router_groups {groups}"] if group_k > groups else []),
        *([f"router_group_top_k {group_k} does not divide top_k {k}"] if k % group_k else []),
        # group_limited_topk scores each group by its top k/k_G experts (torch.topk over the
        # group's E/G), which fails when a group has fewer.
        *(
            [f"each of the router_group_top_k {group_k} groups gives top_k/router_group_top_k "
             f"= {k // group_k} experts, but a group holds only {E // groups}"]
            if not E % groups and not k % group_k and k // group_k > E // groups
            else []
        ),
    ]
    if not reasons:
        return []
    return [
        Problem(
            "PLC110",
            "model.moe.router_groups",
            "group-limited routing cannot run: " + "; ".join(reasons),
            "give groups that divide experts and a router_group_top_k that divides top_k "
            "(DeepSeek-V3: 256 experts, 8 groups, top_k 8 from 4 groups)",
        )
    ]


def _link(*layers: Data | None) -> LinkSpeed | None:
    """The first-to-last merge of link settings (preset, custom GPU, hardware section)."""
    values: dict[str, Any] = {}
    for layer in layers:
        values.update(_given(layer or {}))
    if "bandwidth_gbs" not in values:
        return None
    return LinkSpeed(float(values["bandwidth_gbs"]), float(values.get("latency_us", 0.0)))


def default_fabric(nvlink_domain: int, world: int, intra: LinkSpeed, inter: LinkSpeed) -> Fabric:
    """The fabric of today's hardware fields: tier `nvlink`, the NVLink domain (D GPUs) on
    hardware.intra_node's link, and tier `network`, the whole world on hardware.inter_node's;
    each priced by the efficiency entry of the same name."""
    return Fabric(
        (
            Tier(
                name="nvlink",
                span=nvlink_domain,
                bandwidth_gbs=intra.bandwidth_gbs,
                latency_us=intra.latency_us,
                efficiency="nvlink",
                label="NVLink",
                field="hardware.intra_node",
            ),
            Tier(
                name="network",
                span=world,
                bandwidth_gbs=inter.bandwidth_gbs,
                latency_us=inter.latency_us,
                efficiency="network",
                label="network",
                field="hardware.inter_node",
            ),
        )
    )


def spec_fabric(
    given: str | Sequence[Data] | None,
    pxn: bool,
    nvlink: LinkSpeed,
    inter: LinkSpeed,
    shape: tuple[int, int, int],
) -> Fabric | list[Problem]:
    """The fabric of hardware.fabric (a preset's name or the tiers above the NVLink domain,
    innermost first) on `shape` = (nodes, GPUs per node, NVLink domain in GPUs): the NVLink
    domain first, then each tier in turn up to the first whose block of `nodes` holds every
    node, which joins the world. A tier's bandwidth and latency default to hardware.inter_node's
    and it is priced by the `network` efficiency entry. None: `default_fabric`.

    Each tier's block must be a whole number of the block below (nodes the leaf joins in a
    spine block) unless it holds the world (16,384 GPUs under Llama 3's 1:7 aggregation layer
    over pods of 3,072); the last tier listed must hold every node."""
    nodes, per_node, domain = shape
    world = nodes * per_node
    if given is None:
        return default_fabric(domain, world, nvlink, inter)
    field = "hardware.fabric"
    listed = fabric_preset(given)["tiers"] if isinstance(given, str) else given
    inner = Tier(
        name="nvlink",
        span=domain,
        bandwidth_gbs=nvlink.bandwidth_gbs,
        latency_us=nvlink.latency_us,
        efficiency="nvlink",
        label="NVLink",
        field="hardware.intra_node",
    )
    tiers, problems = [inner], []
    for index, raw in enumerate(listed):
        at = field if isinstance(given, str) else f"{field}[{index}]"
        last = index == len(listed) - 1
        span = world if raw.get("nodes") is None else raw["nodes"] * per_node
        problem = _tier_problem(raw, at, (span, world, tiers[-1], last), {t.name for t in tiers})
        if problem is not None:
            problems.append(problem)
            continue
        tiers.append(
            Tier(
                name=raw["name"],
                span=min(span, world),
                bandwidth_gbs=float(raw.get("bandwidth_gbs") or inter.bandwidth_gbs),
                latency_us=float(
                    inter.latency_us if raw.get("latency_us") is None else raw["latency_us"]
                ),
                efficiency="network",
                oversubscription=float(raw.get("oversubscription", 1.0)),
                label=raw.get("label") or raw["name"],
                field=at,
                rail_aligned=bool(raw.get("rail_aligned", False)),
            )
        )
        if span >= world:
            break
    if problems:
        return problems
    return Fabric(tuple(tiers), pxn=pxn)


def _tier_problem(
    raw: Data, at: str, where: tuple[int, int, Tier, bool], names: set[str]
) -> Problem | None:
    """Why tier `raw` (span in GPUs, the world, the tier below, whether it is listed last)
    cannot follow the tier below, or None."""
    span, world, below, last = where
    name = raw["name"]
    if name in names:
        return Problem(
            "PLC110", f"{at}.name", f"{at}: a second tier called {name}", "give each tier its own name"
        )
    if raw.get("nodes") is None and not last:
        return Problem(
            "PLC109",
            f"{at}.nodes",
            f"{at} ({name}) gives no nodes: only the last tier may leave it out (it joins every node)",
            "give the nodes one block of the tier joins",
        )
    if span < world and last:
        return Problem(
            "PLC110",
            f"{at}.nodes",
            f"{at} ({name}), the last tier, joins {span:,} GPUs, fewer than the world of {world:,}: "
            "no tier joins every node",
            "leave out the last tier's nodes (it then joins every node), or add a tier above it",
        )
    if span < world and (span < below.span or span % below.span):
        return Problem(
            "PLC110",
            f"{at}.nodes",
            f"{at} ({name}) joins {span:,} GPUs, not a whole number of the {below.shown} "
            f"tier's blocks of {below.span:,}",
            f"make its nodes a multiple of {below.shown}'s block",
        )
    return None


def preset_gpu(name: str) -> Gpu:
    """The GPU a spec naming preset `name` gets (planc/presets/gpus.json); KeyError for a name
    that is not a preset."""
    found = _gpu({"hardware": {"gpu": name}})
    if isinstance(found, list):  # a preset without its memory: gpus.json is broken
        raise ValueError(f"GPU preset {name}: {found[0].message}")
    return found[0]


def _gpu(spec: Data) -> tuple[Gpu, dict[str, Any]] | list[Problem]:
    gpu = spec["hardware"]["gpu"]
    if isinstance(gpu, Mapping):
        raw: dict[str, Any] = _given(gpu)
        name, source = raw.get("name", "custom"), "custom GPU in the spec"
    else:
        raw = gpu_preset(gpu)
        name, source = gpu, raw["source"]
    if "memory_gib" in raw:
        memory = round(raw["memory_gib"] * GIB)
    elif "memory_gb" in raw:
        memory = round(raw["memory_gb"] * GB)
    else:
        return [
            Problem(
                "PLC109",
                "hardware.gpu",
                "the GPU's memory is required: give hardware.gpu.memory_gb or memory_gib",
                "add memory_gb: 80 (for example) to hardware.gpu",
            )
        ]
    bandwidth = float(raw.get("memory_bandwidth_gbs", 0.0))
    return Gpu(name, memory, _peaks(raw), bandwidth, source), raw


def _peaks(raw: Mapping[str, Any]) -> Mapping[DType, float]:
    """Dense TFLOPS by data type from a preset's or custom GPU's `<dtype>_tflops` keys; fp16
    defaults to bf16 (the same tensor-core rate on every GPU planc knows)."""
    given = {dtype: raw.get(f"{dtype.value}_tflops") for dtype in DType}
    given[DType.FP16] = given[DType.FP16] or given[DType.BF16]
    return MappingProxyType({d: float(v) for d, v in given.items() if v is not None})


# One {first..last} range of ASCII digits (`\d` would also take other scripts' digits). Its
# numbers are capped in length before int(): Python refuses to convert more than 4,300 digits,
# and no node number needs more than 18.
_RANGE = re.compile(r"\{([0-9]+)\.\.([0-9]+)\}")
_MAX_RANGE_DIGITS = 18


def expand_hosts(pattern: str) -> list[str]:
    """`gpu-{000..063}` -> gpu-000 ... gpu-063 (zero padding kept); a name without a range is
    itself. Raises ValueError saying what is wrong with the pattern."""
    found = _RANGE.findall(pattern)
    if len(found) > 1:
        raise ValueError(f"it has {len(found)} {{first..last}} ranges; planc expands one")
    if not found:
        return [pattern]
    low_text, high_text = found[0]
    longest = max(len(low_text), len(high_text))
    if longest > _MAX_RANGE_DIGITS:
        raise ValueError(
            f"a range bound has {longest:,} digits; planc reads at most {_MAX_RANGE_DIGITS}"
        )
    low, high = int(low_text), int(high_text)
    if high < low:
        raise ValueError(f"the range runs backwards ({low} > {high})")
    if high - low >= MAX_NODES:
        raise ValueError(f"the range names {high - low + 1:,} hosts, more than {MAX_NODES:,}")
    width = len(low_text) if low_text.startswith("0") else 0
    head, tail = _RANGE.split(pattern, maxsplit=1)[0], _RANGE.split(pattern, maxsplit=1)[-1]
    return [f"{head}{i:0{width}d}{tail}" for i in range(low, high + 1)]


def _shown(text: str, limit: int = 60) -> str:
    """`text` for a message: repr, cut to `limit` characters."""
    return repr(text) if len(text) <= limit else repr(text[: limit - 3]) + "..."


def _hosts(spec: Data) -> Sequence[str] | list[Problem]:
    hosts = spec["hardware"]["hosts"]
    nodes = spec["hardware"]["nodes"]
    if isinstance(hosts, str):
        try:
            return tuple(expand_hosts(hosts))
        except ValueError as error:
            return [
                Problem(
                    "PLC110",
                    "hardware.hosts",
                    f"the host pattern {_shown(hosts)} is not a name with one {{first..last}} "
                    f"range: {error}",
                    "write it like gpu-{000..063}",
                )
            ]
    if not hosts:
        return NodeNames(nodes)
    return tuple(hosts)


def _cluster(spec: Data) -> Cluster | list[Problem]:
    gpu_result = _gpu(spec)
    if isinstance(gpu_result, list):
        return gpu_result
    gpu, raw = gpu_result
    hw = spec["hardware"]
    custom = hw["gpu"] if isinstance(hw["gpu"], Mapping) else {}
    intra = _link(raw.get("intra_node"), custom.get("intra_node"), hw["intra_node"])
    inter = _link(raw.get("inter_node"), custom.get("inter_node"), hw["inter_node"])
    problems = [
        Problem(
            "PLC109",
            f"hardware.{name}.bandwidth_gbs",
            f"hardware.{name}.bandwidth_gbs is required: the custom GPU gives none",
            f"add hardware.{name}: {{bandwidth_gbs: ..., latency_us: ...}}",
        )
        for name, link in (("intra_node", intra), ("inter_node", inter))
        if link is None
    ]
    hosts = _hosts(spec)
    if isinstance(hosts, list):
        problems += hosts
    if problems or intra is None or inter is None or isinstance(hosts, list):
        return problems
    gpus_per_node = hw["gpus_per_node"] or raw.get("gpus_per_node") or 8
    host_memory_gb = hw.get("host_memory_gb") or raw.get("host_memory_gb") or 0.0
    domain = hw["nvlink_domain"] or raw.get("nvlink_domain") or gpus_per_node
    shape = (hw["nodes"], gpus_per_node, domain)
    if hw.get("fabric") is not None and hw.get("topology") is not None:
        return [
            Problem(
                "PLC110",
                "hardware.topology",
                "hardware.fabric and hardware.topology both describe the tiers: give one",
                "keep hardware.topology for the scheduler's switches, or hardware.fabric for "
                "bandwidths, oversubscription and rails",
            )
        ]
    fabric = spec_fabric(hw.get("fabric"), bool(hw.get("pxn", False)), intra, inter, shape)
    if isinstance(fabric, list):
        return fabric
    return Cluster(
        gpu=gpu,
        nodes=hw["nodes"],
        gpus_per_node=gpus_per_node,
        nvlink_domain=domain,
        fabric=fabric,
        hosts=hosts,
        reserve_bytes=round(hw["reserve_gib"] * GIB),
        host_memory_bytes=round(host_memory_gb * GB),
        host_bandwidth_gbs=float(raw.get("host_bandwidth_gbs") or DEFAULT_HOST_BANDWIDTH_GBS),
    )


# Megatron-Core's default rank order (parallel_state.py initialize_model_parallel, order
# "tp-cp-ep-dp-pp", which megatron/training/initialize.py passes; megatron-core 0.19.2), and the
# same order without ep: with expert = 1 the ep axis has size 1 and the orders are one grid.
EXPERT_ORDER = "tp-cp-ep-dp-pp"
DENSE_ORDER = "tp-cp-dp-pp"


# The frameworks that keep each expert whole on its expert-parallel rank, whose default
# expert_tensor is therefore 1 (Megatron's is tensor): DeepSpeed's AutoEP refuses
# expert_tensor_parallel_size > 1 (deepspeed/module_inject/auto_ep_folding.py, DeepSpeed
# 0.19.6) and torchtitan 0.3.0 has no expert tensor parallelism.
WHOLE_EXPERTS = frozenset({"deepspeed", "fsdp2"})


def resolved_order(parallelism: Mapping[str, Any]) -> str:
    """parallelism.order as written, else Megatron-Core's default: tp-cp-ep-dp-pp when the
    experts are split (expert > 1), so that RankGenerator places ep, and tp-cp-dp-pp otherwise
    (the dense groups are the same under both)."""
    written = parallelism.get("order")
    if written is not None:
        return str(written)
    return EXPERT_ORDER if (parallelism.get("expert") or 1) > 1 else DENSE_ORDER


def _layout(spec: Data, world: int) -> Layout:
    par = spec["parallelism"]
    order = resolved_order(par)
    inner = par["tensor"] * par["pipeline"] * par["context"]
    derived = world // inner if world % inner == 0 else None
    return Layout(
        t=par["tensor"],
        p=par["pipeline"],
        d=par["data"] if par["data"] is not None else derived,
        c=par["context"],
        v=par["virtual_stages"],
        stage_layers=tuple(par["stage_layers"]),
        sp=par["sequence_parallel"],
        zero=par["zero_stage"],
        order=tuple(axis for axis in order.split("-") if axis != "ep"),
        d_given=par["data"] is not None,
        data_shard=par.get("data_shard"),
        ep=par.get("expert", 1),
        etp=par.get("expert_tensor"),
        expert_order=tuple(order.split("-")),
        named_schedule=_schedule(par.get("pipeline_schedule")),
        pipeline_layout=par.get("pipeline_layout"),
        embedding_in_split=par.get("embedding_in_pipeline_split", False),
        loss_in_split=par.get("loss_in_pipeline_split", False),
        cp_comm=par.get("cp_comm_type") or default_cp_comm(spec["training"]["framework"]),
        named_dispatcher=par.get("expert_dispatcher"),
        dispatcher_sms=par.get("dispatcher_sms"),
    )


def default_cp_comm(framework: str) -> CpCommType:
    """The context-parallel type a framework runs when the spec names none: Megatron's
    --cp-comm-type default p2p, torchtitan's ring attention (p2p), DeepSpeed's Ulysses
    (deepspeed.sequence.layer.DistributedAttention: a2a, the only type it has)."""
    return "a2a" if framework == "deepspeed" else "p2p"


def default_dispatcher(framework: str, schedule: ScheduleKind) -> ExpertDispatcher:
    """The expert dispatcher a framework runs when the spec names none: Megatron-Core 0.19.2's
    `moe_token_dispatcher_type` default 'allgather' (TransformerConfig, and the
    --moe-token-dispatcher-type flag megatron/training/arguments.py builds from it) under
    megatron and megatron-fsdp, but alltoall with the combined-1f1b schedule, whose
    --overlap-moe-expert-parallel-comm TransformerConfig refuses with allgather ('supported with
    alltoall/flex token dispatcher'); DeepSpeed MoE's all-to-all (deepspeed/moe/sharded_moe.py
    _AllToAll, its only one); torchtitan's 'standard' all-to-all (models/common/config_utils.py
    make_token_dispatcher_config, the models' moe_comm_backend default)."""
    if framework in ("deepspeed", "fsdp2") or schedule is ScheduleKind.COMBINED_1F1B:
        return "alltoall"
    return "allgather"


def dispatcher_of(job: Job) -> ExpertDispatcher:
    """The expert dispatcher `job` runs: parallelism.expert_dispatcher, or the framework's
    (`default_dispatcher`) for its schedule."""
    lay = job.layout
    return lay.named_dispatcher or default_dispatcher(job.training.framework, lay.schedule)


def _given_modules(given: list[RecomputeModule] | None) -> tuple[RecomputeModule, ...] | None:
    return None if given is None else tuple(given)


def recompute_modules_of(
    recompute: Recompute, given: Sequence[RecomputeModule] | None
) -> tuple[RecomputeModule, ...]:
    """The modules selective recompute checkpoints: training.recompute_modules as written (each
    once, in order), else Megatron-Core's default core_attn; none unless recompute is selective
    (PLC051 reports a list given with another mode)."""
    if recompute != "selective":
        return ()
    if given is None:
        return DEFAULT_RECOMPUTE_MODULES
    return tuple(dict.fromkeys(given))


def _grad_accum_fusion(given: bool | None, framework: Framework) -> bool:
    """training.grad_accum_fusion as written, else the framework's own: Megatron-LM fuses the
    accumulation into the weight-gradient GEMM by default (`--no-gradient-accumulation-fusion`
    turns it off), Megatron-FSDP's too (it is Megatron-LM's argument); DeepSpeed's engines and
    FSDP2 have no such fusion."""
    return given if given is not None else engine(framework) == "megatron"


def _schedule(name: str | None) -> ScheduleKind | None:
    return None if name is None else ScheduleKind(name)


def _training(spec: Data) -> Training:
    tr = spec["training"]
    fp8 = tr.get("fp8") or {}
    muon = tr.get("muon") or {}
    written = tr.get("framework", "megatron")
    recipe = low_precision_recipe(tr["precision"], fp8, written)
    return Training(
        s=tr["seq_len"],
        b=tr["micro_batch"],
        B=tr["global_batch"],
        precision=tr["precision"],
        optimizer=tr["optimizer"],
        grad_accum_fp32=tr["grad_accum_fp32"],
        recompute=tr["recompute"],
        attention=tr["attention"],
        efficiency=None if tr["efficiency"] is None else float(tr["efficiency"]),
        overlap_tp=tr["overlap_tp"],
        async_tp_allreduce=tr.get("async_tp_allreduce", True),
        grad_accum_fusion=_grad_accum_fusion(tr.get("grad_accum_fusion"), written),
        overlap_grad_reduce=tr.get("overlap_grad_reduce", True),
        overlap_param_gather=tr.get("overlap_param_gather", True),
        overlap_p2p_comm=tr.get("overlap_p2p_comm", True),
        defer_embedding_wgrad=tr.get("defer_embedding_wgrad_compute", False),
        wgrad_deferral_limit=tr.get("wgrad_deferral_limit", 0),
        kernels=tr.get("kernels", "fused"),
        cross_entropy_fusion=tr.get("cross_entropy_fusion", "none"),
        attention_backend=tr.get("attention_backend", "auto"),
        repeat_kv=tr.get("repeat_kv", False),
        fused_grouped_mlp=tr.get("fused_grouped_mlp", False),
        cuda_graph_impl=(tr.get("cuda_graph") or {}).get("impl"),
        cuda_graph_modules=tuple((tr.get("cuda_graph") or {}).get("modules", ())),
        framework=engine(written),
        framework_release=tr.get("framework_release", "latest"),
        recompute_modules=recompute_modules_of(tr["recompute"], tr.get("recompute_modules")),
        recompute_modules_given=_given_modules(tr.get("recompute_modules")),
        megatron_fsdp=written == MEGATRON_FSDP,
        muon_tp_mode=muon.get("tp_mode", "blockwise"),
        muon_ns_steps=int(muon.get("ns_steps", 5)),
        muon_split_qkv=bool(muon.get("split_qkv", True)),
        muon_given="muon" in tr and tr["muon"] is not None,
        reshard_after_forward=tr.get("reshard_after_forward", True),
        reduce_dtype=tr.get("reduce_dtype", "fp32"),
        model_dtype=tr.get("model_dtype", "fp32"),
        optimizer_implementation=tr.get("optimizer_implementation", "fused"),
        offload_optimizer=tr.get("offload", {}).get("optimizer", False),
        offload_parameters=tr.get("offload", {}).get("parameters", False),
        offload_activation_layers=tr.get("offload", {}).get("activations", 0),
        expert_imbalance=float(tr.get("expert_imbalance", 1.0)),
        expert_routing=tr.get("expert_routing", "uniform"),
        fp8_recipe=recipe,
        param_gather=recipe is not None and bool(fp8.get("param_gather", False)),
        first_last_bf16=int(fp8.get("first_last_bf16", 0)) if recipe is not None else 0,
        moments_bf16=recipe is not None and fp8.get("moments", "fp32") == "bf16",
        master_format=(tr.get("optimizer_state") or {}).get("master", "fp32"),
        moments_dtype=(tr.get("optimizer_state") or {}).get("moments"),
        fp8_attention=Fp8Recipe(fp8["attention"])
        if recipe is not None and fp8.get("attention") is not None
        else None,
        fp8_output_proj=recipe is not None and bool(fp8.get("output_proj", False)),
        fp8_given=tr.get("fp8") is not None,
        recipe_named=fp8.get("recipe") is not None,
    )


def low_precision_recipe(precision: str, fp8: Data, framework: str) -> Fp8Recipe | None:
    """The low-precision recipe: the one training.fp8 names, else the framework's default:
    Megatron's (delayed for fp8, `--fp8-recipe` default; nvfp4 for fp4, `--fp4-recipe` default)
    under megatron and deepspeed (Transformer Engine), torchtitan's under fsdp2 (rowwise, the
    default recipe_name of its Float8LinearConverter, torchtitan 0.3.0
    components/quantization/float8.py); None for a 16- or 32-bit precision (PLC044 reports a
    training.fp8 given with one)."""
    if precision not in ("fp8", "fp4"):
        return None
    named = fp8.get("recipe")
    if named is not None:
        return Fp8Recipe(named)
    if precision == "fp4":
        return Fp8Recipe.NVFP4
    return Fp8Recipe.ROWWISE if framework == "fsdp2" else Fp8Recipe.DELAYED


def _rules(spec: Data) -> Rules:
    ru = spec["rules"]
    return Rules(
        options=MappingProxyType(
            {o.name: o.value_type(ru[o.name]) for o in RULE_OPTIONS}
        ),
        ignore=tuple(ru["ignore"]),
        severity=MappingProxyType(dict(ru["severity"])),
    )


def _storage(spec: Data) -> Storage | None:
    given = spec["hardware"].get("storage")
    if not given:
        return None
    write, node_write = float(given["write_gbs"]), given.get("node_write_gbs")
    read, node_read = given.get("read_gbs"), given.get("node_read_gbs")
    return Storage(
        write_gbs=write,
        node_write_gbs=None if node_write is None else float(node_write),
        read_gbs=write if read is None else float(read),
        node_read_gbs=(None if node_write is None else float(node_write))
        if node_read is None
        else float(node_read),
    )


def _run_length(tr: Data) -> tuple[int | None, int | None, tuple[RampPhase, ...]] | list[Problem]:
    """training.tokens, steps and batch_ramp, checked against each other."""
    tokens, steps = tr.get("tokens"), tr.get("steps")
    ramp = tuple(RampPhase(p["global_batch"], p["tokens"]) for p in tr.get("batch_ramp") or ())
    if tokens is not None and steps is not None:
        return [Problem("PLC110", "training.steps", "training.tokens and training.steps are "
                        "both given: the run has one length", "keep one of the two")]
    if ramp and tokens is None:
        return [Problem("PLC110", "training.batch_ramp", "training.batch_ramp needs "
                        "training.tokens: the ramp's phases are counted in tokens",
                        "give training.tokens, the whole run's tokens, ramp included")]
    ramped = sum(phase.tokens for phase in ramp)
    if tokens is not None and ramped >= tokens:
        return [Problem("PLC110", "training.batch_ramp", f"the batch ramp runs {ramped:,} "
                        f"tokens, not below training.tokens {tokens:,}: nothing is left for "
                        "global_batch", "raise training.tokens or shorten the ramp")]
    return tokens, steps, ramp


def _checkpointing(spec: Data, framework: Framework) -> Checkpointing | list[Problem] | None:
    given = spec.get("checkpoint")
    if not given:
        return None
    native = NATIVE_FORMAT[framework]
    fmt = native if given["format"] == "auto" else given["format"]
    problems = []
    if fmt != native:
        problems.append(Problem("PLC110", "checkpoint.format", f"checkpoint.format {fmt} is "
                                f"not what training.framework {framework} saves ({native})",
                                f"write format: {native}, or auto"))
    if not spec["hardware"].get("storage"):
        problems.append(Problem("PLC109", "hardware.storage", "checkpoint: needs "
                                "hardware.storage: planc prices a save by its bandwidth",
                                "add hardware.storage: {write_gbs: ..., node_write_gbs: ...}"))
    if problems:
        return problems
    interval = given["interval"]
    return Checkpointing(
        format=fmt,
        interval=None if interval == "optimal" else interval,
        async_save=given["async_save"],
        fully_parallel=given["fully_parallel_save"],
        model_only_exports=given["model_only_exports"],
    )


def _reliability(spec: Data) -> Reliability | list[Problem]:
    given = spec.get("reliability")
    if not given:
        return NO_RUN.reliability
    mtbf, rate = given.get("gpu_mtbf_hours"), given.get("interruptions_per_gpu_day")
    if mtbf is not None and rate is not None:
        return [Problem("PLC110", "reliability.interruptions_per_gpu_day", "reliability gives "
                        "both gpu_mtbf_hours and interruptions_per_gpu_day: one rate",
                        "keep one of the two")]
    hours = DEFAULT_GPU_MTBF_HOURS if mtbf is None and rate is None else (
        float(mtbf) if mtbf is not None else 24.0 / float(rate)
    )
    return Reliability(hours, float(given["restart_minutes"]) * 60, given=True)


def _cost(spec: Data) -> Cost | None:
    given = spec.get("cost")
    if not given:
        return None
    price, power = given.get("price_per_gpu_hour"), given.get("gpu_power_w")
    return Cost(
        price_per_gpu_hour=None if price is None else float(price),
        gpu_power_w=None if power is None else float(power),
        pue=float(given["pue"]),
    )


def _run(spec: Data, framework: Framework) -> RunInputs | list[Problem]:
    """The run beyond one step (`RunInputs`), or what is inconsistent in it."""
    length = _run_length(spec["training"])
    checkpoint = _checkpointing(spec, framework)
    reliability = _reliability(spec)
    problems = [
        *(length if isinstance(length, list) else []),
        *(checkpoint if isinstance(checkpoint, list) else []),
        *(reliability if isinstance(reliability, list) else []),
    ]
    if problems or isinstance(length, list) or isinstance(checkpoint, list) or isinstance(
        reliability, list
    ):
        return problems
    tokens, steps, ramp = length
    return RunInputs(tokens, steps, ramp, checkpoint, _storage(spec), reliability, _cost(spec))


def _missing_peak(gpu: Gpu, precision: str, preset: bool) -> Problem:
    """PLC109: the GPU gives no peak for the precision's data type. A preset without one has
    no tensor cores for it (the A100 has no FP8 or FP4); a custom GPU may name its peak."""
    if preset:
        low = precision in ("fp8", "fp4")
        return Problem(
            "PLC109",
            "training.precision",
            f"precision {precision} needs {precision} tensor cores: the {gpu.name} preset gives "
            f"no {precision} peak (its datasheet lists none)",
            "train in bf16 on this GPU, or choose a GPU with FP8 (H100, H200, B200, MI300X) or "
            "FP4 (B200, GB200) tensor cores"
            if low
            else f"choose another precision or GPU: the {gpu.name} gives no {precision} peak",
        )
    return Problem(
        "PLC109",
        "hardware.gpu",
        f"precision {precision} needs the GPU's {precision} peak: the custom GPU gives none",
        f"add {precision}_tflops to hardware.gpu (an H100 SXM has 67 for fp32)",
    )


def resolve(spec: Data) -> Job | list[Problem]:
    """Merge presets and defaults into a `Job`, or say what is missing.

    `spec` is a validated spec as plain data with every default filled in: `Spec.model_dump()`,
    or the fast path's output (`planc.spec.fastcheck`), which a property test keeps identical.
    """
    model = _model(spec)
    cluster = _cluster(spec)
    problems = [
        *(model if isinstance(model, list) else []),
        *(cluster if isinstance(cluster, list) else []),
    ]
    if problems or isinstance(model, list) or isinstance(cluster, list):
        return problems
    training = _training(spec)
    if cluster.gpu.peak_tflops(DType(training.precision)) is None:
        return [_missing_peak(cluster.gpu, training.precision, isinstance(spec["hardware"]["gpu"], str))]
    run = _run(spec, spec["training"]["framework"])
    if isinstance(run, list):
        return run
    layout = _layout(spec, cluster.world)
    if model.moe is not None and layout.etp is None and training.framework in WHOLE_EXPERTS:
        layout = replace(layout, etp=1)
    return Job(spec["name"], model, cluster, layout, training, _rules(spec), run)
