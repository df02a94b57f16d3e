"""Static memory by engine (training.framework): DeepSpeed ZeRO against DeepSpeed's own
estimators, FSDP2 and HSDP, offload to the host, and Megatron's numbers unchanged."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
import yaml

from planc.memory import rank_memory
from planc.memory.budget import RankMemory
from planc.memory.params import parameter_count
from planc.memory.terms import Term
from planc.plannable import Plannable
from planc.spec.load import load_text

from conftest import plannable_of

# --- DeepSpeed's estimators, written from DeepSpeed's source -------------------------------------
# deepspeed/runtime/zero/stage_1_and_2.py, estimate_zero2_model_states_mem_needs (DeepSpeed
# 0.19.8; the 2Ψ + 18Ψ/N form since PR #5099), with cpu_offload=False:
#     gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)
# deepspeed/runtime/zero/stage3.py, estimate_zero3_model_states_mem_needs, cpu_offload=False:
#     largest_layer_memory = 4 * largest_layer_params
#     gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)
# With offload_optimizer (cpu_offload=True): ZeRO-2 gpu_mem = 2 * total_params; ZeRO-3
# gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus), and with offload_param
# too, gpu_mem = largest_layer_memory.


def ds_zero2_gpu(total_params: int, total_gpus: int, offload: bool = False) -> int:
    if offload:
        return 2 * total_params
    return 2 * total_params + int(18 * total_params / total_gpus)


def ds_zero3_gpu(
    total_params: int,
    largest_layer_params: int,
    total_gpus: int,
    offload: bool = False,
    offload_params: bool = False,
) -> int:
    largest_layer_memory = 4 * largest_layer_params
    if offload and offload_params:
        return largest_layer_memory
    if offload:
        return largest_layer_memory + int(2 * total_params / total_gpus)
    return largest_layer_memory + int(18 * total_params / total_gpus)


# Hugging Face Llama 3 modules (LlamaForCausalLM): parameters of each module, non-recursive, as
# DeepSpeed's model_to_params walks them. h, n·k, g·k, f, V of the published configs.
LLAMA = {
    "llama3-8b": {"h": 4096, "kv": 1024, "f": 14336, "V": 128256, "L": 32},
    "llama3-70b": {"h": 8192, "kv": 1024, "f": 28672, "V": 128256, "L": 80},
}


def hf_modules(name: str) -> dict[str, int]:
    d = LLAMA[name]
    h, kv, f, V = d["h"], d["kv"], d["f"], d["V"]
    return {
        "embed_tokens": V * h,
        "q_proj": h * h,
        "k_proj": h * kv,
        "v_proj": h * kv,
        "o_proj": h * h,
        "gate_proj": h * f,
        "up_proj": h * f,
        "down_proj": f * h,
        "input_layernorm": h,
        "post_attention_layernorm": h,
        "norm": h,
        "lm_head": V * h,
    }


def hf_total(name: str) -> int:
    m, L = hf_modules(name), LLAMA[name]["L"]
    per_layer = sum(m[k] for k in m if k not in ("embed_tokens", "norm", "lm_head"))
    return L * per_layer + m["embed_tokens"] + m["norm"] + m["lm_head"]


def deepspeed_job(
    preset: str, gpus: int, zero: int, offload: dict[str, bool] | None = None, **extra: Any
) -> Plannable:
    spec = {
        "version": 1,
        "name": "ds",
        "model": {"preset": preset},
        "hardware": {"gpu": "h100-sxm", "nodes": gpus // 8},
        "parallelism": {"data": gpus, "zero_stage": zero, **extra.get("parallelism", {})},
        "training": {
            "seq_len": 4096,
            "global_batch": gpus,
            "framework": "deepspeed",
            "kernels": "unfused",
            "offload": offload or {},
            **extra.get("training", {}),
        },
    }
    loaded = load_text("ds.yaml", yaml.safe_dump(spec))
    assert loaded.job is not None, loaded.findings
    return plannable_of(loaded.job)


def same_terms(mem: RankMemory, zero: int) -> int:
    """planc's bytes of the terms DeepSpeed's estimator counts: every weight, gradient and
    optimizer term (but ZeRO-3's parameter partition, which the estimator leaves out), and at
    ZeRO-3 the gathered largest module and its gradient."""
    module = ("ZeRO-3 gathered module", "ZeRO-3 module gradient")

    def counted(t: Term) -> bool:
        if t.component == "weights":
            return zero < 3
        return t.component in ("gradients", "optimizer") or t.name.startswith(module)

    return sum(t.bytes for t in mem.terms if counted(t))


CASES = [(p, g, z) for p in ("llama3-8b", "llama3-70b") for g in (8, 64) for z in (2, 3)]


def test_hf_counts_equal_plancs_parameter_count() -> None:
    # The estimator's total_params and planc's Ψ are the same number before comparing bytes.
    for preset in LLAMA:
        job = deepspeed_job(preset, 8, 2)
        assert parameter_count(job.model).total == hf_total(preset)


@pytest.mark.parametrize(("preset", "gpus", "zero"), CASES)
def test_model_states_equal_deepspeeds_estimator(preset: str, gpus: int, zero: int) -> None:
    job = deepspeed_job(preset, gpus, zero)
    mem = rank_memory(job, 0)
    total = hf_total(preset)
    largest = max(hf_modules(preset).values())
    expected = ds_zero2_gpu(total, gpus) if zero == 2 else ds_zero3_gpu(total, largest, gpus)
    planc = same_terms(mem, zero)
    assert abs(planc - expected) / expected < 0.005, (planc, expected)
    # Exact up to the ceil of each of the five /N shards and int() of DeepSpeed's 18Ψ/N.
    assert abs(planc - expected) <= 18 + 5 * 4


@pytest.mark.parametrize(("preset", "gpus"), [("llama3-8b", 8), ("llama3-70b", 64)])
def test_offload_leaves_what_deepspeeds_estimator_leaves_on_the_gpu(preset: str, gpus: int) -> None:
    total, largest = hf_total(preset), max(hf_modules(preset).values())
    z2 = rank_memory(deepspeed_job(preset, gpus, 2, {"optimizer": True}), 0)
    assert z2.weights + z2.gradients + z2.optimizer == ds_zero2_gpu(total, gpus, offload=True)
    z3 = rank_memory(deepspeed_job(preset, gpus, 3, {"optimizer": True}), 0)
    z3_same = (
        z3.weights
        + z3.gradients
        + z3.optimizer
        + sum(
            t.bytes
            for t in z3.terms
            if t.name.startswith(("ZeRO-3 gathered module", "ZeRO-3 module"))
        )
    )
    assert abs(z3_same - ds_zero3_gpu(total, largest, gpus, offload=True)) <= 4
    both = rank_memory(deepspeed_job(preset, gpus, 3, {"optimizer": True, "parameters": True}), 0)
    assert both.weights + both.gradients + both.optimizer == 0
    # What left the GPU is on the host: 16 bytes per parameter shard, 18 with the parameters.
    assert abs(z2.host - 16 * total / gpus) <= 16
    assert abs(both.host - 18 * total / gpus) <= 18


def test_deepspeed_counts_what_its_estimator_leaves_out() -> None:
    mem = rank_memory(deepspeed_job("llama3-8b", 8, 3), 0)
    names = {t.name: t.bytes for t in mem.terms}
    psi = hf_total("llama3-8b")
    assert names["parameter partition (bf16)"] == 2 * -(-psi // 8)
    assert names["reduce bucket (bf16)"] == 2 * 500_000_000
    assert names["ZeRO-3 prefetched parameters (bf16)"] == 2 * 50_000_000


def test_deepspeed_zero1_keeps_whole_16bit_gradients() -> None:
    mem = rank_memory(deepspeed_job("llama3-8b", 8, 1), 0)
    psi = hf_total("llama3-8b")
    grads = {t.name: t.bytes for t in mem.terms if t.component == "gradients"}
    assert grads == {
        "gradient buffer (bf16)": 2 * psi,
        "fp32 gradient partition (optimizer step)": 4 * -(-psi // 8),
    }


@pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="deepspeed is not installed: the estimator formulas above are DeepSpeed's source",
)
@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize(("preset", "gpus", "zero"), CASES)
def test_real_deepspeed_estimators(preset: str, gpus: int, zero: int) -> None:
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    total, largest = hf_total(preset), max(hf_modules(preset).values())
    nodes = gpus // 8
    if zero == 2:
        _, gpu = estimate_zero2_model_states_mem_needs(total, 8, nodes, cpu_offload=False)
        assert gpu == ds_zero2_gpu(total, gpus)
    else:
        _, gpu, _ = estimate_zero3_model_states_mem_needs(
            total, largest, 8, nodes, cpu_offload=False, cpu_offload_params=False
        )
        assert gpu == ds_zero3_gpu(total, largest, gpus)
    planc = same_terms(rank_memory(deepspeed_job(preset, gpus, zero), 0), zero)
    assert abs(planc - gpu) / gpu < 0.005


# --- FSDP2 and HSDP ------------------------------------------------------------------------------


def fsdp_job(**overlay: dict[str, Any]) -> Plannable:
    spec: dict[str, Any] = {
        "version": 1,
        "name": "fsdp",
        "model": {"preset": "llama3-8b"},
        "hardware": {"gpu": "h100-sxm", "nodes": 2},
        "parallelism": {"data": 16},
        "training": {"seq_len": 4096, "global_batch": 16, "framework": "fsdp2"},
    }
    for key, value in overlay.items():
        spec[key] = {**spec[key], **value}
    loaded = load_text("fsdp.yaml", yaml.safe_dump(spec))
    assert loaded.job is not None, loaded.findings
    return plannable_of(loaded.job)


def test_fsdp2_static_state_by_hand() -> None:
    # Llama 3 8B over 16 ranks: fp32 sharded parameters and gradients, Adam m and v: 16Ψ/N.
    psi = hf_total("llama3-8b")
    shard = -(-psi // 16)
    mem = rank_memory(fsdp_job(), 0)
    assert (mem.weights, mem.gradients, mem.optimizer) == (4 * shard, 4 * shard, 8 * shard)
    # Buffers: the largest unit is the final norm with the LM head (torchtitan wraps them
    # together): V·h + h = 525,340,672, larger than a layer (218,112,000 + 2h) or the embedding.
    # Two gathered in bf16, its bf16 gradients and its fp32 reduce-scatter input.
    unit = 128256 * 4096 + 4096
    terms = {t.name: t.bytes for t in mem.terms if t.component == "buffers"}
    assert terms["gathered parameters, unit in use and prefetched (bf16)"] == 2 * 2 * unit
    assert terms["unsharded unit gradients (bf16)"] == 2 * unit
    assert terms["reduce-scatter input (fp32 reduce_dtype)"] == 4 * unit


def test_a_bf16_reduce_halves_the_reduce_scatter_input() -> None:
    # reduce_dtype bf16 (NeMo AutoModel's FSDP2Config default): the input foreach_reduce builds
    # in reduce_dtype holds 2 bytes per element of the largest unit; the sharded fp32
    # gradients stay fp32 (foreach_reduce casts the output to the sharded parameters' dtype).
    unit = 128256 * 4096 + 4096
    fp32 = rank_memory(fsdp_job(), 0)
    bf16 = rank_memory(fsdp_job(training={"reduce_dtype": "bf16"}), 0)
    terms = {t.name: t.bytes for t in bf16.terms if t.component == "buffers"}
    assert terms["reduce-scatter input (bf16 reduce_dtype)"] == 2 * unit
    assert bf16.gradients == fp32.gradients
    assert fp32.total - bf16.total == 2 * unit


def test_fsdp2_without_reshard_keeps_every_gathered_parameter() -> None:
    mem = rank_memory(fsdp_job(training={"reshard_after_forward": False}), 0)
    terms = {t.name: t.bytes for t in mem.terms}
    assert terms["gathered parameters, all units forward to backward (bf16)"] == 2 * hf_total(
        "llama3-8b"
    )


def test_hsdp_shards_over_data_shard() -> None:
    # 16 ranks, shards of 8 replicated twice: the static state of an 8-way shard.
    psi = hf_total("llama3-8b")
    hsdp = rank_memory(fsdp_job(parallelism={"data_shard": 8}), 0)
    assert hsdp.weights == 4 * -(-psi // 8)
    job = fsdp_job(parallelism={"data_shard": 8})
    assert (job.layout.shard_group, job.layout.replicas) == (8, 2)


def test_fsdp2_cpu_offload_moves_parameters_gradients_and_optimizer() -> None:
    base = rank_memory(fsdp_job(), 0)
    off = rank_memory(fsdp_job(training={"offload": {"parameters": True}}), 0)
    assert off.weights == off.gradients == off.optimizer == 0
    assert off.host == base.weights + base.gradients + base.optimizer
    assert off.buffers == base.buffers


# --- Megatron --------------------------------------------------------------------------------------


def test_megatron_optimizer_offload_moves_master_and_moments() -> None:
    base = rank_memory(
        fsdp_job(training={"framework": "megatron"}, parallelism={"zero_stage": 1}), 0
    )
    off = rank_memory(
        fsdp_job(
            training={"framework": "megatron", "offload": {"optimizer": True}},
            parallelism={"zero_stage": 1},
        ),
        0,
    )
    assert off.optimizer == 0 and off.host == base.optimizer
    assert off.total == base.total - base.optimizer
    # Megatron has no parameter offload: nothing moves.
    params = rank_memory(
        fsdp_job(training={"framework": "megatron", "offload": {"parameters": True}}), 0
    )
    assert params.host == 0


# --- the report names the stack -------------------------------------------------------------------


def test_report_names_the_modelled_stack_and_the_host_bytes() -> None:
    from planc.memory import budget
    from planc.outputs.memory import render_text, to_json

    job = fsdp_job(training={"kernels": "unfused", "offload": {"optimizer": True}})
    b = budget(job)
    text = render_text(job, b)
    assert "Modelled stack: framework fsdp2" in text and "kernels unfused" in text
    assert "offload: optimizer" in text and "ZeRO=3 (fully_shard)" in text
    assert "offloaded to host memory" in text and "Host memory per node" in text
    data = to_json(job, b)
    assert data["stack"] == {"framework": "fsdp2", "kernels": "unfused", "offload": ["optimizer"]}
    # 8 GPUs per node × the rank's Adam m and v shard (8 bytes per parameter over 16).
    assert data["host_bytes_per_node"] == 8 * 8 * -(-hf_total("llama3-8b") // 16)
    assert data["stages"][0]["host"] == b.peak.memory.host
