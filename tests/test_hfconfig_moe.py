"""Mixture-of-experts Hugging Face configs read into model.moe (issue 14): Mixtral, Qwen3-MoE,
Llama 4 (and DeepSeek-V3, tests/test_hfconfig_deepseek.py).

The config files under tests/data/hf are transcriptions of the published config.json files:
  mixtral-8x7b     https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json
  mixtral-8x22b    https://huggingface.co/mistralai/Mixtral-8x22B-v0.1/blob/main/config.json
  qwen3-30b-a3b    https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json
  qwen3-235b-a22b  https://huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json
  llama4-scout-17b-16e      https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E/blob/main/config.json
  llama4-maverick-17b-128e  https://huggingface.co/meta-llama/Llama-4-Maverick-17B-128E/blob/main/config.json
  gpt-oss-120b     https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json
Expected counts are the presets' published ones (tests/test_moe_params.py) and per-tensor
arithmetic from the config fields written out here; where transformers and torch are
installed, transformers' own models of the files (meta device) give the same numbers.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_hfconfig import HF, PRESETS, hf_job, transformers_counts, write_spec

from planc.memory.params import parameter_count
from planc.spec.hf import from_config, layer_pattern
from planc.spec.load import load_path

MOE_PRESETS = (
    "mixtral-8x7b",
    "mixtral-8x22b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "deepseek-v3",
    "llama4-scout-17b-16e",
    "llama4-maverick-17b-128e",
    "gpt-oss-120b",
)


def config_of(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HF / name / "config.json").read_text("utf-8"))
    return data


@pytest.mark.parametrize("preset", MOE_PRESETS)
def test_every_moe_preset_round_trips(tmp_path: Path, preset: str) -> None:
    """The preset's config.json gives the preset's model, experts included, and its counts."""
    from_hf = hf_job(tmp_path, preset).model
    loaded = load_path(str(write_spec(tmp_path, {"preset": preset}, "preset.yaml")))
    assert loaded.job is not None
    assert from_hf == replace(loaded.job.model, preset=None)
    count = parameter_count(from_hf)
    assert (count.total, count.active) == (
        PRESETS[preset]["parameters"],
        PRESETS[preset]["active_parameters"],
    )


def llama4_text_count(text: dict[str, Any]) -> tuple[int, int]:
    """(total, active) of Llama4ForCausalLM from a text_config, tensor by tensor (transformers
    5.24.0 modeling_llama4.py): q/k/v/o without bias, two RMSNorms per layer, the weightless L2
    QK-norm; a MoE layer (in moe_layers = range(step − 1, L, step)) holds the router
    (h × E, no bias), E experts gate_up_proj (h × 2f) and down_proj (f × h), and a shared
    expert gate/up/down of f; a dense layer a gate/up/down MLP of intermediate_size_mlp."""
    h, L, n, g, k = (text[key] for key in ("hidden_size", "num_hidden_layers",
                                           "num_attention_heads", "num_key_value_heads",
                                           "head_dim"))
    E, top_k, f, f_mlp, V = (text[key] for key in ("num_local_experts", "num_experts_per_tok",
                                                   "intermediate_size", "intermediate_size_mlp",
                                                   "vocab_size"))
    step = text["interleave_moe_layer_step"]
    moe_layers = len(range(step - 1, L, step))
    attention = h * n * k + 2 * h * g * k + n * k * h
    norms = 2 * h
    expert = h * 2 * f + f * h
    moe_total = attention + norms + h * E + E * expert + 3 * h * f
    moe_active = attention + norms + h * E + top_k * expert + 3 * h * f
    dense = attention + norms + 3 * h * f_mlp
    outside = V * h + h + h * V  # embed_tokens, final norm, lm_head (untied)
    dense_layers = L - moe_layers
    return (
        moe_layers * moe_total + dense_layers * dense + outside,
        moe_layers * moe_active + dense_layers * dense + outside,
    )


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [
        ("llama4-scout-17b-16e", 107_769_861_120, 17_172_894_720),
        ("llama4-maverick-17b-128e", 400_711_848_960, 17_184_691_200),
    ],
)
def test_llama4_configs_count_tensor_by_tensor(
    tmp_path: Path, name: str, total: int, active: int
) -> None:
    assert llama4_text_count(config_of(name)["text_config"]) == (total, active)
    count = parameter_count(hf_job(tmp_path, name).model)
    assert (count.total, count.active) == (total, active)


def test_llama4_notes_say_what_is_left_out() -> None:
    read = from_config(config_of("llama4-maverick-17b-128e"))
    assert not isinstance(read, tuple)
    messages = " ".join(note.message for note in read.notes)
    assert "vision_config is not read" in messages
    assert "attention_chunk_size 8192 is not modelled" in messages
    assert not any(note.message.startswith("not read:") for note in read.notes)  # all known
    text = from_config(config_of("llama4-maverick-17b-128e")["text_config"])  # llama4_text
    assert not isinstance(text, tuple) and text.fields == read.fields


def test_spec_fields_override_inside_moe(tmp_path: Path) -> None:
    model = hf_job(
        tmp_path, "llama4-maverick-17b-128e", layers=8, moe={"top_k": 2, "layer_offset": 0}
    ).model
    assert model.moe is not None
    assert (model.L, model.moe.k, model.moe.E, model.moe.frequency) == (8, 2, 128, 2)
    assert [i for i in range(8) if model.moe.is_moe_layer(i)] == [0, 2, 4, 6]


def test_qwen3_moe_sparse_step_and_dense_prefix() -> None:
    base = config_of("qwen3-30b-a3b")
    # (i + 1) % 2 == 0: the odd layers; mlp_only_layers 0..3 drop layers 1 and 3 as well.
    read = from_config({**base, "decoder_sparse_step": 2, "mlp_only_layers": [0, 1, 2, 3]})
    assert not isinstance(read, tuple)
    moe = read.fields["moe"]
    assert (moe["first_dense_layers"], moe["layer_frequency"], moe["layer_offset"]) == (5, 2, 1)
    # norm_topk_prob renormalises the top-k weights: no parameter, so nothing else changes; the
    # frameworks need it (model.moe.router_normalize, Megatron's pre-softmax when false).
    other = from_config({**base, "norm_topk_prob": False})
    same = from_config(base)
    assert not isinstance(other, tuple) and not isinstance(same, tuple)
    assert (other.fields["moe"]["router_normalize"], same.fields["moe"]["router_normalize"]) == (
        False,
        True,
    )
    unnormalised = {**same.fields["moe"], "router_normalize": False}
    assert dict(other.fields) == {**same.fields, "moe": unnormalised}


@pytest.mark.parametrize(
    ("name", "change", "field"),
    [
        ("qwen3-30b-a3b", {"mlp_only_layers": [5]}, "mlp_only_layers"),
        ("llama4-scout-17b-16e", {"moe_layers": [0, 1, 5]}, "moe_layers"),
    ],
)
def test_layer_sets_no_pattern_gives_are_refused(
    name: str, change: dict[str, Any], field: str
) -> None:
    config = config_of(name)
    if "text_config" in config:
        config = {**config, "text_config": {**config["text_config"], **change}}
    else:
        config = {**config, **change}
    read = from_config(config)
    assert isinstance(read, tuple)
    (error,) = read
    assert error.rule == "PLC111" and field in error.message


def test_layer_pattern_reproduces_every_regular_set() -> None:
    """Every pattern planc can express is found again from its layers, and a set it cannot
    express (a gap, or experts that stop early) gives None."""
    for L in (1, 2, 5, 8, 13):
        for first in range(L + 1):
            for frequency in (1, 2, 3, 4):
                for offset in range(frequency):
                    layers = [i for i in range(L) if i >= first and i % frequency == offset]
                    fitted = layer_pattern(layers, L)
                    if not layers:
                        assert fitted is None
                        continue
                    assert fitted is not None
                    d, f, r = fitted
                    assert [i for i in range(L) if i >= d and i % f == r] == layers
    assert layer_pattern([0, 1, 5], 8) is None
    assert layer_pattern([1, 3], 8) is None  # every 2nd layer but not to the end
    assert layer_pattern([3], 8) is not None  # one MoE layer is a pattern (frequency 5)


def test_transformers_builds_the_same_counts_from_the_moe_configs(tmp_path: Path) -> None:
    paths = {name: str(HF / name / "config.json") for name in MOE_PRESETS if name != "deepseek-v3"}
    # A Qwen3-MoE with experts in every second layer after a dense prefix (layer_offset 1).
    sparse = tmp_path / "qwen3-sparse.json"
    sparse.write_text(
        json.dumps(
            {**config_of("qwen3-30b-a3b"), "decoder_sparse_step": 2, "mlp_only_layers": [0, 1, 2]}
        )
    )
    paths["qwen3-sparse"] = str(sparse)
    counted = transformers_counts(paths)
    for name, path in paths.items():
        loaded = load_path(str(write_spec(tmp_path, {"hf_config": path}, f"{name}.yaml")))
        assert loaded.job is not None, loaded.findings
        assert counted[name] == parameter_count(loaded.job.model).total, name


def test_qwen3_moe_as_transformers_5_writes_it() -> None:
    # Qwen3MoeConfig(num_experts=64).save_pretrained() writes num_local_experts (transformers
    # 5's attribute_map): 64 experts, not the default 128. Per layer the routed experts are
    # E·3·h·f_e = 64·3·2,048·768 parameters, half of the 128-expert file's.
    base = {key: value for key, value in config_of("qwen3-30b-a3b").items() if key != "num_experts"}
    written = from_config({**base, "num_local_experts": 64})
    assert not isinstance(written, tuple)
    assert written.fields["moe"]["experts"] == 64
    full = from_config(config_of("qwen3-30b-a3b"))
    assert not isinstance(full, tuple) and full.fields["moe"]["experts"] == 128
    assert not any("num_local_experts" in note.message for note in written.notes)
    # Both spellings, disagreeing: refused, naming both.
    both = from_config({**base, "num_experts": 128, "num_local_experts": 64})
    assert isinstance(both, tuple)
    (error,) = both
    assert "num_experts" in error.message and "num_local_experts" in error.message
    same = from_config({**base, "num_experts": 64, "num_local_experts": 64})
    assert not isinstance(same, tuple) and same.fields["moe"]["experts"] == 64
