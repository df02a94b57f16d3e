"""The plan: every rank's place, layers and memory, the process groups, and a summary.

`compile_job` turns a resolved `Job` into a frozen `Plan` of numpy columns and small per-stage
tables; `plan_json` and `coords_json` render it. Rendering is by hand, one rank per line, from
fragments rendered once per node, per pipeline stage and per distinct memory budget, so 131,072
ranks cost one f-string each.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from planc import __version__
from planc.analysis import Analysis
from planc.comm.schedule import (
    CommOp,
    WireBudget,
    cp_a2a_size,
    dispatch_group,
    grad_bytes,
    layer_wise,
    layer_wise_all_reduce,
    op_record,
)
from planc.comm.sizes import activation_bytes, sp_amax_reduced
from planc.compile.groups import Groups, expert_grid, index_in_group, process_groups
from planc.compile.ranks import AXES, Placement, Ranks, grid_of, place
from planc.dims import padded_vocab
from planc.findings import Finding
from planc.memory import MemoryBudget, rank_memory
from planc.memory.params import RankParameters
from planc.pipeline.registry import FLUSH_ORDER, bubble_fraction, definition, pattern
from planc.plannable import LayerRange, Plannable
from planc.record import record
from planc.spec.fabric import Tier
from planc.vocab import DEFAULT_RECOMPUTE_MODULES, GroupKind

PLAN_FORMAT = "planc-plan"
COORDS_FORMAT = "planc-coords"
# plan.json's layout version: 2 keys each rank's wire bytes by fabric tier and lists the tiers
# (cluster.fabric); `planc verify` reads this version only. coords.json is unchanged at 1.
FORMAT_VERSION = 2
COORDS_FORMAT_VERSION = 1
MEMORY_FIELDS = ("weights", "gradients", "optimizer", "activations", "buffers", "reserve", "total")

@record
class Stage:
    """What one pipeline rank holds: layer ranges [first, last) per model chunk, first chunk first."""

    pp: int
    layers: tuple[LayerRange, ...]
    embedding: bool
    lm_head: bool
    # the last stage's synced copy of the word embedding (tied: its LM head; MTP: their input)
    embedding_copy: bool


@record
class Summary:
    world_size: int
    nodes: int
    gpus_per_node: int
    parameters: int
    parameters_padded: int
    peak_memory_bytes: int
    peak_rank: int
    peak_stage: int
    hbm_bytes: int
    micro_batches: int
    bubble_fraction: float


@record(eq=False)
class Plan:
    """A compiled job. Arrays are indexed by rank; `memory[pp, shard]` is one rank's budget."""

    job: Plannable
    placement: Placement
    groups: Groups
    stages: tuple[Stage, ...]
    shard: Ranks  # optimizer shard index: position in the rank's dp_shard group (its dp_cp group by default)
    memory: npt.NDArray[np.int64]  # (p, d·c, len(MEMORY_FIELDS)) bytes
    summary: Summary
    parameters: tuple[RankParameters, ...]  # Ψ_r of one TP rank of each stage
    communication: tuple[CommOp, ...]  # the schedule of one step, per pipeline stage
    op_seconds: Mapping[CommOp, float]  # each op's time per step (the analysis's model)
    wires: tuple[WireBudget, ...]  # bytes per step on each fabric tier, per pipeline stage
    findings: tuple[Finding, ...] = ()  # check's error findings a forced compile went past

    @property
    def world(self) -> int:
        return self.placement.world


# ----------------------------------------------------------------------------- stages


def _stages(job: Plannable) -> tuple[Stage, ...]:
    lay = job.layout
    last = lay.last_stage
    return tuple(
        Stage(
            pp=r,
            layers=lay.chunks[r],
            embedding=r == 0,
            lm_head=r == last,
            embedding_copy=job.embedding_copy and r == last,
        )
        for r in range(lay.p)
    )


# ----------------------------------------------------------------------------- memory


def _budget_of(job: Plannable, pp: int, shard: int) -> tuple[int, ...]:
    mem = rank_memory(job, pp, shard)
    return tuple(getattr(mem, name) for name in MEMORY_FIELDS)


def _stage_budgets(job: Plannable, pp: int, shards: int) -> npt.NDArray[np.int64]:
    """Budgets of every shard index of one pipeline rank, by bisection.

    A shard's bytes only fall as its index rises (the low shards hold the ⌈Ψ/N⌉ shares; see
    `planc.memory.rank_memory`), so when both ends of a range agree, so does everything between:
    O(log N) calls per distinct step instead of N calls of a few hundred µs each.
    """
    row = np.full((shards, len(MEMORY_FIELDS)), -1, dtype=np.int64)

    def at(index: int) -> tuple[int, ...]:
        if row[index, 0] < 0:
            row[index] = _budget_of(job, pp, index)
        return tuple(row[index].tolist())

    pending = [(0, shards - 1)]
    while pending:
        low, high = pending.pop()
        if at(low) == at(high):
            row[low : high + 1] = row[low]
        elif high - low > 1:
            middle = (low + high) // 2
            pending += [(low, middle), (middle, high)]
    return row


def _memory_table(job: Plannable, shards: int) -> npt.NDArray[np.int64]:
    """Budgets for every distinct (pipeline rank, optimizer shard index)."""
    return np.stack([_stage_budgets(job, pp, shards) for pp in range(job.layout.p)])


def _summary(
    job: Plannable,
    memory: MemoryBudget,
    placement: Placement,
    shard: Ranks,
    table: npt.NDArray[np.int64],
) -> Summary:
    totals = table[placement.coords["pp"], shard, MEMORY_FIELDS.index("total")]
    peak_rank = int(np.argmax(totals))  # the first rank with the largest total
    lay, m = job.layout, job.m
    found = memory
    return Summary(
        world_size=job.world,
        nodes=job.cluster.nodes,
        gpus_per_node=job.cluster.gpus_per_node,
        parameters=found.parameters,
        parameters_padded=found.parameters_padded,
        peak_memory_bytes=int(totals[peak_rank]),
        peak_rank=peak_rank,
        peak_stage=int(placement.coords["pp"][peak_rank]),
        hbm_bytes=job.cluster.gpu.memory_bytes,
        micro_batches=m,
        bubble_fraction=round(bubble_fraction(lay.schedule, lay.p, m, lay.v), 6),
    )


def _dispatch(job: Plannable) -> tuple[bool, int] | None:
    """(over tp × ep, members per NVLink domain) of the MoE dispatcher's group, for the groups
    it lists beyond ep (`planc.compile.groups.dispatch_groups`); None without an exchange."""
    lay = job.layout
    if job.model.moe is None or lay.ep * lay.et == 1:
        return None
    group = dispatch_group(job)
    return group.kind == GroupKind.TP_EP, group.per_domain


def compile_job(analysis: Analysis, findings: tuple[Finding, ...] = ()) -> Plan:
    """Lay out every rank of an analysed job. `findings` are the error findings of a forced
    compile, recorded in the plan."""
    job = analysis.plan
    grid = grid_of(job.layout)
    placement = place(grid, job.cluster.gpus_per_node, job.cluster.nvlink_domain)
    experts = expert_grid(job.layout) if job.model.moe is not None else None
    groups = process_groups(grid, job.layout.shard_group, experts, _dispatch(job))
    shard = index_in_group(groups.dp_shard, grid.world)
    table = _memory_table(job, groups.dp_shard.shape[1])
    return Plan(
        job=job,
        placement=placement,
        groups=groups,
        stages=_stages(job),
        shard=shard,
        memory=table,
        summary=_summary(job, analysis.memory, placement, shard, table),
        parameters=analysis.parameters,
        communication=analysis.ops,
        op_seconds=analysis.op_seconds,
        wires=analysis.wires,
        findings=findings,
    )


# ----------------------------------------------------------------------------- rendering


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def layout_record(plan: Plan) -> dict[str, object]:
    grid, lay = plan.placement.grid, plan.job.layout
    record: dict[str, object] = {
        "order": list(grid.order),
        "degrees": {axis: grid.size(axis) for axis in AXES},
        "strides": {axis: grid.stride(axis) for axis in AXES},
        "mesh_shape": list(grid.mesh_shape),
        "mesh_dim_names": list(grid.mesh_dim_names),
        "virtual_stages": lay.v,
        "stage_layers": [[list(chunk) for chunk in stage.layers] for stage in plan.stages],
        "sequence_parallel": lay.sp,
        "zero_stage": lay.zero,
        "data_shard": lay.data_shard,
    }
    if lay.c > 1 and lay.cp_comm != "p2p":
        # parallelism.cp_comm_type (ring attention, p2p, is what a plan without it runs), and
        # a2a+p2p's inner all-to-all size: what verify recomputes the exchange from.
        record["cp_comm_type"] = lay.cp_comm
        if lay.cp_comm == "a2a+p2p":
            record["cp_a2a_size"] = cp_a2a_size(plan.job)
    if plan.job.model.moe is not None:
        # The expert grid: same ranks and order (ep placed), tp = ETP, dp = EDP, cp = 1.
        record["expert"] = {
            "order": list(lay.expert_order),
            "degrees": dict(lay.expert_degrees),
            # parallelism.expert_dispatcher: what verify recomputes the exchanges from.
            "dispatcher": lay.dispatcher,
        }
    return record


def model_record(plan: Plan) -> dict[str, object]:
    """The model's shape, in Megatron's names: what `planc verify` recomputes bytes from."""
    mod = plan.job.model
    return {
        "layers": mod.L,
        "hidden": mod.h,
        "heads": mod.n,
        "kv_heads": mod.g,
        "head_dim": mod.k,
        "ffn_hidden": mod.f,
        "vocab": mod.V,
        "vocab_padded": padded_vocab(mod.V, plan.job.layout.t),
        "mlp": mod.mlp,
        "norm": mod.norm,
        "bias": mod.bias,
        "tied_embeddings": mod.tied,
        "position_embedding": mod.position,
        "max_seq_len": mod.max_seq_len,
        "stage_parameters": [share.total for share in plan.parameters],
        **_experts_record(plan),
    }


def _experts_record(plan: Plan) -> dict[str, object]:
    """QK-norm, attention sinks, the sliding window, latent attention, multi-token prediction
    and the experts, written only where the model has them (other plans unchanged)."""
    mod = plan.job.model
    record: dict[str, object] = {"qk_norm": True} if mod.qk_norm else {}
    if mod.sinks:
        record["attention_sinks"] = True
    if mod.window:
        record["sliding_window"] = mod.window
        if mod.full_every:
            record["full_attention_every"] = mod.full_every
    if mod.mla is not None:
        record["mla"] = {
            "q_lora_rank": mod.mla.q_lora,
            "kv_lora_rank": mod.mla.kv_lora,
            "qk_nope_head_dim": mod.mla.qk_nope,
            "qk_rope_head_dim": mod.mla.qk_rope,
            "v_head_dim": mod.mla.v_head,
        }
    if mod.mtp:
        record["mtp_layers"] = mod.mtp
    moe = mod.moe
    if moe is None:
        return record
    record["stage_expert_parameters"] = [share.expert_total for share in plan.parameters]
    moe_record: dict[str, object] = {
        "experts": moe.E,
        "top_k": moe.k,
        "expert_ffn_hidden": moe.f_e,
        "shared_experts": moe.E_s,
        "shared_expert_ffn_hidden": moe.f_s,
        "first_dense_layers": moe.first_dense,
        "layer_frequency": moe.frequency,
        "capacity_factor": moe.capacity_factor,
        "router_bias": moe.router_bias,
    }
    if moe.offset:  # written when set, as mtp_layers: plans of other models keep their bytes
        moe_record["layer_offset"] = moe.offset
    if moe.padded:  # written when set, as layer_offset
        moe_record["pad_to_capacity"] = True
    if moe.groups is not None and moe.group_k is not None:
        # Group-limited routing: the flex dispatchers' bytes follow from it.
        moe_record["router_groups"] = moe.groups
        moe_record["router_group_top_k"] = moe.group_k
    record["moe"] = moe_record
    return record


def muon_record(job: Plannable) -> dict[str, object]:
    """Muon's options, whether its layer-wise distributed optimizer runs
    (`planc.comm.schedule.layer_wise`) and whether it all-reduces the gradients whole
    (`layer_wise_all_reduce`, Megatron-Core before 0.18)."""
    tr = job.training
    return {
        "name": "muon",
        "tp_mode": tr.muon_tp_mode,
        "ns_steps": tr.muon_ns_steps,
        "split_qkv": tr.muon_split_qkv,
        "layer_wise": layer_wise(job),
        "gradients_all_reduced": layer_wise_all_reduce(job),
    }


def training_record(plan: Plan) -> dict[str, object]:
    """One step's shape: sequence, batch, micro-batches, dtypes on the wire, recompute."""
    job = plan.job
    tr = job.training
    return {
        "seq_len": tr.s,
        "micro_batch": tr.b,
        "global_batch": tr.B,
        "micro_batches": job.m,
        "precision": tr.precision,
        "activation_bytes": activation_bytes(job),
        "gradient_bytes": grad_bytes(job),
        "recompute": tr.recompute,
        # Megatron's --recompute-modules, written when not its default (plans of other runs
        # keep their bytes)
        **(
            {"recompute_modules": list(tr.recompute_modules)}
            if tr.recompute == "selective" and tr.recompute_modules != DEFAULT_RECOMPUTE_MODULES
            else {}
        ),
        "attention": tr.attention,
        # the loss's kernels where they are fused (their TP reductions differ), as below
        **({"cross_entropy_fusion": tr.loss_fusion} if tr.loss_fusion != "none" else {}),
        # written when set, as expert_routing: plans of other runs keep their bytes
        **({"repeat_kv": True} if tr.repeat_kv else {}),
        # written for Muon only: plans of Adam runs keep their bytes
        **({"optimizer": muon_record(job)} if tr.optimizer == "muon" else {}),
        "framework": tr.framework,
        # written when not the default, as layer_offset: plans of other runs keep their bytes
        **({"expert_routing": tr.expert_routing} if tr.expert_routing != "uniform" else {}),
        **quantized_record(plan),
    }


def quantized_record(plan: Plan) -> dict[str, object]:
    """Under an FP8/FP4 recipe, its number formats as `planc verify` recounts them (the GEMM
    data type, bits per element, a weight scale's block and bytes, whether the parameter
    all-gather moves them, whether the SP all-gathers do, the layers kept in BF16 at each end,
    the attention core's FP8 recipe where it runs in FP8); nothing otherwise."""
    q = plan.job.numerics.quantized
    if q is None:
        return {}
    record: dict[str, object] = {
        "recipe": q.recipe.value,
        "gemm": q.gemm.value,
        "data_bits": q.data_bits,
        "weight_scale_block": q.weight_scale_block,
        "scale_bytes": q.scale_bytes,
        "param_gather": q.gather_fp8,
        "bf16_layers": q.bf16_layers,
    }
    if q.tp_gather_fp8:
        # only when true, so other plans keep their bytes; the activations' scale block, whose
        # scales the gathers move with the data (0: one per tensor, not moved)
        record["tp_gather"] = True
        record["scale_block"] = q.scale_block
        if sp_amax_reduced(plan.job):
            record["tp_amax"] = True  # each quantized gather all-reduces its amax first
    if q.attention is not None:
        record["attention"] = q.attention.recipe.value  # only when set: other plans unchanged
    if q.output_proj:
        record["output_proj"] = True  # the LM head in the recipe (only when set, as above)
    return {"quantized": record}


def fabric_record(plan: Plan) -> list[dict[str, object]]:
    """The fabric's tiers, innermost first: what each op's `link` and each rank's wire bytes
    name, and what `planc verify` places the groups on."""
    return [_tier_record(tier) for tier in plan.job.cluster.fabric]


def _tier_record(tier: Tier) -> dict[str, object]:
    """One tier; `rail_aligned` only when true, so plans of fabrics without rails keep their
    bytes."""
    out: dict[str, object] = {
        "name": tier.name,
        "span": tier.span,
        "bandwidth_gbs": tier.bandwidth_gbs,
        "latency_us": tier.latency_us,
        "oversubscription": tier.oversubscription,
        "efficiency": tier.efficiency,
    }
    if tier.rail_aligned:
        out["rail_aligned"] = True
    return out


def _cluster_record(plan: Plan) -> dict[str, object]:
    cl = plan.job.cluster
    return {
        "gpu": cl.gpu.name,
        "nodes": cl.nodes,
        "gpus_per_node": cl.gpus_per_node,
        "nvlink_domain": cl.nvlink_domain,
        "fabric": fabric_record(plan),
        **({"pxn": True} if cl.fabric.pxn else {}),
        "hosts": list(cl.hosts),
    }


def _stage_fragment(stage: Stage) -> str:
    layers = _compact([list(chunk) for chunk in stage.layers])
    flags = (stage.embedding, stage.lm_head, stage.embedding_copy)
    embedding, lm_head, copy = (_compact(flag) for flag in flags)
    return f'"layers":{layers},"embedding":{embedding},"lm_head":{lm_head},"embedding_copy":{copy}'


def _memory_fragments(table: npt.NDArray[np.int64]) -> list[list[str]]:
    # Integers only, so formatting them directly is valid JSON; json.dumps per budget would
    # dominate rendering when d·c is large.
    def text(budget: list[int]) -> str:
        fields = ",".join(
            f'"{name}":{value}' for name, value in zip(MEMORY_FIELDS, budget, strict=True)
        )
        return "{" + fields + "}"

    return [[text(budget) for budget in stage] for stage in table.tolist()]


def _wire_text(wire: WireBudget) -> str:
    """One stage's wire bytes per tier: {"<tier>":{"sent":…,"received":…},…}, innermost first."""
    return (
        "{"
        + ",".join(
            f'{_compact(name)}:{{"sent":{w.sent},"received":{w.received}}}'
            for name, w in wire.tiers.items()
        )
        + "}"
    )


def _wire_fragments(plan: Plan) -> list[str]:
    return [f'"wire":{_wire_text(w)}' for w in plan.wires]


PIPELINE_ORDER = FLUSH_ORDER


def pipeline_record(job: Plannable) -> dict[str, object]:
    """The pipeline schedule by name, as a pattern: per stage, the warm-up, steady and cool-down
    counts of the named schedule (`planc.pipeline.registry`).

    The op list itself has 2·m·v entries per stage; the pattern and `PIPELINE_ORDER` give every
    one of them, so the plan stays the same size for any number of micro-batches.
    """
    lay, m = job.layout, job.m
    stages = []
    for r in range(lay.p):
        first, steady, last = pattern(lay.schedule, lay.p, m, lay.v, r)
        stages.append({"warmup": first, "steady": steady, "cooldown": last})
    return {
        "p": lay.p,
        "m": m,
        "v": lay.v,
        "schedule": lay.schedule.value,
        "order": definition(lay.schedule).order,
        "stages": stages,
    }


def communication_record(plan: Plan) -> dict[str, object]:
    """The communication schedule of one step and the pipeline's op order per stage.

    `ops[]`: one entry per (stage, group kind, op): calls per step, buffer bytes per call,
    bytes one rank sends per call (NCCL bus factor × buffer), link class, direction for
    pipeline sends, and α-β seconds per step. `pipeline`: the schedule pattern per stage.
    """
    job = plan.job
    record: dict[str, object] = {
        "ops": [op_record(op, plan.op_seconds[op]) for op in plan.communication]
    }
    if job.layout.p > 1:
        record["pipeline"] = pipeline_record(job)
    return record


def rank_lines(plan: Plan) -> list[str]:
    """One compact JSON object per rank, keys in a fixed order."""
    pl = plan.placement
    hosts = [_compact(host) for host in plan.job.cluster.hosts]
    stages = [_stage_fragment(stage) for stage in plan.stages]
    memory = _memory_fragments(plan.memory)
    wires = _wire_fragments(plan)
    c = pl.coords
    columns = zip(
        pl.node.tolist(),
        pl.local_rank.tolist(),
        pl.nvlink_domain.tolist(),
        c["tp"].tolist(),
        c["cp"].tolist(),
        c["dp"].tolist(),
        c["pp"].tolist(),
        plan.shard.tolist(),
        strict=True,
    )
    return [
        f'{{"rank":{rank},"node":{node},"host":{hosts[node]},"local_rank":{local},'
        f'"rail":{local},"nvlink_domain":{domain},'
        f'"coords":{{"tp":{tp},"cp":{cp},"dp":{dp},"pp":{pp}}},{stages[pp]},'
        f'"optimizer_shard":{shard},"memory":{memory[pp][shard]},{wires[pp]}}}'
        for rank, (node, local, domain, tp, cp, dp, pp, shard) in enumerate(columns)
    ]


# Up to this many ranks plan.json lists one record per rank and every group's members (about
# 560 bytes a rank: 73 MB at 131,072 ranks); above it, the compact form (docs/compile.md).
RECORDS_LIMIT = 131_072


def _ints(values: npt.NDArray[np.int64]) -> str:
    return "[" + ",".join(map(str, values.tolist())) + "]"


def _group_record(ranks: Ranks) -> str:
    """A group kind as starts + offsets when every group has the same shape (it always does
    for slices of the grid), else the member lists."""
    offsets = ranks[0] - ranks[0, 0] if ranks.size else ranks.reshape(-1)
    if ranks.size and np.array_equal(ranks - ranks[:, :1], np.broadcast_to(offsets, ranks.shape)):
        return f'{{"starts":{_ints(ranks[:, 0])},"offsets":{_ints(offsets)}}}'
    return _compact(ranks.tolist())


def _groups_lines(plan: Plan) -> str:
    compact = plan.world > RECORDS_LIMIT
    return ",\n".join(
        f'"{name}":{_group_record(ranks) if compact else _compact(ranks.tolist())}'
        for name, ranks in plan.groups.items()
    )


def rank_columns(plan: Plan) -> str:
    """The ranks as columns: every per-rank number as one list indexed by rank, memory and
    wire bytes as tables with a per-rank row, stage contents per pipeline rank (about 45 bytes a
    rank: 47 MB at 1,048,576 ranks)."""
    pl, p = plan.placement, plan.job.layout.p
    shards = plan.memory.shape[1]
    fields = plan.memory.reshape(p * shards, len(MEMORY_FIELDS))
    table, rows = np.unique(fields, axis=0, return_inverse=True)
    memory_row = rows.reshape(p, shards)[pl.coords["pp"], plan.shard]
    wire = "[" + ",".join(_wire_text(w) for w in plan.wires) + "]"
    columns = {
        "node": pl.node,
        "local_rank": pl.local_rank,
        "rail": pl.rail,
        "nvlink_domain": pl.nvlink_domain,
        **{axis: pl.coords[axis] for axis in AXES},
        "optimizer_shard": plan.shard,
        "memory_row": memory_row.astype(np.int64),
        "wire_row": pl.coords["pp"],
    }
    body = ",\n".join(f'"{name}":{_ints(values)}' for name, values in columns.items())
    stages = [
        {"layers": [list(c) for c in st.layers], "embedding": st.embedding, "lm_head": st.lm_head, "embedding_copy": st.embedding_copy}
        for st in plan.stages
    ]
    return (
        f'{{"encoding":"columns","count":{plan.world},"memory_fields":{_compact(list(MEMORY_FIELDS))},'
        f'"memory_table":{_compact(table.tolist())},"wire_table":{wire},'
        f'"stages":{_compact(stages)},\n"columns":{{\n{body}}}}}'
    )


def plan_json(plan: Plan) -> str:
    """plan.json: one rank per line up to RECORDS_LIMIT ranks, so it stays greppable and
    diffable; above it, ranks as columns and groups as starts + offsets, so it stays small."""
    head = {
        "format": PLAN_FORMAT,
        "format_version": FORMAT_VERSION,
        "planc_version": __version__,
        "name": plan.job.name,
        "world_size": plan.world,
    }
    sections = [
        _compact(head)[1:-1],
        f'"layout":{_compact(layout_record(plan))}',
        f'"cluster":{_compact(_cluster_record(plan))}',
        f'"model":{_compact(model_record(plan))}',
        f'"training":{_compact(training_record(plan))}',
        f'"summary":{_compact(dataclasses.asdict(plan.summary))}',
        f'"findings":{_compact([f.record() for f in plan.findings])}',
        f'"groups":{{\n{_groups_lines(plan)}}}',
        f'"communication":{_compact(communication_record(plan))}',
        '"ranks":'
        + (
            rank_columns(plan)
            if plan.world > RECORDS_LIMIT
            else "[\n" + ",\n".join(rank_lines(plan)) + "]"
        ),
    ]
    return "{" + ",\n".join(sections) + "}\n"


def coords_json(plan: Plan) -> str:
    """The few numbers a training script needs to recover its coordinates from RANK."""
    layout = layout_record(plan)
    record = {
        "format": COORDS_FORMAT,
        "format_version": COORDS_FORMAT_VERSION,
        "world_size": plan.world,
        "gpus_per_node": plan.job.cluster.gpus_per_node,
        "rule": "coord[axis] = RANK // strides[axis] % degrees[axis]",
        **{
            key: layout[key]
            for key in ("order", "degrees", "strides", "mesh_shape", "mesh_dim_names")
        },
        "stage_layers": layout["stage_layers"],
    }
    lines = [f"  {_compact(key)}: {_compact(value)}" for key, value in record.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"
