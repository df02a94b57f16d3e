"""training.kernels: compiled, torchtitan's torch.compile of each transformer block
(parallelize_llama.py apply_compile at 9dec370): Inductor fuses the block's element-wise ops,
attention stays PyTorch's SDPA, and the embedding, final norm, LM head and loss run eager.

torchtitan's own benchmark validates it: eager minus compiled, 2.8435 − 2.4575 = 0.386 s per
step on 8 GPUs (Table 1), is what planc's unfused minus compiled prices."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from planc.perf.compute import chunk_times, work_time_s
from planc.perf.inputs import device_of, efficiency_of, layer_shape
from planc.perf.ops import OpShape, Work, flash_attention, last_stage_ops, layer_ops, norm
from planc.plannable import plannable

from conftest import loaded_spec, spec_text


def _plan(kernels: str) -> Any:
    text = spec_text(
        "parallelism: {tensor: 1, sequence_parallel: false}\n"
        f"training: {{micro_batch: 2, kernels: {kernels}, framework: fsdp2}}"
    )
    plan = plannable(loaded_spec(text).job)
    assert not isinstance(plan, tuple), plan
    return plan


def test_compiled_blocks_fuse_but_keep_sdpa() -> None:
    fused, compiled = layer_shape(_plan("fused")), layer_shape(_plan("compiled"))
    assert flash_attention(compiled).engine == "sdpa"  # PyTorch's FlashAttention-2 backend
    # Transformer Engine's fused kernel: cuDNN's on this H100 (attention_backend auto)
    assert flash_attention(fused).engine == "cudnn"
    # every other op of the block is the fused one: the same FLOPs and bytes, but for the sums
    # of the separate linears' input gradients, which autograd adds pair by pair without the
    # compiler (3β per add) and one compiled kernel adds at once ((parts + 1)·β)
    def others(shape: OpShape, attention: str) -> list[tuple[str, Work, Work]]:
        return [
            (op.name, op.forward, op.backward)
            for op in layer_ops(shape)
            if op.engine != attention and not op.name.endswith("input-gradient sum")
        ]

    assert others(fused, "cudnn") == others(compiled, "sdpa")
    sums = {op.name: op.backward.bytes for op in layer_ops(compiled) if op.name.endswith("sum")}
    eager = {op.name: op.backward.bytes for op in layer_ops(fused) if op.name.endswith("sum")}
    elements = compiled.tokens * compiled.h
    assert sums == {"qkv input-gradient sum": 4 * 2 * elements, "mlp fc1 input-gradient sum": 3 * 2 * elements}
    assert eager == {"qkv input-gradient sum": 6 * 2 * elements, "mlp fc1 input-gradient sum": 3 * 2 * elements}
    # an RMSNorm reads and writes 2β bytes per element fused, 4β + 28 eager
    assert norm(compiled).forward.bytes == 4 * elements


def test_the_ends_run_eager() -> None:
    plan = _plan("compiled")
    shape, device, eff = layer_shape(plan), device_of(plan), efficiency_of(plan)
    eager = replace(shape, unfused=True, compiled=False)
    (chunk,) = chunk_times(shape, (1,), False, True, "none", device, eff)
    (block,) = chunk_times(shape, (1,), False, False, "none", device, eff)
    head = chunk.forward_s - block.forward_s
    expected = sum(work_time_s(op, op.forward, device, eff) for op in last_stage_ops(eager))
    assert abs(head - expected) <= 1e-12 * expected
    # the eager final norm moves 36 bytes per element (β = 2), not the fused kernel's 4
    assert last_stage_ops(eager)[0].forward.bytes == 36 * shape.tokens * shape.h
