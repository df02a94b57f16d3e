"""RoPE scaling and group-limited routing: read from a spec and a config.json, written to
Megatron-LM's arguments (issue 31). DeepSeek-V3 trains with YaRN (factor 40 over 4,096
positions, β_fast 32, β_slow 1, mscale 1, mscale_all_dim 1) and routes each token to 8 of its
256 experts within 4 of 8 groups, the routed output scaled by 2.5 (its config.json and
technical report §2.1.2); Llama 3.1 scales RoPE by 8 (Llama 3.2 1B by 32) over 8,192 original
positions. tests/test_frameworks_megatron_build.py builds these models with Megatron-Core."""

from __future__ import annotations

import json
from typing import Any

from test_hfconfig import HF, ROOT

from planc.compile.frameworks import megatron_arguments
from planc.spec.hf import from_config
from planc.spec.job import RopeScaling
from planc.spec.load import load_text

from conftest import compiled, job_of, resolved_of, spec_text

DEEPSEEK = "deepseek-v3-2048xh800.yaml"
DEEPSEEK_YARN = RopeScaling("yarn", 40.0, 4096, 32.0, 1.0, 1.0, 1.0)


def flags(
    overlay: dict[str, Any] | None = None, base: str = DEEPSEEK
) -> tuple[dict[str, str], list[str]]:
    args, notes = megatron_arguments(compiled(job_of(overlay, base)))
    return dict(line.partition(" ")[::2] for line in args), notes


def test_deepseek_v3_trains_with_its_yarn_and_routing() -> None:
    found, notes = flags()
    assert found["--rope-type"] == "yarn" and found["--position-embedding-type"] == "rope"
    assert found["--rotary-scaling-factor"] == "40.0"
    assert (found["--mscale"], found["--mscale-all-dim"]) == ("1.0", "1.0")
    assert found["--moe-router-num-groups"] == "8" and found["--moe-router-group-topk"] == "4"
    assert found["--moe-router-topk-scaling-factor"] == "2.5"
    # The latent norms (q_a_layernorm, kv_a_layernorm) exist in Megatron-Core only with it.
    assert "--qk-layernorm" in found
    assert not [note for note in notes if "YaRN" in note]
    assert resolved_of(None, DEEPSEEK).model.rope_scaling == DEEPSEEK_YARN


def test_latent_attention_without_scaling_says_rope() -> None:
    # Megatron's MLA defaults to YaRN with factor 40: an unscaled model must say rope.
    found, _ = flags({"model": {"rope_scaling": None, "preset": None, **_deepseek_fields()}})
    assert found["--rope-type"] == "rope" and "--rotary-scaling-factor" not in found


def _deepseek_fields() -> dict[str, Any]:
    """DeepSeek-V3 written out without a preset and without RoPE scaling."""
    presets = json.loads((ROOT / "planc" / "presets" / "models.json").read_text("utf-8"))
    left_out = ("parameters", "active_parameters", "source", "rope_scaling")
    return {k: v for k, v in presets["deepseek-v3"].items() if k not in left_out}


def test_yarn_under_latent_attention_names_what_megatron_cannot_set() -> None:
    scaling = {
        "type": "yarn",
        "factor": 40.0,
        "beta_fast": 16.0,
        "original_max_position_embeddings": 8192,
    }
    found, notes = flags({"model": {"rope_scaling": scaling}})
    assert found["--rotary-scaling-factor"] == "40.0"
    assert found["--mscale-all-dim"] == "1.0"  # a field left out is the preset's
    said = " ".join(notes)
    assert "beta_fast 16" in said and "original_max_position_embeddings 8192" in said


def test_yarn_without_latent_attention_and_llama3_scaling() -> None:
    yarn = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}
    found, _ = flags({"model": {"rope_scaling": yarn}}, "llama3-8b-1node.yaml")
    assert found["--position-embedding-type"] == "yarn" and "--rope-type" not in found
    assert found["--rotary-scaling-factor"] == "4.0"
    assert found["--yarn-original-max-position-embeddings"] == "8192"
    assert (found["--yarn-beta-fast"], found["--yarn-beta-slow"]) == ("32.0", "1.0")
    overlay = {"model": {"preset": "llama3-405b"}, "parallelism": {"pipeline": 2, "data": 4}}
    found, notes = flags(overlay, "llama3-70b-8x8.yaml")
    assert "--use-rope-scaling" in found and found["--rope-scaling-factor"] == "8.0"
    assert not [note for note in notes if "Llama 3 RoPE" in note]
    plain, _ = flags(None, "llama3-8b-1node.yaml")
    assert not {"--use-rope-scaling", "--rope-type", "--rotary-scaling-factor"} & set(plain)


def test_group_limited_routing_that_cannot_run_is_refused() -> None:
    for moe, words in (
        ({"router_groups": 6}, "does not divide experts 256"),
        ({"router_group_top_k": 16, "router_groups": 8}, "above router_groups 8"),
        ({"router_group_top_k": 3}, "does not divide top_k 8"),
        # 256 experts in 128 groups of 2, top 8 from 2 groups: each group would give 4.
        ({"router_groups": 128, "router_group_top_k": 2}, "gives top_k/router_group_top_k = 4"),
    ):
        loaded = load_text("spec.yaml", spec_text({"model": {"moe": moe}}, DEEPSEEK))
        assert loaded.job is None
        assert any(f.rule == "PLC110" and words in f.message for f in loaded.findings), moe


def test_configs_give_the_scaling_and_the_routing() -> None:
    deepseek = from_config(json.loads((HF / "deepseek-v3" / "config.json").read_text()))
    assert not isinstance(deepseek, tuple)
    assert deepseek.fields["rope_scaling"] == {
        "type": "yarn",
        "factor": 40.0,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    }
    moe = deepseek.fields["moe"]
    assert (moe["router_groups"], moe["router_group_top_k"], moe["router_scaling_factor"]) == (
        8,
        4,
        2.5,
    )
    llama = from_config(json.loads((HF / "llama3.2-1b" / "config.json").read_text()))
    assert not isinstance(llama, tuple)
    assert llama.fields["rope_scaling"]["factor"] == 32.0
    assert llama.fields["rope_scaling"]["type"] == "llama3"


def test_router_score_function() -> None:
    """Llama 4's router weighs its one expert by a sigmoid; a softmax router with top-1 is
    Megatron's pre-softmax (the top probability, not 1); Mixtral's softmax is the default; an
    expert bias on softmax scores is refused."""
    scout, _ = flags({"model": {"preset": "llama4-scout-17b-16e"}}, "mixtral-8x7b-64xh100.yaml")
    assert scout["--moe-router-score-function"] == "sigmoid"
    assert "--moe-router-pre-softmax" not in scout
    top1, _ = flags({"model": {"moe": {"top_k": 1}}}, "mixtral-8x7b-64xh100.yaml")
    assert "--moe-router-pre-softmax" in top1 and "--moe-router-score-function" not in top1
    mixtral, _ = flags(None, "mixtral-8x7b-64xh100.yaml")
    assert not {"--moe-router-pre-softmax", "--moe-router-score-function"} & set(mixtral)
    refused = load_text(
        "spec.yaml", spec_text({"model": {"moe": {"router_score": "softmax"}}}, DEEPSEEK)
    )
    assert refused.job is None
    assert any(f.field == "model.moe.router_score" for f in refused.findings)


def test_unnormalised_top_k_weights() -> None:
    """Qwen3MoeConfig leaves the top-k softmax weights unnormalised unless norm_topk_prob (its
    default is false; the published Qwen3 configs set it true): Megatron's pre-softmax."""
    config = json.loads((HF / "qwen3-30b-a3b" / "config.json").read_text())
    published = from_config(config)
    assert not isinstance(published, tuple) and published.fields["moe"]["router_normalize"]
    plain = from_config({**config, "norm_topk_prob": False})
    assert not isinstance(plain, tuple) and not plain.fields["moe"]["router_normalize"]
    overlay = {"model": {"preset": "qwen3-30b-a3b", "moe": {"router_normalize": False}}}
    found, _ = flags(overlay, "mixtral-8x7b-64xh100.yaml")
    assert "--moe-router-pre-softmax" in found
    normal, _ = flags({"model": {"preset": "qwen3-30b-a3b"}}, "mixtral-8x7b-64xh100.yaml")
    assert "--moe-router-pre-softmax" not in normal
    sigmoid = {"model": {"moe": {"router_normalize": False}}}
    _, notes = flags(sigmoid)
    assert any("renormalises the top-k weights of a sigmoid router" in note for note in notes)
