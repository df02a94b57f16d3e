"""Check planc's activation model against what PyTorch autograd really saves for backward.

    pip install torch==2.13.0          # optional extra: planc itself never imports torch
    python validation/activations.py   # add --markdown for the table in docs/memory.md

Each case is a spec planc reads and a small decoder built the same way in PyTorch on the CPU, in
bf16 (the fp32 case in fp32), so bytes are compared as they are, with no scaling. One forward runs
under `torch.autograd.graph.saved_tensors_hooks`; every tensor autograd saves is recorded by its
storage, each storage once, parameters and registered buffers (causal mask, RoPE tables) left
out. Two numbers per case:

* per layer: the bytes saved while the transformer layers run, over L, against planc's per-layer
  estimate (no parallelism, recompute none);
* whole forward: everything saved from the token ids to the loss, against planc's activation
  total for the single rank (p = 1, one micro-batch in flight).

Every case runs twice, once per `training.kernels` setting:

* fused: the model follows Megatron-Core with Transformer Engine/Apex: SwiGLU is one fc1 whose
  output a fused SwiGLU saves whole (fused_bias_swiglu.SwiGLUFunction), RMSNorm a fused kernel
  saving its input and 1/rms, eager attention expands K and V to all heads (DotProductAttention).
* unfused: plain PyTorch modules as they run on CUDA: nn.LayerNorm / nn.RMSNorm, SwiGLU as
  w2(silu(w1(x)) * w3(x)) (torchtitan), F.cross_entropy on fp32 logits, SDPA.

Where a CPU kernel saves something other than its CUDA kernel, planc models CUDA and this script
runs the CUDA behaviour on the CPU:

* dropout: CPU `F.dropout` multiplies by a mask in the input's dtype (2 bytes in bf16); CUDA's
  dispatches to `native_dropout`, which keeps a 1-byte bool mask. The models call
  `torch.native_dropout` directly, the op CUDA runs.
* LayerNorm: CPU `native_layer_norm` keeps mean and rstd in the input's dtype; CUDA's keeps
  them in fp32. The models use `CudaLayerNorm`, saving the input and fp32 mean and rstd.
* RMSNorm: CPU `F.rms_norm` is a composite that saves its fp32 intermediates; CUDA (PyTorch
  ≥ 2.8) dispatches to `_fused_rms_norm`, which saves the input and the fp32 1/rms. The models
  use `FusedRMSNorm`, an autograd Function saving exactly those.

SDPA flash (q, k, v, out and the fp32
log-sum-exp; native GQA), GeLU, SiLU, linear layers and the loss save the same on both.

The recompute cases (`Config.recompute_modules`) run mla_up_proj, layernorm and moe_act under
Megatron-Core's CheckpointWithoutOutput as tensor_parallel/random.py has it (the part runs under
no_grad keeping its inputs, its outputs' storage is released once the next part has saved them
and re-created in backward), and mlp, moe and shared_experts under its normal checkpoint
(torch.utils.checkpoint, reentrant). Saved bytes are read when the forward returns, so a
released storage counts 0.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
import yaml
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint as torch_checkpoint

from planc.memory import rank_memory
from planc.memory.activations import expert_shape, layer_bytes, moe_layer_bytes, shape_of
from planc.plannable import Plannable, plannable
from planc.spec.load import load_text

# --- the PyTorch models ------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    L: int
    h: int
    n: int
    g: int
    f: int
    V: int
    s: int
    b: int
    gpt: bool  # GPT style (LayerNorm, GeLU, biases, learned positions, tied) or Llama style
    attention: str  # "eager" | "flash"
    dropout: float
    dtype: torch.dtype = torch.bfloat16
    kernels: str = "fused"  # "fused" (Megatron-Core + TE/Apex) | "unfused" (plain PyTorch on CUDA)
    E: int = 0  # routed experts (0: a dense model)
    top_k: int = 0
    f_e: int = 0  # one routed expert's inner size
    E_s: int = 0  # shared experts
    f_s: int = 0  # one shared expert's inner size
    # Multi-head latent attention (DeepSeek-V2/V3) when kv_lora > 0; q_lora 0: no query latent.
    q_lora: int = 0
    kv_lora: int = 0
    qk_nope: int = 0
    qk_rope: int = 0
    v_head: int = 0
    # Megatron's --recompute-modules under selective recompute (mla_up_proj, moe_act): those
    # modules run under CheckpointWithoutOutput; () is recompute none.
    recompute_modules: tuple[str, ...] = ()

    @property
    def mla(self) -> bool:
        return self.kv_lora > 0

    @property
    def fused_swiglu(self) -> bool:
        return self.kernels == "fused"

    @property
    def k(self) -> int:
        return self.h // self.n


class FusedRMSNorm(torch.autograd.Function):
    """RMSNorm that keeps its input and the fp32 1/rms for backward, as CUDA's `_fused_rms_norm`
    (nn.RMSNorm on CUDA, PyTorch ≥ 2.8), Transformer Engine's and Apex's kernels do. CPU
    `F.rms_norm` is a composite that saves fp32 intermediates instead."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, eps: float) -> Tensor:
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return (x.float() * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, None]:
        x, weight, rstd = ctx.saved_tensors
        xf, gf = x.float(), grad.float()
        normed = xf * rstd
        grad_weight = (gf * normed).sum(dim=tuple(range(grad.dim() - 1))).to(weight.dtype)
        gn = gf * weight.float()
        grad_x = rstd * (gn - normed * (gn * normed).mean(-1, keepdim=True))
        return grad_x.to(x.dtype), grad_weight, None


class CudaLayerNorm(torch.autograd.Function):
    """LayerNorm keeping its input and fp32 mean and rstd for backward, as CUDA's
    `native_layer_norm` does for 16-bit inputs (aten/src/ATen/native/cuda/layer_norm_kernel.cu
    allocates mean and rstd in the accumulation type, fp32). The CPU kernel keeps them in the
    input's dtype (2 bytes each in bf16)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
        xf = x.float()
        mean = xf.mean(-1, keepdim=True)
        rstd = torch.rsqrt(xf.var(-1, unbiased=False, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        return ((xf - mean) * rstd).to(x.dtype) * weight + bias

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, Tensor, None]:
        x, weight, bias, mean, rstd = ctx.saved_tensors
        normed = (x.float() - mean) * rstd
        gf = grad.float()
        dims = tuple(range(grad.dim() - 1))
        grad_weight = (gf * normed).sum(dim=dims).to(weight.dtype)
        grad_bias = gf.sum(dim=dims).to(bias.dtype)
        gn = gf * weight.float()
        grad_x = rstd * (gn - gn.mean(-1, keepdim=True) - normed * (gn * normed).mean(-1, keepdim=True))
        return grad_x.to(x.dtype), grad_weight, grad_bias, None


class LayerNorm(nn.Module):
    def __init__(self, h: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))
        self.bias = nn.Parameter(torch.zeros(h))

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = CudaLayerNorm.apply(x, self.weight, self.bias, 1e-5)
        return out


class RMSNorm(nn.Module):
    def __init__(self, h: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = FusedRMSNorm.apply(x, self.weight, 1e-5)
        return out


class SwiGLUFunction(torch.autograd.Function):
    """Megatron's fused SwiGLU: saves the fc1 output (gate and up) only, recomputes the rest."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        gate, up = x.float().chunk(2, dim=-1)
        sig = torch.sigmoid(gate)
        silu = gate * sig
        g = grad.float()
        d_gate = g * up * sig * (1 + gate * (1 - sig))
        return torch.cat([d_gate, g * silu], dim=-1).to(x.dtype)


def dropout(x: Tensor, p: float) -> Tensor:
    """Dropout as the CUDA kernel runs it (native_dropout, a bool mask kept for backward).

    On the CPU, F.dropout multiplies by a mask in the input's dtype (2 bytes in bf16); on the GPU,
    where Megatron trains, it is native_dropout with a 1-byte mask, which is what planc counts.
    """
    if p == 0.0:
        return x
    out, _ = torch.native_dropout(x, p, True)
    return out


def rotate_half(x: Tensor) -> Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def register_rope(module: nn.Module, s: int, dim: int) -> None:
    """RoPE's cos and sin tables for s positions over `dim` channels, as non-persistent
    buffers of `module` (HF's rotate-half layout)."""
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
    angles = torch.outer(torch.arange(s).float(), inv)
    angles = torch.cat([angles, angles], dim=-1)[None, :, None, :]
    module.register_buffer("cos", angles.cos(), persistent=False)
    module.register_buffer("sin", angles.sin(), persistent=False)


def apply_rope(module: nn.Module, x: Tensor) -> Tensor:
    # x·cos + rotate(x)·sin: multiplying by constant tables saves the tables, not x.
    return x * module.cos.to(x.dtype) + rotate_half(x) * module.sin.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        bias = cfg.gpt
        self.q = nn.Linear(cfg.h, cfg.n * cfg.k, bias=bias)
        self.k = nn.Linear(cfg.h, cfg.g * cfg.k, bias=bias)
        self.v = nn.Linear(cfg.h, cfg.g * cfg.k, bias=bias)
        self.o = nn.Linear(cfg.n * cfg.k, cfg.h, bias=bias)
        self.register_buffer("mask", torch.ones(cfg.s, cfg.s, dtype=torch.bool).triu(1), persistent=False)
        if not cfg.gpt:
            register_rope(self, cfg.s, cfg.k)

    def rope(self, x: Tensor) -> Tensor:
        return apply_rope(self, x)

    def forward(self, x: Tensor) -> Tensor:
        cfg = self.cfg
        b, s, _ = x.shape
        q = self.q(x).view(b, s, cfg.n, cfg.k)
        k = self.k(x).view(b, s, cfg.g, cfg.k)
        v = self.v(x).view(b, s, cfg.g, cfg.k)
        if not cfg.gpt:
            q, k = self.rope(q), self.rope(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if cfg.attention == "flash":
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=cfg.g != cfg.n)
        else:
            if cfg.g != cfg.n:  # Megatron's DotProductAttention expands K and V to n heads
                k = k.repeat_interleave(cfg.n // cfg.g, dim=1)
                v = v.repeat_interleave(cfg.n // cfg.g, dim=1)
            scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(cfg.k))
            scores = scores.masked_fill(self.mask, float("-inf"))
            probs = dropout(torch.softmax(scores, dim=-1), cfg.dropout)
            out = torch.matmul(probs, v)
        out = out.transpose(1, 2).reshape(b, s, cfg.n * cfg.k)
        return dropout(self.o(out), cfg.dropout)


class FusedAttention(torch.autograd.Function):
    """Causal attention keeping what a fused kernel keeps for backward: Q, K, V, the output O
    and the fp32 log-sum-exp per query and head (FlashAttention-2 and cuDNN/Transformer Engine
    fused attention; the latter takes a value head narrower than the query's, as latent
    attention needs). CPU SDPA runs its math path, saving the probabilities, when the value
    head differs, so the MLA flash cases use this function: the CUDA behaviour on the CPU."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        scale = 1.0 / math.sqrt(q.shape[-1])
        s = q.shape[-2]
        mask = torch.ones(s, s, dtype=torch.bool).triu(1)
        scores = (q.float() @ k.float().transpose(-1, -2) * scale).masked_fill(mask, float("-inf"))
        lse = torch.logsumexp(scores, dim=-1, keepdim=True)
        # Laid out [b, s, n, v] as fused kernels return it, so the out-projection reads it as is.
        out = ((scores - lse).exp() @ v.float()).to(q.dtype).transpose(1, 2).contiguous().transpose(1, 2)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v, out, lse = ctx.saved_tensors
        scale = 1.0 / math.sqrt(q.shape[-1])
        s = q.shape[-2]
        mask = torch.ones(s, s, dtype=torch.bool).triu(1)
        scores = (q.float() @ k.float().transpose(-1, -2) * scale).masked_fill(mask, float("-inf"))
        probs = (scores - lse).exp()
        g = grad.float()
        grad_v = probs.transpose(-1, -2) @ g
        grad_p = g @ v.float().transpose(-1, -2)
        delta = (g * out.float()).sum(-1, keepdim=True)
        grad_s = probs * (grad_p - delta) * scale
        grad_q, grad_k = grad_s @ k.float(), grad_s.transpose(-1, -2) @ q.float()
        return grad_q.to(q.dtype), grad_k.to(k.dtype), grad_v.to(v.dtype)


class _CheckpointFunction(torch.autograd.Function):
    """Megatron-Core's CheckpointWithoutOutputFunction (tensor_parallel/random.py, cd4afffa):
    the function runs under no_grad and only its inputs are saved; backward runs the outputs the
    recompute hook re-created."""

    @staticmethod
    def forward(ctx: Any, run: Callable[..., Any], owner: Any, *args: Tensor) -> Any:
        with torch.no_grad():
            outputs = run(*args)
        # detach_variable: detached, keeping requires_grad for the recomputation's graph
        ctx.save_for_backward(*(a.detach().requires_grad_(a.requires_grad) for a in args))
        owner.ctx = ctx
        return outputs

    @staticmethod
    def backward(ctx: Any, *grads: Tensor) -> Any:
        inputs, outputs = ctx.inputs, ctx.outputs
        torch.autograd.backward(outputs, grads)
        ctx.inputs = ctx.outputs = None
        return (None, None, *(a.grad for a in inputs))


class CheckpointWithoutOutput:
    """Megatron-Core's CheckpointWithoutOutput (tensor_parallel/random.py, cd4afffa), on the CPU:
    `checkpoint` runs a module part without keeping its outputs' graph; once the next part has
    saved those outputs, `discard_output_and_register_recompute` frees their storage
    (`untyped_storage().resize_(0)`) and re-creates it in backward when `hook_tensor`'s
    gradient arrives (Megatron shares the recomputed storage; this copies it in)."""

    def __init__(self) -> None:
        self.run: Callable[..., Any] | None = None
        self.ctx: Any = None
        self.outputs: tuple[Tensor, ...] = ()

    def checkpoint(self, run: Callable[..., Any], *args: Tensor) -> Any:
        self.run = run
        outputs = _CheckpointFunction.apply(run, self, *args)
        self.outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        return outputs

    def _recompute(self, _: Tensor) -> None:
        if self.ctx is None or self.run is None:
            return
        inputs = tuple(t.detach().requires_grad_(t.requires_grad) for t in self.ctx.saved_tensors)
        with torch.enable_grad():
            outputs = self.run(*inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        for kept, again in zip(self.outputs, outputs, strict=True):
            storage = kept.untyped_storage()
            storage.resize_(again.untyped_storage().nbytes())
            storage.copy_(again.untyped_storage())
        self.ctx.outputs, self.ctx.inputs = outputs, inputs
        self.ctx = self.run = None

    def discard_output_and_register_recompute(self, hook_tensor: Tensor) -> None:
        for output in self.outputs:
            output.untyped_storage().resize_(0)
        if hook_tensor.requires_grad:
            hook_tensor.register_hook(self._recompute)


class LatentAttention(nn.Module):
    """DeepSeek-V2/V3 multi-head latent attention as Megatron-Core's MLASelfAttention runs it
    in training (multi_latent_attention.py, get_query_key_value_tensors): down projections and
    RMSNorms of the latents, up projections, RoPE on the d_h^R channels (the key's shared by all
    heads and expanded), Q = [q_nope, q_pe], K = [k_nope, k_pe], V made contiguous."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        n, qk = cfg.n, cfg.qk_nope + cfg.qk_rope
        if cfg.q_lora:
            self.q_a = nn.Linear(cfg.h, cfg.q_lora, bias=False)
            self.q_norm = RMSNorm(cfg.q_lora)
            self.q_b = nn.Linear(cfg.q_lora, n * qk, bias=False)
        else:
            self.q = nn.Linear(cfg.h, n * qk, bias=False)
        self.kv_a = nn.Linear(cfg.h, cfg.kv_lora + cfg.qk_rope, bias=False)
        self.kv_norm = RMSNorm(cfg.kv_lora)
        self.kv_b = nn.Linear(cfg.kv_lora, n * (cfg.qk_nope + cfg.v_head), bias=False)
        self.o = nn.Linear(n * cfg.v_head, cfg.h, bias=False)
        self.register_buffer("mask", torch.ones(cfg.s, cfg.s, dtype=torch.bool).triu(1), persistent=False)
        register_rope(self, cfg.s, cfg.qk_rope)

    def rope(self, x: Tensor) -> Tensor:
        return apply_rope(self, x)

    def up(self, q_in: Tensor, latent: Tensor, k_pe: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The up projections and RoPE (Megatron's qkv_up_proj_and_rope_apply): Q, K, V."""
        cfg = self.cfg
        b, s, _ = latent.shape
        n = cfg.n
        q = self.q_b(q_in) if cfg.q_lora else self.q(q_in)
        q_nope, q_pe = q.view(b, s, n, -1).split([cfg.qk_nope, cfg.qk_rope], dim=-1)
        k_pe = self.rope(k_pe.view(b, s, 1, cfg.qk_rope))
        kv = self.kv_b(latent).view(b, s, n, cfg.qk_nope + cfg.v_head)
        k_nope, v = kv.split([cfg.qk_nope, cfg.v_head], dim=-1)
        query = torch.cat([q_nope, self.rope(q_pe)], dim=-1).transpose(1, 2)
        key = torch.cat([k_nope, k_pe.expand(b, s, n, cfg.qk_rope)], dim=-1).transpose(1, 2)
        return query, key, v.contiguous().transpose(1, 2)

    def forward(self, x: Tensor) -> Tensor:
        cfg = self.cfg
        b, s, _ = x.shape
        n = cfg.n
        q_in = self.q_norm(self.q_a(x)) if cfg.q_lora else x
        latent, k_pe = self.kv_a(x).split([cfg.kv_lora, cfg.qk_rope], dim=-1)
        latent = self.kv_norm(latent)
        checkpoint = CheckpointWithoutOutput() if "mla_up_proj" in cfg.recompute_modules else None
        if checkpoint is not None:
            query, key, value = checkpoint.checkpoint(self.up, q_in, latent, k_pe)
        else:
            query, key, value = self.up(q_in, latent, k_pe)
        if cfg.attention == "flash":
            out = FusedAttention.apply(query, key, value)
        else:
            scale = 1.0 / math.sqrt(cfg.qk_nope + cfg.qk_rope)
            scores = torch.matmul(query, key.transpose(-1, -2)) * scale
            scores = scores.masked_fill(self.mask, float("-inf"))
            probs = dropout(torch.softmax(scores, dim=-1), cfg.dropout)
            out = torch.matmul(probs, value)
        if checkpoint is not None:
            checkpoint.discard_output_and_register_recompute(out)
        out = out.transpose(1, 2).reshape(b, s, n * cfg.v_head)
        return dropout(self.o(out), cfg.dropout)


class MLP(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        if cfg.gpt:
            self.fc1 = nn.Linear(cfg.h, cfg.f, bias=True)
        elif cfg.fused_swiglu:
            self.fc1 = nn.Linear(cfg.h, 2 * cfg.f, bias=False)
        else:  # torchtitan: w1 (gate), w3 (up)
            self.w1 = nn.Linear(cfg.h, cfg.f, bias=False)
            self.w3 = nn.Linear(cfg.h, cfg.f, bias=False)
        self.fc2 = nn.Linear(cfg.f, cfg.h, bias=cfg.gpt)

    def forward(self, x: Tensor) -> Tensor:
        cfg = self.cfg
        if cfg.gpt:
            inner = F.gelu(self.fc1(x))
        elif cfg.fused_swiglu:
            inner = SwiGLUFunction.apply(self.fc1(x))
        else:
            inner = F.silu(self.w1(x)) * self.w3(x)
        return dropout(self.fc2(inner), cfg.dropout)


class WeightedSwiGLUFunction(torch.autograd.Function):
    """Megatron's fused weighted SwiGLU (fused_bias_swiglu.WeightedSwiGLUFunction): saves the fc1
    output and each row's routing probability, returns silu(gate)·up·p."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, probs: Tensor) -> Tensor:
        ctx.save_for_backward(x, probs)
        gate, up = x.chunk(2, dim=-1)
        return (F.silu(gate) * up * probs).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor]:
        x, probs = ctx.saved_tensors
        gate, up = x.float().chunk(2, dim=-1)
        sig = torch.sigmoid(gate)
        silu = gate * sig
        g = grad.float()
        gp = g * probs.float()
        d_gate = gp * up * sig * (1 + gate * (1 - sig))
        d_probs = (g * silu * up).sum(-1, keepdim=True)
        return torch.cat([d_gate, gp * silu], dim=-1).to(x.dtype), d_probs.to(probs.dtype)


class ForcedTopK(torch.autograd.Function):
    """torch.topk's values at given indices: saves only the indices, as topk's backward does
    (derivatives.yaml: value_selecting_reduction_backward from indices and sizes)."""

    @staticmethod
    def forward(ctx: Any, logits: Tensor, indices: Tensor) -> Tensor:
        ctx.save_for_backward(indices)
        ctx.experts = logits.shape[-1]
        return logits.gather(1, indices)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        (indices,) = ctx.saved_tensors
        full = grad.new_zeros(grad.shape[0], ctx.experts)
        return full.scatter(1, indices, grad), None


class MoE(nn.Module):
    """A MoE layer as Megatron-Core builds it (alltoall dispatcher on one rank, EP = ETP = 1):
    TopKRouter (gating linear; top-k of the logits, fp32 softmax over the top-k; fp32 softmax
    over all E for the load-balancing loss), moe_utils.permute (index_select of the tokens by
    sorted indices, masked_select of the probabilities by the routing map), the experts' fc1 and
    fc2 per expert on its rows (TEGroupedMLP), the probabilities applied in the activation,
    unpermute (scatter_add), and a shared expert on the layer's input.

    Routing is forced balanced: token i goes to experts (i·k + j) mod E, so each expert gets
    exactly T·k/E rows and planc's balanced expectation is exact.
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.router = nn.Linear(cfg.h, cfg.E, bias=False)
        self.fused = cfg.fused_swiglu
        width = 2 * cfg.f_e if self.fused else cfg.f_e  # unfused: separate gate and up (w1, w3)
        self.fc1 = nn.ModuleList(nn.Linear(cfg.h, width, bias=False) for _ in range(cfg.E))
        self.up = nn.ModuleList(
            nn.Linear(cfg.h, cfg.f_e, bias=False) for _ in range(0 if self.fused else cfg.E)
        )
        self.fc2 = nn.ModuleList(nn.Linear(cfg.f_e, cfg.h, bias=False) for _ in range(cfg.E))
        shared = replace(cfg, f=cfg.E_s * cfg.f_s, dropout=0.0)
        self.shared = MLP(shared) if cfg.E_s else None
        self.aux: list[Tensor] = []

    def route(self, x: Tensor) -> tuple[Tensor, Tensor]:
        cfg = self.cfg
        tokens = x.shape[0]
        logits = self.router(x)
        scores = torch.softmax(logits, dim=-1, dtype=torch.float32)  # load-balancing loss
        self.aux.append(scores.mean(0).square().sum())
        token = torch.arange(tokens).unsqueeze(1)
        indices = (token * cfg.top_k + torch.arange(cfg.top_k)) % cfg.E  # forced, balanced
        top = torch.softmax(ForcedTopK.apply(logits, indices), dim=-1, dtype=torch.float32)
        probs = torch.zeros_like(logits).scatter(1, indices, top.to(logits.dtype))
        routing = torch.zeros_like(logits, dtype=torch.int32).scatter(1, indices, 1).bool()
        return probs, routing

    def forward(self, x: Tensor) -> Tensor:
        if "moe" in self.cfg.recompute_modules:
            return torch_checkpoint(self.block, x, use_reentrant=True)
        return self.block(x)

    def block(self, x: Tensor) -> Tensor:
        cfg = self.cfg
        b, s, h = x.shape
        flat = x.reshape(b * s, h)
        probs, routing = self.route(flat)
        mask = routing.T.contiguous()  # [E, T]
        sorted_indices = torch.arange(b * s).expand(cfg.E, -1).masked_select(mask)
        permuted_probs = probs.T.contiguous().masked_select(mask)
        rows = flat.index_select(0, sorted_indices)
        counts = mask.sum(1).tolist()
        parts = rows.split(counts)
        fc1 = torch.cat([fc(part) for fc, part in zip(self.fc1, parts, strict=True)])
        weights = permuted_probs.unsqueeze(-1)
        checkpoint = CheckpointWithoutOutput() if "moe_act" in cfg.recompute_modules else None
        if self.fused:
            act_fn: Callable[..., Tensor] = WeightedSwiGLUFunction.apply
            inputs: tuple[Tensor, ...] = (fc1, weights)
        else:
            up = torch.cat([fc(part) for fc, part in zip(self.up, parts, strict=True)])
            act_fn, inputs = (lambda a, u, w: (F.silu(a) * u) * w), (fc1, up, weights)
        act = checkpoint.checkpoint(act_fn, *inputs) if checkpoint else act_fn(*inputs)
        out = torch.cat([fc(part) for fc, part in zip(self.fc2, act.split(counts), strict=True)])
        if checkpoint is not None:
            checkpoint.discard_output_and_register_recompute(out)
        combined = torch.zeros_like(flat).scatter_add(
            0, sorted_indices.unsqueeze(1).expand(-1, h), out
        )
        y = combined.view(b, s, h)
        if self.shared is not None:
            shared = self.shared
            if "shared_experts" in cfg.recompute_modules:
                y = y + torch_checkpoint(shared, x, use_reentrant=True)
            else:
                y = y + shared(x)
        return dropout(y, cfg.dropout)


def norm(cfg: Config) -> nn.Module:
    return LayerNorm(cfg.h) if cfg.gpt else RMSNorm(cfg.h)


class Block(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        attention = LatentAttention(cfg) if cfg.mla else Attention(cfg)
        self.norm1, self.attn, self.norm2 = norm(cfg), attention, norm(cfg)
        self.mlp = MoE(cfg) if cfg.E else MLP(cfg)

    def forward(self, x: Tensor) -> Tensor:
        cfg = self.cfg
        # layernorm: Megatron recomputes the norms it runs as modules of their own (latent
        # attention's input norm, a MoE layer's pre-MLP norm; TE fuses the others).
        own = "layernorm" in cfg.recompute_modules
        x = x + self._normed(self.norm1, self.attn, x, own and cfg.mla)
        if "mlp" in cfg.recompute_modules and not cfg.E:
            # mlp: Megatron's normal checkpoint of the MLP module, whose input is the residual
            # where TE fuses the norm into fc1 and the norm's output where it runs apart.
            if cfg.fused_swiglu:
                return x + torch_checkpoint(lambda y: self.mlp(self.norm2(y)), x, use_reentrant=True)
            return x + torch_checkpoint(self.mlp, self.norm2(x), use_reentrant=True)
        return x + self._normed(self.norm2, self.mlp, x, own and cfg.E > 0)

    @staticmethod
    def _normed(norm: nn.Module, part: nn.Module, x: Tensor, recompute: bool) -> Tensor:
        if not recompute:
            return part(norm(x))
        checkpoint = CheckpointWithoutOutput()
        out = part(checkpoint.checkpoint(norm, x))
        checkpoint.discard_output_and_register_recompute(out)
        return out


class Decoder(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.V, cfg.h)
        self.pos = nn.Embedding(cfg.s, cfg.h) if cfg.gpt else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.L))
        self.final = norm(cfg)
        self.head = None if cfg.gpt else nn.Linear(cfg.h, cfg.V, bias=False)

    def stem(self, ids: Tensor) -> Tensor:
        x = self.embed(ids)
        if self.pos is not None:
            # Megatron: arange(s) expanded to [b, s] (a view of s ids).
            x = x + self.pos(torch.arange(ids.shape[1]).unsqueeze(0).expand_as(ids))
        return dropout(x, self.cfg.dropout)

    def layers(self, x: Tensor) -> Tensor:
        for block in self.blocks:
            x = block(x)
        return x

    def loss(self, x: Tensor, targets: Tensor) -> Tensor:
        x = self.final(x)
        logits = F.linear(x, self.embed.weight) if self.head is None else self.head(x)
        # Megatron runs the loss on logits.float(); the 16-bit logits are not kept.
        return F.cross_entropy(logits.float().view(-1, self.cfg.V), targets.view(-1))


# --- measuring ---------------------------------------------------------------------------------


class SavedBytes:
    """Records each storage autograd saves, once, leaving out the model's parameters and buffers."""

    def __init__(self, model: nn.Module) -> None:
        tensors = [*model.parameters(), *model.buffers()]
        self.excluded = {t.untyped_storage().data_ptr() for t in tensors}
        self.seen: dict[int, int] = {}

    def pack(self, tensor: Tensor) -> Tensor:
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        if pointer not in self.excluded and storage.nbytes():
            self.seen[pointer] = storage
        return tensor

    @property
    def total(self) -> int:
        return sum(storage.nbytes() for storage in self.seen.values())

    def measure(self, fn: Callable[[], Tensor]) -> tuple[Tensor, int]:
        """`fn()` and the bytes of the storages autograd saved during it, read when it returns:
        a storage a checkpoint has released since (CheckpointWithoutOutput) counts 0."""
        before = set(self.seen)
        with torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t):
            out = fn()
        return out, sum(st.nbytes() for pointer, st in self.seen.items() if pointer not in before)


def measure(cfg: Config, backward: bool = True) -> tuple[int, int]:
    """(bytes saved by the layers / L, bytes saved by the whole forward) for one micro-batch.

    With `backward`, the recorded graph is also run backward, to show the models are sound.
    """
    torch.manual_seed(0)
    model = Decoder(cfg).to(cfg.dtype)
    ids = torch.randint(0, cfg.V, (cfg.b, cfg.s))
    targets = torch.randint(0, cfg.V, (cfg.b, cfg.s))
    layers_only = SavedBytes(model)
    x = model.stem(ids)
    y, layer_total = layers_only.measure(lambda: model.layers(x))
    if backward:
        model.loss(y, targets).backward()

    whole = SavedBytes(model)
    loss, total = whole.measure(lambda: model.loss(model.layers(model.stem(ids)), targets))
    del loss
    return layer_total // cfg.L, total


# --- planc's side ------------------------------------------------------------------------------


def spec_for(cfg: Config) -> str:
    model: dict[str, Any] = {
        "layers": cfg.L, "hidden": cfg.h, "heads": cfg.n, "kv_heads": cfg.g, "ffn_hidden": cfg.f,
        "vocab": cfg.V, "dropout": cfg.dropout,
    }
    if cfg.gpt:
        model |= {"mlp": "gelu", "norm": "layernorm", "bias": True, "tied_embeddings": True,
                  "position_embedding": "learned", "max_seq_len": cfg.s}
    else:
        model |= {"mlp": "swiglu", "norm": "rmsnorm", "bias": False, "tied_embeddings": False,
                  "position_embedding": "rope"}
    if cfg.E:
        model["moe"] = {
            "experts": cfg.E, "top_k": cfg.top_k, "expert_ffn_hidden": cfg.f_e,
            "shared_experts": cfg.E_s, "shared_expert_ffn_hidden": cfg.f_s or cfg.f_e,
        }
    if cfg.mla:
        model["mla"] = {
            "kv_lora_rank": cfg.kv_lora, "qk_nope_head_dim": cfg.qk_nope,
            "qk_rope_head_dim": cfg.qk_rope, "v_head_dim": cfg.v_head,
        } | ({"q_lora_rank": cfg.q_lora} if cfg.q_lora else {})
    spec = {
        "version": 1,
        "name": "validation",
        "model": model,
        "hardware": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 1},
        "training": {
            "seq_len": cfg.s, "micro_batch": cfg.b, "global_batch": cfg.b,
            "precision": "fp32" if cfg.dtype == torch.float32 else "bf16",
            "attention": cfg.attention, "kernels": cfg.kernels,
            **(
                {"recompute": "selective", "recompute_modules": list(cfg.recompute_modules)}
                if cfg.recompute_modules
                else {"recompute": "none"}
            ),
        },
    }
    return yaml.safe_dump(spec, sort_keys=False)


def planc_estimate(cfg: Config) -> tuple[int, int]:
    job = load_text("validation.yaml", spec_for(cfg)).job
    plan = plannable(job) if job is not None else None
    if not isinstance(plan, Plannable):
        raise SystemExit(f"planc could not plan the spec for {cfg}: {plan}")
    tr = plan.training
    if cfg.E:
        layer = moe_layer_bytes(shape_of(plan), expert_shape(plan), tr.recompute, tr.recompute_modules)
    else:
        layer = layer_bytes(shape_of(plan), tr.recompute, tr.recompute_modules)
    # The recompute working set exists in backward only, which a forward does not show.
    memory = rank_memory(plan, 0)
    working = sum(t.bytes for t in memory.terms if t.name.startswith("recompute working set"))
    return layer, memory.activations - working


# --- the cases ---------------------------------------------------------------------------------

GPT = Config(L=4, h=256, n=8, g=8, f=1024, V=4096, s=512, b=2, gpt=True, attention="eager", dropout=0.1)
LLAMA = Config(L=4, h=256, n=8, g=2, f=640, V=4096, s=512, b=2, gpt=False, attention="flash", dropout=0.0)
# DeepSeek-V3's proportions scaled down: d_c' = 3·d_c (1536/512), d_h = 2·d_h^R (128/64), v = d_h.
MLA = Config(
    L=4, h=256, n=8, g=8, f=640, V=4096, s=512, b=2, gpt=False, attention="eager", dropout=0.0,
    q_lora=96, kv_lora=32, qk_nope=32, qk_rope=16, v_head=32,
)


def replace(cfg: Config, **changes: Any) -> Config:
    from dataclasses import replace as dc_replace

    return dc_replace(cfg, **changes)


SHAPES: tuple[tuple[str, Config], ...] = (
    ("gpt eager, dropout 0.1", GPT),
    ("gpt eager, no dropout", replace(GPT, dropout=0.0)),
    ("gpt eager, longer sequence", replace(GPT, s=1024, b=1)),
    ("gpt flash (SDPA), dropout 0.1", replace(GPT, attention="flash")),
    ("gpt eager, fp32", replace(GPT, dtype=torch.float32)),
    ("llama GQA g=2, flash (SDPA)", LLAMA),
    ("llama GQA g=2, eager", replace(LLAMA, attention="eager")),
    ("llama GQA g=2, eager, dropout 0.1", replace(LLAMA, attention="eager", dropout=0.1)),
    ("llama MHA, flash, h=512", replace(LLAMA, h=512, n=8, g=8, f=1344)),
    ("MLA (DeepSeek-V3 shape), eager", MLA),
    ("MLA, fused attention", replace(MLA, attention="flash")),
    ("MLA, eager, dropout 0.1", replace(MLA, dropout=0.1)),
    ("MLA without query latent (V2-Lite shape), eager", replace(MLA, q_lora=0)),
)
MIXTRAL = replace(LLAMA, E=8, top_k=2, f_e=320)  # every layer MoE, forced balanced routing
SHAPES += (
    ("moe E=8 k=2 (Mixtral-like), flash", MIXTRAL),
    ("moe E=8 k=2 + shared expert, flash", replace(MIXTRAL, E_s=1, f_s=256)),
    ("moe E=8 k=2, eager, dropout 0.1", replace(MIXTRAL, attention="eager", dropout=0.1)),
)
# Megatron's --recompute-modules: the MLA up projections, the experts' activation.
SHAPES += (
    ("MLA, fused attention, recompute mla_up_proj",
     replace(MLA, attention="flash", recompute_modules=("mla_up_proj",))),
    ("moe E=8 k=2, flash, recompute moe_act", replace(MIXTRAL, recompute_modules=("moe_act",))),
    ("MLA, fused attention, recompute layernorm",
     replace(MLA, attention="flash", recompute_modules=("layernorm",))),
    ("moe E=8 k=2, flash, recompute layernorm", replace(MIXTRAL, recompute_modules=("layernorm",))),
    ("moe E=8 k=2 + shared expert, flash, recompute moe",
     replace(MIXTRAL, E_s=1, f_s=256, recompute_modules=("moe",))),
    ("moe E=8 k=2 + shared expert, flash, recompute shared_experts",
     replace(MIXTRAL, E_s=1, f_s=256, recompute_modules=("shared_experts",))),
    ("llama GQA g=2, flash (SDPA), recompute mlp", replace(LLAMA, recompute_modules=("mlp",))),
)
CASES: tuple[tuple[str, Config, bool], ...] = tuple(
    (f"{kernels}: {name}", replace(cfg, kernels=kernels), True)
    for kernels in ("fused", "unfused")
    for name, cfg in SHAPES
)


@dataclass(frozen=True)
class Row:
    case: str
    s: int
    b: int
    measured_layer: int
    planc_layer: int
    measured_total: int
    planc_total: int
    modelled: bool

    @staticmethod
    def error(planc: int, measured: int) -> float:
        return 100.0 * (planc - measured) / measured


def run(quick: bool = False) -> list[Row]:
    rows = []
    for name, full, modelled in CASES:
        cfg = replace(full, s=full.s // 4) if quick else full
        measured_layer, measured_total = measure(cfg, backward=not quick)
        planc_layer, planc_total = planc_estimate(cfg)
        rows.append(Row(name, cfg.s, cfg.b, measured_layer, planc_layer, measured_total, planc_total, modelled))
    return rows


def _mib(n: int) -> str:
    return f"{n / 2**20:.3f}"


def render(rows: list[Row], markdown: bool) -> str:
    head = ("case", "s", "b", "layer: torch MiB", "planc MiB", "error %", "forward: torch MiB", "planc MiB", "error %")
    body = [
        (
            row.case + ("" if row.modelled else " *"), str(row.s), str(row.b),
            _mib(row.measured_layer), _mib(row.planc_layer),
            f"{Row.error(row.planc_layer, row.measured_layer):+.2f}",
            _mib(row.measured_total), _mib(row.planc_total),
            f"{Row.error(row.planc_total, row.measured_total):+.2f}",
        )
        for row in rows
    ]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
    else:
        widths = [max(len(r[i]) for r in (head, *body)) for i in range(len(head))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in (head, *body)]
    lines.append("")
    lines.append("MiB = 2^20 bytes; error = (planc − torch) / torch. * not modelled by planc (informational).")
    lines.append(f"torch {torch.__version__}, CPU, bf16 unless noted; one micro-batch, no parallelism.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--quick", action="store_true", help="sequences 4× shorter (for the test suite)")
    parser.add_argument("--tolerance", type=float, default=10.0, help="largest |error| %% allowed")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    rows = run(args.quick)
    print(render(rows, args.markdown))
    bad = [
        row.case
        for row in rows
        if row.modelled
        and max(abs(Row.error(row.planc_layer, row.measured_layer)),
                abs(Row.error(row.planc_total, row.measured_total))) > args.tolerance
    ]
    if bad:
        print(f"outside ±{args.tolerance:g} %: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
