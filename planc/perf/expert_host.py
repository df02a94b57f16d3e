"""The time per local expert a software release spends in each MoE layer beyond its GPU work
(`training.framework_release`; issue 24; docs/explain.md, "MoE runs of 2025's software").

Transformer Engine 2.10's GroupedLinear (NeMo 25.11) handles a rank's E/EP local experts one by
one on the host: it quantizes each expert's input (`tex.split_quantize`), fetches or refreshes
each expert's weight workspace, and issues one GEMM per expert (`general_grouped_gemm` over
`m_splits`), forward, and the data and weight gradients' two per expert backward. On the
dropless runs of that release the time the step model leaves unpriced is a constant per local
expert, layer and micro-batch, whatever the tokens (0.38 to 0.45 ms on Blackwell MXFP8 at 4,096
to 16,384 tokens per micro-batch and 16 or 32 experts a rank): a time that does not overlap the
GPU's work, so it is added, not compared with it.

    t_host = τ_e · E/EP per MoE layer and micro-batch; a third of it forward, two thirds
             backward (one GEMM per expert and linear forward, two backward)

τ_e is `Efficiency.expert_host` of the job's release and recipe (`release_key`), the value
planc/presets/releases.json fits (`planc.presets.releases`); 0 where it has none, as for the
software planc targets (`latest`), and 0 where a CUDA graph holds the routed experts
(`EXPERTS_GRAPHED`): the graph replays their kernels without the host.
"""

from __future__ import annotations

from planc.plannable import Plannable
from planc.presets.efficiency import Efficiency
from planc.presets.releases import recipe_key

# The forward's share of an expert's host time: 1 of its 3 GEMMs per linear.
FORWARD_SHARE = 1 / 3
# The CUDA graph implementations that hold a MoE layer's routed experts: Megatron-Core's own
# per-layer graphs (static shapes: its MoE layers drop and pad) and the full-iteration graph.
# Transformer Engine's partial graphs (attn, moe_router, moe_preprocess) leave them to the host.
EXPERTS_GRAPHED = frozenset({"local", "full_iteration"})


def release_key(job: Plannable) -> tuple[str, str] | None:
    """(release, recipe of the expert GEMMs) whose τ_e prices the job's MoE layers: Megatron-LM's
    only (the releases are NeMo containers); None for a dense model or another framework."""
    tr = job.training
    if job.model.moe is None or tr.framework != "megatron":
        return None
    return tr.framework_release, recipe_key(None if tr.fp8_recipe is None else tr.fp8_recipe.value)


def experts_graphed(job: Plannable) -> bool:
    """Whether a CUDA graph holds the job's routed experts (`EXPERTS_GRAPHED`)."""
    return job.training.cuda_graph_impl in EXPERTS_GRAPHED


def tau_e(job: Plannable, eff: Efficiency) -> float:
    """τ_e of the job under `eff`: seconds per local expert per MoE layer and micro-batch; 0
    where a graph holds the experts."""
    key = release_key(job)
    if key is None or experts_graphed(job):
        return 0.0
    return eff.expert_host.get(key, 0.0)


def expert_host_per_layer(job: Plannable, eff: Efficiency) -> tuple[float, float]:
    """(forward, backward) seconds one MoE layer spends per micro-batch on its local experts
    beyond its GPU work: τ_e · E/EP, split as `FORWARD_SHARE` says; (0, 0) for a dense model or
    where the release costs nothing per expert."""
    experts = job.dims.experts
    tau = tau_e(job, eff)
    if experts is None or tau == 0.0:
        return 0.0, 0.0
    total = tau * (experts.E // experts.ep)
    return FORWARD_SHARE * total, (1 - FORWARD_SHARE) * total
