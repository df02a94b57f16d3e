"""No op is priced below its roofline, or far above it (issue 24).

The roofline of one pass of an op (Williams, Waterman & Patterson 2009) is the slower of its math
at the GPU's dense peak and its bytes at the HBM's peak bandwidth: nothing runs faster. A kernel
also pays a fixed launch-and-tail time τ whatever its size; here τ is derived from the preset's
own HBM curve (eff(B) = e·B/(B + B½) is B/(e·BW) + B½/(e·BW)), so the ceiling a price must stay
under is 10 × (roofline + τ). Every op of every preset model (dense, MoE, latent attention, both
ends of the model), at several layouts, on every GPU preset, in all three passes.
"""

from __future__ import annotations

import pytest

from planc.perf.compute import work_time_s
from planc.perf.inputs import device_of, efficiency_of, expert_shape, layer_shape
from planc.perf.ops import (
    OpCost,
    OpShape,
    Work,
    first_stage_ops,
    last_stage_ops,
    layer_ops,
    moe_layer_ops,
    router,
)
from planc.plannable import Plannable, plannable
from planc.presets.efficiency import for_gpu
from planc.presets.names import GPU_NAMES, MODEL_NAMES
from planc.spec.load import load_text

LAYOUTS = (
    # (tensor, sequence parallel, context, expert, attention, seq_len, micro_batch)
    (1, False, 1, 1, "flash", 4096, 1),
    (8, True, 1, 8, "flash", 8192, 1),
    (2, False, 2, 2, "eager", 2048, 4),
)


def _plan(model: str, gpu: str, layout: tuple[int, bool, int, int, str, int, int]) -> Plannable:
    t, sp, c, ep, attention, s, b = layout
    text = (
        f"version: 1\nname: r\nmodel: {{preset: {model}}}\n"
        f"hardware: {{gpu: {gpu}, nodes: 64}}\n"
        f"parallelism: {{tensor: {t}, context: {c}, sequence_parallel: {str(sp).lower()}"
        + (
            f", expert: {ep}"
            if "mix" in model or "qwen3" in model or "deepseek" in model or "llama4" in model
            else ""
        )
        + "}\n"
        f"training: {{seq_len: {s}, micro_batch: {b}, global_batch: {4096 * b}, "
        f"attention: {attention}, precision: bf16}}\n"
    )
    job = load_text("r.yaml", text).job
    assert job is not None, text
    plan = plannable(job)
    if not isinstance(plan, Plannable):
        pytest.skip(f"{model} at {layout} is not plannable: {plan}")
    return plan


def _ops(plan: Plannable) -> tuple[OpCost, ...]:
    shape = layer_shape(plan)
    experts = expert_shape(plan)
    ops = layer_ops(shape) + first_stage_ops(shape) + last_stage_ops(shape)
    return ops + (moe_layer_ops(shape, experts) if experts is not None else ())


def _roofline_s(work: Work, peak_flops: float, hbm_bytes: float) -> float:
    return max(work.flops / peak_flops, work.bytes / hbm_bytes)


@pytest.mark.parametrize("gpu", GPU_NAMES)
def test_every_op_is_priced_between_its_roofline_and_ten_times_it(gpu: str) -> None:
    worst: tuple[float, str] = (0.0, "")
    for model in MODEL_NAMES:
        for layout in LAYOUTS:
            try:
                plan = _plan(model, gpu, layout)
            except pytest.skip.Exception:
                continue
            device, eff = device_of(plan), efficiency_of(plan)
            tau = eff.hbm.half_bytes / (eff.hbm.efficiency * device.hbm_bytes)
            for op in _ops(plan):
                passes = (
                    (op.forward, False, None),
                    (op.backward_data, True, op.data_gemm),
                    (op.backward_weight, True, op.weight_gemm),
                )
                for work, backward, gemm in passes:
                    if work.flops <= 0 and work.bytes <= 0:
                        continue
                    priced = work_time_s(op, work, device, eff, backward, gemm)
                    floor = _roofline_s(work, device.matrix_flops, device.hbm_bytes)
                    assert priced >= floor, (model, layout, op.name, priced, floor)
                    ratio = priced / (floor + tau)
                    where = f"{model} {layout} {op.name}"
                    worst = max(worst, (ratio, where))
    assert worst[0] <= 10.0, worst


def test_a_grok_like_router_is_priced_within_twice_its_roofline() -> None:
    # Grok-1's router: [1024 × 6144]·[6144 × 8] per micro-batch (1,024 tokens a rank, h = 6144,
    # 8 experts): 0.10 GFLOP and (1024·6144 + 6144·8 + 1024·8)·2 = 12.7 MB. On an H100 SXM
    # (989 TFLOPS bf16, 3,350 GB/s) its roofline is its memory time, 3.8 µs.
    shape = OpShape(b=1, s=1024, s_c=1024, s_r=1024, h=6144, n=48, g=8, k=128, f=32768, vocab=1)

    class Experts:
        tokens = 1024
        E = 8

    op = router(shape, Experts())  # type: ignore[arg-type]
    flops = 2 * 1024 * 6144 * 8
    moved = (1024 * 6144 + 6144 * 8 + 1024 * 8) * 2
    assert op.forward == Work(flops, moved)
    roofline = max(flops / 989e12, moved / 3350e9)
    assert roofline == pytest.approx(3.80e-6, rel=0.01)
    eff = for_gpu("h100-sxm")
    from planc.perf.compute import Device

    device = Device.of(989, 3350)
    priced = work_time_s(op, op.forward, device, eff)
    assert roofline <= priced <= 2 * roofline, priced
