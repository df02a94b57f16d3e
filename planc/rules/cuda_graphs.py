"""What Megatron-Core refuses of training.cuda_graph, and its use under other frameworks.

Each check is one of TransformerConfig.__post_init__'s CUDA-graph assertions (megatron-core
0.19.2, megatron/core/transformer/transformer_config.py, "if self.cuda_graph_impl != 'none'")
or validate_args' (megatron/training/arguments.py), read as planc states the run: its recompute,
its dropout, its dispatcher and capacity, its activation offload. PLC048 runs them under
framework megatron; PLC051 says that DeepSpeed and torchtitan have no such setting.
"""

from __future__ import annotations

from collections.abc import Iterator

from planc.rules.base import Violation
from planc.spec.job import Job, dispatcher_of

WHERE = "training.cuda_graph"
PER_LAYER = ("local", "transformer_engine")


def megatron_cuda_graph(job: Job) -> Iterator[Violation]:
    """Megatron-Core's refusals of the graphs training.cuda_graph states, one reason each."""
    impl = job.training.cuda_graph_impl
    if impl is None:
        return
    reasons = [*_scope_refusals(job), *_recompute_refusals(job)]
    if impl in PER_LAYER and job.training.offload_activation_layers:
        reasons.append(
            f"offload.activations {job.training.offload_activation_layers}: 'CUDA graphs not "
            "supported with CPU offloading' (only full_iteration takes it)"
        )
    if reasons:
        yield Violation(
            WHERE,
            f"Megatron-Core refuses CUDA graphs {impl} of {_captured(job)}: " + "; ".join(reasons),
            "change training.cuda_graph's modules or impl as the reasons say, or leave "
            "cuda_graph out",
            ("training.recompute", "training.recompute_modules", "model.moe"),
        )


def _captured(job: Job) -> str:
    """What the graphs capture, in words: the modules, whole layers or the iteration."""
    modules = job.training.cuda_graph_modules
    if modules:
        return "modules " + ", ".join(modules)
    return "the iteration" if job.training.cuda_graph_impl == "full_iteration" else "whole layers"


def _scope_refusals(job: Job) -> list[str]:
    """The modules against the model and the dispatcher (TransformerConfig: 'cuda_graph_modules
    must be empty when cuda_graph_impl="full_iteration"', 'moe_preprocess cuda graph is only
    supported with moe_router cuda graph' — local adds the one missing —, 'moe cuda graph is
    only supported for MoE', 'mlp cuda graph is only supported for dense layers', 'moe_preprocess
    cuda graph is not supported when there are DtoH copies and synchronizations in the
    preprocess step': the alltoall dispatcher with a capacity factor and no padding, whose
    preprocess sums the routing map on the GPU and copies it to the host; padded to capacity it
    knows its counts on the host and is allowed: transformer_config.py:2506-2519 at core_v0.19.0,
    2006-2020 at 2edffadb)."""
    impl, modules, moe = (
        job.training.cuda_graph_impl,
        job.training.cuda_graph_modules,
        job.model.moe,
    )
    if impl == "full_iteration":
        return (
            ["full_iteration takes no modules ('cuda_graph_modules must be empty')"]
            if modules
            else []
        )
    out = []
    if impl == "transformer_engine" and "moe_preprocess" in modules and "moe_router" not in modules:
        out.append("moe_preprocess needs moe_router ('only supported with moe_router cuda graph')")
    routed = [m for m in modules if m in ("moe_router", "moe_preprocess")]
    if moe is None and routed:
        out.append(f"{' and '.join(routed)} on a model without experts ('only supported for MoE')")
    if moe is not None and "mlp" in modules and moe.moe_layers(job.model.L) == job.model.L:
        out.append("mlp, but every layer has experts ('only supported for dense layers')")
    if (
        moe is not None
        and "moe_preprocess" in modules
        and dispatcher_of(job) == "alltoall"
        and moe.capacity_factor is not None
        and not moe.padded
    ):
        out.append(
            "moe_preprocess with the alltoall dispatcher and a capacity factor without "
            "pad_to_capacity (its preprocessing copies to the host and synchronizes)"
        )
    return out


def _recompute_refusals(job: Job) -> list[str]:
    """Recompute against the graphs (TransformerConfig: 'full recompute is only supported with
    full iteration CUDA graph'; 'moe recompute is not supported with moe_router CUDA graph' under
    transformer_engine; a graphed recompute takes no random numbers: 'attention dropout is not
    supported with graphed attention recomputation', 'hidden dropout is not supported with
    graphed MLP/MoE recomputation'; a whole layer or full_iteration is graphed everywhere)."""
    tr, impl, modules = job.training, job.training.cuda_graph_impl, job.training.cuda_graph_modules
    if tr.recompute == "full":
        return [] if impl == "full_iteration" else ["recompute full needs full_iteration"]
    if tr.recompute != "selective":
        return []
    out = []
    recomputed = set(tr.recompute_modules)
    if impl == "transformer_engine" and "moe" in recomputed and "moe_router" in modules:
        out.append("recompute of moe with the moe_router graph under transformer_engine")
    whole = impl == "full_iteration" or not modules
    if job.model.dropout and "core_attn" in recomputed and (whole or "attn" in modules):
        out.append(f"dropout {job.model.dropout:g} with graphed core_attn recompute")
    if job.model.dropout and (
        ("mlp" in recomputed and (whole or "mlp" in modules)) or ("moe" in recomputed and whole)
    ):
        out.append(f"dropout {job.model.dropout:g} with graphed MLP or MoE recompute")
    return out


def cuda_graph_elsewhere(job: Job) -> Iterator[Violation]:
    """training.cuda_graph is Megatron-LM's (--cuda-graph-impl): DeepSpeed's and torchtitan's
    training loops capture no graphs (torchtitan's torch.compile runs its default mode)."""
    tr = job.training
    if tr.cuda_graph_impl is not None:
        yield Violation(
            WHERE,
            f"cuda_graph is Megatron-LM's --cuda-graph-impl: {tr.framework} captures no "
            "CUDA graphs of the training step",
            "leave cuda_graph out, or training.framework: megatron",
            ("training.framework",),
        )
