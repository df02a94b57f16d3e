"""training.attention_backend: which fused attention kernel runs (Megatron --attention-backend),
priced at that kernel's measured fraction of the peak, emitted as Megatron's flag and read back
by Megatron-LM's own parser (megatron-core 0.19.2) where installed.

The H100 fractions are the FlashAttention-3 paper's measurements (Shah et al. 2024, arXiv
2407.08608, Figures 5 and 6: BF16, head dimension 128, sequence 4k): FlashAttention-2 319
TFLOPS forward (causal) and 310 backward, cuDNN 518 and 499, of the H100's 989.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_frameworks import MEGATRON_PARSER, MEGATRON_TP_ENV, _run, megatron_python

from planc.compile.frameworks import megatron_arguments
from planc.perf.compute import Device, work_time_s
from planc.perf.inputs import layer_shape
from planc.perf.ops import flash_attention
from planc.presets.efficiency import for_gpu, from_json, to_json

from conftest import check_overlay, compiled, job_of

H100_PEAK = 989e12


def _backend(backend: str | None, gpu: str = "h100-sxm", **training: Any) -> dict[str, Any]:
    chosen = {} if backend is None else {"attention_backend": backend}
    return {"hardware": {"gpu": gpu}, "training": {**chosen, **training}}


@pytest.mark.parametrize(
    ("backend", "gpu", "engine"),
    [
        # Transformer Engine prefers cuDNN on Hopper and newer, flash-attn on Ampere.
        (None, "h100-sxm", "cudnn"),
        (None, "gb200-nvl72", "cudnn"),
        (None, "a100-80gb", "attention"),
        ("flash", "h100-sxm", "attention"),
        ("fused", "a100-80gb", "cudnn"),
    ],
)
def test_the_backend_picks_the_kernel(backend: str | None, gpu: str, engine: str) -> None:
    assert flash_attention(layer_shape(job_of(_backend(backend, gpu)))).engine == engine


def test_eager_and_compiled_kernels_run_sdpa_whatever_the_backend() -> None:
    for kernels in ("unfused", "compiled"):
        job = job_of(_backend("fused", kernels=kernels))
        assert flash_attention(layer_shape(job)).engine == "sdpa"


def test_h100_attention_runs_at_the_measured_fraction_of_each_kernel() -> None:
    eff, device = for_gpu("h100-sxm"), Device(H100_PEAK, 3350e9)
    for backend, (forward, backward) in {"flash": (319, 310), "fused": (518, 499)}.items():
        op = flash_attention(layer_shape(job_of(_backend(backend))))
        # Compute-bound: the executed FLOPs at the kernel's TFLOPS, rounded as efficiency.json
        # rounds them (two digits of the fraction of 989).
        assert work_time_s(op, op.forward, device, eff) == pytest.approx(
            op.forward.flops / (round(forward / 989, 2) * H100_PEAK)
        )
        assert work_time_s(op, op.backward, device, eff, True) == pytest.approx(
            op.backward.flops / (round(backward / 989, 2) * H100_PEAK)
        )


def test_an_entry_without_cudnn_numbers_takes_the_flash_kernels() -> None:
    a100 = for_gpu("a100-80gb")
    assert (a100.cudnn_forward, a100.cudnn_backward) == (a100.flash_forward, a100.flash_backward)
    h100 = for_gpu("h100-sxm")
    assert from_json(to_json(h100)) == h100
    assert (h100.cudnn_forward, h100.cudnn_backward) == (0.52, 0.5)


def test_megatron_arguments_name_the_backend() -> None:
    def flag(overlay: dict[str, Any]) -> list[str]:
        args, _ = megatron_arguments(compiled(job_of(overlay)))
        return [a for a in args if a.startswith("--attention-backend")]

    assert flag(_backend(None)) == ["--attention-backend auto"]
    assert flag(_backend("flash")) == ["--attention-backend flash"]
    assert flag(_backend("fused")) == ["--attention-backend fused"]
    assert flag(_backend(None, attention="eager")) == ["--attention-backend unfused"]


def test_a_backend_nothing_runs_is_a_warning() -> None:
    def fired(overlay: dict[str, Any]) -> set[str]:
        return {f.rule for f in check_overlay(overlay).findings}

    assert "PLC051" not in fired(_backend("fused"))
    assert "PLC051" in fired(_backend("fused", attention="eager"))
    assert "PLC051" in fired(_backend("flash", kernels="unfused", framework="fsdp2"))


MEGATRON_BACKEND = MEGATRON_PARSER + MEGATRON_TP_ENV + r"""
out = {}
for case, (lines, world, vocab) in json.load(sys.stdin).items():
    words = [word for line in lines for word in line.split()]
    args = parser.parse_args(words + extra + ["--vocab-size", str(vocab)])
    args.world_size, args.rank = world, 0
    arguments.validate_args(args)
    out[case] = args.attention_backend.name
print(json.dumps(out))
"""


def test_megatron_reads_the_backend() -> None:
    python = megatron_python()
    payload = {}
    for backend in ("auto", "flash", "fused"):
        plan = compiled(job_of(_backend(backend)))
        payload[backend] = [megatron_arguments(plan)[0], plan.world, plan.job.model.V]
    assert _run(python, MEGATRON_BACKEND, payload) == {b: b for b in payload}
