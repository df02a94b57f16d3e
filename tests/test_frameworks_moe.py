"""Megatron-LM arguments of mixture-of-experts plans (issue 14).

Megatron-LM's own parser and validate_args read them when PLANC_MEGATRON_PYTHON names an
interpreter with megatron-core (Python ≥ 3.12); that test skips otherwise.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_frameworks import MEGATRON_PARSE, _interpreter, _run

from planc.compile.frameworks import megatron_arguments

from conftest import compiled, job_of

BASE = "mixtral-8x7b-64xh100.yaml"
CASES: dict[str, dict[str, Any] | None] = {
    "mixtral": None,
    "etp-shared-dense-first": {
        "model": {
            "moe": {
                "shared_experts": 1,
                "shared_expert_ffn_hidden": 4096,
                "first_dense_layers": 4,
                "capacity_factor": 1.25,
                "router_bias": True,
            }
        },
        "parallelism": {
            "tensor": 2,
            "data": 8,
            "expert": 4,
            "expert_tensor": 2,
            "sequence_parallel": True,
        },
    },
    "qwen3-frequency": {
        "model": {"preset": "qwen3-30b-a3b", "moe": {"layer_frequency": 2}},
        "parallelism": {"pipeline": 4, "data": 16, "expert": 8},
    },
    "qwen3-odd-layers": {
        "model": {"preset": "qwen3-30b-a3b", "moe": {"layer_frequency": 2, "layer_offset": 1}},
        "parallelism": {"pipeline": 4, "data": 16, "expert": 8},
    },
    "padded": {"model": {"moe": {"capacity_factor": 1.25, "pad_to_capacity": True}}},
    "allgather": {"parallelism": {"expert_dispatcher": "allgather"}},
    "flex-deepep": {"parallelism": {"expert_dispatcher": "deepep"}},
    "flex-hybridep": {"parallelism": {"expert_dispatcher": "hybridep"}},
}
# parallelism.expert_dispatcher as Megatron-Core's two settings.
DISPATCHER = {"alltoall": ("alltoall", None), "allgather": ("allgather", None),
              "deepep": ("flex", "deepep"), "hybridep": ("flex", "hybridep")}


def args_of(case: str) -> list[str]:
    return megatron_arguments(compiled(job_of(CASES[case], BASE)))[0]


def flags(case: str) -> dict[str, str]:
    return dict(line.partition(" ")[::2] for line in args_of(case))


def test_mixtral_flags() -> None:
    found = flags("mixtral")
    assert found["--num-experts"] == "8" and found["--moe-router-topk"] == "2"
    assert found["--moe-ffn-hidden-size"] == "14336"
    assert found["--expert-model-parallel-size"] == "8"
    assert found["--expert-tensor-parallel-size"] == "1"
    assert "--moe-layer-freq" not in found and "--qk-layernorm" not in found


def test_layer_pattern_shared_experts_and_capacity() -> None:
    found = flags("etp-shared-dense-first")
    assert found["--moe-layer-freq"] == "[" + ",".join(["0"] * 4 + ["1"] * 28) + "]"
    assert found["--moe-shared-expert-intermediate-size"] == "4096"
    assert found["--moe-expert-capacity-factor"] == "1.25"
    assert "--moe-router-enable-expert-bias" in found
    assert found["--moe-router-score-function"] == "sigmoid"
    assert found["--expert-tensor-parallel-size"] == "2"
    qwen = flags("qwen3-frequency")
    assert qwen["--moe-layer-freq"] == "2" and "--qk-layernorm" in qwen
    # Experts in the odd layers (Llama 4 Maverick's pattern): an integer frequency cannot say
    # it (Megatron's is i % f == 0), so the list does: 0,1,0,1,... over the 48 layers.
    odd = flags("qwen3-odd-layers")
    assert odd["--moe-layer-freq"] == "[" + ",".join(["0", "1"] * 24) + "]"


def test_padding_follows_the_capacity_factor() -> None:
    # Drop and pad (model.moe.pad_to_capacity) is its own flag after the capacity factor.
    args = args_of("padded")
    at = args.index("--moe-expert-capacity-factor 1.25")
    assert args[at + 1] == "--moe-pad-expert-input-to-capacity"
    assert args.count("--moe-pad-expert-input-to-capacity") == 1


def test_drop_only_and_dropless_plans_do_not_pad() -> None:
    # A capacity factor alone is drop only (Megatron's default), and dropless has neither.
    assert "--moe-expert-capacity-factor" in flags("etp-shared-dense-first")
    assert "--moe-pad-expert-input-to-capacity" not in flags("etp-shared-dense-first")
    assert "--moe-pad-expert-input-to-capacity" not in flags("mixtral")


def test_dispatcher_flags() -> None:
    assert flags("mixtral")["--moe-token-dispatcher-type"] == "alltoall"
    assert flags("allgather")["--moe-token-dispatcher-type"] == "allgather"
    for backend in ("deepep", "hybridep"):
        found = flags(f"flex-{backend}")
        assert found["--moe-token-dispatcher-type"] == "flex"
        assert found["--moe-flex-dispatcher-backend"] == backend
        assert found["--moe-router-dtype"] == "fp32"


def test_dense_plans_have_no_expert_flags() -> None:
    args = megatron_arguments(compiled(job_of()))[0]
    assert not [a for a in args if "expert" in a or "moe" in a]


# Megatron's TransformerConfig built from the validated arguments runs the MoE checks of its
# __post_init__ (expert bias needs sigmoid scores, biases need ETP 1, ...). --no-rope-fusion:
# the CPU install has no Transformer Engine, which rope fusion needs.
MEGATRON_CONFIG = MEGATRON_PARSE.replace(
    '"--lr", "1e-4"]', '"--lr", "1e-4", "--no-rope-fusion"]'
).replace(
    "    arguments.validate_args(full)\n",
    "    arguments.validate_args(full)\n"
    "    config = arguments.core_transformer_config_from_args(full)\n"
    "    parsed['config_layer_pattern'] = str(config.moe_layer_freq)\n"
    "    parsed['config_experts'] = config.num_moe_experts\n"
    "    parsed['config_dispatcher'] = config.moe_token_dispatcher_type\n"
    "    parsed['config_flex_backend'] = config.moe_flex_dispatcher_backend\n",
)


def test_megatron_validates_the_moe_arguments() -> None:
    python = _interpreter("PLANC_MEGATRON_PYTHON", "megatron.training.arguments")
    if python is None:
        pytest.skip(
            "megatron.training.arguments is not importable (pip install megatron-core on "
            "Python >= 3.12, and point PLANC_MEGATRON_PYTHON at that interpreter)"
        )
    plans = {case: compiled(job_of(overlay, BASE)) for case, overlay in CASES.items()}
    payload = {
        case: [megatron_arguments(plan)[0], plan.world, plan.job.model.V]
        for case, plan in plans.items()
    }
    assert MEGATRON_CONFIG.count("core_transformer_config_from_args") == 1
    assert MEGATRON_CONFIG.count("--no-rope-fusion") == 1
    parsed = _run(python, MEGATRON_CONFIG, payload)
    for case, plan in plans.items():
        args, lay, moe = parsed[case], plan.job.layout, plan.job.model.moe
        assert moe is not None
        assert args["num_experts"] == moe.E and args["moe_router_topk"] == moe.k
        assert args["moe_ffn_hidden_size"] == moe.f_e
        assert args["expert_model_parallel_size"] == lay.ep
        assert args["expert_tensor_parallel_size"] == lay.et
        assert args["validated_data_parallel_size"] == lay.d
        assert args["config_experts"] == moe.E
        assert args["moe_pad_expert_input_to_capacity"] is moe.padded
        # The dispatcher reaches TransformerConfig (whose __post_init__ checks it) as written.
        kind, backend = DISPATCHER[lay.dispatcher]
        assert args["config_dispatcher"] == kind
        if backend is not None:
            assert args["config_flex_backend"] == backend
            assert args["moe_router_dtype"] == "fp32"
        pattern = [int(moe.is_moe_layer(i)) for i in range(plan.job.model.L)]
        assert args["config_layer_pattern"] in (str(pattern), str(moe.frequency))
