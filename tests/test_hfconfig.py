"""model.hf_config: Hugging Face config.json files read into planc's model (issue 18).

The config files under tests/data/hf are the published config.json of each model (values as on
the Hugging Face Hub). Expected parameter counts are the published ones: the presets' counts
in planc/presets/models.json, and for the models without a preset the counts their authors
publish (GPT-NeoX-20B paper, Table 1; the safetensors totals of Mistral-7B-v0.1, Qwen2.5-7B and
Qwen3-8B). Where transformers and torch are installed, transformers' own model of each file (on
the meta device) is counted too, and gives the same numbers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from planc.check import check_loaded
from planc.findings import Finding, Severity
from planc.memory.params import parameter_count
from planc.spec.hf import Note, from_config, parse
from planc.spec.job import Job
from planc.spec.load import load_path

ROOT = Path(__file__).resolve().parent.parent
HF = ROOT / "tests" / "data" / "hf"
PRESETS: dict[str, Any] = json.loads(
    (ROOT / "planc" / "presets" / "models.json").read_text("utf-8")
)
# Every dense preset with a Hugging Face config.
DENSE_PRESETS = (
    "llama3-8b",
    "llama3-70b",
    "llama3-405b",
    "llama3.2-1b",
    "tinyllama-1.1b",
    "gpt2-small",
)


def write_spec(folder: Path, model: dict[str, Any], name: str = "spec.yaml") -> Path:
    spec = {
        "version": 1,
        "name": "hf",
        "model": model,
        "hardware": {"gpu": "h100-sxm", "nodes": 1},
        "parallelism": {"tensor": 4},
        "training": {"seq_len": 1024, "global_batch": 16},
    }
    path = folder / name
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def hf_job(tmp_path: Path, name: str, **fields: Any) -> Job:
    config = tmp_path / name / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_bytes((HF / name / "config.json").read_bytes())
    loaded = load_path(str(write_spec(tmp_path, {"hf_config": f"{name}/config.json", **fields})))
    assert loaded.job is not None, loaded.findings
    return loaded.job


def findings_of(path: Path) -> tuple[Finding, ...]:
    return check_loaded(load_path(str(path))).findings


@pytest.mark.parametrize("preset", DENSE_PRESETS)
def test_every_dense_preset_round_trips(tmp_path: Path, preset: str) -> None:
    """The preset's config.json gives the preset's model, field for field, and its count."""
    from_hf = hf_job(tmp_path, preset).model
    loaded = load_path(str(write_spec(tmp_path, {"preset": preset}, "preset.yaml")))
    assert loaded.job is not None
    assert from_hf == replace(loaded.job.model, preset=None)
    assert parameter_count(from_hf).total == PRESETS[preset]["parameters"]


def test_the_round_trip_covers_every_preset_with_a_published_config() -> None:
    configs = {path.parent.name for path in HF.glob("*/config.json")}
    assert set(DENSE_PRESETS) <= configs
    # The GPT-3 and Korthikanti presets have no Hugging Face config; every other preset has one.
    without = {"gpt3-175b", "gpt-22b", "gpt-530b", "gpt-1t"}
    # Mixture-of-experts presets round-trip in tests/test_hfconfig_moe.py.
    moe = {name for name, data in PRESETS.items() if isinstance(data, dict) and "moe" in data}
    assert moe <= configs
    assert {name for name in PRESETS if not name.startswith("_")} - without - moe == set(
        DENSE_PRESETS
    )


@pytest.mark.parametrize(
    ("name", "published", "unmodelled"),
    [
        ("gpt-neox-20b", 20_554_567_680, 0),  # Black et al. 2022, Table 1
        ("mistral-7b", 7_241_732_096, 0),
        # Qwen2: L·(n + 2g)·k q/k/v biases (in the notes); Qwen3's q_norm/k_norm is qk_norm.
        ("qwen2.5-7b", 7_615_616_512, 28 * (28 + 2 * 4) * 128),
        ("qwen3-8b", 8_190_735_360, 0),
    ],
)
def test_published_counts_of_models_without_a_preset(
    tmp_path: Path, name: str, published: int, unmodelled: int
) -> None:
    model = hf_job(tmp_path, name).model
    assert parameter_count(model).total + unmodelled == published
    if unmodelled:
        notes = [f for f in findings_of(tmp_path / "spec.yaml") if f.field == "model.hf_config"]
        assert any(f"{unmodelled:,} parameters planc does not model" in f.message for f in notes)


def test_architecture_fields_map_onto_planc_fields(tmp_path: Path) -> None:
    gpt2 = hf_job(tmp_path, "gpt2-small").model
    assert (gpt2.mlp, gpt2.norm, gpt2.bias, gpt2.tied, gpt2.position) == (
        "gelu",
        "layernorm",
        True,
        True,
        "learned",
    )
    assert (gpt2.f, gpt2.max_seq_len, gpt2.dropout) == (4 * 768, 1024, 0.1)
    neox = hf_job(tmp_path, "gpt-neox-20b").model
    assert (neox.mlp, neox.norm, neox.bias, neox.tied, neox.position) == (
        "gelu",
        "layernorm",
        True,
        False,
        "rope",
    )
    qwen3 = hf_job(tmp_path, "qwen3-8b").model
    assert (qwen3.k, qwen3.g, qwen3.mlp, qwen3.norm) == (128, 8, "swiglu", "rmsnorm")


def test_explicit_fields_override_the_config(tmp_path: Path) -> None:
    model = hf_job(tmp_path, "llama3-8b", layers=16, vocab=32000).model
    assert (model.L, model.V, model.h) == (16, 32000, 4096)


# A Qwen2-MoE config (Qwen1.5-MoE-A2.7B's dimensions) and a DBRX config: planc reads neither's
# experts (Qwen2-MoE's shared_expert_gate has no term in planc; DBRX has no table).
QWEN2_MOE = {
    "model_type": "qwen2_moe",
    "num_hidden_layers": 24,
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "intermediate_size": 5632,
    "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632,
    "num_experts": 60,
    "num_experts_per_tok": 4,
    "vocab_size": 151936,
}


@pytest.mark.parametrize(
    ("config", "what"),
    [
        (QWEN2_MOE, "'qwen2_moe'"),
        ({"model_type": "dbrx", "d_model": 6144}, "'dbrx'"),
    ],
)
def test_moe_configs_are_refused_where_hf_config_stands(
    tmp_path: Path, config: dict[str, Any], what: str
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = write_spec(tmp_path, {"hf_config": "config.json"})
    loaded = load_path(str(spec))
    assert loaded.job is None
    (finding,) = loaded.findings
    assert (finding.rule, finding.severity, finding.field) == (
        "PLC111",
        Severity.ERROR,
        "model.hf_config",
    )
    assert what in finding.message and "mixture-of-experts" in finding.message
    if "qwen2" in what:
        assert "shared_expert_gate" in finding.message
    line = spec.read_text().splitlines().index("  hf_config: config.json") + 1
    assert (finding.line, finding.column) == (line, 14)


def test_an_expert_count_is_moe_whatever_the_model_type() -> None:
    config = json.loads((HF / "llama3-8b" / "config.json").read_text())
    read = from_config({**config, "num_local_experts": 4})
    assert isinstance(read, tuple) and read[0].rule == "PLC111"


@pytest.mark.parametrize(
    ("config", "rule", "words"),
    [
        ({"model_type": "t5", "d_model": 512}, "PLC111", "'t5'"),
        ({"hidden_size": 4096}, "PLC111", "no model_type"),
        ({"model_type": "llama", "hidden_size": 4096}, "PLC110", "no num_hidden_layers"),
        (
            {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 1.5},
            "PLC110",
            "vocab_size",
        ),
        (
            {"model_type": "gpt2", "n_layer": True, "n_embd": 64, "n_head": 4, "vocab_size": 9},
            "PLC110",
            "n_layer",
        ),
        (
            {"model_type": "gpt2", "n_layer": 2, "n_embd": 65, "n_head": 4, "vocab_size": 9},
            "PLC110",
            "does not split into 4 heads",
        ),
        (
            {
                "model_type": "llama",
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "num_attention_heads": 4,
                "intermediate_size": 128,
                "vocab_size": 9,
                "hidden_act": "relu2",
            },
            "PLC110",
            "no model for this activation",
        ),
    ],
)
def test_configs_planc_cannot_model_say_why(config: dict[str, Any], rule: str, words: str) -> None:
    read = from_config(config)
    assert isinstance(read, tuple)
    assert read[0].rule == rule and words in read[0].message


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b'{"model_type": "llama",', "not valid JSON"),
        (b"[1, 2]", "a JSON list, not an object"),
        (b'{"a": NaN}', "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[" * 100_000, "not valid JSON"),
    ],
)
def test_bad_json_is_a_finding(data: bytes, words: str) -> None:
    note = parse(data)
    assert isinstance(note, Note)
    assert words in note.message


def test_unreadable_configs_are_located_findings(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text('{"model_type": "llama",\n', encoding="utf-8")
    (tmp_path / "folder").mkdir()
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "config.json")
    for target, words in [
        ("missing.json", "no such file"),
        ("broken.json", "not valid JSON"),
        ("folder", "no such file: '" + str(tmp_path / "folder" / "config.json")),
        ("fifo", "is not a regular file"),
    ]:
        spec = write_spec(tmp_path, {"hf_config": target})
        (finding,) = findings_of(spec)
        assert (finding.rule, finding.field, finding.line) == ("PLC110", "model.hf_config", 4)
        assert words in finding.message


def test_a_field_the_spec_gives_is_not_read_from_the_config(tmp_path: Path) -> None:
    config = json.loads((HF / "llama3-8b" / "config.json").read_text())
    (tmp_path / "config.json").write_text(
        json.dumps({**config, "hidden_act": "relu2", "tie_word_embeddings": "yes"})
    )
    spec = write_spec(tmp_path, {"hf_config": "config.json"})
    assert {f.rule for f in findings_of(spec)} == {"PLC110"}
    spec = write_spec(
        tmp_path, {"hf_config": "config.json", "mlp": "gelu", "tied_embeddings": True}
    )
    loaded = load_path(str(spec))
    assert loaded.job is not None, loaded.findings
    assert (loaded.job.model.mlp, loaded.job.model.tied) == ("gelu", True)


def test_a_model_folder_stands_for_its_config_json(tmp_path: Path) -> None:
    snapshot = tmp_path / "models" / "Meta-Llama-3-8B"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_bytes((HF / "llama3-8b" / "config.json").read_bytes())
    loaded = load_path(str(write_spec(tmp_path, {"hf_config": "models/Meta-Llama-3-8B"})))
    assert loaded.job is not None, loaded.findings
    assert parameter_count(loaded.job.model).total == PRESETS["llama3-8b"]["parameters"]


def test_preset_and_hf_config_together_are_refused(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, {"preset": "llama3-8b", "hf_config": "config.json"})
    (finding,) = findings_of(spec)
    assert finding.rule == "PLC110" and "both give the model" in finding.message


def test_ignored_fields_are_named_with_the_reason(tmp_path: Path) -> None:
    # Llama 3.1's rope_scaling is read (model.rope_scaling); a kind planc does not read is named.
    assert hf_job(tmp_path, "llama3-405b").model.rope_scaling is not None
    assert not [f for f in findings_of(tmp_path / "spec.yaml") if f.field == "model.hf_config"]
    linear = json.loads((HF / "llama3-8b" / "config.json").read_text())
    read = from_config({**linear, "rope_scaling": {"rope_type": "linear", "factor": 2.0}})
    assert not isinstance(read, tuple) and "rope_scaling" not in read.fields
    (note,) = read.notes
    assert note.severity == "info" and "rope_scaling (linear) is not read" in note.message
    # Mistral's window is read (every layer windowed); Qwen2's window from max_window_layers on
    # is not, and says how to state one
    mistral = hf_job(tmp_path, "mistral-7b").model
    assert (mistral.window, mistral.full_every) == (4096, 0)
    assert not [f for f in findings_of(tmp_path / "spec.yaml") if f.field == "model.hf_config"]
    # Mixtral's too (MixtralAttention takes config.sliding_window in every layer), none by
    # default: MixtralConfig's sliding_window is null where Mistral's is 4,096
    mixtral = json.loads((HF / "mixtral-8x7b" / "config.json").read_text())
    assert mixtral.get("sliding_window") is None
    read = from_config(mixtral)
    assert not isinstance(read, tuple) and "sliding_window" not in read.fields
    read = from_config({**mixtral, "sliding_window": 4096})
    assert not isinstance(read, tuple) and read.fields["sliding_window"] == 4096
    assert not [n for n in read.notes if n.rule == "PLC066"]
    assert isinstance(from_config({**mixtral, "sliding_window": 0}), tuple)
    qwen2 = json.loads((HF / "qwen2.5-7b" / "config.json").read_text())
    read = from_config({**qwen2, "use_sliding_window": True, "sliding_window": 4096})
    assert not isinstance(read, tuple) and "sliding_window" not in read.fields
    (note,) = [n for n in read.notes if n.rule == "PLC066"]
    assert note.severity == "info" and "sliding_window 4096 is not read" in note.message
    config = json.loads((HF / "llama3-8b" / "config.json").read_text())
    read = from_config({**config, "fancy_new_thing": 3, "quantization_config": {"bits": 4}})
    assert not isinstance(read, tuple)
    messages = [note.message for note in read.notes]
    assert any("quantization_config is not read" in m for m in messages)
    assert any("not read: fancy_new_thing" in m for m in messages)


def test_published_configs_read_without_notes() -> None:
    for name in ("llama3-8b", "llama3-70b", "tinyllama-1.1b", "gpt2-small"):
        read = from_config(json.loads((HF / name / "config.json").read_text()))
        assert not isinstance(read, tuple) and read.notes == (), name


def test_null_means_the_transformers_default() -> None:
    read = from_config(
        {
            "model_type": "gpt2",
            "n_layer": 2,
            "n_embd": 64,
            "n_head": 4,
            "n_inner": None,
            "vocab_size": 100,
        }
    )
    assert not isinstance(read, tuple)
    # n_inner null is 4·n_embd, planc's own default for gelu: left for planc to derive, so that
    # an overridden hidden size carries it along.
    assert "ffn_hidden" not in read.fields and read.fields["tied_embeddings"] is True


def test_derived_dimensions_follow_overrides(tmp_path: Path) -> None:
    model = hf_job(tmp_path, "gpt2-small", hidden=1024, heads=16).model
    assert (model.f, model.k) == (4096, 64)


def test_stdin_reads_relative_to_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_bytes((HF / "llama3-8b" / "config.json").read_bytes())
    spec = write_spec(tmp_path, {"hf_config": "config.json"}).read_text()
    run = subprocess.run(
        [sys.executable, "-m", "planc", "check", "-"],
        input=spec,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    elsewhere = subprocess.run(
        [sys.executable, "-m", "planc", "check", "-"],
        input=spec,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert elsewhere.returncode == 1 and "PLC110" in elsewhere.stdout
    assert "Traceback" not in elsewhere.stdout + elsewhere.stderr


TRANSFORMERS_COUNT = """
import json, sys
import torch
from transformers import AutoConfig, AutoModelForCausalLM
out = {}
for name, path in json.load(sys.stdin).items():
    data = json.load(open(path))
    data = data.get("text_config", data)  # Llama 4: its text model, Llama4ForCausalLM
    if "attn_temperature_tuning" in data:
        # The Llama 4 configs write 4 for this flag, which transformers 5's strict config
        # refuses (it wants a bool); it scales attention logits and holds no tensor.
        data["attn_temperature_tuning"] = bool(data["attn_temperature_tuning"])
    config = AutoConfig.for_model(**data)
    with torch.device("meta"):  # shapes only: no memory for 405B
        model = AutoModelForCausalLM.from_config(config)
    out[name] = sum(p.numel() for p in model.parameters())  # tied weights counted once
print(json.dumps(out))
"""


def transformers_counts(paths: dict[str, str]) -> dict[str, int]:
    """transformers' own parameter count of each config file (its model built on the meta
    device), in the interpreter PLANC_TRANSFORMERS_PYTHON names; the test skips without one."""
    python = os.environ.get("PLANC_TRANSFORMERS_PYTHON") or sys.executable
    probe = subprocess.run(
        [python, "-c", "import torch, transformers"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(
            "transformers with torch is not importable (pip install transformers torch, and "
            "point PLANC_TRANSFORMERS_PYTHON at that interpreter)"
        )
    run = subprocess.run(
        [python, "-c", TRANSFORMERS_COUNT],
        input=json.dumps(paths),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    counts: dict[str, int] = json.loads(run.stdout.strip().splitlines()[-1])
    return counts


def test_transformers_builds_the_same_counts_from_the_config_files(tmp_path: Path) -> None:
    """transformers' own model of each config file (on the meta device) has the parameters
    planc counts plus those its notes say it leaves out: the files and the mapping agree."""
    dense = {
        name: (published, unmodelled)
        for name, published, unmodelled in [
            *((preset, PRESETS[preset]["parameters"], 0) for preset in DENSE_PRESETS),
            ("gpt-neox-20b", 20_554_567_680, 0),
            ("mistral-7b", 7_241_732_096, 0),
            ("qwen2.5-7b", 7_615_616_512, 28 * (28 + 2 * 4) * 128),
            ("qwen3-8b", 8_190_735_360, 0),
        ]
    }
    counted = transformers_counts({name: str(HF / name / "config.json") for name in dense})
    for name, (published, unmodelled) in dense.items():
        model = hf_job(tmp_path / name, name).model
        assert counted[name] == published == parameter_count(model).total + unmodelled, name
