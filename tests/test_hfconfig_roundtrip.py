"""Config files as transformers writes them, read by planc, against transformers' own models (#31).

For every architecture planc reads from a config.json (planc/spec/hf.py), transformers' own
config class builds configs of several sizes and saves them (`save_pretrained`, so the keys,
their spellings and their defaults are the ones transformers 5 writes). transformers then builds
each file's model on the meta device and counts its parameters; planc reads the same file
through a spec's `model.hf_config` and must give that count (plus exactly the parameters its
notes say it leaves out), or refuse the file with an error. Then every key of every file is
changed one at a time (a number doubled, a flag flipped, a list shortened, a null set, another
spelling of the key from the class's attribute_map) and the same must hold: a key that changes
transformers' count either changes planc's the same way or is an error, never an info line.

The comparisons run in the interpreter PLANC_TRANSFORMERS_PYTHON names (CI's reference venv,
transformers 5 with torch); they skip without one. The last tests need no transformers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from planc.findings import Finding, Severity
from planc.memory.params import parameter_count
from planc.spec.hf import from_config
from planc.spec.load import load_path

SMALL = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "vocab_size": 1000,
    "intermediate_size": 160,
}
_MLA = {"kv_lora_rank": 16, "qk_nope_head_dim": 8, "v_head_dim": 12, "num_key_value_heads": 4}
_LLAMA4 = {**SMALL, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size_mlp": 96}
# (name, transformers config class, its arguments): two or three sizes per architecture, each
# turning on what the others leave off (GQA, MHA, a head width of its own, biases, tied
# embeddings, dense layers among the MoE ones, a query without latent, ...).
CASES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("llama-gqa", "LlamaConfig", {**SMALL, "num_key_value_heads": 2}),
    (
        "llama-bias-tied",
        "LlamaConfig",
        {
            **SMALL,
            "num_hidden_layers": 3,
            "attention_bias": True,
            "mlp_bias": True,
            "tie_word_embeddings": True,
        },
    ),
    ("llama-headdim", "LlamaConfig", {**SMALL, "head_dim": 32, "num_key_value_heads": 1}),
    ("mistral", "MistralConfig", {**SMALL, "num_key_value_heads": 2, "head_dim": 16}),
    (
        "mistral-nowindow",
        "MistralConfig",
        {**SMALL, "num_key_value_heads": 4, "head_dim": 16, "sliding_window": None},
    ),
    ("qwen2", "Qwen2Config", {**SMALL, "num_key_value_heads": 2}),
    ("qwen2-tied", "Qwen2Config", {**SMALL, "num_key_value_heads": 4, "tie_word_embeddings": True}),
    ("qwen3", "Qwen3Config", {**SMALL, "num_key_value_heads": 2, "head_dim": 16}),
    (
        "qwen3-wide",
        "Qwen3Config",
        {**SMALL, "num_key_value_heads": 2, "head_dim": 48, "attention_bias": True},
    ),
    (
        "deepseek-v3",
        "DeepseekV3Config",
        {
            **SMALL,
            **_MLA,
            "num_hidden_layers": 4,
            "q_lora_rank": 24,
            "qk_rope_head_dim": 4,
            "n_routed_experts": 8,
            "num_experts_per_tok": 2,
            "n_group": 2,
            "topk_group": 1,
            "moe_intermediate_size": 32,
            "n_shared_experts": 1,
            "first_k_dense_replace": 1,
        },
    ),
    (
        "deepseek-v3-noq",
        "DeepseekV3Config",
        {
            **SMALL,
            **_MLA,
            "num_hidden_layers": 3,
            "q_lora_rank": None,
            "qk_rope_head_dim": 8,
            "v_head_dim": 8,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "n_group": 1,
            "topk_group": 1,
            "moe_intermediate_size": 24,
            "n_shared_experts": 2,
            "first_k_dense_replace": 0,
        },
    ),
    (
        "mixtral",
        "MixtralConfig",
        {**SMALL, "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2},
    ),
    (
        "mixtral-8",
        "MixtralConfig",
        {
            **SMALL,
            "num_key_value_heads": 4,
            "num_local_experts": 8,
            "num_experts_per_tok": 1,
            "head_dim": 32,
        },
    ),
    (
        "gpt-oss",
        "GptOssConfig",
        {
            **SMALL,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "sliding_window": 8,
        },
    ),
    (
        "qwen3-moe",
        "Qwen3MoeConfig",
        {
            **SMALL,
            "num_key_value_heads": 2,
            "num_experts": 8,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "head_dim": 16,
        },
    ),
    (
        "qwen3-moe-sparse",
        "Qwen3MoeConfig",
        {
            **SMALL,
            "num_hidden_layers": 6,
            "num_key_value_heads": 2,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "decoder_sparse_step": 2,
            "mlp_only_layers": [1],
        },
    ),
    (
        "llama4-text",
        "Llama4TextConfig",
        {**_LLAMA4, "num_hidden_layers": 4, "num_local_experts": 4, "interleave_moe_layer_step": 2},
    ),
    (
        "llama4-text-every",
        "Llama4TextConfig",
        {**_LLAMA4, "num_key_value_heads": 4, "num_local_experts": 2},
    ),
    (
        "llama4",
        "Llama4Config",
        {
            "text_config": {
                **_LLAMA4,
                "num_hidden_layers": 4,
                "num_local_experts": 4,
                "interleave_moe_layer_step": 2,
            },
            "vision_config": {
                "hidden_size": 32,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "intermediate_size": 64,
            },
        },
    ),
    (
        "gpt2",
        "GPT2Config",
        {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 1000, "n_positions": 128},
    ),
    (
        "gpt2-inner",
        "GPT2Config",
        {
            "n_layer": 3,
            "n_embd": 64,
            "n_head": 2,
            "vocab_size": 1000,
            "n_positions": 256,
            "n_inner": 100,
        },
    ),
    ("gpt-neox", "GPTNeoXConfig", {**SMALL, "max_position_embeddings": 256}),
    (
        "gpt-neox-nobias-tied",
        "GPTNeoXConfig",
        {**SMALL, "attention_bias": False, "tie_word_embeddings": True},
    ),
)

REFERENCE = r'''
import json, os, sys, warnings
warnings.filterwarnings("ignore")
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM
transformers.utils.logging.set_verbosity_error()

def count(path):
    """Parameters of the file's causal LM, built on the meta device; RoPE's base."""
    config = AutoConfig.from_pretrained(path)
    if config.model_type == "llama4":  # its text model, Llama4ForCausalLM, as planc plans
        config = config.text_config
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    # DeepSeek-V3's router bias is a buffer (DeepseekV3TopkRouter.e_score_correction_bias), a
    # tensor of the checkpoint all the same: planc counts it with the parameters.
    bias = sum(b.numel() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
    rope = getattr(config, "rope_parameters", None) or {}
    return sum(p.numel() for p in model.parameters()) + bias, rope.get("rope_theta")

TOKENS = {"bos_token_id", "eos_token_id", "pad_token_id", "boi_token_index", "eoi_token_index",
          "image_token_index"}

def changes(data, aliases):
    """(what, the config changed): each key changed in turn, and each other spelling."""
    for key, value in data.items():
        if key in TOKENS:
            continue
        if isinstance(value, bool):
            new = not value
        elif isinstance(value, int):
            new = value * 2
        elif value is None:
            new = 2
        elif isinstance(value, list) and value and all(type(v) is int for v in value):
            new = value[1:]
        elif value == []:
            new = [0]
        else:
            continue
        yield key, {**data, key: new}
    for alias, key in aliases.items():
        if key in data:
            yield f"{alias} for {key}", {alias if k == key else k: v for k, v in data.items()}

out = {}
for case in json.load(sys.stdin):
    cls = getattr(transformers, case["class"])
    folder = case["dir"]
    cls(**case["kwargs"]).save_pretrained(folder)
    counted, theta = count(folder)
    out[case["name"]] = {"path": folder, "count": counted, "theta": theta}
    data = json.load(open(os.path.join(folder, "config.json")))
    nested = "text_config" in data  # Llama 4: change its text model's keys
    inner = data["text_config"] if nested else data
    text_cls = getattr(transformers, "Llama4TextConfig") if nested else cls
    for index, (what, changed) in enumerate(changes(inner, dict(text_cls.attribute_map))):
        changed = {**data, "text_config": changed} if nested else changed
        where = f"{folder}.changed.{index}"
        os.makedirs(where)
        with open(os.path.join(where, "config.json"), "w") as handle:
            json.dump(changed, handle)
        try:
            counted, theta = count(where)
        except Exception:  # transformers refuses the change itself: nothing to compare
            continue
        out[f"{case['name']}: {what}"] = {"path": where, "count": counted, "theta": theta}
print(json.dumps(out))
'''

UNMODELLED = re.compile(r"([\d,]+) parameters planc does not model")


@pytest.fixture(scope="module")
def transformers_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """name -> {path, count, theta}: every case and every change transformers accepts."""
    python = os.environ.get("PLANC_TRANSFORMERS_PYTHON") or sys.executable
    probe = subprocess.run(
        [python, "-c", "import torch, transformers"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(
            "transformers with torch is not importable (pip install transformers torch, and "
            "point PLANC_TRANSFORMERS_PYTHON at that interpreter)"
        )
    root = tmp_path_factory.mktemp("written")
    cases = [
        {"name": name, "class": cls, "kwargs": kwargs, "dir": str(root / name)}
        for name, cls, kwargs in CASES
    ]
    run = subprocess.run(
        [python, "-c", REFERENCE],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    files: dict[str, dict[str, Any]] = json.loads(run.stdout.strip().splitlines()[-1])
    return files


def read(path: str, folder: Path) -> tuple[int | None, float | None, tuple[Finding, ...]]:
    """planc's count of the file (its own plus the parameters its notes say it leaves out) and
    RoPE base, through a spec's model.hf_config; None when planc refuses the file."""
    spec = {
        "version": 1,
        "name": "written",
        "model": {"hf_config": path},
        "hardware": {"gpu": "h100-sxm", "nodes": 1},
        "training": {"seq_len": 64, "global_batch": 8},
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    loaded = load_path(str(folder / "spec.yaml"))
    if loaded.job is None:
        return None, None, loaded.findings
    left_out = sum(
        int(match.group(1).replace(",", ""))
        for finding in loaded.findings
        for match in UNMODELLED.finditer(finding.message)
    )
    model = loaded.job.model
    theta = model.rope_theta if model.position == "rope" else None
    return parameter_count(model).total + left_out, theta, loaded.findings


@pytest.mark.parametrize("case", [name for name, _, _ in CASES])
def test_a_file_transformers_wrote_counts_as_its_model(
    case: str, transformers_files: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """The file as saved: planc's count and RoPE base are transformers', and every key it
    wrote is one planc knows (no "not read" line)."""
    written = transformers_files[case]
    counted, theta, findings = read(written["path"], tmp_path)
    assert counted == written["count"], [f.message for f in findings]
    if theta is not None:
        assert theta == written["theta"]
    assert not [f.message for f in findings if f.message.startswith("model.hf_config: not read:")]


@pytest.mark.parametrize("case", [name for name, _, _ in CASES])
def test_every_key_that_changes_the_count_is_read_or_refused(
    case: str, transformers_files: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """Each key of the file changed in turn: planc's count follows transformers', or planc
    refuses the file with an error; an info line is never all that stands for a wrong count."""
    changed = {name: w for name, w in transformers_files.items() if name.startswith(f"{case}: ")}
    assert len(changed) >= 8, sorted(changed)  # the file's keys, each changed once
    wrong = {}
    refused = 0
    for index, (name, written) in enumerate(sorted(changed.items())):
        counted, theta, findings = read(written["path"], tmp_path / str(index))
        if counted is None:
            assert any(f.severity is Severity.ERROR for f in findings), name
            refused += 1
        elif counted != written["count"] or (theta is not None and theta != written["theta"]):
            wrong[name] = (written["count"], counted, [f.message for f in findings])
    assert not wrong
    assert refused < len(changed) / 2  # planc reads most of them


# ----------------------------------------------------------------------------- without transformers


def test_another_spelling_of_a_key_is_the_key() -> None:
    """GPT2Config takes hidden_size for n_embd (its attribute_map): the same model, read
    without a note; both spellings, disagreeing, are refused naming both."""
    base = {"model_type": "gpt2", "n_layer": 2, "n_head": 4, "vocab_size": 100, "n_positions": 32}
    read = from_config({**base, "hidden_size": 64})
    canonical = from_config({**base, "n_embd": 64})
    assert not isinstance(read, tuple) and not isinstance(canonical, tuple)
    assert read.fields["hidden"] == 64 and read == canonical
    both = from_config({**base, "hidden_size": 64, "n_embd": 128})
    assert isinstance(both, tuple) and "hidden_size" in both[0].message


def test_an_unknown_key_that_names_a_size_is_an_error() -> None:
    config = {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "intermediate_size": 160,
        "vocab_size": 1000,
    }
    sized = from_config({**config, "num_dense_experts": 4})
    assert isinstance(sized, tuple)
    (error,) = sized
    assert error.severity == "error" and "num_dense_experts 4" in error.message
    assert "delete it" in error.fix
    # A name without a sizing word, or a sizing name set to nothing, stays an info line.
    for extra in ({"fancy_new_thing": 3}, {"moe_layer_size": None}, {"use_expert_cache": False}):
        read = from_config({**config, **extra})
        assert not isinstance(read, tuple), extra
        assert [n.severity for n in read.notes if n.message.startswith("not read:")] == ["info"]


def test_gpt2_cross_attention_is_refused() -> None:
    config = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100}
    assert not isinstance(from_config({**config, "add_cross_attention": False}), tuple)
    refused = from_config({**config, "add_cross_attention": True})
    assert isinstance(refused, tuple) and "add_cross_attention" in refused[0].message


def test_rope_base_where_transformers_5_writes_it() -> None:
    """transformers 5 writes θ inside rope_parameters; a Mixtral config without one has
    MixtralConfig's default_theta, 1,000,000, and Llama 4's 500,000."""
    config = {
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "intermediate_size": 160,
        "vocab_size": 1000,
    }
    llama = from_config(
        {
            **config,
            "model_type": "llama",
            "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0},
        }
    )
    assert not isinstance(llama, tuple) and llama.fields["rope_theta"] == 500_000
    mixtral = from_config({**config, "model_type": "mixtral", "num_local_experts": 4})
    assert not isinstance(mixtral, tuple) and mixtral.fields["rope_theta"] == 1_000_000
    plain = from_config({**config, "model_type": "llama"})
    assert not isinstance(plain, tuple) and "rope_theta" not in plain.fields
