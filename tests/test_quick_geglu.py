"""GPT-OSS's GLU is quick-GEGLU, and planc says so to the frameworks.

What a user relies on: `model.mlp: quick_geglu` (the `gpt-oss-120b` preset's, and what a GPT-OSS
config.json reads as) is a gated MLP everywhere a gated MLP differs from a plain one (its three
matrices, its saved activations, its time), so it prices exactly as `swiglu`; the Megatron
arguments say `--quick-geglu`, not `--swiglu` (Megatron-Core's own build of them is checked in
tests/test_frameworks_megatron_build.py); the linear offset GPT-OSS adds to the up projection,
which Megatron-LM's command line cannot set, is in the README beside the clamp.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from planc.analysis import analyse, estimate_step
from planc.compile.frameworks import megatron_arguments, megatron_files
from planc.memory.params import parameter_count
from planc.spec.hf import from_config
from planc.spec.job import preset_model

from conftest import compiled, job_of

HF = Path(__file__).resolve().parent / "data" / "hf"
BASE = "mixtral-8x7b-64xh100.yaml"


def _oss(mlp: str | None = None) -> dict[str, Any]:
    model: dict[str, Any] = {"preset": "gpt-oss-120b"}
    if mlp is not None:
        model["mlp"] = mlp
    return {
        "model": model,
        "hardware": {"gpu": "b200", "nodes": 8},
        "parallelism": {"tensor": 1, "pipeline": 1, "data": 64, "expert": 8, "expert_tensor": 1},
        "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 64},
    }


def test_the_preset_and_its_config_json_are_quick_geglu_with_offset_one() -> None:
    # transformers' GptOssExperts: glu = gate·σ(1.702·gate), out = (up + 1)·glu.
    config = json.loads((HF / "gpt-oss-120b" / "config.json").read_text("utf-8"))
    read = from_config(config)
    assert not isinstance(read, tuple)
    assert read.fields["mlp"] == "quick_geglu" and read.fields["glu_linear_offset"] == 1.0
    assert not [note for note in read.notes if "swiglu" in note.message]
    model = preset_model("gpt-oss-120b", 4096)
    assert model is not None and (model.mlp, model.glu_linear_offset) == ("quick_geglu", 1.0)


def test_another_alpha_is_a_note_and_a_spec_mlp_wins() -> None:
    config = json.loads((HF / "gpt-oss-120b" / "config.json").read_text("utf-8"))
    other = from_config({**config, "swiglu_alpha": 1.5})
    assert not isinstance(other, tuple)
    assert any("swiglu_alpha 1.5" in note.message for note in other.notes)
    given = from_config(config, {"mlp": "swiglu"})
    assert not isinstance(given, tuple) and given.fields["mlp"] == "swiglu"


def test_quick_geglu_prices_and_counts_as_swiglu() -> None:
    """The same tensors: parameters, memory per rank and the step time are swiglu's to the
    byte and the second; only the activation op's name differs."""
    quick, swiglu = job_of(_oss(), BASE), job_of(_oss("swiglu"), BASE)
    assert quick.model.mlp == "quick_geglu" and swiglu.model.mlp == "swiglu"
    assert parameter_count(quick.model) == parameter_count(swiglu.model)
    a, b = analyse(quick), analyse(swiglu)
    assert a.memory.peak_bytes == b.memory.peak_bytes
    assert estimate_step(a).step_time_s == estimate_step(b).step_time_s
    plain = job_of(_oss("gelu"), BASE)
    assert parameter_count(plain.model).total < parameter_count(quick.model).total


def test_megatron_is_told_quick_geglu_and_the_offset() -> None:
    plan = compiled(job_of(_oss(), BASE))
    args = " ".join(megatron_arguments(plan)[0])
    assert "--quick-geglu" in args and "--swiglu" not in args
    readme = megatron_files(plan)["megatron/README.md"]
    assert "glu_linear_offset: 1" in readme and "activation_func_clamp_value: 7" in readme
    swiglu = compiled(job_of(_oss("swiglu"), BASE))
    assert "--swiglu" in " ".join(megatron_arguments(swiglu)[0])
