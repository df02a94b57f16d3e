"""torchtitan's per-op selective activation checkpointing (`training.recompute: selective-op`).

torchtitan wraps each transformer block in a checkpoint whose policy is (torchtitan
parallelisms/parallelize_llama.py `_apply_ac_to_transformer_block`, commit 9dec370, the one its
December 2024 benchmark names; `selective_ac_option = 'op'` in its llama3_8b.toml):

    save the outputs of aten.mm, SDPA (flash or efficient) and the c10d reduce-scatter,
    except every second aten.mm of the block (the policy counts them, 1, 2, 3, ...; an even
    count is recomputed); recompute everything else.

So the backward of a block re-runs its forward but for the saved ops. In the Llama block the
aten.mm calls run in the order wq, wk, wv (attention), wo, w1, w3, w2 (the feed-forward
w2(silu(w1(x)) · w3(x)), evaluated left to right): wq, wv, w1 and w2 are saved; wk, wo and w3
are recomputed, with every norm, rotary embedding, activation and residual add. The layer's
ops (planc.perf.ops.layer_ops) fuse some of those matmuls: `qkv` is wq, wk, wv ((n + 2g)·k/t
columns: n·k, g·k, g·k) and a SwiGLU layer's `mlp fc1` is w1, w3 (f/t columns each); every other
matrix op is one aten.mm. The recomputed share of a fused op is its recomputed columns over all
its columns (the matmuls share rows and inner size, so time goes with columns). Priced as
torchtitan runs them (`planc.perf.inputs.separate_projections`), wq, wk, wv and w1, w3 are ops
of their own, one aten.mm each.

Layers other than the dense GQA block (latent attention, MoE experts, whose grouped GEMMs are
not aten.mm) are counted with the same rule, one aten.mm per matrix op: an approximation the
sources above do not cover.
"""

from __future__ import annotations

from collections.abc import Sequence

from planc.perf.ops import OpCost, OpShape

# What torch's non-reentrant checkpoint does not recompute of a block (`OpShape.early_stop`).
# Eager, it re-runs the block's forward until the last tensor the backward saves is packed
# again and stops there ('stops recomputation as soon as all needed intermediate activations
# have been recomputed', torch/utils/checkpoint.py): the MLP's down projection, w2, still runs
# (its backward node packs its input as it is created), and what follows it does not, the TP
# collective on w2's output and the block's closing residual add (their backward saves
# nothing). Compiled, the partitioner builds the recomputation from what the backward reads
# (torch/_functorch/partitioners.py): w2's input and weight, not its output, so w2 and the
# casts of its forward are not recomputed either (in a MoE layer the shared experts' w2, whose
# output joins the routed output in a sum).
UNREAD_DOWN = "mlp fc2"
UNREAD_RESIDUAL = "MLP dropout + residual"
# Under the per-op policy, compiled, with sequence parallelism the attention output
# projection, wo, is not recomputed either: its output only feeds the reduce-scatter, whose
# output the policy saves.
UNREAD_BEFORE_SAVED_SCATTER = "attention output"

SAVED_ENGINES = ("attention", "cudnn", "cudnn-fp8", "cudnn-mxfp8", "sdpa")  # SDPA flash/efficient attention: MUST_SAVE
# The vector ops of a gated layer (fused and eager), which make its `mlp fc1` two matmuls.
SWIGLU_OPS = ("swiglu", "quick-geglu", "swiglu (eager)")


def mm_calls(op: OpCost, shape: OpShape, gated: bool) -> tuple[float, ...]:
    """The output columns of each aten.mm that matrix op `op` runs, in call order: qkv's wq,
    wk, wv (n·k/t, g·k/t, g·k/t); a SwiGLU layer's fc1 w1, w3 (f/t each); any other one."""
    if op.name == "qkv":
        kv = float(shape.kv_heads * shape.k)
        return (float(shape.heads * shape.k), kv, kv)
    cols = float(op.shape.n) if op.shape is not None else 1.0
    if op.name == "mlp fc1" and gated:
        return (cols / 2, cols / 2)
    return (cols,)


def of_op(op: OpCost, name: str) -> bool:
    """Whether `op` is the op `name` or one of its casts (`planc.perf.ops.quantization`)."""
    return op.name == name or op.name.startswith(name + " quantize (")


def unread_tail(ops: Sequence[OpCost], shape: OpShape) -> tuple[float, ...]:
    """1 for each of one block's ops (in forward order) that torch's non-reentrant checkpoint
    does not recompute under full activation checkpointing because no backward reads its
    output: the block's closing residual add (`UNREAD_RESIDUAL`) and, compiled, the MLP down
    projection just before it (`UNREAD_DOWN`, with its casts), walking back from the end; 0 for
    every op where the blocks are not checkpointed that way (`OpShape.early_stop`)."""
    marks = [0.0] * len(ops)
    if not shape.early_stop or not ops or ops[-1].name != UNREAD_RESIDUAL:
        return tuple(marks)
    marks[-1] = 1.0
    i = len(ops) - 2
    while shape.compiled and i >= 0 and of_op(ops[i], UNREAD_DOWN):
        marks[i] = 1.0
        i -= 1
    return tuple(marks)


def recomputed_shares(ops: Sequence[OpCost], shape: OpShape) -> tuple[float, ...]:
    """The share of each op's forward that the policy recomputes, in `ops` order (one block's
    ops in forward order, of one rank's `shape`): 0 for SDPA, 1 for every op outside the save
    list (norms, rotary, activations, residual adds, eager attention's aten.bmm), and for a
    matrix op the columns of its
    even-numbered aten.mm calls (the block's count) over all its columns."""
    gated = any(op.name in SWIGLU_OPS for op in ops)
    unread = unread_tail(ops, shape)
    unread_wo = shape.early_stop and shape.compiled and shape.t > 1 and shape.s_r < shape.s_c
    count = 0
    shares = []
    for op, tail in zip(ops, unread, strict=True):
        if tail or (unread_wo and of_op(op, UNREAD_BEFORE_SAVED_SCATTER)):
            # not recomputed, though its aten.mm still counts in the policy's numbering
            count += len(mm_calls(op, shape, gated)) if op.engine == "matrix" else 0
            shares.append(0.0)
            continue
        if op.engine in SAVED_ENGINES:
            shares.append(0.0)
            continue
        if op.engine != "matrix" or op.attention_core:
            # outside the save list; eager attention's matmuls are aten.bmm, not counted
            shares.append(1.0)
            continue
        calls = mm_calls(op, shape, gated)
        recomputed = 0.0
        for cols in calls:
            count += 1
            recomputed += cols if count % 2 == 0 else 0.0
        shares.append(recomputed / sum(calls))
    return tuple(shares)
