"""The eager PyTorch kernels Megatron-Core runs for what its fused kernels do not take, and cuDNN's
attention at head dimension 64: what GPT-OSS 120B runs under Megatron-Bridge.

What is checked, each against an independent derivation:
- the bytes of Megatron-Core's own unfused RoPE (`_apply_rotary_pos_emb_bshd`), its per-expert
  fc2 bias (`TEGroupedMLP._apply_bias`) and its GLU clamp (`weighted_bias_quick_geglu_impl`
  with a clamp value, the fused activation itself stubbed out), forward and backward, counted
  by a TorchDispatchMode that adds up what each eager kernel reads and writes, against planc's
  per-element formulas (megatron-core 0.19.2 on CPU, PLANC_MEGATRON_PYTHON; the three are the
  same code at 0.17.1, 2edffadb, the release Megatron-Bridge 26.04 pins);
- YaRN's attention scale as Megatron-Core computes it (`_yarn_get_concentration_factor`) and by
  hand (0.1·ln s + 1), which decides the unfused RoPE;
- which models take which path: GPT-OSS all three, DeepSeek-V3 (scale 1, latent attention) and
  Qwen3 (no biases, no clamp) none, any other framework none;
- a GPT-OSS config.json's swiglu_limit read as model.glu_clamp;
- cuDNN's attention at head dimension 64 as planc prices it against cudnn-frontend's gpt_oss
  rows (the numbers written here from the benchmark's CSV files).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_frameworks import _run, megatron_python
from test_sliding_window import OSS

from planc.compile.frameworks import megatron_files
from planc.dims import EagerPaths, ExpertDims, megatron_eager
from planc.memory.activations import expert_shape, moe_layer_terms, shape_of
from planc.perf.compute import work_time_s
from planc.perf.inputs import core_ops, device_of, efficiency_of, layer_shape
from planc.perf.ops import (
    OpShape,
    expert_bias_add,
    expert_glu_clamp,
    flash_attention,
    megatron_unfused_rotary,
    moe_layer_ops,
)
from planc.presets.efficiency import for_gpu
from planc.spec.hf import from_config
from planc.spec.job import preset_model

from conftest import check_overlay, compiled, job_of, rules_fired

HF = Path(__file__).resolve().parent / "data" / "hf"

# Runs Megatron-Core's three functions on CPU in bf16 and prints the bytes their eager kernels
# move, forward and backward: each non-view kernel reads its tensor inputs and writes its
# outputs (in place: writes its first argument); factory kernels (empty) move nothing.
BYTES = r'''
import json, sys, warnings
warnings.filterwarnings("ignore")
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from megatron.core.models.common.embeddings.rope_utils import _apply_rotary_pos_emb_bshd
from megatron.core.models.common.embeddings.yarn_rotary_pos_embedding import (
    _yarn_get_concentration_factor,
)
from megatron.core.transformer.moe.experts import TEGroupedMLP
import megatron.core.fusions.fused_bias_geglu as geglu

SILENT = {"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "detach",
          "lift_fresh", "_local_scalar_dense"}

def size(t):
    return t.numel() * t.element_size()

class Bytes(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.total = 0
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if func.is_view or name in SILENT:
            return out
        ins = [a for a in tree_flatten((args, kwargs or {}))[0] if isinstance(a, torch.Tensor)]
        outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        if name in ("fill_", "zero_"):
            self.total += size(ins[0])
        elif func._schema.is_mutable:
            self.total += sum(size(t) for t in ins) + (size(ins[0]) if name != "copy_" else 0)
        else:
            self.total += sum(size(t) for t in ins) + sum(size(o) for o in outs)
        return out

def measure(fn, x):
    with Bytes() as forward:
        y = fn(x)
    g = torch.randn_like(y)
    with Bytes() as backward:
        y.backward(g)
    return [forward.total, backward.total]

class Activation(torch.autograd.Function):
    """The fused activation, stubbed: it moves nothing, so what is counted is Megatron's clamp."""
    @staticmethod
    def forward(ctx, x, weights, store, offset):
        ctx.shape = x.shape
        return x.new_empty(x.shape[0], x.shape[1] // 2)
    @staticmethod
    def backward(ctx, g):
        return g.new_empty(ctx.shape), None, None, None

geglu.WeightedQuickGeGLUFunction = Activation
case = json.load(sys.stdin)
bf16 = torch.bfloat16
s, b, n, g, k = case["rope"]
freqs = torch.randn(s, 1, 1, k)
scale = case["scale"]
rope = [0, 0]
for heads in (n, g):  # the query, then the key (Attention.forward)
    t = torch.randn(s, b, heads, k, dtype=bf16, requires_grad=True)
    for i, moved in enumerate(measure(lambda x: _apply_rotary_pos_emb_bshd(x, freqs, mscale=scale), t)):
        rope[i] += moved
rows, h, f, local = case["experts"]
split = [rows // local] * local
biases = [torch.randn(h, dtype=bf16, requires_grad=True) for _ in split]
probs = torch.rand(rows, 1, dtype=bf16, requires_grad=True)
out = torch.randn(rows, h, dtype=bf16, requires_grad=True)
bias = measure(lambda x: TEGroupedMLP._apply_bias(x, biases, split, probs), out)
# a flex dispatcher's fp32 probabilities, on fresh leaves (no gradient to accumulate into)
biases = [torch.randn(h, dtype=bf16, requires_grad=True) for _ in split]
probs32 = torch.rand(rows, 1, dtype=torch.float32, requires_grad=True)
out = torch.randn(rows, h, dtype=bf16, requires_grad=True)
bias32 = measure(lambda x: TEGroupedMLP._apply_bias(x, biases, split, probs32), out)
fc1 = torch.randn(rows, 2 * f, dtype=bf16, requires_grad=True)
weights = torch.rand(rows, 1, dtype=bf16)
clamp = measure(lambda x: geglu.weighted_bias_quick_geglu_impl(x, None, weights, False, 1.0, 7.0), fc1)
yarn = [_yarn_get_concentration_factor(*args) for args in case["yarn"]]
print(json.dumps({"rope": rope, "bias": bias, "bias32": bias32, "clamp": clamp, "yarn": yarn}))
'''

# RoPE over s·b rows of (n + g) heads of k; the experts' rows, hidden, inner size, local experts.
ROPE = (32, 16, 16, 4, 16)
EXPERTS = (1024, 256, 128, 4)
# (factor, mscale, mscale_all_dim): GPT-OSS (Megatron-Bridge leaves both None), DeepSeek-V3,
# planc's defaults (1, 0), and a factor of 1.
YARN = ((32.0, None, None), (40.0, 1.0, 1.0), (32.0, 1.0, 0.0), (1.0, 1.0, 0.0))


def _shape(**changed: Any) -> OpShape:
    s, b, n, g, k = ROPE
    base = OpShape(b=b, s=s, s_c=s, s_r=s, h=EXPERTS[1], n=n, g=g, k=k, f=EXPERTS[2], vocab=1)
    return replace(base, **changed)


def _experts() -> ExpertDims:
    rows, _, f, local = EXPERTS
    return ExpertDims(local, 1, 1, 1, rows, rows, rows, rows, f, 0, False, False)


@pytest.fixture(scope="module")
def counted() -> dict[str, Any]:
    payload = {"rope": ROPE, "experts": EXPERTS, "scale": 1.3466, "yarn": YARN}
    return _run(megatron_python(), BYTES, payload)


def test_unfused_rope_moves_what_megatrons_function_moves(counted: dict[str, Any]) -> None:
    op = megatron_unfused_rotary(_shape(rope_unfused=True))
    forward, backward = counted["rope"]
    # the [s, k] cos/sin tables Megatron builds per call are the rest (about 1 %)
    assert op.forward.bytes == pytest.approx(forward, rel=0.02)
    assert op.forward.bytes < forward
    assert op.backward_data.bytes == pytest.approx(backward, rel=0.02)


def test_expert_bias_moves_what_megatrons_loop_moves(counted: dict[str, Any]) -> None:
    op = expert_bias_add(_shape(), _experts())
    forward, backward = counted["bias"]
    # the [h] biases and [N, 1] probabilities are the rest (1/h of the rows)
    assert op.forward.bytes == pytest.approx(forward, rel=0.01)
    assert op.backward_data.bytes == pytest.approx(backward, rel=0.02)


def test_expert_bias_under_fp32_probabilities_moves_what_megatrons_loop_moves(
    counted: dict[str, Any],
) -> None:
    # HybridEP and DeepEP hand the experts fp32 probabilities: the products, sums and cat are
    # fp32 and cast back at the end, 28 and 40 bytes per element where bf16 moves 12 and 16.
    op = expert_bias_add(_shape(), replace(_experts(), fp32_probs=True))
    forward, backward = counted["bias32"]
    rows, h = EXPERTS[0], EXPERTS[1]
    assert op.forward.bytes == 28 * rows * h
    assert op.backward_data.bytes == 40 * rows * h
    assert op.forward.bytes == pytest.approx(forward, rel=0.01)
    assert op.backward_data.bytes == pytest.approx(backward, rel=0.02)


def test_glu_clamp_moves_what_megatrons_clamp_moves(counted: dict[str, Any]) -> None:
    op = expert_glu_clamp(_shape(), _experts())
    forward, backward = counted["clamp"]
    assert op.forward.bytes == forward
    assert op.backward_data.bytes == pytest.approx(backward, abs=16)  # two 0-d scalars


def test_yarn_scale_is_megatrons(counted: dict[str, Any]) -> None:
    by_hand = [0.1 * math.log(32) + 1, 1.0, 0.1 * math.log(32) + 1, 1.0]
    assert counted["yarn"] == pytest.approx(by_hand, rel=1e-12)
    oss = preset_model("gpt-oss-120b", 4096)
    deepseek = preset_model("deepseek-v3", 4096)
    assert oss is not None and oss.rope_scaling is not None
    assert deepseek is not None and deepseek.rope_scaling is not None
    assert oss.rope_scaling.concentration == pytest.approx(by_hand[0], rel=1e-12)
    assert deepseek.rope_scaling.concentration == 1.0


@pytest.mark.parametrize(
    ("preset", "expected"),
    [
        ("gpt-oss-120b", {"rope_unfused": True, "glu_clamp": True, "expert_bias": True}),
        ("deepseek-v3", {"rope_unfused": False, "glu_clamp": False, "expert_bias": False}),
        ("qwen3-30b-a3b", {"rope_unfused": False, "glu_clamp": False, "expert_bias": False}),
        ("llama3-8b", {"rope_unfused": False, "glu_clamp": False, "expert_bias": False}),
    ],
)
def test_which_models_take_megatrons_eager_paths(preset: str, expected: dict[str, bool]) -> None:
    model = preset_model(preset, 4096)
    assert model is not None
    assert megatron_eager(model, True) == EagerPaths(**expected)
    assert megatron_eager(model, False) == EagerPaths()


def _oss(gpu: str, nodes: int, **training: Any) -> dict[str, Any]:
    """GPT-OSS 120B on 64 GPUs, expert-parallel over 8 (test_sliding_window's), on `gpu`."""
    return {
        **OSS,
        "hardware": {"gpu": gpu, "nodes": nodes},
        "training": {**OSS["training"], **training},
    }


BASE = "mixtral-8x7b-64xh100.yaml"
EAGER = {"rotary (unfused)", "expert GLU clamp", "expert bias"}


def test_a_gpt_oss_layer_under_megatron_runs_the_three_and_under_fsdp2_none() -> None:
    job = job_of(_oss("b200", 8), BASE)
    assert job.dims.experts is not None
    names = {op.name for op in moe_layer_ops(layer_shape(job), job.dims.experts)}
    assert names >= EAGER and "rotary" not in names
    titan = job_of(_oss("b200", 8, framework="fsdp2"), BASE)
    assert titan.dims.experts is not None
    names = {op.name for op in moe_layer_ops(layer_shape(titan), titan.dims.experts)}
    assert not EAGER & names


def test_gpt_oss_swiglu_limit_is_glu_clamp() -> None:
    config = json.loads((HF / "gpt-oss-120b" / "config.json").read_text("utf-8"))
    read = from_config(config)
    assert not isinstance(read, tuple) and read.fields["glu_clamp"] == 7.0
    other = from_config({**config, "swiglu_limit": 3.5})
    assert not isinstance(other, tuple) and other.fields["glu_clamp"] == 3.5
    model = preset_model("gpt-oss-120b", 4096)
    assert model is not None and model.glu_clamp == 7.0


# cudnn-frontend's SDPA training benchmark, cuDNN 9.19.1 (results/gb200_919_only_cudnn,
# gb300_919_only_cudnn and h200_919_only_cudnn, gpt_oss_*.csv): batch 2, 64 query and 8
# key/value heads of 64, causal with a 1,024-token window, BF16 TFLOPS on the band's FLOPs at
# 2k to 32k tokens, forward and backward.
MEASURED = {
    "gb200-nvl72": ([497, 574, 609, 624, 632], [559, 617, 646, 658, 660]),
    "gb300-nvl72": ([581, 675, 718, 738, 748], [583, 638, 668, 682, 689]),
    "h200": ([310, 336, 349, 355, 358], [264, 289, 300, 303, 299]),
}
SEQ = (2048, 4096, 8192, 16384, 32768)


@pytest.mark.parametrize("gpu", sorted(MEASURED))
def test_head_dimension_64_attention_runs_at_cudnns_measured_rate(gpu: str) -> None:
    """The benchmark's own problems (a 1,024-token window over 2k to 32k tokens, heads of 64),
    priced as planc prices any windowed op, run at the benchmark's rates: the band's FLOPs
    (s·w − w²/2 per head, which the benchmark's TFLOPS count too) through the lookup at the
    equivalent square, with no HBM bound in the way."""
    eff = for_gpu(gpu)
    job = job_of(_oss(gpu, 8, micro_batch=2), BASE)
    device = device_of(job)
    for s, fwd, bwd in zip(SEQ, *MEASURED[gpu], strict=True):
        shape = replace(layer_shape(job), s=s, s_c=s, s_r=s, window=1024)
        op = flash_attention(shape)
        assert op.engine == "cudnn" and op.shape is not None and op.shape.k == 64
        rate = op.forward.flops / work_time_s(op, op.forward, device, eff) / 1e12
        assert rate == pytest.approx(fwd, rel=0.01)
        rate = op.backward_data.flops / work_time_s(op, op.backward_data, device, eff, True) / 1e12
        assert rate == pytest.approx(bwd, rel=0.01)
    assert efficiency_of(job) == eff


# The same benchmark, cuDNN 9.26 (NVIDIA/cudnn-frontend e99b0d0b, results/gpt_oss/gb200 and
# gb300, gpt_oss_20260724_*.csv): batch 2, 128 query and key/value heads of 64, causal with a
# 128-token window (GPT-OSS's), BF16 TFLOPS on the band's FLOPs at 2k to 32k tokens.
MEASURED_W128 = {
    "gb200-nvl72": ([154, 162, 166, 167, 168], [178, 184, 189, 188, 187]),
    "gb300-nvl72": ([166, 174, 179, 181, 182], [183, 192, 198, 199, 199]),
}


@pytest.mark.parametrize("gpu", sorted(MEASURED_W128))
def test_a_128_token_window_runs_at_cudnns_rate_for_it(gpu: str) -> None:
    """The benchmark's 128-token-window problems run at its rates, about a third of the
    1,024-token window's: GPT-OSS's sliding layers; a 1,024-token window keeps the table above
    (test_head_dimension_64_attention_runs_at_cudnns_measured_rate)."""
    eff = for_gpu(gpu)
    job = job_of(_oss(gpu, 8, micro_batch=2), BASE)
    device = device_of(job)
    for s, fwd, bwd in zip(SEQ, *MEASURED_W128[gpu], strict=True):
        shape = replace(layer_shape(job), s=s, s_c=s, s_r=s, window=128, n=128, g=128)
        op = flash_attention(shape)
        # the band's FLOPs, as the benchmark counts them: 4·b·n·(s·w − w²/2)·64 forward
        assert op.forward.flops == 4 * 2 * 128 * (s * 128 - 128**2 / 2) * 64
        rate = op.forward.flops / work_time_s(op, op.forward, device, eff) / 1e12
        assert rate == pytest.approx(fwd, rel=0.01)
        rate = op.backward_data.flops / work_time_s(op, op.backward_data, device, eff, True) / 1e12
        assert rate == pytest.approx(bwd, rel=0.01)


def test_a_full_layer_and_a_short_sequence_keep_the_d64_table() -> None:
    """Only a window shorter than the sequence takes the 128-token rows: a full causal layer
    of 256 tokens (as many keys as queries) does not."""
    eff = for_gpu("gb200-nvl72")
    job = job_of(_oss("gb200-nvl72", 8, micro_batch=2), BASE)
    shape = replace(layer_shape(job), s=256, s_c=256, s_r=256, window=0)
    op = flash_attention(shape)
    device = device_of(job)
    t = work_time_s(op, op.forward, device, eff)
    assert t == work_time_s(op, op.forward, device, replace(eff, cudnn_d64_w128_by_seq=()))


def test_head_dimension_128_is_unchanged() -> None:
    """A head of 128 keeps the 128 table: Llama 3 8B's attention is priced as before."""
    job = job_of({"hardware": {"gpu": "gb200-nvl72"}})
    eff = for_gpu("gb200-nvl72")
    op = flash_attention(layer_shape(job))
    assert op.shape is not None and op.shape.k == 128
    t = work_time_s(op, op.forward, device_of(job), eff)
    plain = replace(eff, cudnn_d64_by_seq=())
    assert t == work_time_s(op, op.forward, device_of(job), plain)


def test_the_op_fuser_takes_the_clamp_and_bias_but_not_rope() -> None:
    """training.fused_grouped_mlp (Megatron-Core's use_transformer_engine_op_fuser): the GLU
    and the probability-scaled fc2 biases run inside Transformer Engine's ops; RoPE is the
    attention's and stays unfused."""
    job = job_of(_oss("b200", 8, fused_grouped_mlp=True), BASE)
    assert job.dims.experts is not None
    names = {op.name for op in moe_layer_ops(layer_shape(job), job.dims.experts)}
    assert "rotary (unfused)" in names and not {"expert GLU clamp", "expert bias"} & names


def test_megatron_refuses_the_op_fuser_where_it_asserts() -> None:
    """PLC048: Megatron-Core before 0.18 has no op-fuser path, and TEGroupedMLP asserts
    _is_fused_impl_supported (expert tensor parallelism of one, a gated MLP); PLC051: another
    framework runs its own expert kernels."""

    def fired(**changed: Any) -> set[str]:
        spec = _oss("b200", 8, fused_grouped_mlp=True)
        for section, values in changed.items():
            spec[section] = {**spec[section], **values}
        return rules_fired(check_overlay(spec, BASE))

    assert not {"PLC048", "PLC051"} & fired()
    assert "PLC048" in fired(training={"framework_release": "nemo-26.04"})
    assert "PLC048" in fired(parallelism={"tensor": 2, "data": 32, "sequence_parallel": True})
    dense = {"training": {"fused_grouped_mlp": True}}  # Llama 3 8B: no routed experts
    assert "PLC048" in rules_fired(check_overlay(dense))
    assert "PLC051" in fired(training={"framework": "fsdp2"})


def test_megatron_files_say_what_the_command_line_cannot() -> None:
    """The clamp and the op fuser are TransformerConfig fields Megatron-LM's parser has no flag
    for: the emitted README says how to set them."""
    readme = megatron_files(compiled(job_of(_oss("b200", 8, fused_grouped_mlp=True), BASE)))
    text = readme["megatron/README.md"]
    assert "activation_func_clamp_value: 7" in text
    assert "use_transformer_engine_op_fuser" in text and "NVTE_CUTEDSL_FUSED_GROUPED_MLP=1" in text
    plain = megatron_files(compiled(job_of(_oss("b200", 8), BASE)))["megatron/README.md"]
    assert "use_transformer_engine_op_fuser" not in plain


def test_cudnn_fp8_backward_at_64_computes_the_whole_triangle_under_a_window() -> None:
    """cuDNN's FP8 backward at head dimension 64 grows with the square of the sequence
    whatever the window (cudnn-frontend's gpt_oss rows: 0.86 ms at 4k, 43.9 at 32k, ×51 for ×8
    tokens, where BF16's backward grows ×8.4): a windowed layer's FP8 backward is priced over
    the causal triangle, its forward over the band; at 128 the band, as before."""
    fp8 = {"recipe": "mxfp8", "attention": "mxfp8"}
    job = job_of(_oss("gb200-nvl72", 8, precision="fp8", fp8=fp8), BASE)
    windowed = replace(layer_shape(job), window=128)
    full, band = flash_attention(replace(windowed, window=0)), flash_attention(windowed)
    kernels = [op for op in core_ops(job, windowed) if op.engine == "cudnn-mxfp8"]
    assert sum(op.forward.flops for op in kernels) == band.forward.flops
    assert sum(op.backward_data.flops for op in kernels) == full.backward_data.flops
    assert full.backward_data.flops > 15 * band.backward_data.flops
    wide = replace(windowed, k=128, n=32, g=4)
    kernels = [op for op in core_ops(job, wide) if op.engine == "cudnn-mxfp8"]
    assert [op.backward_data.flops for op in kernels] == [flash_attention(wide).backward_data.flops]


def test_the_clamped_copy_is_saved_beside_fc1s_output() -> None:
    """The clamps keep fc1's output for their backward and the fused activation keeps the
    clamped copy: one more 2·ε·R·f_e per MoE layer and micro-batch (GPT-OSS on B200 at ep 8,
    micro-batch 1: R = 4,096 tokens × top 4 = 16,384 rows, f_e = 2,880), none where moe_act is
    recomputed or the op fuser runs the GLU."""

    def clamp_bytes(**training: Any) -> int:
        job = job_of(_oss("b200", 8, **training), BASE)
        recompute = job.training.recompute
        modules = job.training.recompute_modules
        terms = moe_layer_terms(shape_of(job), expert_shape(job), recompute, modules)
        return sum(t.bytes for t in terms if t.name.startswith("expert clamped"))

    assert clamp_bytes() == 2 * 2 * 4096 * 4 * 2880
    assert clamp_bytes(recompute="selective", recompute_modules=["moe_act"]) == 0
    assert clamp_bytes(fused_grouped_mlp=True) == 0
