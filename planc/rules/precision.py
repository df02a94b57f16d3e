"""Rules on low-precision training (precision fp8/fp4, training.fp8): the recipes a GPU and a
framework run, and the options the frameworks refuse, each with the framework's own reason."""

from __future__ import annotations

from collections.abc import Iterator

from planc.dims import ceil_div
from planc.presets.fp8 import architecture, recipe_table
from planc.rules.base import Context, Violation, rule
from planc.spec.job import Job
from planc.vocab import Fp8Recipe

_FRAMEWORKS = {"megatron": "Megatron-LM", "deepspeed": "DeepSpeed", "fsdp2": "torchtitan (FSDP2)"}
# The Transformer Engine recipes, for the fix of a torchao recipe named under Megatron.
_TE = "delayed, current, blockwise, mxfp8 or nvfp4"
_TORCHAO = "tensorwise, rowwise, rowwise_with_gw_hp or mxfp8"


@rule("PLC043")
def recipe_on_gpu(ctx: Context) -> Iterator[Violation]:
    """Low precision: the GPU runs the FP8/FP4 recipe training.fp8.recipe names.

    Transformer Engine checks the device before it quantizes (transformer_engine/pytorch/
    quantization.py): FP8 needs compute capability 8.9 (Ada, Hopper and later), FP8 block
    scaling 9.0 and CUDA 12.9, MXFP8 and NVFP4 10.0 (Blackwell); ROCm's Transformer Engine
    runs MXFP8 only from gfx950, so not on the MI300X (gfx942). torchtitan's float8 converter
    (torchao) needs NVIDIA SM89 or AMD gfx942. The architecture comes from the GPU preset
    (planc/presets/fp8.json); a custom GPU with fp4_tflops is taken as Blackwell, one with
    fp8_tflops as Hopper. The reason quoted is the framework's own. A GPU without FP8 tensor
    cores at all (A100) is refused by PLC109 before this rule runs.

    Passes:
        hardware: {gpu: b200}
        training: {precision: fp8, fp8: {recipe: mxfp8}}

    Fails:
        training: {precision: fp8, fp8: {recipe: mxfp8}}
    """
    tr, gpu = ctx.job.training, ctx.job.cluster.gpu
    if tr.fp8_recipe is None:
        return
    row = recipe_table(tr.fp8_recipe)
    arch = architecture(gpu.name, gpu.peaks)
    if row.supports(arch):
        return
    able = "a Blackwell GPU (b200, gb200-nvl72, b300, gb300-nvl72)"
    if "hopper" in row.usages:
        able = "a Hopper or Blackwell GPU (h100-sxm, h200, b200)"
    yield Violation(
        "training.fp8.recipe" if tr.recipe_named else "training.precision",
        f"recipe {row.name.value} does not run on the {gpu.name} ({arch}): "
        + row.refusals.get(arch, f"planc knows of no {arch} support for it"),
        f"choose a recipe the {gpu.name} runs ({_able(arch)}), or {able}",
        ("hardware.gpu",),
    )


def _able(arch: str) -> str:
    """The recipes that run on `arch`, in the enum's order."""
    names = [r.value for r in Fp8Recipe if recipe_table(r).supports(arch)]
    return ", ".join(names) if names else "none: train in bf16"


@rule("PLC044")
def recipe_options(ctx: Context) -> Iterator[Violation]:
    """Low precision: training.fp8 is a combination the framework accepts.

    Each check quotes the framework's refusal:

    - training.fp8 is read only with precision fp8 or fp4; fp4 runs the nvfp4 recipe and
      nvfp4 needs precision fp4 (Megatron: "--fp4-format and --fp8-format cannot be used
      simultaneously").
    - The recipe's framework: Transformer Engine's recipes run under Megatron-LM (and
      DeepSpeed with TE modules), torchao's (tensorwise, rowwise, rowwise_with_gw_hp) under
      torchtitan (framework: fsdp2); mxfp8 under both.
    - param_gather: Megatron "--fp8-param-gather only supported with distributed optimizer,
      torch fsdp2, megatron fsdp" (zero_stage ≥ 1); torchtitan all-gathers in FP8 only with
      tensorwise scaling ("rowwise: all-gather happens in high precision"); DeepSpeed has
      none. With the optimizer offloaded, Megatron requires the delayed recipe.
    - moments: bf16 is Megatron's precision-aware optimizer, in its distributed optimizer
      (framework megatron, zero_stage ≥ 1), and says what training.optimizer_state.moments
      says: the two may not disagree.
    - first_last_bf16: Megatron "Delayed scaling does not support first / last layer in
      BF16", and at most the layers of one pipeline stage at each end (L/p).
    - The GEMM dimensions the recipe needs divisible (hidden size, heads·k/t, ffn/t): by 16
      for FP8 tensor cores, 32 for MXFP8's 1×32 blocks, 128 for 1×128 blocks (TE docs).
    - attention (FP8 attention, Transformer Engine's fp8_dpa; TE 2.18, Megatron-Core 0.20):
      Megatron-LM's Transformer Engine attention only; cuDNN's FusedAttention, since TE turns
      flash-attn and its unfused attention off for FP8 attention and then finds no backend; the
      linear recipe must carry fp8_dpa (Megatron builds Float8BlockScaling without it and TE
      refuses FP8 attention for it); current scaling and MXFP8 attention need Blackwell
      (sm100); Hopper trains FP8 attention only at head dimension 128, Blackwell up to 192
      for Q and K and 128 for V, each a multiple of 16; MXFP8 attention needs head dims
      divisible by 32 and each rank's sequence by 128.
    - output_proj (the LM head in MXFP8, Megatron-Core fp8_output_proj, 3f6a2ed8):
      Megatron-LM only; "fp8_output_proj requires fp8_recipe='mxfp8'"; and TE's head cannot
      share the embedding's weight on the first stage ("TE output projection does not
      support skip_weight_param_allocation"), so a tied head needs p > 1.

    Passes:
        training: {precision: fp8, fp8: {recipe: current, first_last_bf16: 1}}

    Fails:
        training: {precision: fp8, fp8: {recipe: delayed, first_last_bf16: 1}}
    """
    job = ctx.job
    tr = job.training
    if tr.fp8_recipe is None:
        if tr.fp8_given:
            yield Violation(
                "training.fp8",
                f"training.fp8 is read only with precision fp8 or fp4; precision is "
                f"{tr.precision}",
                "set training.precision: fp8, or remove training.fp8",
            )
        return
    yield from _precision_matches(job)
    yield from _framework_runs(job)
    yield from _param_gather(job)
    yield from _bf16_layers(job)
    yield from _moments(job)
    yield from _divisible(job)
    yield from _fp8_attention(job)
    yield from _output_proj(job)


def _output_proj(job: Job) -> Iterator[Violation]:
    """training.fp8.output_proj against the framework, the recipe and a tied head (the list
    in `recipe_options`)."""
    tr = job.training
    if not tr.fp8_output_proj:
        return
    where = "training.fp8.output_proj"
    drop = "remove training.fp8.output_proj (the LM head in bf16)"
    if tr.framework != "megatron":
        yield Violation(
            where,
            "the MXFP8 LM head is Megatron-Core's fp8_output_proj (Transformer Engine's "
            f"TELMHeadColumnParallelLinear); {_FRAMEWORKS[tr.framework]} (training.framework: "
            f"{tr.framework}) keeps its output layer in 16 bits",
            f"{drop}, or training.framework: megatron",
            ("training.framework",),
        )
        return
    if tr.fp8_recipe is not Fp8Recipe.MXFP8:
        recipe = tr.fp8_recipe.value if tr.fp8_recipe is not None else "none"
        yield Violation(
            where,
            "Megatron-Core's TransformerConfig refuses it: \"fp8_output_proj requires "
            f"fp8_recipe='mxfp8', got '{recipe}'\"",
            f"use recipe: mxfp8 (Blackwell), or {drop}",
            ("training.fp8.recipe",),
        )
    if job.model.tied and job.layout.p == 1:
        yield Violation(
            where,
            "with tied embeddings on one pipeline stage the LM head reuses the word "
            "embedding's weight, which Transformer Engine's head refuses: \"TE output "
            "projection does not support skip_weight_param_allocation\" (Megatron-Core "
            "TELMHeadColumnParallelLinear)",
            f"untie the embeddings (model.tied_embeddings: false), use pipeline > 1, or {drop}",
            ("model",),
        )


def _moments(job: Job) -> Iterator[Violation]:
    tr = job.training
    if tr.moments_bf16 and tr.moments_dtype not in (None, "bf16"):
        yield Violation(
            "training.fp8.moments",
            f"training.fp8.moments says bf16 and training.optimizer_state.moments says "
            f"{tr.moments_dtype}: one format for Adam's moments",
            "keep training.optimizer_state.moments and leave fp8.moments out",
            ("training.optimizer_state.moments",),
        )
    if not tr.moments_bf16 or (tr.framework == "megatron" and job.layout.zero >= 1):
        return
    yield Violation(
        "training.fp8.moments",
        "bf16 moments are Megatron's precision-aware optimizer (--use-precision-aware-"
        "optimizer), which its distributed optimizer runs; "
        f"framework {tr.framework}, zero_stage {job.layout.zero}",
        "use training.framework: megatron with parallelism.zero_stage >= 1, or moments: fp32",
        ("training.framework",),
    )


def _precision_matches(job: Job) -> Iterator[Violation]:
    tr = job.training
    recipe = tr.fp8_recipe
    if (tr.precision == "fp4") != (recipe is Fp8Recipe.NVFP4):
        yield Violation(
            "training.fp8.recipe" if tr.recipe_named else "training.precision",
            f"precision {tr.precision} with recipe {recipe}: FP4 training is the nvfp4 recipe "
            "and nvfp4 is FP4 (Megatron: '--fp4-format and --fp8-format cannot be used "
            "simultaneously')",
            "use precision: fp4 with recipe: nvfp4, or precision: fp8 with an FP8 recipe",
            ("training.precision",),
        )


def _framework_runs(job: Job) -> Iterator[Violation]:
    tr = job.training
    row = recipe_table(tr.fp8_recipe) if tr.fp8_recipe else None
    if row is None or tr.framework in row.frameworks:
        return
    others = _TORCHAO if tr.framework == "fsdp2" else _TE
    yield Violation(
        "training.fp8.recipe",
        f"{row.name.value} is a {row.library} recipe, which "
        f"{_FRAMEWORKS[tr.framework]} (training.framework: {tr.framework}) does not run; "
        f"it runs under {', '.join(_FRAMEWORKS[f] for f in row.frameworks)}",
        f"choose {others}, or training.framework: {row.frameworks[0]}",
        ("training.framework",),
    )


def _param_gather(job: Job) -> Iterator[Violation]:
    tr, lay = job.training, job.layout
    if not tr.param_gather or tr.fp8_recipe is None:
        return
    where = "training.fp8.param_gather"
    if tr.framework == "megatron" and lay.zero == 0:
        yield Violation(
            where,
            "Megatron: '--fp8-param-gather only supported with distributed optimizer, torch "
            "fsdp2, megatron fsdp, or inference mode'; zero_stage is 0",
            "set parallelism.zero_stage: 1 (the distributed optimizer), or param_gather: false",
            ("parallelism.zero_stage",),
        )
    if tr.framework == "deepspeed":
        yield Violation(
            where,
            "DeepSpeed has no FP8 parameter all-gather (its config has no FP8 setting)",
            "set param_gather: false, or training.framework: megatron",
        )
    if tr.framework == "fsdp2" and tr.fp8_recipe is not Fp8Recipe.TENSORWISE:
        yield Violation(
            where,
            f"torchtitan all-gathers in FP8 only with tensorwise scaling "
            f"(enable_fsdp_float8_all_gather); with {tr.fp8_recipe} 'all-gather happens in "
            "high precision'",
            "set recipe: tensorwise, or param_gather: false",
        )
    if tr.offload_optimizer and tr.fp8_recipe is not Fp8Recipe.DELAYED:
        yield Violation(
            where,
            "Megatron: 'When `--fp8-param-gather` is enabled, the optimizer cpu offload must "
            "be used in conjunction with `--fp8-recipe delayed`'",
            "set recipe: delayed, param_gather: false, or offload.optimizer: false",
            ("training.offload.optimizer",),
        )


def _bf16_layers(job: Job) -> Iterator[Violation]:
    tr, lay = job.training, job.layout
    n = tr.first_last_bf16
    if n == 0:
        return
    where = "training.fp8.first_last_bf16"
    if tr.fp8_recipe is Fp8Recipe.DELAYED:
        yield Violation(
            where,
            "Megatron: 'Delayed scaling does not support first / last layer in BF16.'",
            "set recipe: current (or blockwise, mxfp8), or first_last_bf16: 0",
            ("training.fp8.recipe",),
        )
    most = job.model.L // lay.p
    if n > most:
        yield Violation(
            where,
            f"first_last_bf16 = {n}: Megatron takes at most the layers of one pipeline stage "
            f"at each end, {job.model.L} // {lay.p} = {most} ('num_layers_at_start_in_bf16 "
            "must be between 0 and number of layers per pipeline stage')",
            f"set first_last_bf16 to at most {most}",
        )


def _divisible(job: Job) -> Iterator[Violation]:
    tr, model, lay = job.training, job.model, job.layout
    row = recipe_table(tr.fp8_recipe) if tr.fp8_recipe else None
    if row is None:
        return
    q = row.divisor
    sizes = {
        "model.hidden": model.h,
        "heads·head_dim/tensor": ceil_div(model.n, lay.t) * model.k,
        "ffn_hidden/tensor": ceil_div(model.f, lay.t),
    }
    bad = {name: size for name, size in sizes.items() if size % q}
    if not bad:
        return
    listed = ", ".join(f"{name} = {size:,}" for name, size in bad.items())
    yield Violation(
        "training.fp8.recipe",
        f"the {row.name.value} recipe needs GEMM dimensions divisible by {q} "
        f"({row.library}: quantized GEMMs and their scale blocks); {listed}",
        "choose a tensor degree that keeps them divisible, or another recipe",
        ("parallelism.tensor",),
    )


def _fp8_attention(job: Job) -> Iterator[Violation]:
    """training.fp8.attention against the framework, the kernel, the linear recipe, the GPU
    and the head dimensions (the list in `recipe_options`)."""
    tr = job.training
    a = tr.fp8_attention
    if a is None or tr.fp8_recipe is None:
        return
    where = "training.fp8.attention"
    drop = "remove training.fp8.attention (attention in bf16)"
    if tr.framework != "megatron":
        yield Violation(
            where,
            f"FP8 attention is Transformer Engine's fp8_dpa, which Megatron-LM's attention runs; "
            f"{_FRAMEWORKS[tr.framework]} (training.framework: {tr.framework}) quantizes the "
            "linear layers only",
            f"{drop}, or training.framework: megatron",
            ("training.framework",),
        )
        return
    if tr.attention != "flash" or tr.kernels != "fused" or tr.attention_backend == "flash":
        yield Violation(
            where,
            "Transformer Engine runs FP8 attention on cuDNN's FusedAttention only ('Disabling "
            "FlashAttention 2 for FP8 attention', 'Disabling UnfusedDotProductAttention for FP8 "
            "attention', then 'No dot product attention backend is available'); attention "
            f"{tr.attention}, kernels {tr.kernels}, attention_backend {tr.attention_backend}",
            f"set attention: flash with kernels: fused and attention_backend: auto or fused, or "
            f"{drop}",
            ("training.attention",),
        )
    if tr.fp8_recipe is Fp8Recipe.BLOCKWISE:
        yield Violation(
            where,
            "Megatron-Core builds the blockwise recipe without fp8_dpa (fp8_utils.py "
            "get_fp8_recipe) and Transformer Engine refuses it there: 'FP8 attention is not "
            "supported for Float8BlockScaling.'",
            f"choose recipe delayed, current or mxfp8, or {drop}",
            ("training.fp8.recipe",),
        )
    yield from _fp8_attention_gpu(job, a, where, drop)


def _fp8_attention_gpu(job: Job, a: Fp8Recipe, where: str, drop: str) -> Iterator[Violation]:
    gpu, model = job.cluster.gpu, job.model
    arch = architecture(gpu.name, gpu.peaks)
    qk = model.k
    v = model.mla.v_head if model.mla is not None else model.k
    if arch not in ("hopper", "blackwell"):
        yield Violation(
            where,
            f"Transformer Engine's FP8 attention runs on cuDNN's FusedAttention from compute "
            f"capability 9.0 (Hopper, Blackwell); the {gpu.name} is {arch}",
            f"{drop}, or a Hopper or Blackwell GPU",
            ("hardware.gpu",),
        )
        return
    if arch == "hopper" and a is not Fp8Recipe.DELAYED:
        yield Violation(
            where,
            f"Transformer Engine runs {a.value} FP8 attention on Blackwell only ('Disabling "
            f"FusedAttention for {'FP8 current scaling' if a is Fp8Recipe.CURRENT else 'MXFP8'} "
            f"on arch < sm100'); the {gpu.name} is Hopper",
            f"set attention: delayed, or {drop}",
            ("hardware.gpu",),
        )
    most_qk, most_v = (128, 128) if arch == "hopper" else (192, 128)
    exact = arch == "hopper"
    fits = (qk == most_qk and v == most_v) if exact else (qk <= most_qk and v <= most_v)
    if not fits or qk % 16 or v % 16:
        need = "exactly 128" if exact else "at most 192 for Q and K and 128 for V"
        yield Violation(
            where,
            f"cuDNN's FP8 attention trains head dimensions {need}, each a multiple of 16, on "
            f"{arch} (nvte_get_fused_attn_backend, fused_attn.cpp); Q/K {qk}, V {v}",
            f"{drop}",
            ("model.head_dim",),
        )
    if a is Fp8Recipe.MXFP8:
        yield from _mxfp8_attention(job, qk, v, where, drop)


def _mxfp8_attention(job: Job, qk: int, v: int, where: str, drop: str) -> Iterator[Violation]:
    s_c = ceil_div(job.training.s, job.layout.c)
    if qk % 32 == 0 and v % 32 == 0 and s_c % 128 == 0:
        return
    yield Violation(
        where,
        "Transformer Engine's MXFP8 attention needs 's_q % 128 == 0, s_kv % 128 == 0, d_qk % 32 "
        f"== 0, d_v % 32 == 0' (combine_and_quantize); sequence per rank {s_c}, Q/K {qk}, V {v}",
        f"set attention: delayed or current, or {drop}",
        ("training.seq_len",),
    )
