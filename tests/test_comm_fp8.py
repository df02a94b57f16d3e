"""What an FP8 recipe moves: the parameter all-gather in FP8 under param_gather, and the plan's
verifier recounting it from tensor shapes.

Base: llama3-8b-1node (8 H100, tensor 2, data 4, ZeRO-1). Per layer and TP rank the GEMM
weights are, by hand, Q and O 2·4096·(32/2)·128 = 16,777,216, K and V 2·4096·(8/2)·128 =
4,194,304 and the MLP 3·4096·(14,336/2) = 88,080,384: Ψ_q,ℓ = 109,051,904, over 32 layers
3,489,660,928. The rank holds Ψ_r = Ψ_q + norms (2·4096 per layer, 4,096 final) + the
embedding and head slices (2·128,256·4096/2 = 525,336,576): 4,015,263,744.
"""

from __future__ import annotations

from typing import Any

from planc.analysis import analyse
from planc.vocab import Collective

from conftest import job_of

PSI_Q = 32 * (2 * 4096 * 16 * 128 + 2 * 4096 * 4 * 128 + 3 * 4096 * 7168)
PSI_R = PSI_Q + 32 * 2 * 4096 + 4096 + 2 * 128256 * 4096 // 2


def gather_bytes(training: dict[str, Any], **overlay: Any) -> int:
    ops = analyse(job_of({"training": training, **overlay})).ops
    return sum(
        op.calls * op.buffer_bytes
        for op in ops
        if op.group in ("dp_cp", "dp_shard") and op.op is Collective.ALL_GATHER
    )


def test_hand_counts() -> None:
    assert PSI_Q == 3_489_660_928 and PSI_R == 4_015_263_744


def test_bf16_gathers_two_bytes_per_parameter() -> None:
    assert gather_bytes({"precision": "bf16"}) == 2 * PSI_R


def test_fp8_without_param_gather_gathers_16_bit_parameters() -> None:
    # TE keeps the 16-bit weight, which the distributed optimizer gathers after its step.
    assert gather_bytes({"precision": "fp8", "fp8": {"recipe": "current"}}) == 2 * PSI_R


def test_fp8_param_gather_moves_the_quantized_weights_in_one_byte() -> None:
    # --fp8-param-gather: the quantized GEMM weights in 1 byte, norms, embedding and head in 2.
    # planc apportions each bucket; rounding down the quantized share of each of its buckets
    # leaves at most one element per bucket at 2 bytes.
    got = gather_bytes({"precision": "fp8", "fp8": {"recipe": "current", "param_gather": True}})
    exact = PSI_Q + 2 * (PSI_R - PSI_Q)
    buckets = -(-PSI_R // 40_000_000)
    assert exact <= got <= exact + buckets


def test_torchtitan_rowwise_gathers_in_high_precision() -> None:
    # torchtitan: 'rowwise: all-gather happens in high precision' (PLC044 refuses the option,
    # and the schedule moves 16-bit weights whatever the spec asks).
    training = {"precision": "fp8", "framework": "fsdp2", "fp8": {"recipe": "rowwise", "param_gather": True}}
    plain = {"precision": "bf16", "framework": "fsdp2"}
    assert gather_bytes(training) == gather_bytes(plain)


def test_verify_recounts_the_fp8_gather(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from planc.cli.main import main

    from conftest import spec_text

    spec = tmp_path / "fp8.yaml"
    overlay = {"training": {"precision": "fp8", "fp8": {"recipe": "current", "param_gather": True, "first_last_bf16": 1}}}
    spec.write_text(spec_text(overlay))
    result = CliRunner().invoke(main, ["verify", str(spec)])
    assert result.exit_code == 0, result.output
    assert "verified" in result.output


def test_verify_catches_a_gather_counted_in_16_bits(tmp_path: Any) -> None:
    import json

    from click.testing import CliRunner

    from planc.cli.main import main

    from conftest import spec_text

    spec = tmp_path / "fp8.yaml"
    overlay = {"training": {"precision": "fp8", "fp8": {"recipe": "current", "param_gather": True}}}
    spec.write_text(spec_text(overlay))
    out = tmp_path / "plan"
    assert CliRunner().invoke(main, ["compile", str(spec), "-o", str(out)]).exit_code == 0
    plan = json.loads((out / "plan.json").read_text())
    plan["training"]["quantized"]["param_gather"] = False  # a plan that says 16-bit gathers
    (out / "plan.json").write_text(json.dumps(plan))
    result = CliRunner().invoke(main, ["verify", str(out)])
    assert result.exit_code == 1
    assert "all_gather" in result.output


MXFP8_GATHER = {"precision": "fp8", "fp8": {"recipe": "mxfp8", "param_gather": True}}
B200 = {"gpu": "b200"}


def test_the_distributed_optimizer_gathers_mxfp8_parameters_in_16_bits() -> None:
    # Megatron-Core's distributed optimizer gives a bucket of MXFP8 parameters one buffer for
    # the parameter all-gather and the gradient reduce-scatter, in the gradients' dtype, and
    # copies each gathered weight into its MXFP8 parameter (param_and_grad_buffer.py, 'For MXFP8
    # param: Create a shared buffer for param AG and grad RS'): 2 bytes a parameter, as bf16.
    assert gather_bytes(MXFP8_GATHER, hardware=B200) == 2 * PSI_R
    # current scaling's FP8 parameters still travel in one byte, as on Hopper (the test above)
    current = {"precision": "fp8", "fp8": {"recipe": "current", "param_gather": True}}
    assert gather_bytes(current, hardware=B200) == gather_bytes(current)


def test_megatron_fsdp_gathers_mxfp8_parameters_quantized() -> None:
    # Megatron-FSDP keeps the FP8 parameters in uint8 buffers and all-gathers those: fewer bytes
    # than the same layout's bf16 gathers.
    fsdp = {"hardware": B200, "parallelism": {"zero_stage": 3}}
    mxfp8 = {**MXFP8_GATHER, "framework": "megatron-fsdp"}
    bf16 = {"precision": "bf16", "framework": "megatron-fsdp"}
    assert gather_bytes(mxfp8, **fsdp) < gather_bytes(bf16, **fsdp)
