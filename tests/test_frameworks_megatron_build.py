"""Megatron-Core builds the model planc's emitted arguments describe, and it is the spec's (#31).

`megatron/args.txt` is parsed by Megatron-LM's own parser and validate_args at the plan's world
size; the same arguments, with every parallel degree set to 1 (the whole model in one process),
then go through `core_transformer_config_from_args` into Megatron-Core's GPTModel on the meta
device (CPU only, no weights). Its parameters must be the spec's (planc's count at the
vocabulary Megatron pads to at the plan's tensor-parallel degree), and its RoPE (base θ, YaRN's
factor, original length, β_fast, β_slow, mscale, mscale_all_dim, Llama 3.1's scaling) and
group-limited routing must be the spec's. The expected values are planc's spec, resolved; the
model is Megatron-Core's own code.

What the harness changes, none of it a parameter: no Transformer Engine (the local spec, its
fusions off), the all-gather token dispatcher (the all-to-all one opens a CUDA stream), and
latent attention's core attention, which megatron-core 0.19.2's local spec cannot build (its
DotProductAttention refuses k_channels) and which holds no weights in either backend.

Runs in the interpreter PLANC_MEGATRON_PYTHON names (CI's reference venv, megatron-core 0.19.2
with torch); skips without one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from test_frameworks import _interpreter, _run

from planc.compile.frameworks import megatron_arguments
from planc.dims import padded_vocab
from planc.memory.params import parameter_count

from conftest import compiled, job_of

BUILD = r'''
import argparse, copy, json, os, sys, tempfile, warnings
warnings.filterwarnings("ignore")
os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
import torch
import megatron.training.arguments as arguments
from megatron.training.argument_utils import core_transformer_config_from_args
from megatron.core import parallel_state
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_mtp_block_spec
from megatron.core.tokenizers.utils.build_tokenizer import vocab_size_with_padding

arguments.get_device_arch_version = lambda: 9  # validate as on the plans' Hopper GPUs
# MLA builds its YaRN embedding on torch.cuda.current_device() whatever use_cpu_initialization
# says (multi_latent_attention.py): no GPU here, so that device is the CPU.
torch.cuda.current_device = lambda: "cpu"
parser = arguments.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
extra = ["--tokenizer-type", "NullTokenizer", "--mock-data", "--train-iters", "10", "--lr", "1e-4"]
# One process: the whole model on the meta device, every parallel degree 1 (counts and RoPE
# do not depend on the layout; the vocabulary's padding does, and is taken at the plan's TP).
LAYOUT = {"--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
          "--expert-model-parallel-size", "--expert-tensor-parallel-size",
          "--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
          "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
          "--num-distributed-optimizer-instances", "--pipeline-model-parallel-layout"}
FLAGS = {"--sequence-parallel", "--tp-comm-overlap", "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"}
store = os.path.join(tempfile.mkdtemp(), "store")
torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
parallel_state.initialize_model_parallel()

class CoreAttention(torch.nn.Module):
    """softmax(QK^T)V without weights: megatron-core 0.19.2's local DotProductAttention does
    not take the k_channels / v_channels latent attention passes it (TE's does), and holds no
    parameter either way."""

    def __init__(self, *args, **kwargs):
        super().__init__()


def local_core_attention(spec, seen=None):
    """`spec` with every core attention of latent attention made CoreAttention."""
    import dataclasses
    seen = set() if seen is None else seen
    if id(spec) in seen:
        return
    seen.add(id(spec))
    if hasattr(spec, "module") and getattr(spec, "module", None) is not None and "MLA" in getattr(spec.module, "__name__", ""):
        spec.submodules.core_attention = CoreAttention
    if dataclasses.is_dataclass(spec):
        for field in dataclasses.fields(spec):
            value = getattr(spec, field.name)
            if isinstance(value, list):
                for item in value:
                    local_core_attention(item, seen)
            elif dataclasses.is_dataclass(value) and not isinstance(value, type):
                local_core_attention(value, seen)


def rope_of(module):
    emb = module
    out = {"class": type(emb).__name__}
    for name in ("scaling_factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim"):
        if hasattr(emb, name):
            out[name] = float(getattr(emb, name))
    return out

out = {}
for case, (lines, world, vocab) in json.load(sys.stdin).items():
    planned = parser.parse_args([w for line in lines for w in line.split()] + extra + ["--vocab-size", str(vocab)])
    planned.world_size, planned.rank = world, 0
    arguments.validate_args(planned)
    padded = vocab_size_with_padding(vocab, planned, logging_enabled=False)
    kept = [line for line in lines if line.split()[0] not in LAYOUT and line.split()[0] not in FLAGS]
    args = parser.parse_args([w for line in kept for w in line.split()] + extra + ["--vocab-size", str(vocab), "--use-cpu-initialization", "--no-rope-fusion", "--transformer-impl", "local", "--no-persist-layer-norm", "--no-gradient-accumulation-fusion", "--no-masked-softmax-fusion", "--no-bias-dropout-fusion", "--no-bias-swiglu-fusion", "--moe-token-dispatcher-type", "allgather"])
    args.world_size, args.rank = 1, 0
    arguments.validate_args(args)
    config = core_transformer_config_from_args(args)
    config.perform_initialization = False
    # The graphs as TransformerConfig.__post_init__ took them; the model below is built without
    # them (capture needs a GPU), its weights being the same.
    graphs = [config.cuda_graph_impl, sorted(m.name for m in config.cuda_graph_modules)]
    config.cuda_graph_impl = "none"
    spec = get_gpt_decoder_block_spec(config, use_transformer_engine=False)
    mtp = get_gpt_mtp_block_spec(config, spec.layer_specs[-1], use_transformer_engine=False) if args.mtp_num_layers else None
    local_core_attention(spec)
    if mtp is not None:
        local_core_attention(mtp)
    with torch.device("meta"):
        model = GPTModel(
            config=config, transformer_layer_spec=spec, vocab_size=padded,
            max_sequence_length=args.max_position_embeddings,
            share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights,
            position_embedding_type=args.position_embedding_type, rotary_percent=args.rotary_percent,
            rotary_base=args.rotary_base, rope_scaling=args.use_rope_scaling,
            rope_scaling_factor=args.rope_scaling_factor, mtp_block_spec=mtp,
        )
    # The router's expert bias (auxiliary-loss-free balancing) is a buffer in Megatron-Core
    # (TopKRouter.expert_bias), a tensor of the checkpoint all the same: planc counts it.
    bias = sum(b.numel() for n, b in model.named_buffers() if n.endswith("expert_bias"))
    total = sum(p.numel() for p in model.parameters()) + bias
    attention = model.decoder.layers[0].self_attention
    rope = rope_of(attention.rotary_pos_emb) if config.multi_latent_attention else rope_of(getattr(model, "rotary_pos_emb", None))
    out[case] = {
        "parameters": total, "padded_vocab": padded, "rotary_base": float(config.rotary_base if hasattr(config, "rotary_base") else args.rotary_base),
        "rope": rope, "rope_scaling": bool(args.use_rope_scaling), "rope_scaling_factor": args.rope_scaling_factor,
        "groups": config.moe_router_num_groups, "group_topk": config.moe_router_group_topk,
        "topk_scaling": config.moe_router_topk_scaling_factor, "score": config.moe_router_score_function,
        "pre_softmax": config.moe_router_pre_softmax,
        "position": args.position_embedding_type,
        "gated": config.gated_linear_unit, "activation": config.activation_func.__name__,
        "graphs": graphs, "te_rng_tracker": bool(planned.te_rng_tracker),
        "flex": [planned.moe_flex_dispatcher_backend if planned.moe_token_dispatcher_type == "flex" else None, planned.moe_flex_dispatcher_num_sms],
        "nan_check": bool(planned.check_for_nan_in_loss_and_grad),
    }
print(json.dumps(out))
'''

_YARN = {
    "type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 8192,
    "beta_fast": 16.0,
    "beta_slow": 2.0,
    "mscale": 0.5,
    "mscale_all_dim": 0.25,
}
# (base example, overlay): every architecture field the presets and examples use — GQA and
# MHA, gated and plain MLPs, biases, learned positions, tied embeddings, QK-norm, experts with
# shared ones, dense leading layers, latent attention, multi-token prediction, RoPE bases,
# YaRN with and without latent attention, Llama 3.1's scaling, group-limited routing, sigmoid
# and top-1 routers, and a vocabulary Megatron pads (tensor 8).
CASES: dict[str, tuple[str, dict[str, Any] | None]] = {
    "llama3-8b": ("llama3-8b-1node.yaml", None),
    "llama3-70b-tp8": ("llama3-70b-8x8.yaml", None),
    "llama3-405b-scaled": (
        "llama3-70b-8x8.yaml",
        {"model": {"preset": "llama3-405b"}, "parallelism": {"pipeline": 2, "data": 4}},
    ),
    "llama3.2-1b-tied": ("llama3-8b-1node.yaml", {"model": {"preset": "llama3.2-1b"}}),
    "llama3-8b-yarn": ("llama3-8b-1node.yaml", {"model": {"rope_scaling": _YARN}}),
    "gpt3-175b": ("gpt3-175b-1024xa100.yaml", None),
    "mixtral-8x7b": ("mixtral-8x7b-64xh100.yaml", None),
    "qwen3-30b-a3b": ("mixtral-8x7b-64xh100.yaml", {"model": {"preset": "qwen3-30b-a3b"}}),
    "deepseek-v3": ("deepseek-v3-2048xh800.yaml", None),
    "llama4-scout": ("mixtral-8x7b-64xh100.yaml", {"model": {"preset": "llama4-scout-17b-16e"}}),
    "mixtral-top1": ("mixtral-8x7b-64xh100.yaml", {"model": {"moe": {"top_k": 1}}}),
    # biases on every linear, the router and the experts; attention sinks; a sliding window
    "gpt-oss-120b": (
        "mixtral-8x7b-64xh100.yaml",
        {"model": {"preset": "gpt-oss-120b"}, "parallelism": {"expert": 8}},
    ),
    "qwen3-unnormalised": (
        "mixtral-8x7b-64xh100.yaml",
        {"model": {"preset": "qwen3-30b-a3b", "moe": {"router_normalize": False}}},
    ),
    # CUDA graphs: NVIDIA's MoE recipes' partial graphs, Megatron-Core's own per-layer graphs of
    # a dense model's whole layers, and the whole iteration
    "deepseek-v3-partial-graphs": (
        "deepseek-v3-2048xh800.yaml",
        {
            "training": {
                "recompute": "selective",
                "recompute_modules": ["layernorm", "mla_up_proj"],
                "cuda_graph": {
                    "impl": "transformer_engine",
                    "modules": ["attn", "moe_router", "moe_preprocess"],
                },
            }
        },
    ),
    "llama3-8b-layer-graphs": (
        "llama3-8b-1node.yaml",
        {"training": {"cuda_graph": {"impl": "local"}}},
    ),
    # a flex dispatcher with the SMs its kernels hold
    "qwen3-30b-hybridep-sms": (
        "mixtral-8x7b-64xh100.yaml",
        {
            "model": {"preset": "qwen3-30b-a3b"},
            "parallelism": {"expert_dispatcher": "hybridep", "dispatcher_sms": 32},
        },
    ),
    "llama3-8b-iteration-graph": (
        "llama3-8b-1node.yaml",
        {"training": {"cuda_graph": {"impl": "full_iteration"}}},
    ),
}


# planc's model.mlp as Megatron-Core's TransformerConfig has it: (gated_linear_unit, the
# activation function's __name__).
MLPS = {"gelu": (False, "gelu"), "swiglu": (True, "silu"), "quick_geglu": (True, "quick_gelu")}


@pytest.mark.slow
def test_megatron_core_builds_the_spec_model_from_the_emitted_arguments() -> None:
    python = _interpreter("PLANC_MEGATRON_PYTHON", "megatron.core.models.gpt")
    if python is None:
        pytest.skip(
            "megatron.core is not importable (pip install megatron-core on Python >= 3.12, and "
            "point PLANC_MEGATRON_PYTHON at that interpreter)"
        )
    plans = {name: compiled(job_of(overlay, base)) for name, (base, overlay) in CASES.items()}
    built = _run(
        python,
        BUILD,
        {
            name: [megatron_arguments(plan)[0], plan.world, plan.job.model.V]
            for name, plan in plans.items()
        },
    )
    for name, plan in plans.items():
        model, layout, got = plan.job.model, plan.job.layout, built[name]
        assert got["padded_vocab"] == padded_vocab(model.V, layout.t), name
        expected = parameter_count(replace(model, V=got["padded_vocab"])).total
        assert got["parameters"] == expected, name
        assert got["rotary_base"] == model.rope_theta, name
        scaling = model.rope_scaling
        if model.position == "learned":
            assert got["position"] == "learned_absolute", name
        elif scaling is None:
            assert got["rope"]["class"] == "RotaryEmbedding" and not got["rope_scaling"], name
        elif scaling.kind == "llama3":
            assert got["rope_scaling"] and got["rope_scaling_factor"] == scaling.factor, name
        else:
            assert got["rope"] == {
                "class": "YarnRotaryEmbedding",
                "scaling_factor": scaling.factor,
                "original_max_position_embeddings": scaling.original,
                "beta_fast": scaling.beta_fast,
                "beta_slow": scaling.beta_slow,
                "mscale": scaling.mscale,
                "mscale_all_dim": scaling.mscale_all_dim,
            }, name
        moe = model.moe
        routing = (got["groups"], got["group_topk"], got["topk_scaling"])
        assert routing == ((moe.groups, moe.group_k, moe.scaling) if moe else (None, None, None))
        assert got["score"] == (moe.score if moe else "softmax"), name
        # Softmax weights: normalised over the k picked (Megatron's default) unless the spec
        # says not, or k = 1; then the softmax over all experts (pre-softmax).
        softmax_all = (
            moe is not None and moe.score == "softmax" and (moe.k == 1 or not moe.normalize)
        )
        assert got["pre_softmax"] == softmax_all, name
        # The MLP Megatron builds is the spec's: gated or not, and the gate's activation
        # (--swiglu F.silu, --quick-geglu quick_gelu, Megatron's default F.gelu).
        assert (got["gated"], got["activation"]) == MLPS[model.mlp], name
        # The graphs Megatron-Core takes are the spec's (none without training.cuda_graph);
        # validate_args' own requirements hold: Transformer Engine's RNG tracker under any
        # graphs, no NaN check under the whole-iteration graph.
        tr = plan.job.training
        modules = sorted(tr.cuda_graph_modules)
        assert got["graphs"] == [tr.cuda_graph_impl or "none", modules], name
        assert got["te_rng_tracker"] == (tr.cuda_graph_impl is not None), name
        assert got["nan_check"] == (tr.cuda_graph_impl != "full_iteration"), name
        # The flex dispatcher and the SMs it holds are the spec's (none stated: the library's).
        flex = layout.dispatcher if layout.dispatcher in ("deepep", "hybridep") else None
        assert got["flex"] == [flex, layout.dispatcher_sms], name
    # The cases reach what they are there for (not a test of planc: of the list above).
    assert {plan.job.model.mlp for plan in plans.values()} == set(MLPS)
    deepseek = plans["deepseek-v3"].job.model
    assert deepseek.rope_scaling is not None and deepseek.moe is not None
    assert (deepseek.moe.groups, deepseek.moe.group_k, deepseek.moe.scaling) == (8, 4, 2.5)
    assert deepseek.mtp == 1 and deepseek.mla is not None
    tp8 = plans["llama3-70b-tp8"]
    assert padded_vocab(tp8.job.model.V, tp8.job.layout.t) != tp8.job.model.V
