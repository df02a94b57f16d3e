"""Checkpoint bytes and save, copy and load times, term by term from planc's memory budget.

What a checkpoint holds is what the memory budget already counts on each rank: the weights and
the optimizer state (fp32 master copy and moments), in HBM or offloaded to the host; gradients
and buffers are not saved. Per parameter, bf16 with Adam:

| saver (training.framework)           | saved per rank                      | per parameter |
|--------------------------------------|-------------------------------------|---------------|
| megatron-dist (Megatron-Core)        | 2Ψ_r/R_save + 12Ψ_r/N               | 14 B          |
| deepspeed-zero (DeepSpeed)           | 2Ψ_r (data-parallel rank 0) + 12Ψ_r/N | 14 B        |
| torch-dcp (FSDP2)                    | 4Ψ_r/N + 8Ψ_r/N                     | 12 B          |

R_save is the number of data-parallel replicas that split the save of the replicated 16-bit
weights: d·c with Megatron's fully parallel save (`--ckpt-fully-parallel-save`, Megatron-Core
dist_checkpointing FullyParallelSaveStrategyWrapper), 1 without it and under DeepSpeed, whose
`mp_rank_XX_model_states.pt` is written by data-parallel rank 0 (DeepSpeed
runtime/engine.py `_save_checkpoint`; the ZeRO shards go to `zero_pp_rank_*_optim_states.pt`,
one per rank). Experts split the same way over EDP. Sharded state held by R = d·c/N replicas
(HSDP) is saved once: torch DCP deduplicates replicated items across ranks
(`dedup_save_plans`), Megatron's fully parallel save splits them too. Sources: NeMo Speech
#9967 and Hugging Face transformers #22822 (optimizer state makes checkpoints about six times
the model), torchtitan docs/checkpoint.md (fp32 parameters and moments; model-only exports).
"""

from __future__ import annotations

from planc.dims import ceil_div
from planc.memory import MemoryBudget
from planc.memory.terms import Term
from planc.plannable import Plannable
from planc.record import record

GB = 10**9
SAVED_COMPONENTS = frozenset({"weights", "optimizer"})


@record
class RankCheckpoint:
    """What one rank of a stage writes to a checkpoint: its replicated weights (split over
    `weights_writers` replicas), its own shards, the sum; and `resident`, the saved terms as the
    memory budget holds them (what an asynchronous save copies to host memory)."""

    stage: int
    replicated: int  # bytes of replicated weights this rank holds
    sharded: int  # bytes of sharded state (optimizer; weights under ZeRO-3 / FSDP2)
    written: int  # bytes the writing rank saves: replicated / writers + sharded / replicas
    resident: int  # Σ saved terms of the budget: what an asynchronous save stages on the host
    mean: float  # bytes per rank of the stage on average (the stage's total / its ranks)


@record
class CheckpointSize:
    """One checkpoint: every stage's writing rank, the most any rank and any node writes, the
    total, and a model-only export."""

    stages: tuple[RankCheckpoint, ...]
    rank_bytes: int  # S_rank: the most one rank writes
    node_bytes: int  # S_node = G · S_rank: the most one node writes
    total_bytes: int  # S_total: the whole checkpoint
    model_only_bytes: int  # 16-bit weights alone: 2Ψ (a model-only export)


def saved(term: Term) -> bool:
    """A term a checkpoint holds: weights and optimizer state (not gradients, activations,
    buffers or the reserve)."""
    return term.component in SAVED_COMPONENTS


def weights_sharded(plan: Plannable) -> bool:
    """The weights are sharded over N (ZeRO-3, or FSDP2's fully_shard), so each rank saves its
    own shard; otherwise every data-parallel replica holds them whole."""
    return plan.layout.zero >= 3 or plan.training.framework == "fsdp2"


def weight_writers(plan: Plannable, expert: bool) -> int:
    """R_save: the replicas that split the save of a replicated weight: d·c (EDP for experts)
    under Megatron's fully parallel save, else 1 (data-parallel rank 0 writes them)."""
    checkpoint = plan.run.checkpoint
    fully = checkpoint is not None and checkpoint.fully_parallel
    if plan.training.framework != "megatron" or not fully:
        return 1
    return plan.layout.edp if expert else plan.layout.d * plan.layout.c


def holders(plan: Plannable, expert: bool) -> int:
    """The ranks of one stage coordinate that hold the same replicated weight: d·c (dense) or
    EDP (experts)."""
    return plan.layout.edp if expert else plan.layout.d * plan.layout.c


def shard_replicas(plan: Plannable, expert: bool) -> int:
    """R: the groups holding the same shard (HSDP), d·c/N (EDP/N_e for experts); the shard is
    saved once, split over them by DCP's and Megatron's deduplication (DeepSpeed: each rank)."""
    lay = plan.layout
    if plan.training.framework == "deepspeed":
        return 1
    return lay.edp // lay.expert_shard_group if expert else lay.replicas


def _is_expert(term: Term) -> bool:
    return term.name.startswith("expert ")


def rank_checkpoint(plan: Plannable, stage: int, terms: tuple[Term, ...]) -> RankCheckpoint:
    """The writing rank of a stage (data-parallel coordinate 0, the heaviest): S_rank =
    Σ_replicated w/R_save + Σ_sharded s/R, the terms being the budget's saved ones (HBM and
    host). `mean` is what a rank of the stage writes on average: Σ w/holders + Σ s/R."""
    shard = weights_sharded(plan)
    kept = [t for t in terms if saved(t)]
    replicated = [t for t in kept if t.component == "weights" and not shard]
    sharded = [t for t in kept if t not in replicated]
    written = sum(ceil_div(t.bytes, weight_writers(plan, _is_expert(t))) for t in replicated)
    written += sum(ceil_div(t.bytes, shard_replicas(plan, _is_expert(t))) for t in sharded)
    mean = sum(t.bytes / holders(plan, _is_expert(t)) for t in replicated)
    mean += sum(t.bytes / shard_replicas(plan, _is_expert(t)) for t in sharded)
    return RankCheckpoint(
        stage=stage,
        replicated=sum(t.bytes for t in replicated),
        sharded=sum(t.bytes for t in sharded),
        written=written,
        resident=sum(t.bytes for t in kept),
        mean=mean,
    )


def checkpoint_size(plan: Plannable, memory: MemoryBudget) -> CheckpointSize:
    """One checkpoint of `plan`: every stage's writing rank from its budget; S_node =
    G·max S_rank (the ranks of a node write together; conservative when they belong to
    different stages); S_total = Σ_stages (W/p)·mean; the export 2Ψ (16-bit weights)."""
    stages = tuple(
        rank_checkpoint(plan, s.stage, s.memory.terms + s.memory.host_terms) for s in memory.stages
    )
    rank_bytes = max(s.written for s in stages)
    ranks_per_stage = plan.world // plan.layout.p
    return CheckpointSize(
        stages=stages,
        rank_bytes=rank_bytes,
        node_bytes=plan.cluster.gpus_per_node * rank_bytes,
        total_bytes=round(sum(ranks_per_stage * s.mean for s in stages)),
        model_only_bytes=2 * memory.parameters,
    )


def transfer_s(total: int, node: int, aggregate_gbs: float, node_gbs: float | None) -> float:
    """T = max(S_total/B, S_node/B_node) seconds: the file system's aggregate bandwidth B and
    one node's B_node (GB/s = 10⁹ B/s) each bound a transfer (landscape 2026-12-01 §5.2,
    derived; torchtitan #1301 and Megatron-LLM #69 report minutes where the aggregate alone
    would give seconds, which is the per-node bound)."""
    slowest = total / (aggregate_gbs * GB)
    if node_gbs is not None:
        slowest = max(slowest, node / (node_gbs * GB))
    return slowest


def host_copy_s(rank_bytes: int, host_gbs: float) -> float:
    """T_block = S_rank/B_D2H seconds: an asynchronous save blocks the step only while each
    rank copies its state to pinned host memory at its device-to-host bandwidth (PyTorch async
    DCP recipe: async_save "works by first copying models into internal CPU-buffers"). planc
    stages the whole saved state of the rank (`RankCheckpoint.resident`: DCP stages the state
    dict before deduplicating replicated items), so S_rank here is that, not the bytes written."""
    return rank_bytes / (host_gbs * GB)
