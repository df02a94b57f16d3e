"""RoPE's base θ reaches Megatron's arguments: from the preset (the published config.json's
rope_theta), from a Hugging Face config, or from the spec. Without it Megatron trains with
10,000 where Llama 3 needs 500,000 and Mixtral 1,000,000."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_hfconfig import HF, hf_job

from planc.compile import render_files
from planc.spec.hf import from_config

from conftest import check_text, compiled, job_of, rules_fired, spec_text


def rotary_base(overlay: dict[str, object] | None, base: str) -> str | None:
    """The value of --rotary-base in the compiled megatron/args.txt (None: not written)."""
    args = render_files(compiled(job_of(overlay, base)))["megatron/args.txt"].split()
    return args[args.index("--rotary-base") + 1] if "--rotary-base" in args else None


@pytest.mark.parametrize(
    ("base", "theta"),
    [
        # The published configs: Llama 3 rope_theta 500000.0, Mixtral 1000000.0.
        ("llama3-70b-8x8.yaml", "500000"),
        ("mixtral-8x7b-64xh100.yaml", "1000000"),
    ],
)
def test_the_preset_theta_reaches_megatron(base: str, theta: str) -> None:
    assert rotary_base(None, base) == theta


def test_the_spec_overrides_theta_and_learned_positions_write_none() -> None:
    assert rotary_base({"model": {"rope_theta": 2_000_000}}, "llama3-70b-8x8.yaml") == "2000000"
    assert rotary_base(None, "gpt3-175b-1024xa100.yaml") is None  # learned positions


def test_a_hf_config_gives_its_theta(tmp_path: Path) -> None:
    config = json.loads((HF / "llama3-8b" / "config.json").read_text("utf-8"))
    read = from_config(config)
    assert not isinstance(read, tuple) and read.fields["rope_theta"] == 500000.0
    assert hf_job(tmp_path, "llama3-8b").model.rope_theta == 500000.0
    unset = from_config({key: value for key, value in config.items() if key != "rope_theta"})
    assert not isinstance(unset, tuple) and "rope_theta" not in unset.fields
    bad = from_config({**config, "rope_theta": "large"})
    assert isinstance(bad, tuple) and "rope_theta" in bad[0].message


def test_theta_is_bounded_in_the_spec() -> None:
    result = check_text(spec_text({"model": {"rope_theta": 0}}))
    assert rules_fired(result) == {"PLC110"}
    (finding,) = result.findings
    assert finding.field == "model.rope_theta"
