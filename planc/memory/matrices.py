"""The 2-D weights of a rank, matrix by matrix: what Muon orthogonalizes.

Megatron-Core's Muon (optimizer/muon.py get_megatron_muon_optimizer, Megatron-Core 0.17;
emerging_optimizers.py _is_muon_excluded from 0.18) takes every parameter with two dimensions
that is not the word embedding or the output layer, the two that LanguageModule marks
`is_embedding_or_output_parameter` (a learned position embedding is 2-D and unmarked: Muon's);
the rest, norms, biases and the two marked, go to Adam. Each weight is [out, in] as
Megatron stores it; a column-parallel linear splits `out` over its tensor-parallel group (split
0), a row-parallel one `in` (split 1), a duplicated one (latent attention's down projections,
the router) is whole on every rank.

Symbols as in `planc.memory.params`: h hidden, n/g query/key-value heads, k channels per head,
f MLP inner size (γ' = 2 fused gate and up rows for SwiGLU, 1 for GeLU), E routed experts of
f_e, E_s shared experts of f_s, d_c / d_c' the key-value / query latents, d_h and d_h^R the
per-head channels without and with RoPE, d_v the value channels; t tensor-parallel and ETP
expert-tensor-parallel degree, EP expert parallelism.
"""

from __future__ import annotations

from planc.memory.terms import ceil_div
from planc.plannable import Plannable
from planc.record import record
from planc.spec.job import Model
from planc.vocab import gated


@record
class Matrix:
    """One weight matrix of a layer on one rank, `count` of them: its local shape
    `rows` × `cols`, and the dimension its group of `degree` ranks splits (0 rows, 1 columns,
    None: whole on every rank)."""

    name: str
    rows: int
    cols: int
    split: int | None = None
    degree: int = 1
    count: int = 1
    expert: bool = False

    @property
    def local_elements(self) -> int:
        """Elements of one such matrix on this rank."""
        return self.rows * self.cols

    @property
    def whole(self) -> tuple[int, int]:
        """The matrix gathered over its group: rows × degree (split 0) or cols × degree
        (split 1); the local shape where nothing splits it."""
        if self.split == 0:
            return self.rows * self.degree, self.cols
        if self.split == 1:
            return self.rows, self.cols * self.degree
        return self.rows, self.cols


def _gated(model: Model) -> int:
    """γ': fc1's rows per inner channel, 2 for SwiGLU (gate and up fused), 1 for GeLU."""
    return 2 if gated(model.mlp) else 1


def attention_matrices(model: Model, t: int, split_qkv: bool) -> tuple[Matrix, ...]:
    """The attention projections on one TP rank. Latent attention: q_down [d_c', h] and
    kv_down [d_c + d_h^R, h] whole, q_up [n/t·(d_h + d_h^R), d_c'] (q_proj [.., h] without a
    query latent) and kv_up [n/t·(d_h + d_v), d_c] column-parallel, proj [h, n/t·d_v]
    row-parallel. Otherwise the fused QKV [(n/t + 2g/t)·k, h], as Q [n/t·k, h], K and V
    [g/t·k, h] each with `split_qkv`, and proj [h, n/t·k]."""
    h, n_t = model.h, ceil_div(model.n, t)
    mla = model.mla
    if mla is not None:
        query = (
            (Matrix("linear_q_proj", n_t * mla.qk_head, h, 0, t),)
            if mla.q_lora is None
            else (
                Matrix("linear_q_down_proj", mla.q_lora, h),
                Matrix("linear_q_up_proj", n_t * mla.qk_head, mla.q_lora, 0, t),
            )
        )
        return (
            *query,
            Matrix("linear_kv_down_proj", mla.kv_lora + mla.qk_rope, h),
            Matrix("linear_kv_up_proj", n_t * (mla.qk_nope + mla.v_head), mla.kv_lora, 0, t),
            Matrix("linear_proj", h, n_t * mla.v_head, 1, t),
        )
    k, g_t = model.k, ceil_div(model.g, t)
    qkv = (
        (
            Matrix("linear_qkv (Q)", n_t * k, h, 0, t),
            Matrix("linear_qkv (K)", g_t * k, h, 0, t),
            Matrix("linear_qkv (V)", g_t * k, h, 0, t),
        )
        if split_qkv
        else (Matrix("linear_qkv", (n_t + 2 * g_t) * k, h, 0, t),)
    )
    return (*qkv, Matrix("linear_proj", h, n_t * k, 1, t))


def mlp_matrices(
    model: Model, inner: int, degree: int, prefix: str = "", count: int = 1, expert: bool = False
) -> tuple[Matrix, ...]:
    """An MLP of inner size `inner` split `degree` ways: fc1 [γ'·inner/degree, h]
    column-parallel, fc2 [h, inner/degree] row-parallel; `count` of them."""
    local = ceil_div(inner, degree)
    return (
        Matrix(f"{prefix}linear_fc1", _gated(model) * local, model.h, 0, degree, count, expert),
        Matrix(f"{prefix}linear_fc2", model.h, local, 1, degree, count, expert),
    )


def layer_matrices(
    model: Model, t: int, moe_layer: bool, ep: int = 1, et: int = 1, split_qkv: bool = True
) -> tuple[Matrix, ...]:
    """One layer's 2-D weights on one rank: its attention's and a dense MLP's, or in a MoE
    layer the router [E, h] (whole: TopKRouter is not tensor-parallel), the shared experts'
    MLP of E_s·f_s split over t and the rank's E/EP routed experts, each split ETP ways."""
    attention = attention_matrices(model, t, split_qkv)
    moe = model.moe
    if not moe_layer or moe is None:
        return (*attention, *mlp_matrices(model, model.f, t))
    shared = mlp_matrices(model, moe.E_s * moe.f_s, t, "shared_experts.") if moe.E_s else ()
    experts = mlp_matrices(model, moe.f_e, et, "experts.", moe.E // ep, expert=True)
    return (*attention, Matrix("router", moe.E, model.h), *shared, *experts)


@record
class StageMatrices:
    """The 2-D weights of one rank of pipeline rank r: each matrix with the layers holding it
    (`layers` × `Matrix.count` of each)."""

    entries: tuple[tuple[Matrix, int], ...]

    def elements(self, expert: bool) -> int:
        """Ψ_μ: the elements Muon updates, of the routed experts (`expert`) or the rest."""
        return sum(
            layers * m.count * m.local_elements for m, layers in self.entries if m.expert == expert
        )


def stage_matrices(job: Plannable, pp_rank: int) -> StageMatrices:
    """Every 2-D weight Muon takes on one rank of pipeline rank `pp_rank`: its dense and MoE
    layers' (`layer_matrices`), and on the last stage each multi-token prediction module's
    layer and eh_proj [h/t, 2h] (column-parallel), and on the first a learned position
    embedding [max_seq_len, h] (whole on every TP rank). The word embedding and output layer are
    Adam's."""
    model, lay = job.model, job.layout
    split = job.training.muon_split_qkv
    mtp, mtp_moe = job.mtp_modules(pp_rank)
    moe_layers = job.moe_layers(pp_rank) + mtp_moe
    dense_layers = lay.stage_layers[pp_rank] + mtp - moe_layers
    entries: list[tuple[Matrix, int]] = []
    for layers, moe in ((dense_layers, False), (moe_layers, True)):
        if layers:
            entries += [
                (m, layers) for m in layer_matrices(model, lay.t, moe, lay.ep, lay.et, split)
            ]
    if pp_rank == 0 and model.position == "learned":
        entries.append((Matrix("position_embeddings", model.max_seq_len, model.h), 1))
    if mtp:
        entries.append((Matrix("eh_proj", ceil_div(model.h, lay.t), 2 * model.h, 0, lay.t), mtp))
    return StageMatrices(tuple(entries))
