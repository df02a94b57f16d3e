"""Muon's optimizer step: the Newton-Schulz iterations on every matrix it updates.

Muon (Jordan et al. 2024; Liu et al. 2025, "Muon is Scalable for LLM Training", arXiv
2502.16982, Algorithm 1) orthogonalizes each 2-D weight's momentum M (m × n, m ≤ n, transposed
when taller than wide) by `ns_steps` quintic Newton-Schulz iterations (emerging_optimizers
muon_utils newton_schulz, which Megatron-Core's TensorParallelMuon calls):

    A = X·Xᵀ (2·m²·n FLOPs),  B = b·A + c·A·A (2·m³),  X ← a·X + B·X (2·m²·n)

so 5·(4·m²·n + 2·m³) FLOPs per matrix at Megatron's default of 5 steps. Under
--muon-fp32-matmul-prec medium (Megatron's default) newton_schulz casts the normalized fp32
momentum to bfloat16 before the iterations ("Using BF16 I/O kernels"), so the matmuls are
priced on the 16-bit GEMM curve with 2-byte operands.

Which ranks iterate on what (Megatron-Core --muon-tp-mode; emerging_optimizers
orthogonalized_optimizers/muon_utils.py newton_schulz_tp, NVIDIA-NeMo/Emerging-Optimizers
0001f6e2):
- blockwise (Megatron's default, OptimizerConfig.muon_tp_mode): each rank iterates on its own
  shard, no communication (TensorParallelMuon passes no partition_dim);
- duplicated: the momentum's tensor-parallel shards are all-gathered (fp32) and every TP rank
  iterates on the whole matrix;
- distributed: the iteration runs on each rank's shard with the split dimension as the Gram
  matrix's inner one (transposed when the rows are split), so m is the matrix's unsplit side
  whichever is shorter ("wastes compute" where that is the long one): per step X·Xᵀ over the
  local n/degree columns, an all-reduce of the m × m Gram matrix (bfloat16, as X is by then),
  A·A and B·X; one fp32 all-reduce of the squared norm first (distributed_normalize_p2).
A matrix no group splits (latent attention's down projections, the router) is whole everywhere.
With zero_stage 1 the layer-wise distributed optimizer hands each data-parallel rank whole
tensors to update (ping-pong by size, layer_wise_optimizer.py shard_params): planc charges each
rank the even share of the work, 1/N of the dense matrices' and 1/N_e of the experts'. The TP
exchanges are priced in the optimizer step but are not ops of plan.json's schedule: under the
layer-wise optimizer which matrices a rank exchanges differs from one data-parallel rank to the
next, where the schedule lists one stage's ops.
"""

from __future__ import annotations

from planc.memory.matrices import Matrix, stage_matrices
from planc.perf.compute import Device, work_time_s
from planc.perf.ops import GemmShape, OpCost, Work
from planc.plannable import Plannable
from planc.presets.efficiency import Efficiency
from planc.record import record
from planc.vocab import Collective

FP32_BYTES = 4


def ns_flops(rows: int, cols: int, steps: int) -> int:
    """steps·(4·m²·n + 2·m³), m = min(rows, cols), n = max: one matrix's Newton-Schulz FLOPs
    (module docstring)."""
    m, n = min(rows, cols), max(rows, cols)
    return steps * (4 * m * m * n + 2 * m**3)


# bytes of an operand of the iterations' matmuls: bfloat16 under --muon-fp32-matmul-prec medium
NS_BYTES = 2


def ns_gemms(m: int, n: int, split: int = 1) -> tuple[GemmShape, ...]:
    """One iteration's three matmuls on an m × n momentum (m ≤ n) whose n columns `split`
    ranks share: the Gram X·Xᵀ [m × n/split]·[n/split × m], A·A [m × m]·[m × m] and B·X
    [m × m]·[m × n/split]."""
    cols = -(-n // split)
    return GemmShape(m, m, cols), GemmShape(m, m, m), GemmShape(m, cols, m)


def gemm_work(shape: GemmShape) -> Work:
    """2·M·N·K FLOPs; the operands read and the product written, `NS_BYTES` each."""
    elements = shape.m * shape.k + shape.k * shape.n + shape.m * shape.n
    return Work(2.0 * shape.m * shape.n * shape.k, float(NS_BYTES * elements))


def ns_sides(matrix: Matrix, mode: str) -> tuple[int, int, int]:
    """(m, n, split): the Gram side m, the other side n and the ranks splitting n, as
    newton_schulz_tp iterates on `matrix` under TP mode `mode`: the local shard's short and
    long sides (blockwise), the whole matrix's (duplicated), or the unsplit side as m and the
    split one shared by the group (distributed)."""
    if mode == "blockwise":
        return min(matrix.rows, matrix.cols), max(matrix.rows, matrix.cols), 1
    rows, cols = matrix.whole
    if mode == "distributed" and matrix.split is not None and matrix.degree > 1:
        unsplit, split = (cols, rows) if matrix.split == 0 else (rows, cols)
        return unsplit, split, matrix.degree
    return min(rows, cols), max(rows, cols), 1


def matrix_ns_work(
    matrix: Matrix, mode: str, steps: int, device: Device, eff: Efficiency
) -> tuple[float, float]:
    """Seconds and FLOPs of `steps` Newton-Schulz iterations on one `matrix` on one rank under
    TP mode `mode` (`ns_sides`)."""
    seconds = flops = 0.0
    for shape in ns_gemms(*ns_sides(matrix, mode)):
        work = gemm_work(shape)
        op = OpCost("Muon Newton-Schulz", "matrix", work, Work(0, 0), shape=shape)
        seconds += work_time_s(op, work, device, eff)
        flops += work.flops
    return steps * seconds, steps * flops


@record
class MuonExchange:
    """A TP exchange Muon's mode needs per step: `calls` collectives over `degree` ranks of
    `bytes` each; under duplicated an all-gather of a matrix's fp32 momentum (`bytes` the
    gathered matrix), under distributed an all-reduce of the fp32 squared norm and, per step,
    of the m × m bfloat16 Gram matrix."""

    collective: Collective
    degree: int
    calls: float
    bytes: int
    expert: bool


@record
class MuonStep:
    """One rank's Muon work per step: its Newton-Schulz seconds and FLOPs, and the TP
    exchanges its mode needs (priced by the caller on the TP tier)."""

    ns_s: float
    ns_flops: float
    exchanges: tuple[MuonExchange, ...]


def muon_step(
    job: Plannable, pp_rank: int, device: Device, eff: Efficiency, shard: int, expert_shard: int
) -> MuonStep:
    """The Newton-Schulz work of one rank of pipeline rank `pp_rank` (`stage_matrices`), the
    dense matrices' share 1/`shard` and the experts' 1/`expert_shard` under the layer-wise
    distributed optimizer (1 and 1 without it: every rank updates all)."""
    tr = job.training
    mode, steps = tr.muon_tp_mode, tr.muon_ns_steps
    seconds = flops = 0.0
    exchanges: list[MuonExchange] = []
    for matrix, layers in stage_matrices(job, pp_rank).entries:
        share = layers * matrix.count / (expert_shard if matrix.expert else shard)
        time_s, work = matrix_ns_work(matrix, mode, steps, device, eff)
        seconds, flops = seconds + share * time_s, flops + share * work
        if matrix.split is None or matrix.degree == 1 or mode == "blockwise":
            continue
        if mode == "duplicated":
            whole = FP32_BYTES * matrix.local_elements * matrix.degree
            exchanges.append(
                MuonExchange(Collective.ALL_GATHER, matrix.degree, share, whole, matrix.expert)
            )
            continue
        m = ns_sides(matrix, mode)[0]
        for calls, size in ((share, FP32_BYTES), (share * steps, NS_BYTES * m * m)):
            exchanges.append(
                MuonExchange(Collective.ALL_REDUCE, matrix.degree, calls, size, matrix.expert)
            )
    return MuonStep(seconds, flops, tuple(exchanges))
