"""What a run is known to spend that the step model does not price (issue 24).

Each `Unpriced` mechanism has a predicate on the job and the words `planc explain` prints under
the step time. The validation corpus is grouped by them as well (`planc.perf.validation`,
axis "unpriced"), so the words come with planc's error on the published runs that have the same
mechanism (`planc.presets.accuracy.unpriced_words`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from planc.perf.expert_host import experts_graphed, release_key
from planc.plannable import Plannable
from planc.presets.accuracy import unpriced_words
from planc.vocab import ROWWISE_RECIPES, Unpriced

# The fewest context-parallel ranks of torch's ring at which the corpus shows its unpriced cost.
WIDE_RING = 4

WHAT: Mapping[Unpriced, str] = MappingProxyType(
    {
        Unpriced.HOST_LAUNCHES: (
            "the host's kernel launches. No CUDA graph of this MoE run holds its routed experts "
            "(training.cuda_graph: none, or Transformer Engine's partial graphs), so the host "
            "launches them each micro-batch, after the dispatcher's synchronisation where it "
            "has one (dropless, or a capacity factor without pad_to_capacity); on 256 GB200 "
            "NVIDIA measured graphs of attention, router and preprocessing saving 2.1 ms per "
            "layer and micro-batch of DeepSeek-V3, and found the routed experts still "
            "host-bound after them (docs/explain.md)"
        ),
        Unpriced.GRAPHED_EXPERT_KERNELS: (
            "what the routed experts' kernels cost the GPU beyond the GEMM curve's price. This "
            "release's Transformer Engine runs one GEMM and one quantization per local expert "
            "(GroupedLinear up to 2.16); a CUDA graph holds them, so planc adds none of the "
            "release's time per expert, which it fits on runs without graphs and cannot split "
            "into the host's part, which the graph removes, and the GPU's, which it does not "
            "(docs/explain.md)"
        ),
        Unpriced.ROWWISE: (
            "torchao's rowwise scaling beyond its casts and its backward rescale where no "
            "measured speed-up covers the recipe on this GPU (planc/presets/fp8.json "
            "linear_speedup: rowwise on Hopper only): PyTorch's CUTLASS rowwise GEMM runs at 50 "
            "to 100 % of cuBLAS's per-tensor rate by shape (pytorch/pytorch #147971)"
        ),
        Unpriced.WIDE_TORCH_RING: (
            "what makes torch's ring attention slower per unit of attention at four or more "
            "context-parallel ranks than at one or two (torchtitan's December 2024 benchmark: "
            "1.5 times the per-rank attention time of CP 2 at CP 4 and 8; validation/README.md)"
        ),
    }
)


def unpriced_of(job: Plannable) -> tuple[Unpriced, ...]:
    """The mechanisms of `Unpriced` that `job` has, in the vocabulary's order."""
    tr = job.training
    q = job.numerics.quantized
    # a Megatron-LM MoE run, and the release its experts run under
    key = release_key(job)
    graphed = experts_graphed(job)
    found = {
        Unpriced.HOST_LAUNCHES: key is not None and not graphed,
        Unpriced.GRAPHED_EXPERT_KERNELS: key is not None and key[0] != "latest" and graphed,
        Unpriced.ROWWISE: q is not None
        and q.recipe in ROWWISE_RECIPES
        and q.linear_speedup is None,
        Unpriced.WIDE_TORCH_RING: tr.framework == "fsdp2" and job.layout.c >= WIDE_RING,
    }
    return tuple(mechanism for mechanism in Unpriced if found[mechanism])


def said(mechanism: Unpriced) -> str:
    """What `mechanism` is (`WHAT`), and planc's error on the validated runs that have it where
    enough do (`planc.presets.accuracy.unpriced_words`)."""
    measured = unpriced_words(str(mechanism))
    return WHAT[mechanism] + (f"; {measured}" if measured else "")
