"""Static state: weights, gradients and optimizer state, by precision, optimizer and ZeRO stage.

Bytes per parameter (Ψ = parameters on the rank):

| setting                          | weights | gradients | optimizer                   | total |
|----------------------------------|---------|-----------|-----------------------------|-------|
| bf16/fp16 + Adam                 | 2       | 2         | 4 master + 4 m + 4 v = 12   | 16    |
| bf16/fp16 + Adam, grad_accum_fp32| 2       | 4         | 12                          | 18    |
| fp32 + Adam                      | 4       | 4         | 4 m + 4 v = 8               | 16    |
| bf16/fp16 + SGD (momentum)       | 2       | 2 (4)     | 4 master + 4 momentum = 8   | 12/14 |
| fp32 + SGD (momentum)            | 4       | 4         | 4 momentum                  | 12    |

16 is mixed-precision Adam as Rajbhandari et al. 2020 (ZeRO) §3.1 count it: 2Ψ + 2Ψ + KΨ with
K = 12 (fp32 master weights, momentum and variance).
18 is Megatron's bf16 with fp32 main gradients (docs/user-guide/features/dist_optimizer.md:
"bf16 params, fp32 grads: 18 bytes, 6 + 12/d with the distributed optimizer"): the 16-bit
gradient is accumulated straight into the fp32 main-grad buffer (gradient-accumulation fusion),
so no separate 16-bit gradient exists; the fp32 main grad replaces it (2 + 4 + 12).

ZeRO shards over the group of N = d·c ranks (Megatron's distributed optimizer shards over the
data × context group, intra_dp_cp): stage 1 the optimizer state, stage 2 also the gradients,
stage 3 also the weights. So with 16 bytes: 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N (ZeRO §5,
Fig. 1: P_os, P_os+g, P_os+g+p).
A shard is a contiguous range of the rank's flat Ψ_r-element buffer: ⌈Ψ_r/N⌉ elements for the
low shard indices, ⌊Ψ_r/N⌋ for the high ones.
"""

from __future__ import annotations

from planc.dims import Numerics
from planc.memory.terms import Component, Term, shard
from planc.record import record
from planc.vocab import OptimizerName

SOURCE_ADAM = "Rajbhandari et al. 2020, ZeRO §3.1 (mixed-precision Adam: 2 + 2 + 12 bytes/param)"
SOURCE_MEGATRON_18 = (
    "Megatron-LM docs dist_optimizer.md (bf16 params, fp32 main grads: 18 bytes/param)"
)
SOURCE_ZERO = "Rajbhandari et al. 2020, ZeRO §5 and Fig. 1 (P_os, P_os+g, P_os+g+p)"
SOURCE_PRECISION_AWARE = (
    "Megatron --use-precision-aware-optimizer --main-params-dtype, --exp-avg-dtype, "
    "--exp-avg-sq-dtype (TE FusedAdam, distrib_optimizer.py); DeepSeek-V3 (arXiv 2412.19437 "
    "§3.3.4): BF16 moments; Apex DistributedFusedAdam dtype (NeMo 1.0 optim.dtype): the "
    "parameter shard, exp_avg and exp_avg_sq in that format; Transformer Engine FusedAdam "
    "store_param_remainders (TE 2.1, Megatron-Core optimizer/__init__.py): the fp32 master "
    "as the 16 bits the bf16 weight lacks"
)


@record
class StateBytes:
    """Bytes per parameter of each static buffer for one precision/optimizer setting."""

    weights: int
    gradients: int
    master: int  # fp32 master copy; 0 when training in fp32
    moments: tuple[tuple[str, int], ...]  # optimizer moments: (name, bytes)
    label: str  # dtype of weights, for names: "bf16", "fp16", "fp32"
    grad_label: str
    master_label: str = "fp32"  # the master weights' and the moments' formats, for names
    moment_label: str = "fp32"
    muon: bool = False  # optimizer muon: its matrices keep one fp32 momentum in place of moments

    @property
    def optimizer(self) -> int:
        return self.master + sum(size for _, size in self.moments)

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer


def state_bytes(numerics: Numerics, optimizer: OptimizerName) -> StateBytes:
    """Bytes per parameter for the run's number formats and `optimizer` (adam|sgd|muon: Adam's
    moments here, for the parameters Muon leaves to Adam; `optimizer_terms` takes Muon's
    matrices out of them)."""
    size = numerics.moment
    moments = (("SGD momentum", 4),) if optimizer == "sgd" else (("Adam m", size), ("Adam v", size))
    return StateBytes(
        weights=numerics.weight,
        gradients=numerics.gradient,
        master=numerics.master,
        moments=moments,
        label=numerics.weight_label,
        grad_label=numerics.gradient_label,
        master_label=numerics.master_format,
        moment_label=numerics.moment_format.value if optimizer != "sgd" else "fp32",
        muon=optimizer == "muon",
    )


@record
class Group:
    """The ZeRO shard group as one rank sees it: N = d·c ranks, this rank's index, the stage.

    `symbol` names N in formulas: "N" for the dense shard group, "N_e" for the expert one
    (the expert data-parallel group, EDP/R)."""

    zero: int
    N: int
    index: int = 0
    symbol: str = "N"

    def __post_init__(self) -> None:
        if self.zero not in (0, 1, 2, 3) or self.N < 1:
            raise ValueError(f"bad ZeRO group: stage {self.zero}, N = {self.N}")
        shard(1, self.N, self.index)  # validates the index

    def elements(self, psi: int, sharded_from: int) -> int:
        """Ψ_r, or this rank's shard of it when the stage shards this buffer (stage ≥ sharded_from)."""
        return shard(psi, self.N, self.index) if self.zero >= sharded_from else psi

    def suffix(self, sharded_from: int) -> str:
        return f"/{self.symbol}" if self.zero >= sharded_from else ""


@record
class Part:
    """One flat parameter buffer of a rank and the group it is sharded over: the whole Ψ_r over
    N, or, on a mixture-of-experts rank, the dense part Ψ_d over N and the routed experts Ψ_e
    over N_e, which Megatron-Core, DeepSpeed and FSDP2 keep in buffers and optimizers of their
    own. `symbol` names its parameters in formulas, `prefix` its lines ("expert ")."""

    psi: int
    group: Group
    symbol: str = "Ψ_r"
    prefix: str = ""
    matrices: int = 0  # optimizer muon: Ψ_μ of them, the 2-D weights Muon updates


# ZeRO stage from which each buffer is sharded.
SHARD_OPTIMIZER, SHARD_GRADIENTS, SHARD_WEIGHTS = 1, 2, 3


def _term(
    name: str, component: Component, size: int, elements: int, formula: str, source: str
) -> Term:
    return Term(name, component, size * elements, formula, source)


def weight_bytes(psi: int, state: StateBytes, group: Group) -> int:
    """w·Ψ_r, or w·Ψ_r/N at ZeRO-3 (w = 2 for 16-bit weights, 4 for fp32)."""
    return state.weights * group.elements(psi, SHARD_WEIGHTS)


def gradient_bytes(psi: int, state: StateBytes, group: Group) -> int:
    """γ·Ψ_r, or γ·Ψ_r/N from ZeRO-2 (γ = 2 for 16-bit gradients, 4 for fp32 main grads)."""
    return state.gradients * group.elements(psi, SHARD_GRADIENTS)


def optimizer_bytes(psi: int, state: StateBytes, group: Group) -> int:
    """K·Ψ_r, or K·Ψ_r/N from ZeRO-1 (K = 12 for mixed-precision Adam: fp32 master, m, v)."""
    return state.optimizer * group.elements(psi, SHARD_OPTIMIZER)


def static_bytes(psi: int, state: StateBytes, group: Group) -> int:
    """Weights + gradients + optimizer state of one rank holding Ψ_r = `psi` parameters."""
    return (
        weight_bytes(psi, state, group)
        + gradient_bytes(psi, state, group)
        + optimizer_bytes(psi, state, group)
    )


def gradient_terms(
    psi: int, state: StateBytes, group: Group, symbol: str = "Ψ_r", prefix: str = ""
) -> tuple[Term, ...]:
    """The gradient buffer: 16-bit gradients, or fp32 main grads with grad_accum_fp32/fp32.
    `symbol` names the parameters in the formula (Ψ_r, or Ψ_d and Ψ_e for the dense and expert
    parts of a mixture-of-experts rank), `prefix` the line ("expert ")."""
    source = SOURCE_MEGATRON_18 if state.gradients == 4 and state.master else SOURCE_ADAM
    if group.zero >= SHARD_GRADIENTS:
        source += "; " + SOURCE_ZERO
    return (
        _term(
            f"{prefix}gradients ({state.grad_label})",
            "gradients",
            state.gradients,
            group.elements(psi, SHARD_GRADIENTS),
            f"{state.gradients}·{symbol}{group.suffix(SHARD_GRADIENTS)}",
            source,
        ),
    )


def optimizer_terms(
    psi: int,
    state: StateBytes,
    group: Group,
    symbol: str = "Ψ_r",
    prefix: str = "",
    matrices: int = 0,
) -> tuple[Term, ...]:
    """Master weights (mixed precision only) and the optimizer's moments, 4 bytes each in fp32, 2
    in 16 bits (training.optimizer_state).
    Under Muon (`state.muon`) its Ψ_μ = `matrices` keep one fp32 momentum buffer and the other
    Ψ − Ψ_μ Adam's m and v (`muon_terms`)."""
    elements = group.elements(psi, SHARD_OPTIMIZER)
    suffix = group.suffix(SHARD_OPTIMIZER)
    source = SOURCE_ADAM + ("; " + SOURCE_ZERO if group.zero >= SHARD_OPTIMIZER else "")
    if state.master_label != "fp32" or any(size != 4 for _, size in state.moments):
        source += "; " + SOURCE_PRECISION_AWARE
    lines = [(_master_name(state.master_label), state.master)] if state.master else []
    if not state.muon:
        lines += [(f"{name} ({state.moment_label})", size) for name, size in state.moments]
    own = tuple(
        _term(f"{prefix}{name}", "optimizer", size, elements, f"{size}·{symbol}{suffix}", source)
        for name, size in lines
    )
    if state.muon:
        return (*own, *muon_terms(psi, matrices, state, group, symbol, prefix, source))
    return own


def _master_name(label: str) -> str:
    """The master weights' line: 'fp32 master weights', or what their format keeps."""
    if label == "remainders":
        return "fp32 master remainders (16 bits)"
    return f"{label} master weights"


SOURCE_MUON = (
    "Megatron-Core optimizer/muon.py (muon_init_state_fn: momentum_buffer = zeros_like of the "
    "fp32 main parameter; Adam's exp_avg and exp_avg_sq for the rest) and "
    "layer_wise_optimizer.py LayerWiseDistributedOptimizer (zero_stage 1: whole tensors "
    "assigned to the data-parallel ranks; planc counts the even share)"
)


def muon_terms(
    psi: int,
    matrices: int,
    state: StateBytes,
    group: Group,
    symbol: str,
    prefix: str,
    source: str,
) -> tuple[Term, ...]:
    """Muon's state beside the master weights: 4·Ψ_μ of fp32 momentum for its matrices, and
    Adam's m and v over the Ψ − Ψ_μ it leaves to Adam (embedding, output layer, norms, biases).
    With zero_stage 1 each is this rank's share over N (the layer-wise distributed optimizer
    hands out whole tensors; the share is the even one)."""
    suffix = group.suffix(SHARD_OPTIMIZER)
    rest = psi - matrices
    lines = [(f"{prefix}Muon momentum (fp32)", 4, matrices, f"4·{symbol}_μ{suffix}")]
    lines += [
        (
            f"{prefix}{name} ({'fp32' if size == 4 else 'bf16'}, non-matrix parameters)",
            size,
            rest,
            f"{size}·({symbol} − {symbol}_μ){suffix}",
        )
        for name, size in state.moments
    ]
    return tuple(
        _term(
            name,
            "optimizer",
            size,
            group.elements(count, SHARD_OPTIMIZER),
            formula,
            f"{source}; {SOURCE_MUON}",
        )
        for name, size, count, formula in lines
        if count
    )


def weight_terms(
    parts: tuple[tuple[str, int, str], ...],
    state: StateBytes,
    group: Group,
    symbol: str = "Ψ_r",
    prefix: str = "",
) -> tuple[Term, ...]:
    """Weights by part (name, Ψ of the part, formula of Ψ), or one shard line at ZeRO-3.

    ZeRO-3 shards the rank's flat weight buffer as a whole, so the shard is of Ψ_r = Σ parts,
    not of each part: one line.
    """
    psi = sum(count for _, count, _ in parts)
    w = state.weights
    if group.zero >= SHARD_WEIGHTS:
        return (
            _term(
                f"{prefix}weights shard ({state.label})",
                "weights",
                w,
                group.elements(psi, SHARD_WEIGHTS),
                f"{w}·{symbol}/{group.symbol}",
                SOURCE_ADAM + "; " + SOURCE_ZERO,
            ),
        )
    return tuple(
        _term(f"{name} ({state.label})", "weights", w, count, f"{w}·{formula}", SOURCE_ADAM)
        for name, count, formula in parts
        if count
    )


def static_terms(
    psi: int,
    state: StateBytes,
    group: Group,
    parts: tuple[tuple[str, int, str], ...] | None = None,
    symbol: str = "Ψ_r",
    prefix: str = "",
    matrices: int = 0,
) -> tuple[Term, ...]:
    """All static lines of one buffer of Ψ = `psi` parameters (weights split into `parts` when
    given): a rank's whole state, or one of a mixture-of-experts rank's two, the dense part
    over N and the routed experts over N_e (`symbol` and `prefix` name them)."""
    weight_parts = parts if parts is not None else ((f"{prefix}weights", psi, symbol),)
    if sum(count for _, count, _ in weight_parts) != psi:
        raise ValueError(f"the weight parts do not add up to {symbol}")
    return (
        *weight_terms(weight_parts, state, group, symbol, prefix),
        *gradient_terms(psi, state, group, symbol, prefix),
        *optimizer_terms(psi, state, group, symbol, prefix, matrices),
    )
