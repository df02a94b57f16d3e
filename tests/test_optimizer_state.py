"""training.optimizer_state: the master weights and Adam's moments kept in fewer bits, as
Megatron-Core's precision-aware optimizer and NeMo 1.0's Apex DistributedFusedAdam keep them
(memory, the optimizer step's bytes, Megatron-LM's arguments, the rules that refuse it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_frameworks import MEGATRON_ARGUMENTS, _run, megatron_case, megatron_python

from planc.compile.frameworks import megatron_arguments, torchtitan_settings
from planc.memory import budget
from planc.perf.ops import optimizer_bytes_per_parameter

from conftest import check_overlay, compiled, job_of

ROOT = Path(__file__).resolve().parent.parent


def _state(master: str = "fp32", moments: str = "fp32") -> dict[str, Any]:
    return {"training": {"optimizer_state": {"master": master, "moments": moments}}}


def _optimizer_terms(overlay: dict[str, Any] | None) -> dict[str, int]:
    stage = budget(job_of(overlay)).stages[0]
    return {t.name: t.bytes for t in stage.memory.terms if t.component == "optimizer"}


def test_sixteen_bit_state_halves_each_optimizer_term() -> None:
    fp32 = _optimizer_terms(None)
    assert set(fp32) == {"fp32 master weights", "Adam m (fp32)", "Adam v (fp32)"}
    half = _optimizer_terms(_state("bf16", "bf16"))
    assert half == {
        "bf16 master weights": fp32["fp32 master weights"] // 2,
        "Adam m (bf16)": fp32["Adam m (fp32)"] // 2,
        "Adam v (bf16)": fp32["Adam v (fp32)"] // 2,
    }
    mixed = _optimizer_terms(_state("fp16", "fp32"))
    assert mixed["fp16 master weights"] * 2 == fp32["fp32 master weights"]
    assert mixed["Adam m (fp32)"] == fp32["Adam m (fp32)"]


def test_remainders_keep_two_bytes_of_the_fp32_master() -> None:
    fp32 = _optimizer_terms(None)
    kept = _optimizer_terms(_state("remainders", "fp32"))
    assert kept["fp32 master remainders (16 bits)"] * 2 == fp32["fp32 master weights"]
    assert "fp32 master weights" not in kept


def test_fp8_moments_say_what_optimizer_state_moments_says() -> None:
    fp8 = {"precision": "fp8", "fp8": {"recipe": "delayed"}}
    by_fp8 = _optimizer_terms(
        {"training": {**fp8, "fp8": {"recipe": "delayed", "moments": "bf16"}}}
    )
    by_state = _optimizer_terms({"training": {**fp8, "optimizer_state": {"moments": "bf16"}}})
    assert by_fp8 == by_state
    assert by_fp8["Adam m (bf16)"] * 2 == _optimizer_terms({"training": fp8})["Adam m (fp32)"]


def test_the_optimizer_step_reads_and_writes_the_state_in_its_own_format() -> None:
    # Per parameter: the fp32 gradient read (4), the 16-bit working copy written (2), the
    # gradient buffer zeroed (4), the master read and written (2·μ), both moments read and
    # written (4·m), and the gradient norm's read of the gradient (4).
    assert optimizer_bytes_per_parameter("megatron") == 4 + 2 + 4 + 2 * 4 + 4 * 4 + 4
    assert optimizer_bytes_per_parameter("megatron", master=2, moment=2) == 10 + 4 + 8 + 4
    assert optimizer_bytes_per_parameter("deepspeed", master=2, moment=4) == 10 + 4 + 16 + 4


def _words(overlay: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    args, notes = megatron_arguments(compiled(job_of(overlay)))
    return " ".join(args).split(), notes


def test_megatron_arguments_name_the_precision_aware_optimizer() -> None:
    words, _ = _words(_state("fp16", "bf16"))
    assert words.count("--use-precision-aware-optimizer") == 1
    assert words[words.index("--main-params-dtype") + 1] == "fp16"
    assert words[words.index("--exp-avg-dtype") + 1] == "bf16"
    assert words[words.index("--exp-avg-sq-dtype") + 1] == "bf16"
    # Remainders are the precision-aware optimizer's default for a bf16 run's fp32 master.
    words, _ = _words(_state("remainders"))
    assert "--use-precision-aware-optimizer" in words
    assert "--main-params-dtype" not in words and "--exp-avg-dtype" not in words
    plain, _ = _words(None)
    assert "--use-precision-aware-optimizer" not in plain
    # Offloading the optimizer already names the precision-aware optimizer once.
    offload = {"training": {**_state("fp32", "bf16")["training"], "offload": {"optimizer": True}}}
    words, _ = _words(offload)
    assert words.count("--use-precision-aware-optimizer") == 1


def test_a_bf16_master_is_nemos_distributed_fused_adam_said_in_a_note() -> None:
    words, notes = _words(_state("bf16", "bf16"))
    assert "--main-params-dtype" not in words
    assert any("distributed_fused_adam with optim.dtype: bf16" in note for note in notes)


MEGATRON_STATE = (
    MEGATRON_ARGUMENTS
    + r"""
out = {}
for case, (lines, world, vocab) in json.load(sys.stdin).items():
    args = parsed(lines, world, vocab)
    arguments.validate_args(args)
    out[case] = [args.use_precision_aware_optimizer, str(args.main_params_dtype),
                 str(args.exp_avg_dtype), str(args.exp_avg_sq_dtype)]
print(json.dumps(out))
"""
)


def test_megatron_lm_reads_the_state_formats_planc_writes() -> None:
    python = megatron_python()
    cases = {"fp16-bf16": _state("fp16", "bf16"), "remainders": _state("remainders")}
    payload = {}
    for case, overlay in cases.items():
        plan = compiled(job_of(overlay))
        payload[case] = megatron_case(plan)
    built = _run(python, MEGATRON_STATE, payload)
    assert built["fp16-bf16"] == [True, "torch.float16", "torch.bfloat16", "torch.bfloat16"]
    assert built["remainders"] == [True, "torch.float32", "torch.float32", "torch.float32"]


@pytest.mark.parametrize(
    ("overlay", "rule", "said"),
    [
        ({"parallelism": {"zero_stage": 0}, **_state("fp32", "bf16")}, "PLC048", "distributed"),
        (
            {"training": {"optimizer": "sgd", "optimizer_state": {"master": "fp16"}}},
            "PLC048",
            "only supported with adam",
        ),
        (
            {"training": {"precision": "fp16", "optimizer_state": {"master": "remainders"}}},
            "PLC048",
            "the weights are fp16",
        ),
        (
            {"training": {"framework": "fsdp2", "optimizer_state": {"moments": "bf16"}}},
            "PLC051",
            "keeps the master weights and moments in fp32",
        ),
        (
            {
                "training": {
                    "precision": "fp8",
                    "fp8": {"recipe": "current"},
                    "optimizer_state": {"master": "remainders"},
                }
            },
            "PLC051",
            "fp32 master of its own",
        ),
    ],
)
def test_the_rules_say_where_the_state_is_not_kept_so(
    overlay: dict[str, Any], rule: str, said: str
) -> None:
    fired = [f for f in check_overlay(overlay).findings if f.rule == rule]
    assert any(said in f.message for f in fired), [f.message for f in fired]


def test_fp8_moments_and_optimizer_state_may_not_disagree() -> None:
    overlay = {
        "training": {
            "precision": "fp8",
            "fp8": {"recipe": "delayed", "moments": "bf16"},
            "optimizer_state": {"moments": "fp16"},
        }
    }
    fired = [f for f in check_overlay(overlay).findings if f.rule == "PLC044"]
    assert any("one format for Adam's moments" in f.message for f in fired)
    same = {"training": {**overlay["training"], "optimizer_state": {"moments": "bf16"}}}
    assert not [f for f in check_overlay(same).findings if f.rule == "PLC044"]
    # A master alone leaves the moments to fp8.moments.
    master = {"training": {**overlay["training"], "optimizer_state": {"master": "remainders"}}}
    assert not [f for f in check_overlay(master).findings if f.rule == "PLC044"]
    assert _optimizer_terms(master)["Adam m (bf16)"] > 0


def test_a_delayed_fp8_run_keeps_remainders_without_a_finding() -> None:
    overlay = {
        "training": {
            "precision": "fp8",
            "fp8": {"recipe": "delayed"},
            "optimizer_state": {"master": "remainders"},
        }
    }
    assert not [f for f in check_overlay(overlay).findings if f.rule in ("PLC048", "PLC051")]


def _fsdp2_state(model_dtype: str) -> dict[str, int]:
    overlay = {"training": {"framework": "fsdp2", "model_dtype": model_dtype}}
    stage = budget(job_of(overlay)).stages[0]
    kinds = ("weights", "gradients", "optimizer")
    return {t.name: t.bytes for t in stage.memory.terms if t.component in kinds}


def test_an_fsdp2_model_kept_in_bf16_keeps_its_shards_and_adam_state_in_bf16() -> None:
    # NeMo AutoModel builds the model in bf16: FSDP2's sharded parameters, their gradients and
    # torch.optim's m and v (zeros_like of each parameter) are all 2 bytes, no fp32 copy.
    fp32, bf16 = _fsdp2_state("fp32"), _fsdp2_state("bf16")
    assert set(fp32) == {
        "sharded parameters (fp32)",
        "sharded gradients (fp32)",
        "Adam m (fp32)",
        "Adam v (fp32)",
    }
    assert bf16 == {name.replace("fp32", "bf16"): size // 2 for name, size in fp32.items()}
    # torch.optim's foreach Adam (80 bytes a parameter in fp32) and clipping (12), in bf16.
    assert optimizer_bytes_per_parameter("fsdp2", "foreach", model=2) == (80 + 12) // 2


def test_model_dtype_is_fsdp2s() -> None:
    fired = check_overlay({"training": {"model_dtype": "bf16"}}).findings
    assert any(f.rule == "PLC051" and "FSDP2's parameter storage" in f.message for f in fired)


def test_torchtitans_arguments_say_its_model_is_float32() -> None:
    job = job_of({"training": {"framework": "fsdp2", "model_dtype": "bf16"}})
    _, _, notes = torchtitan_settings(compiled(job))
    assert any("model_dtype bf16" in note and "float32" in note for note in notes)
    plain = job_of({"training": {"framework": "fsdp2"}})
    assert not any("model_dtype" in note for note in torchtitan_settings(compiled(plain))[2])
