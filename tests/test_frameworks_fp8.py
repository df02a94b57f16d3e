"""FP8/FP4 in the framework files: Megatron-LM's arguments, torchtitan's model converters and
DeepSpeed's note, read back by the frameworks where their interpreters are installed
(PLANC_MEGATRON_PYTHON, PLANC_TORCHTITAN_PYTHON; see tests/test_frameworks.py)."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
from test_frameworks import MEGATRON_PARSE, _interpreter, _run, flags

from planc.compile import render_files

from conftest import compiled, job_of

FP8_CASES: dict[str, dict[str, Any]] = {
    "current-param-gather-bf16-ends": {
        "parallelism": {"tensor": 2, "pipeline": 2, "zero_stage": 1},
        "training": {
            "precision": "fp8",
            "fp8": {"recipe": "current", "param_gather": True, "first_last_bf16": 1, "moments": "bf16"},
        },
    },
    "delayed": {"training": {"precision": "fp8"}},
    "blockwise": {"training": {"precision": "fp8", "fp8": {"recipe": "blockwise"}}},
    "mxfp8-b200": {
        "hardware": {"gpu": "b200"},
        "training": {
            "precision": "fp8",
            "fp8": {"recipe": "mxfp8", "param_gather": True, "output_proj": True},
        },
    },
}


@cache
def files(case: str) -> dict[str, str]:
    return render_files(compiled(job_of(FP8_CASES[case])))


def test_megatron_flags_carry_the_recipe() -> None:
    args = flags(files("current-param-gather-bf16-ends")["megatron/args.txt"])
    assert "--bf16" in args and "--fp8" not in args
    assert args["--fp8-format"] == "hybrid" and args["--fp8-recipe"] == "tensorwise"
    assert "--fp8-param-gather" in args and "--first-last-layers-bf16" in args
    assert args["--num-layers-at-start-in-bf16"] == args["--num-layers-at-end-in-bf16"] == "1"
    assert "--use-precision-aware-optimizer" in args
    assert args["--exp-avg-dtype"] == args["--exp-avg-sq-dtype"] == "bf16"
    assert flags(files("delayed")["megatron/args.txt"])["--fp8-recipe"] == "delayed"
    mx = flags(files("mxfp8-b200")["megatron/args.txt"])
    assert mx["--fp8-recipe"] == "mxfp8" and mx["--fp8-format"] == "e4m3"
    assert "--reuse-grad-buf-for-mxfp8-param-ag" in mx
    assert "--fp8-output-proj" in mx and "--fp8-output-proj" not in flags(files("delayed")["megatron/args.txt"])


def test_megatron_parser_accepts_the_fp8_arguments() -> None:
    python = _interpreter("PLANC_MEGATRON_PYTHON", "megatron.training.arguments")
    if python is None:
        pytest.skip("megatron.training.arguments is not importable (see tests/test_frameworks.py)")
    payload = {}
    for case in FP8_CASES:
        plan = json.loads(files(case)["plan.json"])
        payload[case] = [files(case)["megatron/args.txt"].splitlines(), plan["world_size"], plan["model"]["vocab"]]
    parsed = _run(python, MEGATRON_PARSE, payload)
    got = parsed["current-param-gather-bf16-ends"]
    assert got["fp8"] == "hybrid" and got["fp8_recipe"] == "tensorwise"
    assert got["fp8_param_gather"] and got["first_last_layers_bf16"]
    assert got["num_layers_at_start_in_bf16"] == 1 and got["bf16"]
    assert got["use_precision_aware_optimizer"]
    assert parsed["blockwise"]["fp8_recipe"] == "blockwise"
    assert parsed["mxfp8-b200"]["reuse_grad_buf_for_mxfp8_param_ag"]
    # TransformerConfig.fp8_output_proj, the flag arguments.py's ArgumentGroupFactory generates
    assert parsed["mxfp8-b200"]["fp8_output_proj"] and not parsed["delayed"]["fp8_output_proj"]


def test_deepspeed_trains_bf16_and_says_fp8_is_the_model_code() -> None:
    config = json.loads(files("delayed")["deepspeed/ds_config.json"])
    assert config["bf16"] == {"enabled": True}
    assert "fp8_autocast" in files("delayed")["deepspeed/README.md"]


def torchtitan_case(recipe: str, gpu: str = "h100-sxm") -> dict[str, str]:
    return render_files(
        compiled(
            job_of(
                {
                    "hardware": {"gpu": gpu},
                    "training": {"precision": "fp8", "framework": "fsdp2", "fp8": {"recipe": recipe}},
                }
            )
        )
    )


def test_torchtitan_gets_the_converter_of_its_recipe() -> None:
    module = torchtitan_case("rowwise")["torchtitan/planc_config.py"]
    assert "Float8LinearConverter" in module and '"recipe_name": "rowwise"' in module
    assert "MXFP8LinearConverter" in torchtitan_case("mxfp8", "b200")["torchtitan/planc_config.py"]
    # torchtitan 0.3.0 has no tensorwise converter: none is applied, and the module says so
    tensorwise = torchtitan_case("tensorwise")["torchtitan/planc_config.py"]
    assert "CONVERTERS" not in tensorwise and "no converter is applied" in tensorwise


TORCHTITAN_CONVERTERS = """
import importlib, json, sys
sys.path.insert(0, ".")
out = {}
for module in json.load(sys.stdin):
    planc = importlib.import_module(module)
    for path, fields in planc.CONVERTERS:
        name, _, cls = path.partition(":")
        converter = getattr(importlib.import_module(name), cls)
        config = converter.Config(**fields)  # build() needs an SM89+ GPU
        out[module] = {key: getattr(config, key) for key in fields}
print(json.dumps(out))
"""


def test_torchtitan_knows_the_converters(tmp_path: Any) -> None:
    python = _interpreter("PLANC_TORCHTITAN_PYTHON", "torchtitan.components.quantization.float8")
    if python is None:
        pytest.skip("torchtitan is not importable (see tests/test_frameworks.py)")
    cases = {"planc_rowwise": ("rowwise", "h100-sxm"), "planc_mxfp8": ("mxfp8", "b200")}
    for module, (recipe, gpu) in cases.items():
        (tmp_path / f"{module}.py").write_text(torchtitan_case(recipe, gpu)["torchtitan/planc_config.py"])
    got = _run(python, TORCHTITAN_CONVERTERS, list(cases), tmp_path)
    assert got["planc_rowwise"] == {"recipe_name": "rowwise", "filter_fqns": ["output"]}
    assert got["planc_mxfp8"] == {"fqns": ["layers"]}
