"""Framework files of latent-attention and expert plans: Megatron-LM's MLA and MTP arguments,
DeepSpeed's AutoEP section and torchtitan's expert-parallel degree (issue 14).

Megatron-LM's own parser and validate_args read the arguments when PLANC_MEGATRON_PYTHON names
an interpreter with megatron-core (Python >= 3.12); that test skips otherwise.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_frameworks import MEGATRON_PARSE, _interpreter, _run

from planc.compile.frameworks import (
    deepspeed_config,
    framework_files,
    megatron_arguments,
    torchtitan_settings,
)

from conftest import compiled, job_of

DEEPSEEK = "deepseek-v3-2048xh800.yaml"
MIXTRAL = "mixtral-8x7b-64xh100.yaml"


def flags(overlay: dict[str, Any] | None = None, base: str = DEEPSEEK) -> dict[str, str]:
    args = megatron_arguments(compiled(job_of(overlay, base)))[0]
    return dict(line.partition(" ")[::2] for line in args)


def test_deepseek_v3_megatron_flags() -> None:
    found = flags()
    assert "--multi-latent-attention" in found
    assert found["--q-lora-rank"] == "1536" and found["--kv-lora-rank"] == "512"
    assert found["--qk-head-dim"] == "128" and found["--qk-pos-emb-head-dim"] == "64"
    assert found["--v-head-dim"] == "128" and found["--mtp-num-layers"] == "1"
    # MLA has no kv_channels and no query groups (Megatron refuses GQA with MLA).
    assert "--kv-channels" not in found and "--group-query-attention" not in found
    assert found["--moe-layer-freq"] == "[" + ",".join(["0"] * 3 + ["1"] * 58) + "]"
    assert found["--moe-shared-expert-intermediate-size"] == "2048"
    assert found["--expert-model-parallel-size"] == "64"


# The example's layout without its MTP layer (m): a spec without one must not place one.
NO_MTP_LAYOUT = "Et|(tt|)*29,t|tL"


def test_no_query_latent_and_no_mtp() -> None:
    # The example's layout places its MTP layer (m): without one, the layout has none either.
    no_mtp = {"pipeline_layout": NO_MTP_LAYOUT}
    found = flags({"model": {"mtp_layers": 0}, "parallelism": no_mtp}, DEEPSEEK)
    assert "--mtp-num-layers" not in found
    dense = flags(None, "llama3-8b-1node.yaml")
    assert "--multi-latent-attention" not in dense and dense["--kv-channels"] == "128"


def test_deepspeed_autoep_section() -> None:
    config, notes = deepspeed_config(compiled(job_of(None, DEEPSEEK)))
    assert config["expert_parallel"] == {
        "enabled": True,
        "autoep_size": 64,
        "expert_tensor_parallel_size": 1,
        "preset_model": "deepseek_v3",
    }
    assert not [note for note in notes if "AutoEP" in note]
    # ETP 2 with TP 2: AutoEP keeps experts whole and folds only its own AutoTP: both said.
    overlay = {"parallelism": {"tensor": 2, "data": 8, "expert": 4, "expert_tensor": 2}}
    config, notes = deepspeed_config(compiled(job_of(overlay, MIXTRAL)))
    assert config["expert_parallel"]["expert_tensor_parallel_size"] == 1
    assert config["expert_parallel"]["preset_model"] == "mixtral"
    assert any("expert_tensor 2" in note for note in notes)
    assert any("tensor 2 with experts" in note for note in notes)
    dense, _ = deepspeed_config(compiled(job_of()))
    assert "expert_parallel" not in dense


def test_deepspeed_files_carry_the_section() -> None:
    files = framework_files(compiled(job_of(None, MIXTRAL)))
    config = json.loads(files["deepspeed/ds_config.json"])
    assert config["expert_parallel"]["autoep_size"] == 8


def test_torchtitan_expert_parallel_degree() -> None:
    parallelism, _, notes = torchtitan_settings(compiled(job_of(None, DEEPSEEK)))
    assert parallelism["expert_parallel_degree"] == 64
    # The example's DeepEP dispatcher is chosen where torchtitan builds its model config, which
    # the note says; nothing else about the experts runs otherwise.
    (dispatcher,) = [note for note in notes if "expert" in note]
    assert "moe_comm_backend='deepep'" in dispatcher
    plain = {"parallelism": {"expert_dispatcher": "alltoall"}}
    _, _, notes = torchtitan_settings(compiled(job_of(plain, DEEPSEEK)))
    assert not [note for note in notes if "expert" in note]
    no_mtp = {"model": {"mtp_layers": 0}, "parallelism": {"pipeline_layout": NO_MTP_LAYOUT}}
    files = framework_files(compiled(job_of(no_mtp, DEEPSEEK)))
    assert "deepseek_v3.config_registry:deepseek_v3_671b" in files["torchtitan/planc_config.py"]
    # ETP 2: torchtitan 0.3.0 has no expert tensor parallelism.
    overlay = {"parallelism": {"tensor": 2, "data": 8, "expert": 4, "expert_tensor": 2}}
    parallelism, _, notes = torchtitan_settings(compiled(job_of(overlay, MIXTRAL)))
    assert parallelism["expert_parallel_degree"] == 4
    assert any("no expert tensor parallelism" in note for note in notes)
    dense, _, _ = torchtitan_settings(compiled(job_of()))
    assert "expert_parallel_degree" not in dense


def test_megatron_parses_the_mla_arguments() -> None:
    python = _interpreter("PLANC_MEGATRON_PYTHON", "megatron.training.arguments")
    if python is None:
        pytest.skip(
            "megatron.training.arguments is not importable (pip install megatron-core on "
            "Python >= 3.12, and point PLANC_MEGATRON_PYTHON at that interpreter)"
        )
    plan = compiled(job_of(None, DEEPSEEK))
    parsed = _run(
        python, MEGATRON_PARSE, {"v3": [megatron_arguments(plan)[0], plan.world, plan.job.model.V]}
    )["v3"]
    assert parsed["multi_latent_attention"] is True
    assert (parsed["q_lora_rank"], parsed["kv_lora_rank"]) == (1536, 512)
    assert (parsed["qk_head_dim"], parsed["qk_pos_emb_head_dim"], parsed["v_head_dim"]) == (
        128,
        64,
        128,
    )
    assert parsed["mtp_num_layers"] == 1
    assert parsed["validated_data_parallel_size"] == 128


def test_torchtitan_names_no_base_for_a_changed_preset() -> None:
    """A registered torchtitan config is its preset's model and no other: a spec that changes a
    field of the preset gets no base, and a note naming the fields. The DeepSeek-V3 example
    adds a multi-token prediction layer, which torchtitan's deepseek_v3_671b leaves out
    (num_mtp_layers 0)."""
    plain = {"model": {"mtp_layers": 0}, "parallelism": {"pipeline_layout": NO_MTP_LAYOUT}}
    same = framework_files(compiled(job_of(plain, DEEPSEEK)))["torchtitan/planc_config.py"]
    assert "deepseek_v3.config_registry:deepseek_v3_671b" in same
    assert "the spec changes" not in same
    example = framework_files(compiled(job_of(None, DEEPSEEK)))["torchtitan/planc_config.py"]
    assert "BASE = None" in example
    assert "the spec changes model.mtp_layers of the deepseek-v3 preset:" in example
    other = {
        "model": {"mtp_layers": 0, "dropout": 0.1, "moe": {"capacity_factor": 1.25}},
        "parallelism": {"pipeline_layout": NO_MTP_LAYOUT},
    }
    changed = framework_files(compiled(job_of(other, DEEPSEEK)))["torchtitan/planc_config.py"]
    assert "BASE = None" in changed
    assert "the spec changes model.dropout, model.moe of the deepseek-v3 preset:" in changed
