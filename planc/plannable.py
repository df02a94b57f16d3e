"""The plannable job: a checked job with every degree, count and layer range decided.

`plannable(job)` is the one place that decides whether a run can be laid out at all. It runs the
preconditions below (the same functions the rules PLC001, PLC004, PLC005, PLC010, PLC012,
PLC014, PLC015, PLC022 and, for experts, PLC023, PLC024, PLC025 and PLC027 report) and returns either a `Plannable`, a type with no optional field, or the
refusals that say why not. Memory, communication, the pipeline, explain, compile and verify
accept only a `Plannable`, so none of them re-derives what a valid job means, and a rule that a
spec ignores or re-levels cannot lead any of them into a layout that does not exist.

Quantities defined once here: the data degree d, micro-batches per step m, the layers of every
stage and of every model chunk, the rank strides, and the tokens one context-parallel rank holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType

from planc.dims import Numerics, RankDims, megatron_eager, numerics, rank_dims
from planc.findings import Violation
from planc.pipeline.placement import stage_of, virtual_stage
from planc.pipeline.registry import definition, unmet
from planc.record import record
from planc.spec.job import (
    HOST_NAME,
    NO_RUN,
    Cluster,
    Job,
    Model,
    NodeNames,
    Rules,
    RunInputs,
    Training,
    dispatcher_of,
)
from planc.spec.pipeline_layout import parse_layout
from planc.vocab import (
    AXES,
    FLEX_BACKENDS,
    Axis,
    ChunkPlacement,
    CpCommType,
    ExpertDispatcher,
    ScheduleKind,
    ScheduleNeed,
)

MAX_RANKS = 1_048_576

LayerRange = tuple[int, int]  # [first, last) layer indices

# Megatron-Core DDP's default gradient bucket, in elements: max(40,000,000, 1,000,000 × the
# data-parallel group size), the group taken without context parallelism
# (distributed_data_parallel.py: `dp_group.size()`, `get_data_parallel_group(
# with_context_parallel=False)`; DistributedDataParallelConfig.bucket_size).
BUCKET_MIN_ELEMENTS = 40_000_000
BUCKET_ELEMENTS_PER_RANK = 1_000_000
# DeepSpeed ZeRO's default reduce_bucket_size, in elements (deepspeed/runtime/zero/config.py).
DS_REDUCE_BUCKET_ELEMENTS = 500_000_000


def axis_strides(order: tuple[Axis, ...], degrees: Mapping[Axis, int]) -> dict[Axis, int]:
    """Stride of each axis when `order` runs fastest-varying first: the prefix products of the
    degrees (Megatron RankGenerator), so rank = Σ coord_axis · stride_axis."""
    out, stride = {}, 1
    for axis in order:
        out[axis] = stride
        stride *= degrees[axis]
    return out


def bucket_elements(d: int) -> int:
    """Megatron DDP's default gradient bucket: max(4·10⁷, 10⁶·d) elements, d the data degree."""
    return max(BUCKET_MIN_ELEMENTS, BUCKET_ELEMENTS_PER_RANK * d)


# --- preconditions: each yields what stops a layout, in the words of its rule ------------------


def world_limit(job: Job) -> Iterator[Violation]:
    """PLC015: at most MAX_RANKS ranks, refused before any per-rank work."""
    if job.world > MAX_RANKS:
        yield Violation(
            "hardware.nodes",
            f"world size {job.world:,} is above planc's limit of {MAX_RANKS:,} ranks",
            "check hardware.nodes and gpus_per_node",
        )


def world_size(job: Job) -> Iterator[Violation]:
    """PLC001: t × p × d × c = world, with d derived when not given."""
    lay, cl, world = job.layout, job.cluster, job.world
    inner = lay.t * lay.p * lay.c
    if not lay.d_given:
        if world % inner:
            yield Violation(
                "parallelism",
                f"world size {world} (nodes {cl.nodes} × gpus_per_node {cl.gpus_per_node}) is "
                f"not divisible by tensor × pipeline × context = {lay.t} × {lay.p} × {lay.c} = "
                f"{inner}, so data cannot be derived",
                f"choose degrees whose product divides {world}",
                ("parallelism.tensor", "hardware.nodes"),
            )
        return
    total = inner * (lay.d or 0)
    if total != world:
        fix = (
            f"set data: {world // inner}"
            if world % inner == 0
            else f"choose degrees whose product is {world}"
        )
        yield Violation(
            "parallelism.data",
            f"tensor × pipeline × data × context = {lay.t} × {lay.p} × {lay.d} × {lay.c} = {total}, "
            f"but the cluster has {cl.nodes} × {cl.gpus_per_node} = {world} GPUs",
            fix,
        )


def topology(job: Job) -> Iterator[Violation]:
    """PLC014: NVLink domains tile the nodes; one distinct, usable host name per node."""
    cl = job.cluster
    domain, per_node = cl.nvlink_domain, cl.gpus_per_node
    if domain % per_node and per_node % domain:
        yield Violation(
            "hardware.nvlink_domain",
            f"an NVLink domain of {domain} GPUs neither divides nor is a multiple of "
            f"{per_node} GPUs per node",
            "set nvlink_domain to the GPUs behind one NVSwitch fabric",
            ("hardware.gpus_per_node",),
        )
    if len(cl.hosts) != cl.nodes:
        yield Violation(
            "hardware.hosts",
            f"{len(cl.hosts)} host names for {cl.nodes} nodes",
            "give exactly one host name per node",
        )
    if isinstance(cl.hosts, NodeNames):
        return  # planc's own names: one per node, distinct and usable
    unusable = [h for h in cl.hosts if not HOST_NAME.fullmatch(h)]
    if unusable:
        yield Violation(
            "hardware.hosts",
            f"host name {unusable[0]!r} cannot go into a hostfile or rankfile",
            "use letters, digits, '.', '_', ':' and '-' only",
        )
    seen: set[str] = set()
    repeated: set[str] = set()
    for host in cl.hosts:
        (repeated if host in seen else seen).add(host)
    if repeated:
        yield Violation(
            "hardware.hosts",
            f"host names repeat: {', '.join(sorted(repeated)[:5])}",
            "list every node once",
        )


def attention_heads(job: Job) -> Iterator[Violation]:
    """PLC012: hidden splits into heads (or head_dim is given); kv_heads divides heads, and
    equals heads under multi-head latent attention."""
    mod = job.model
    if mod.k == 0:
        yield Violation(
            "model.hidden",
            f"hidden = {mod.h} is not divisible by heads = {mod.n}",
            "set model.head_dim, or make hidden a multiple of heads",
            ("model.heads", "model.preset"),
        )
    if mod.mla is not None and mod.g != mod.n:
        yield Violation(
            "model.kv_heads",
            f"kv_heads = {mod.g} with multi-head latent attention, which up-projects a key and "
            f"a value for each of the {mod.n} heads (Megatron's validate_args: group query "
            "attention is mutually exclusive with multi latent attention)",
            "remove model.kv_heads, or model.mla",
            ("model.mla", "model.preset"),
        )
    elif mod.n % mod.g:
        yield Violation(
            "model.kv_heads",
            f"kv_heads = {mod.g} does not divide heads = {mod.n}",
            "choose kv_heads among the divisors of heads",
            ("model.preset",),
        )


def tensor_split(job: Job) -> Iterator[Violation]:
    """PLC003: heads, key/value heads and the MLP's inner size split over tensor.

    Column-parallel QKV gives each TP rank heads / tensor whole query heads; key/value heads
    either split (kv_heads % tensor == 0) or are replicated when tensor is a multiple of
    kv_heads (Megatron `TransformerConfig`; torchtitan accepts only the first form). The MLP's
    ffn_hidden splits over tensor too (ColumnParallelLinear's `divide`). A precondition, so that
    every rank's share of a layer (`planc.dims.RankDims`) is exact.
    """
    mod, t = job.model, job.layout.t
    if mod.n % t:
        yield Violation(
            "model.heads",
            f"heads = {mod.n} is not divisible by tensor = {t}",
            f"use a tensor degree that divides {mod.n}",
            ("parallelism.tensor", "model.preset"),
        )
    if mod.g % t and t % mod.g:
        yield Violation(
            "model.kv_heads",
            f"kv_heads = {mod.g} neither divides nor is a multiple of tensor = {t}",
            f"use a tensor degree that divides {mod.g} or is a multiple of it",
            ("parallelism.tensor", "model.preset"),
        )
    if mod.f % t:
        yield Violation(
            "model.ffn_hidden",
            f"ffn_hidden = {mod.f} is not divisible by tensor = {t}",
            f"use a tensor degree that divides {mod.f}",
            ("parallelism.tensor", "model.preset"),
        )


def _even_stages(job: Job) -> Iterator[Violation]:
    lay, L = job.layout, job.model.L
    chunks = lay.p * lay.v
    if L % chunks:
        lower = L // chunks
        fixed = _preset_layers(job)
        counted = _counted_split_fix(job)
        yield Violation(
            "model.layers",
            f"layers = {L} do not split evenly over pipeline × virtual_stages = {lay.p} × {lay.v} "
            f"= {chunks} chunks ({L / chunks:.2f} each)",
            _preset_split_fix(job, fixed)
            if fixed
            else (f"{counted} or " if counted else "")
            + f"give parallelism.stage_layers explicitly, or use {lower * chunks} or "
            f"{(lower + 1) * chunks} layers",
            ("parallelism.pipeline", "model.preset"),
        )


def _preset_layers(job: Job) -> str | None:
    """The model preset whose layers the spec keeps (a preset's depth is the model's: a fix
    cannot change it), or None."""
    from planc.spec.job import preset_model  # start-up: only for a layout that does not split

    name = job.model.preset
    own = preset_model(name, job.training.s) if name else None
    return name if own is not None and own.L == job.model.L else None


def _preset_split_fix(job: Job, preset: str) -> str:
    """A fix that keeps the preset's L layers: an uneven stage_layers (each stage a multiple of
    v, the first stages one chunk more) and the nearest pipeline degrees p' whose p'·v chunks
    split L evenly and that the world divides (world = t·c·p'·d for a whole d)."""
    lay, L, world = job.layout, job.model.L, job.world
    fixes = []
    if L % lay.v == 0 and L // lay.v >= lay.p:
        units, extra = divmod(L // lay.v, lay.p)
        stages = [(units + (i < extra)) * lay.v for i in range(lay.p)]
        fixes.append(f"give parallelism.stage_layers {stages}")
    degrees = [
        p
        for p in range(1, min(L, world) + 1)
        if p != lay.p and L % (p * lay.v) == 0 and world % (lay.t * lay.c * p) == 0
    ]
    nearest = sorted(sorted(degrees, key=lambda p: (abs(p - lay.p), p))[:4])
    if nearest:
        shown = ", ".join(map(str, nearest[:-1])) + (" or " if len(nearest) > 1 else "")
        fixes.append(f"use pipeline {shown}{nearest[-1]}")
    counted = _counted_split_fix(job)
    if counted:
        fixes.insert(0, counted)
    said = " or ".join(fixes) or "choose another pipeline degree"
    return f"{said} (the {preset} preset's {L} layers are the model's)"


def _counted_split_fix(job: Job) -> str | None:
    """Megatron's other way to split L layers that do not fill the chunks: count the embedding
    and the loss as layers (--account-for-embedding/loss-in-pipeline-split), when L + 2 or
    L + 1 fills them; None where neither does or the framework is not Megatron."""
    if job.training.framework != "megatron":
        return None
    lay, L = job.layout, job.model.L
    chunks = lay.p * lay.v
    for extra, fields in (
        (2, "embedding_in_pipeline_split and loss_in_pipeline_split"),
        (1, "loss_in_pipeline_split"),
    ):
        if (L + extra) % chunks == 0 and (L + extra) // chunks >= 2:
            return f"set parallelism.{fields} ({L} + {extra} = {L + extra} over {chunks} chunks)"
    return None


def _given_stages(job: Job) -> Iterator[Violation]:
    lay, L, stages = job.layout, job.model.L, job.layout.stage_layers
    if len(stages) != lay.p:
        yield Violation(
            "parallelism.stage_layers",
            f"stage_layers has {len(stages)} entries for pipeline = {lay.p} stages",
            f"give one layer count per stage ({lay.p} entries)",
        )
    if sum(stages) != L:
        yield Violation(
            "parallelism.stage_layers",
            f"stage_layers sums to {sum(stages)}, but the model has {L} layers",
            f"make the entries add up to {L}",
        )
    for index, count in enumerate(stages):
        if count == 0:
            yield Violation(
                f"parallelism.stage_layers[{index}]",
                f"stage {index} holds no layers",
                "give every stage at least one layer, or lower pipeline",
                ("parallelism.stage_layers",),
            )
        elif count % lay.v:
            yield Violation(
                f"parallelism.stage_layers[{index}]",
                f"stage {index} holds {count} layers, which do not split into "
                f"virtual_stages = {lay.v} equal chunks",
                f"give stage {index} a multiple of {lay.v} layers",
                ("parallelism.stage_layers",),
            )


_LAYOUT = "parallelism.pipeline_layout"
# Megatron-LM megatron/core/transformer/pipeline_parallel_layer_layout.py (NVIDIA/Megatron-LM
# 00caa53), PipelineParallelLayerLayout.__init__ and validate_layer_layout: the checks below
# are its asserts, in its words where it has them.
_MEGATRON_LAYOUT = "Megatron-Core's PipelineParallelLayerLayout"


def _layout_violation(message: str, fix: str) -> Violation:
    return Violation(_LAYOUT, message, fix)


def _layout_conflicts(job: Job) -> Iterator[Violation]:
    """What the layout string cannot be combined with: Megatron's validate_args takes the layout
    instead of the first/last-stage counts, and the layout places the embedding and the loss
    itself."""
    lay = job.layout
    if lay.stage_layers:
        yield _layout_violation(
            "pipeline_layout and stage_layers both split the layers (Megatron takes "
            "--pipeline-model-parallel-layout instead of --decoder-first/last-pipeline-num-layers)",
            "remove one of them",
        )
    if lay.embedding_in_split or lay.loss_in_split:
        yield _layout_violation(
            "pipeline_layout places the embedding (E) and the loss (L) itself; "
            "embedding_in_pipeline_split / loss_in_pipeline_split apply to the even split only",
            "remove embedding_in_pipeline_split and loss_in_pipeline_split",
        )


def _layout_shape(job: Job, stages: tuple[str, ...]) -> Iterator[Violation]:
    lay = job.layout
    if len(stages) % lay.p:
        yield _layout_violation(
            f"pipeline_layout has {len(stages)} stages, not a multiple of pipeline = {lay.p} "
            f"({_MEGATRON_LAYOUT}: the layout must be divisible by pipeline_model_parallel_size)",
            f"give pipeline × virtual_stages = {lay.p * lay.v} stages separated by '|'",
        )
    elif len(stages) != lay.p * lay.v:
        chunks = len(stages) // lay.p
        yield _layout_violation(
            f"pipeline_layout has {len(stages)} stages = {lay.p} × {chunks} chunks, but "
            f"virtual_stages = {lay.v} (Megatron takes the chunks per stage from the layout)",
            f"set virtual_stages: {chunks}",
        )


def _layout_layers(job: Job, stages: tuple[str, ...]) -> Iterator[Violation]:
    flat = "".join(stages)
    mtp, layers = job.model.mtp, job.model.L
    checks = (
        (flat[:1] == "E", "the first layer must be the embedding (E)", "begin the layout with E"),
        (flat[-1:] == "L", "the last layer must be the loss (L)", "end the layout with L"),
        (flat.count("E") == 1, "the embedding must be given exactly once", "write E once"),
        (flat.count("L") == 1, "the loss must be given exactly once", "write L once"),
        (
            flat.count("t") == layers,
            f"the layout has {flat.count('t')} decoder layers (t), the model {layers}",
            f"give {layers} t",
        ),
        (
            flat.count("m") == mtp,
            f"the layout has {flat.count('m')} MTP layers (m), the model {mtp} (model.mtp_layers)",
            f"give {mtp} m",
        ),
        (
            "t" not in flat[flat.find("m") :] if "m" in flat else True,
            "decoder layers must be placed before MTP layers",
            "move every m after the last t",
        ),
    )
    for holds, message, fix in checks:
        if not holds:
            yield _layout_violation(f"{message} ({_MEGATRON_LAYOUT})", fix)
            return


def _layout_places(stages: tuple[str, ...]) -> Iterator[Violation]:
    """Where planc puts the embedding, MTP layers and loss: on the first and last virtual stage,
    with the layers around them (Megatron also runs an MTP layer on another rank's last chunk and
    an empty first stage; planc's memory and traffic do not model that)."""
    inner = "".join(stages[1:-1]) + stages[0][1:] + stages[-1][:-1].replace("m", "")
    if "E" not in stages[0] or "L" not in stages[-1] or "m" in inner:
        yield _layout_violation(
            "planc models the embedding on the first virtual stage and the MTP layers and the "
            "loss on the last one only",
            "put E on the first stage and every m with L on the last",
        )
    empty = [index for index, stage in enumerate(stages) if not stage]
    if empty:
        yield _layout_violation(
            f"virtual stage {empty[0]} is empty (Megatron passes its input on); planc's pipeline "
            "simulation needs every virtual stage to hold a layer, the embedding or the loss",
            f"move a layer into virtual stage {empty[0]}, or use fewer virtual_stages",
        )


def _layout_stages(job: Job) -> Iterator[Violation]:
    """PLC004 for parallelism.pipeline_layout: Megatron's own checks of the string."""
    text = job.layout.pipeline_layout or ""
    parsed = parse_layout(text)
    if parsed.error is not None:
        yield _layout_violation(f"pipeline_layout {parsed.error}", "write it as Megatron does")
        return
    conflicts = tuple(_layout_conflicts(job))
    shape = tuple(_layout_shape(job, parsed.stages))
    yield from conflicts + shape
    if not shape:
        found = tuple(_layout_layers(job, parsed.stages))
        yield from found or _layout_places(parsed.stages)


def _accounted_stages(job: Job) -> Iterator[Violation]:
    """PLC004 with the embedding and/or loss counted as layers (Megatron-Core
    TransformerConfig: (layers + embedding + loss) splits evenly over pipeline × virtual stages;
    the flags do not combine with first/last-stage counts)."""
    lay = job.layout
    counted = job.model.L + lay.embedding_in_split + lay.loss_in_split
    if lay.stage_layers:
        yield Violation(
            "parallelism.stage_layers",
            "stage_layers cannot be combined with embedding_in_pipeline_split or "
            "loss_in_pipeline_split (Megatron refuses --decoder-first/last-pipeline-num-layers "
            "with --account-for-embedding/loss-in-pipeline-split)",
            "give the split as pipeline_layout, or drop one of them",
        )
    elif counted % (lay.p * lay.v):
        yield Violation(
            "parallelism.pipeline",
            f"layers + embedding + loss = {counted} do not split evenly over pipeline × "
            f"virtual_stages = {lay.p} × {lay.v} chunks (Megatron-Core TransformerConfig with "
            "account_for_embedding/loss_in_pipeline_split)",
            "give the split as parallelism.pipeline_layout, or change pipeline or virtual_stages",
            ("model.preset",),
        )


def layer_split(job: Job) -> Iterator[Violation]:
    """PLC004: the layers split over the stages and their virtual chunks."""
    lay = job.layout
    if lay.pipeline_layout is not None:
        yield from _layout_stages(job)
    elif lay.embedding_in_split or lay.loss_in_split:
        yield from _accounted_stages(job)
    else:
        yield from _given_stages(job) if lay.stage_layers else _even_stages(job)


def chunk_split(job: Job) -> tuple[int, ...]:
    """Decoder layers of each virtual stage, in run order (index chunk·p + stage), for a job
    that passed PLC004: the layout's, the even split with the embedding and the loss counted,
    stage_layers split into v equal chunks, or the even split."""
    lay, L = job.layout, job.model.L
    chunks = lay.p * lay.v
    if lay.pipeline_layout is not None:
        return parse_layout(lay.pipeline_layout).decoder_layers()
    if lay.embedding_in_split or lay.loss_in_split:
        each = (L + lay.embedding_in_split + lay.loss_in_split) // chunks
        split = [each] * chunks
        split[0] -= lay.embedding_in_split
        split[-1] -= lay.loss_in_split
        return tuple(split)
    stages = lay.stage_layers or (L // lay.p,) * lay.p
    placement = definition(lay.schedule).placement
    return tuple(stages[stage_of(lay.p, i, placement)[0]] // lay.v for i in range(chunks))


def batch_split(job: Job) -> Iterator[Violation]:
    """PLC005: global_batch = micro_batch × data × m for a whole m (needs the data degree)."""
    lay, tr = job.layout, job.training
    if lay.d is None:
        return
    unit = tr.b * lay.d
    if tr.B % unit:
        lower = tr.B - tr.B % unit
        choices = f"{lower} or {lower + unit}" if lower else str(unit)
        yield Violation(
            "training.global_batch",
            f"global_batch {tr.B} is not divisible by micro_batch × data = {tr.b} × {lay.d} = {unit}",
            f"use global_batch {choices}",
            ("training.micro_batch",),
        )


def interleaving(job: Job) -> Iterator[Violation]:
    """PLC010: the pipeline schedule fits the layout (`planc.pipeline.registry` needs): 1F1B
    runs one chunk per stage; interleaved 1F1B needs virtual_stages > 1, a pipeline and m a
    multiple of pipeline, and under Megatron without overlapped p2p more than two stages. Only
    the first unmet need is reported."""
    lay = job.layout
    need = unmet(lay.schedule, lay.p, job.m, lay.v)
    if need is not None:
        yield _unmet_need(job, need)
    elif lay.v > 1 and lay.p == 2 and _megatron_blocking_p2p(job):
        yield Violation(
            "training.overlap_p2p_comm",
            f"virtual_stages = {lay.v} over pipeline = 2 needs Megatron's overlapped p2p: without "
            "it the sends to the next and the previous stage go to the same peer and Megatron "
            "refuses the layout (validate_args: 'pipeline-model-parallel size should be greater "
            "than 2' when overlap_p2p_comm is off)",
            "set training.overlap_p2p_comm: true (Megatron's default), or virtual_stages: 1, "
            "or pipeline ≥ 3",
            ("parallelism.virtual_stages", "parallelism.pipeline"),
        )


def _megatron_blocking_p2p(job: Job) -> bool:
    """Megatron-LM runs the pipeline, with --no-overlap-p2p-communication."""
    return job.training.framework == "megatron" and not job.training.overlap_p2p_comm


def _unmet_need(job: Job, need: ScheduleNeed) -> Violation:
    """The located finding for a schedule need the layout fails."""
    lay, m, name = job.layout, job.m, job.layout.schedule.value
    if need is ScheduleNeed.ONE_CHUNK:
        return Violation(
            "parallelism.pipeline_schedule",
            f"pipeline_schedule = {name} runs one model chunk per stage, but virtual_stages = "
            f"{lay.v}",
            f"set virtual_stages: 1, or remove pipeline_schedule (virtual_stages = {lay.v} runs "
            f"{ScheduleKind.default(lay.v).value})",
            ("parallelism.virtual_stages",),
        )
    if need is ScheduleNeed.CHUNKS:
        return Violation(
            "parallelism.pipeline_schedule",
            f"pipeline_schedule = {name} runs virtual_stages > 1 model chunks per stage, but "
            f"virtual_stages = {lay.v}",
            f"set virtual_stages: 2 or more, or pipeline_schedule: "
            f"{ScheduleKind.default(lay.v).value}",
            ("parallelism.virtual_stages",),
        )
    if need is ScheduleNeed.ALONE_OR_CHUNKS:
        return Violation(
            "parallelism.pipeline_schedule",
            f"pipeline_schedule = {name} runs virtual_stages > 1 model chunks per stage over a "
            f"pipeline, or no pipeline at all, but pipeline = {lay.p} with virtual_stages = "
            f"{lay.v} (Megatron-Core asserts virtual_pipeline_model_parallel_size with "
            "overlap_moe_expert_parallel_comm when pipeline_model_parallel_size > 1)",
            f"set virtual_stages: 2 or more, or pipeline: 1, or pipeline_schedule: "
            f"{ScheduleKind.default(lay.v).value}",
            ("parallelism.virtual_stages", "parallelism.pipeline"),
        )
    if need in (ScheduleNeed.SEVERAL_STAGES, ScheduleNeed.STAGES_FOR_CHUNKS):
        return Violation(
            "parallelism.virtual_stages",
            f"virtual_stages = {lay.v} interleaves a pipeline, but pipeline = {lay.p}",
            "set virtual_stages: 1, or pipeline ≥ 2",
        )
    if need is ScheduleNeed.TWO_CHUNKS:
        return Violation(
            "parallelism.virtual_stages",
            f"pipeline_schedule = {name} runs two model chunks per stage (rank r holds virtual "
            f"stages r and 2p − 1 − r), but virtual_stages = {lay.v}",
            "set virtual_stages: 2",
            ("parallelism.pipeline_schedule",),
        )
    if need is ScheduleNeed.FILLED_V:
        least = job.training.b * (lay.d or 1) * (2 * lay.p - 1)
        return Violation(
            "training.global_batch",
            f"pipeline_schedule = {name} needs m ≥ 2 × pipeline − 1 = {2 * lay.p - 1} "
            f"micro-batches, got m = {m} (PyTorch pads fewer with empty slots; planc does not "
            "expand them)",
            f"make global_batch at least micro_batch × data × (2 × pipeline − 1) = {least}",
            ("parallelism.pipeline_schedule",),
        )
    if need is ScheduleNeed.TWICE_THE_STAGES:
        least = job.training.b * (lay.d or 1) * 2 * lay.p
        return Violation(
            "training.global_batch",
            f"pipeline_schedule = {name} needs m ≥ 2 × pipeline = {2 * lay.p} micro-batches, "
            f"got m = {m} (deepseek-ai/DualPipe asserts num_chunks >= num_ranks * 2)",
            f"make global_batch at least micro_batch × data × 2 × pipeline = {least}",
            ("parallelism.pipeline_schedule",),
        )
    step = job.training.b * (lay.d or 1) * lay.p
    return Violation(
        "training.global_batch",
        f"the interleaved schedule needs micro-batches m = {m} to be a multiple of "
        f"pipeline = {lay.p}",
        f"make global_batch a multiple of micro_batch × data × pipeline = {step}",
        ("parallelism.virtual_stages",),
    )


def shard_split(job: Job) -> Iterator[Violation]:
    """PLC022: parallelism.data_shard divides data × context (the rest replicate: HSDP)."""
    lay = job.layout
    if lay.data_shard is None or lay.d is None:
        return
    group = lay.d * lay.c
    if group % lay.data_shard:
        yield Violation(
            "parallelism.data_shard",
            f"data_shard = {lay.data_shard} does not divide data × context = {lay.d} × {lay.c} "
            f"= {group}",
            f"choose a divisor of {group}, such as {math.gcd(group, lay.data_shard)}",
            ("parallelism.data",),
        )
        return
    edp = lay.edp(job.world)
    replicas = group // lay.data_shard
    if job.model.moe is not None and edp is not None and edp % replicas:
        yield Violation(
            "parallelism.data_shard",
            f"data_shard = {lay.data_shard} leaves {replicas} replicas of the sharded state, "
            f"which do not divide the expert data-parallel size EDP = {edp}: the experts' "
            "shards cannot be replicated the same way (Megatron-Core asserts EDP % "
            "num_distributed_optimizer_instances == 0)",
            f"choose data_shard so that data × context / data_shard divides {edp}, such as "
            f"{group // math.gcd(replicas, edp)}",
            ("parallelism.data", "parallelism.expert"),
        )


def expert_split(job: Job) -> Iterator[Violation]:
    """PLC023: expert parallelism splits the routed experts evenly, and only a model with
    experts has any (Megatron-Core: num_moe_experts % expert_model_parallel_size == 0)."""
    lay, moe = job.layout, job.model.moe
    if moe is None:
        if lay.ep > 1:
            yield Violation(
                "parallelism.expert",
                f"expert = {lay.ep}, but the model has no experts (model.moe is not set)",
                "set parallelism.expert: 1, or describe the experts under model.moe",
            )
        return
    if moe.E % lay.ep:
        yield Violation(
            "parallelism.expert",
            f"expert = {lay.ep} does not divide the {moe.E} routed experts, so the expert-"
            "parallel ranks would hold different numbers of experts",
            f"choose a divisor of {moe.E}, such as {math.gcd(moe.E, lay.ep)}",
            ("model.moe.experts",),
        )


def expert_world(job: Job) -> Iterator[Violation]:
    """PLC024: the world divides into expert_tensor × expert × pipeline, leaving the expert
    data-parallel degree EDP = W/(ETP·EP·PP) whole (Megatron-Core initialize_model_parallel)."""
    lay = job.layout
    if job.model.moe is None and lay.ep == 1 and lay.etp is None:
        return
    inner = lay.et * lay.ep * lay.p
    if job.world % inner:
        yield Violation(
            "parallelism.expert",
            f"world size {job.world} is not divisible by expert_tensor × expert × pipeline = "
            f"{lay.et} × {lay.ep} × {lay.p} = {inner}, so the expert data-parallel degree "
            "is not whole",
            f"choose expert and expert_tensor so that their product with pipeline divides "
            f"{job.world}",
            ("parallelism.expert_tensor", "parallelism.pipeline"),
        )


def expert_routing(job: Job) -> Iterator[Violation]:
    """PLC025: each token goes to at most all the routed experts: top_k ≤ experts."""
    moe = job.model.moe
    if moe is not None and moe.k > moe.E:
        yield Violation(
            "model.moe.top_k",
            f"top_k = {moe.k} routes each token to more experts than the {moe.E} there are",
            f"choose top_k between 1 and {moe.E}",
            ("model.moe.experts",),
        )


def pp_stride(order: tuple[str, ...], sizes: Mapping[str, int]) -> int:
    """The stride of pp in Megatron's RankGenerator grid: the product of the sizes before it."""
    return math.prod(sizes[axis] for axis in order[: order.index("pp")])


def expert_order(job: Job) -> Iterator[Violation]:
    """PLC027: an expert layout Megatron-Core's initialize_model_parallel accepts.

    It builds two RankGenerators over one order: the dense one with ep = 1, the expert one with
    (tp, ep, dp, pp, cp) = (ETP, EP, EDP, PP, 1). It refuses (parallel_state.py): an order
    that leaves out ep when EP > 1 (RankGenerator: "you haven't specified the order"); with PP >
    1 and pp not last, an EDP different from DP; pipeline groups that differ between the two
    generators, which happens exactly when p > 1 and pp has a different stride in the two grids
    (tested against Megatron-Core's RankGenerator).
    """
    lay = job.layout
    if (lay.ep == 1 and lay.etp is None) or lay.d is None:
        return
    edp = lay.edp(job.world)
    if edp is None:
        return  # PLC024
    full = lay.expert_order
    if lay.ep > 1 and "ep" not in full:
        yield Violation(
            "parallelism.order",
            f"expert = {lay.ep}, but the order {'-'.join(full)} does not place ep: "
            "Megatron-Core's RankGenerator refuses an axis of size above 1 that the order "
            "leaves out",
            "write order: tp-cp-ep-dp-pp (Megatron-Core's default)",
            ("parallelism.expert",),
        )
        return
    expert = (*full, "ep") if "ep" not in full else full
    if lay.p > 1 and full[-1] != "pp" and edp != lay.d:
        yield Violation(
            "parallelism.order",
            f"with pipeline = {lay.p} and an order that does not end in pp, Megatron-Core needs "
            f"the expert data-parallel degree W/(ETP·EP·PP) = {edp} to equal data = {lay.d}",
            "end the order with pp (tp-cp-ep-dp-pp), or choose expert degrees with "
            f"expert_tensor × expert = tensor × context = {lay.t * lay.c}",
            ("parallelism.expert",),
        )
        return
    dense = {"tp": lay.t, "cp": lay.c, "ep": 1, "dp": lay.d, "pp": lay.p}
    sizes = {"tp": lay.et, "cp": 1, "ep": lay.ep, "dp": edp, "pp": lay.p}
    dense_stride, expert_stride = pp_stride(expert, dense), pp_stride(expert, sizes)
    if lay.p > 1 and dense_stride != expert_stride:  # with p = 1 every pp group is one rank
        yield Violation(
            "parallelism.order",
            f"under order {'-'.join(full)} the pipeline groups of the dense layers (stride "
            f"{dense_stride}) and of the experts (stride {expert_stride}) differ; Megatron-Core "
            "requires them equal",
            "end the order with pp (tp-cp-ep-dp-pp)",
            ("parallelism.expert", "parallelism.expert_tensor"),
        )


# Rule id and precondition, in the order they are tried; the first group is cheap and bounds
# the rest (no per-rank or per-stage work runs on a world above the limit).
PRECONDITIONS = (
    ("PLC015", world_limit),
    ("PLC001", world_size),
    ("PLC014", topology),
    ("PLC012", attention_heads),
    ("PLC003", tensor_split),
    ("PLC004", layer_split),
    ("PLC005", batch_split),
    ("PLC010", interleaving),
    ("PLC022", shard_split),
    ("PLC023", expert_split),
    ("PLC024", expert_world),
    ("PLC025", expert_routing),
    ("PLC027", expert_order),
)


@record
class Refusal:
    """Why a job has no plan: the rule whose precondition failed, and what it found."""

    rule: str
    violation: Violation


# --- the plannable job -------------------------------------------------------------------------


def layer_ranges(stage_layers: tuple[int, ...], v: int) -> tuple[tuple[LayerRange, ...], ...]:
    """Layer ranges of each pipeline rank, one [first, last) per model chunk, stage r's chunks
    holding stage_layers[r] / v layers each (see `chunk_ranges`)."""
    p = len(stage_layers)
    return chunk_ranges(tuple(stage_layers[i % p] // v for i in range(p * v)), p)


def chunk_ranges(
    chunks: tuple[int, ...], p: int, placement: ChunkPlacement = ChunkPlacement.LOOP
) -> tuple[tuple[LayerRange, ...], ...]:
    """Layer ranges of each pipeline rank, one [first, last) per model chunk, from the layers
    of each virtual stage in run order.

    Interleaved 1F1B (Narayanan et al. 2021, §2.2; Megatron's interleaved assignment) cuts the
    layers into p·v blocks and gives chunk j of rank r the block j·p + r; block i holds
    chunks[i] layers (Megatron's layout: every chunk its own count). With v = 1 this is the
    plain contiguous split. In the V placement (ZB-V, DualPipeV) rank r's chunks hold blocks r
    and 2p − 1 − r (`planc.pipeline.schedule.virtual_stage`).
    """
    v = len(chunks) // p
    starts = [0]
    for count in chunks:
        starts.append(starts[-1] + count)
    blocks = [[virtual_stage(p, r, j, placement) for j in range(v)] for r in range(p)]
    return tuple(tuple((starts[i], starts[i + 1]) for i in row) for row in blocks)


@record
class PlanLayout:
    """Parallel degrees of a plannable job: every one an integer, every stage's layers decided."""

    t: int
    p: int
    d: int
    c: int
    v: int
    sp: bool
    zero: int
    order: tuple[Axis, ...]  # fastest-varying first (Megatron convention)
    data_shard: int  # N: ranks ZeRO/FSDP shards over, a divisor of d·c
    stage_layers: tuple[int, ...]  # L_r: layers on each pipeline rank, all chunks
    chunks: tuple[tuple[LayerRange, ...], ...]  # [stage][chunk] -> [first, last)
    # The expert grid (Megatron-Core's expert RankGenerator): EP, ETP, EDP = W/(ETP·EP·PP), and
    # the order with ep in it (appended, size 1, when the spec leaves it out). Dense jobs: 1, t,
    # d·c.
    ep: int = 1
    et: int = 1
    edp: int = 1
    expert_order: tuple[str, ...] = ("tp", "cp", "dp", "pp", "ep")
    # The pipeline schedule (`planc.pipeline.registry`), one that fits p, m and v (PLC010).
    schedule: ScheduleKind = ScheduleKind.ONE_F_ONE_B
    # How the spec states a split of its own (Megatron's words for it, written back to
    # megatron/args.txt): the layout string, or the embedding and loss counted as layers.
    pipeline_layout: str | None = None
    embedding_in_split: bool = False
    loss_in_split: bool = False
    # parallelism.cp_comm_type (planc.comm.context prices each).
    cp_comm: CpCommType = "p2p"
    # parallelism.expert_dispatcher (planc.comm.schedule prices each).
    dispatcher: ExpertDispatcher = "alltoall"
    # parallelism.dispatcher_sms: the SMs a flex dispatcher's kernels hold; None: the default.
    dispatcher_sms: int | None = None

    @property
    def expert_degrees(self) -> Mapping[str, int]:
        """The expert grid's sizes by axis: tp = ETP, cp = 1, ep = EP, dp = EDP, pp = p."""
        return MappingProxyType(
            {"tp": self.et, "cp": 1, "ep": self.ep, "dp": self.edp, "pp": self.p}
        )

    @property
    def degrees(self) -> Mapping[Axis, int]:
        # Computed once per layout (the grid's formulas ask for it millions of times in a
        # search), kept as a plain dict on the instance (not a field: equality, hashing and
        # `replace` ignore it, and it pickles) and shown read-only.
        cached: dict[Axis, int] | None = self.__dict__.get("_degrees")
        if cached is None:
            cached = {Axis.TP: self.t, Axis.CP: self.c, Axis.DP: self.d, Axis.PP: self.p}
            self.__dict__["_degrees"] = cached
        return MappingProxyType(cached)

    @property
    def strides(self) -> Mapping[Axis, int]:
        """Stride of each axis in the rank order: rank = Σ coord_axis · stride_axis."""
        cached: dict[Axis, int] | None = self.__dict__.get("_strides")  # as `degrees`
        if cached is None:
            cached = axis_strides(self.order, self.degrees)
            self.__dict__["_strides"] = cached
        return MappingProxyType(cached)

    @property
    def bucket_elements(self) -> int:
        """Elements in one DDP gradient bucket (see `bucket_elements`)."""
        return bucket_elements(self.d)

    @property
    def shard_group(self) -> int:
        """N: the ranks ZeRO, Megatron's distributed optimizer or FSDP shard over.

        d·c by default (Megatron shards over data × context, intra_dp_cp); `data_shard` when the
        spec sets it, and then d·c/N groups hold the same shards (HSDP; Megatron's
        num_distributed_optimizer_instances; torchtitan's dp_replicate × dp_shard).
        """
        return self.data_shard

    @property
    def replicas(self) -> int:
        """R = d·c/N: the groups that each hold a whole copy of the sharded state."""
        return self.d * self.c // self.data_shard

    @property
    def expert_shard_group(self) -> int:
        """N_e = EDP/R: the ranks the routed experts' gradients and optimizer state are sharded
        over. Megatron-Core builds a separate distributed optimizer for expert parameters over
        the intra-partial expert data-parallel group of EDP / num_distributed_optimizer_instances
        ranks (optimizer/__init__.py get_megatron_optimizer, intra_expt_dp_group; parallel_state
        asserts that R divides EDP); DeepSpeed shards expert param groups over the expert data
        group (stage_1_and_2.py _configure_moe_settings); torchtitan fully_shards the experts
        over efsdp = dp_shard·cp·tp/ep, under dp_replicate. Dense jobs: EDP = d·c, so N_e = N."""
        return self.edp // self.replicas

    def chunk_layers(self, stage: int) -> tuple[int, ...]:
        """Layers in each of the v model chunks of pipeline rank `stage`."""
        return tuple(last - first for first, last in self.chunks[stage])

    @property
    def last_stage(self) -> int:
        """The pipeline rank holding the last virtual stage (the final norm, LM head, loss and
        MTP layers, in its last chunk): p − 1, or rank 0 in the V placement (DualPipeV), whose
        last chunk is virtual stage 2p − 1."""
        return 0 if definition(self.schedule).placement is ChunkPlacement.V else self.p - 1


@record
class Plannable:
    """A job that can be laid out: the checked job's model, cluster and training, and a layout
    with no unknowns. Built only by `plannable`."""

    name: str
    model: Model
    cluster: Cluster
    training: Training
    rules: Rules
    layout: PlanLayout
    m: int  # micro-batches per data-parallel rank per step: B / (b·d)
    numerics: Numerics  # the run's number formats (planc.dims)
    dims: RankDims  # one rank's share of a layer, the same on every stage (planc.dims)
    run: RunInputs = NO_RUN  # the whole run: length, checkpoints, reliability, cost

    @property
    def world(self) -> int:
        return self.cluster.world

    @property
    def gradient_bucket_elements(self) -> int:
        """Elements per gradient bucket of the engine that reduces them: DeepSpeed's
        reduce_bucket_size (5·10⁸), else Megatron DDP's max(4·10⁷, 10⁶·d). FSDP2 reduces per
        fully_shard unit; planc uses Megatron's bucket there too, which moves the same bytes in
        different calls (a documented approximation of its latency terms)."""
        if self.training.framework == "deepspeed":
            return DS_REDUCE_BUCKET_ELEMENTS
        return self.layout.bucket_elements

    @property
    def tokens_per_cp_rank(self) -> int:
        """s/c: the tokens of each sequence one context-parallel rank holds (⌈s/c⌉ if uneven)."""
        return self.dims.s_c

    def chunk_moe_layers(self, stage: int) -> tuple[int, ...]:
        """The layers with experts in each model chunk of `stage` (all zero for a dense model)."""
        moe = self.model.moe
        chunks = self.layout.chunks[stage]
        return tuple(0 if moe is None else moe.moe_layers_between(a, b) for a, b in chunks)

    def chunk_window_layers(self, stage: int) -> tuple[tuple[int, int], ...]:
        """Per model chunk of `stage`, its (dense, MoE) layers that attend through the sliding
        window (model.sliding_window; all (0, 0) without one)."""
        model = self.model
        if not model.window:
            return tuple((0, 0) for _ in self.layout.chunks[stage])
        moe = model.moe
        out = []
        for a, b in self.layout.chunks[stage]:
            windowed = [i for i in range(a, b) if model.is_window_layer(i)]
            routed = sum(1 for i in windowed if moe is not None and moe.is_moe_layer(i))
            out.append((len(windowed) - routed, routed))
        return tuple(out)

    def moe_layers(self, stage: int) -> int:
        """L_moe,r: the layers with experts among pipeline rank `stage`'s chunks (0 for a dense
        model)."""
        return sum(self.chunk_moe_layers(stage))

    def mtp_modules(self, stage: int) -> tuple[int, int]:
        """(D, of them with experts): the multi-token prediction modules pipeline rank `stage`
        runs after its last chunk's layers: all D on the last stage (Megatron's GPTModel builds
        the MTP block in its post-process part), none elsewhere; each a layer shaped like layer
        L − 1, with experts where that layer has them (Megatron's mtp_layer_is_moe)."""
        modules = self.model.mtp if stage == self.layout.last_stage else 0
        moe = self.model.moe
        routed = modules if moe is not None and moe.is_moe_layer(self.model.L - 1) else 0
        return modules, routed

    @property
    def embedding_copy(self) -> bool:
        """Whether the last stage keeps its own copy of the word embedding, kept equal to the
        first stage's by the embedding group's gradient all-reduce: with tied embeddings (its LM
        head) or multi-token prediction modules (which embed the shifted tokens), when the last
        stage is not the first (Megatron-Core LanguageModule.setup_embeddings_and_output_layer:
        'If use Multi-Token Prediction (MTP), we also need to maintain duplicated embedding
        weights in mtp process stage')."""
        last = self.layout.last_stage
        return (self.model.tied or self.model.mtp > 0) and self.layout.p > 1 and last != 0

    def run_layers(self, stage: int) -> tuple[int, int]:
        """(layers, of them with experts) pipeline rank `stage` runs per micro-batch: its
        decoder layers and its multi-token prediction modules' (`mtp_modules`), which exchange
        what any layer of their shape does (TP, CP, the expert all-to-all)."""
        modules, routed = self.mtp_modules(stage)
        return self.layout.stage_layers[stage] + modules, self.moe_layers(stage) + routed

    def chunk_run_layers(self, stage: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Per model chunk of `stage`, the layers it runs and those of them with experts: its
        decoder layers, and on the last stage's last chunk its multi-token prediction modules'
        (`mtp_modules`)."""
        split = list(self.layout.chunk_layers(stage))
        routed = list(self.chunk_moe_layers(stage))
        modules, with_experts = self.mtp_modules(stage)
        split[-1] += modules
        routed[-1] += with_experts
        return tuple(split), tuple(routed)

    @property
    def usable_hbm_bytes(self) -> int:
        """HBM × (1 − rules.memory_headroom): what PLC007 lets the heaviest rank use (PLC007
        owns the option, planc.rules.memory.MEMORY_HEADROOM)."""
        return int(self.cluster.gpu.memory_bytes * (1 - self.rules.options["memory_headroom"]))

    @property
    def tokens_per_sp_rank(self) -> int:
        """The tokens a rank keeps of the parts TP replicates: s/c/t with sequence parallelism."""
        return self.dims.s_r


def refusals(job: Job) -> tuple[Refusal, ...]:
    """Every precondition a layout needs that `job` fails (empty: the job is plannable)."""
    found: list[Refusal] = []
    for rule, precondition in PRECONDITIONS:
        found += [Refusal(rule, violation) for violation in precondition(job)]
        if rule == "PLC015" and found:
            break  # nothing else is looked at for a world above the limit
    return tuple(found)


Chunks = tuple[tuple[LayerRange, ...], ...]  # [stage][chunk] -> [first, last)


def layer_chunks(job: Job) -> tuple[Chunks, tuple[int, ...]]:
    """Each pipeline rank's chunks' layer ranges (`chunk_split`, `chunk_ranges`) and its layers,
    for a job that passed PLC004."""
    lay = job.layout
    ranges = chunk_ranges(chunk_split(job), lay.p, definition(lay.schedule).placement)
    return ranges, tuple(sum(b - a for a, b in chunks) for chunks in ranges)


def formats_and_dims(job: Job) -> tuple[Numerics, RankDims]:
    """The run's number formats (`planc.dims.numerics`) and one rank's share of a layer
    (`planc.dims.rank_dims`) of a job that passed its preconditions: they read the training
    section (K/V repeated before the attention core too), the GPU, the model and, of the layout,
    the tensor, context, expert and expert-tensor degrees, sequence parallelism and the expert
    dispatcher."""
    lay = job.layout
    return numerics(job.training, job.cluster.gpu), rank_dims(
        job.model,
        s=job.training.s,
        b=job.training.b,
        t=lay.t,
        c=lay.c,
        sp=lay.sp,
        et=lay.et,
        ep=lay.ep,
        imbalance=job.training.expert_imbalance,
        repeat_kv=job.training.repeat_kv,
        sorts_by_expert=sorts_by_local_expert(job),
        eager=megatron_eager(
            job.model,
            job.training.framework in ("megatron", "megatron-fsdp"),
            job.training.fused_grouped_mlp,
        ),
        fp32_probs=flex_probs_fp32(job),
    )


def flex_probs_fp32(job: Job) -> bool:
    """Megatron-Core's flex dispatchers (DeepEP, HybridEP) cast the routing probabilities to
    fp32 before their dispatch, and the experts receive them so (`ExpertDims.fp32_probs`)."""
    megatron = job.training.framework in ("megatron", "megatron-fsdp")
    return megatron and dispatcher_of(job) in FLEX_BACKENDS


def sorts_by_local_expert(job: Job) -> bool:
    """Megatron-Core's alltoall dispatcher (megatron and megatron-fsdp) sorts the rows it
    received by local expert after the all-to-all and back before the return
    (MoEAlltoAllTokenDispatcher dispatch_postprocess and combine_preprocess, 'Permutation 2';
    token_dispatcher.py at Megatron-Core 0.17.1); its flex dispatchers permute once each way,
    inside DeepEP's and HybridEP's managers. Other frameworks' dispatchers are not read."""
    megatron = job.training.framework in ("megatron", "megatron-fsdp")
    return megatron and dispatcher_of(job) == "alltoall"


def plannable(
    job: Job,
    refused: tuple[Refusal, ...] | None = None,
    chunks_of: Callable[[Job], tuple[Chunks, tuple[int, ...]]] = layer_chunks,
    derived_of: Callable[[Job], tuple[Numerics, RankDims]] = formats_and_dims,
) -> Plannable | tuple[Refusal, ...]:
    """The plannable form of `job`, or the refusals that say why it has none (`refused`: the
    result of `refusals(job)` when the caller has it already). `chunks_of` and `derived_of` give
    what `layer_chunks` and `formats_and_dims` give (a search's reuse them across candidates)."""
    refused = refusals(job) if refused is None else refused
    if refused:
        return refused
    formats, dims = derived_of(job)
    lay, m = job.layout, job.m
    if lay.d is None or m is None:  # excluded by PLC001 and PLC005 above
        raise AssertionError("a job that passed its preconditions has d and m")
    ranges, stage_layers = chunks_of(job)
    edp = lay.edp(job.world)
    if edp is None:  # PLC024 above; a dense job has W/(t·p) = d·c
        raise AssertionError("a job that passed its preconditions has a whole EDP")
    order = tuple(Axis(name) for name in lay.order)
    if sorted(order) != sorted(AXES):
        raise AssertionError(f"the order {lay.order} names every axis once (the spec enforces it)")
    return Plannable(
        name=job.name,
        model=job.model,
        cluster=job.cluster,
        training=job.training,
        rules=job.rules,
        layout=PlanLayout(
            t=lay.t,
            p=lay.p,
            d=lay.d,
            c=lay.c,
            v=lay.v,
            sp=lay.sp,
            zero=lay.zero,
            order=order,
            data_shard=lay.data_shard or lay.d * lay.c,
            stage_layers=stage_layers,
            chunks=ranges,
            ep=lay.ep,
            et=lay.et,
            edp=edp,
            expert_order=lay.expert_order + (() if "ep" in lay.expert_order else ("ep",)),
            schedule=lay.schedule,
            pipeline_layout=lay.pipeline_layout,
            embedding_in_split=lay.embedding_in_split,
            loss_in_split=lay.loss_in_split,
            cp_comm=lay.cp_comm,
            dispatcher=dispatcher_of(job),
            dispatcher_sms=lay.dispatcher_sms,
        ),
        m=m,
        numerics=formats,
        dims=dims,
        run=job.run,
    )
