"""DeepSeek-V3's Hugging Face config.json read into model.mla and model.moe (issue 14)."""

from __future__ import annotations

import json
from pathlib import Path

from test_hfconfig import HF, hf_job

from planc.memory import parameter_count
from planc.presets import model_preset
from planc.spec.hf import from_config


def test_deepseek_v3_config_gives_the_preset_exactly(tmp_path: Path) -> None:
    model = hf_job(tmp_path, "deepseek-v3").model
    count = parameter_count(model)
    # The preset's 671,026,419,200 and 37,552,297,472 (tests/test_mla_params.py, by hand).
    preset = model_preset("deepseek-v3")
    assert (count.total, count.active) == (preset["parameters"], preset["active_parameters"])
    assert model.mla is not None and model.moe is not None
    assert (model.mla.q_lora, model.mla.kv_lora, model.mla.qk_head) == (1536, 512, 192)
    assert (model.moe.E, model.moe.k, model.moe.E_s, model.moe.first_dense) == (256, 8, 1, 3)
    assert model.moe.router_bias and model.mtp == 0


def test_spec_fields_override_inside_the_sections(tmp_path: Path) -> None:
    model = hf_job(
        tmp_path, "deepseek-v3", mla={"kv_lora_rank": 256}, moe={"top_k": 4}, mtp_layers=1
    ).model
    assert model.mla is not None and model.moe is not None
    assert (model.mla.kv_lora, model.mla.q_lora) == (256, 1536)  # the rest from the config
    assert (model.moe.k, model.moe.E) == (4, 256)
    assert model.mtp == 1


def test_mtp_and_query_latent_notes() -> None:
    config = json.loads((HF / "deepseek-v3" / "config.json").read_text())
    read = from_config(config)
    assert not isinstance(read, tuple)
    assert any("num_nextn_predict_layers 1" in note.message for note in read.notes)
    # No unknown-key note: the routing keys change neither parameters nor FLOPs.
    assert not any(note.message.startswith("not read:") for note in read.notes)
    lite = from_config({**config, "q_lora_rank": None})
    assert not isinstance(lite, tuple)
    assert "q_lora_rank" not in lite.fields["mla"]
    bad = from_config({**config, "kv_lora_rank": "512"})
    assert isinstance(bad, tuple) and bad[0].rule == "PLC110"
