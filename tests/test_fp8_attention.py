"""FP8 attention (training.fp8.attention): Transformer Engine's fp8_dpa on cuDNN's FusedAttention.

What is checked, each against an independent source:
- the kernel's speed over cuDNN's BF16 kernel is NVIDIA's cudnn-frontend measurement (the TFLOPS
  of benchmark/sdpa_benchmark_training/results/llama3.1/gb200/llama3.1_20260724_040930.csv at
  e99b0d0b and the H200 file of afa9f7c0, copied here from the CSVs, not from planc's tables);
- the cast kernels' bytes and the saved Q, K, V, O are worked by hand from Llama 3 8B's heads
  (32 query, 8 key/value, 128 channels) after TE 2.18's FusedAttnFunc (attention/
  dot_product_attention/backends.py): per-tensor recipes concatenate Q, K, V and cast them once,
  MXFP8 casts each along both dimensions, delayed scaling writes O in FP8;
- the refusals quote Transformer Engine's and Megatron-Core's own reasons.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planc.analysis import analyse
from planc.comm.schedule import CommOp
from planc.compile import compile_job
from planc.compile.frameworks import megatron_files
from planc.compile.plan import plan_json, quantized_record
from planc.dims import attention_quant
from planc.memory.activations import key, query, shape_of, value
from planc.memory.budget import rank_memory
from planc.perf.compute import work_time_s
from planc.perf.inputs import device_of, efficiency_of, layer_shape
from planc.perf.ops import OpCost, fp8_attention, layer_ops
from planc.plannable import Plannable
from planc.presets.efficiency import for_gpu
from planc.verify import render, verify_text
from planc.vocab import Fp8Recipe

from conftest import check_overlay, compiled, job_of, resolved_of, rules_fired

N, G, K = 32, 8, 128  # Llama 3 8B's query heads, key/value heads, channels per head

# cudnn-frontend e99b0d0b, GB200, Llama 3.1 shape, causal, non-deterministic backward: TFLOPS
# at 2k, 4k, 8k, 16k, 32k tokens.
GB200_BF16 = ((1098, 1407, 1646, 1728, 1569), (899, 1172, 1344, 1327, 1202))
GB200_FP8 = ((1427, 1781, 2012, 2112, 2135), (825, 1178, 1446, 1633, 1670))
GB200_MXFP8 = ((1355, 1715, 1955, 2063, 2080), (737, 1032, 1268, 1403, 1398))
# cudnn-frontend afa9f7c0, H200, cuDNN 9.19.1, causal: BF16 and FP8 TFLOPS, same lengths.
H200_BF16 = ((484, 591, 644, 673, 688), (370, 474, 541, 579, 581))
H200_FP8 = ((698, 854, 964, 1010, 1042), (393, 471, 430, 374, 370))
SEQ = (2048, 4096, 8192, 16384, 32768)


def _gb200(training: dict[str, Any] | None = None, **overlay: Any) -> Plannable:
    spec: dict[str, Any] = {
        "hardware": {"gpu": "gb200-nvl72", "nodes": 2, "hosts": ["a", "b"]},
        "parallelism": {"tensor": 1, "sequence_parallel": False},
        "training": {
            "precision": "fp8",
            "recompute": "none",
            "fp8": {"recipe": "current", "attention": "current"},
            **(training or {}),
        },
    }
    spec.update(overlay)
    return job_of(spec)


def _attention(job: Plannable) -> tuple[OpCost, ...]:
    q = job.numerics.quantized
    assert q is not None and q.attention is not None
    shape = layer_shape(job)
    (flash,) = [op for op in layer_ops(shape) if op.engine == "cudnn"]
    return fp8_attention(flash, shape, q.attention)


def _kernel_times(job: Plannable, engine: str) -> tuple[float, float]:
    ops = _attention(job) if engine != "cudnn" else layer_ops(layer_shape(job))
    (op,) = [op for op in ops if op.engine == engine]
    device, eff = device_of(job), efficiency_of(job)
    return (
        work_time_s(op, op.forward, device, eff),
        work_time_s(op, op.backward_data, device, eff, True, op.data_gemm),
    )


@pytest.mark.parametrize("i", range(len(SEQ)))
@pytest.mark.parametrize(
    ("recipe", "engine", "measured"),
    [("current", "cudnn-fp8", GB200_FP8), ("mxfp8", "cudnn-mxfp8", GB200_MXFP8)],
)
def test_the_kernel_runs_at_the_measured_speed_up_over_bf16(
    i: int, recipe: str, engine: str, measured: tuple[tuple[int, ...], ...]
) -> None:
    job = _gb200(
        {"seq_len": SEQ[i], "fp8": {"recipe": "mxfp8", "attention": recipe}},
    )
    bf16_f, bf16_b = _kernel_times(job, "cudnn")
    fp8_f, fp8_b = _kernel_times(job, engine)
    assert bf16_f / fp8_f == pytest.approx(measured[0][i] / GB200_BF16[0][i], rel=2e-3)
    assert bf16_b / fp8_b == pytest.approx(measured[1][i] / GB200_BF16[1][i], rel=2e-3)


def test_hopper_s_fp8_backward_is_slower_than_bf16_at_long_sequences() -> None:
    # H200's cuDNN 9.19.1 rows: the causal FP8 backward takes 1.57 times BF16's at 32k.
    tables = for_gpu("h100-sxm")
    (row,) = [r for r in tables.cudnn_fp8_by_seq if r[0] == 32768]
    assert row[1] == pytest.approx(H200_FP8[0][4] / H200_BF16[0][4], rel=2e-3)
    assert row[2] == pytest.approx(H200_FP8[1][4] / H200_BF16[1][4], rel=2e-3)
    assert row[2] < 1.0


# The attention's element-wise kernels: Transformer Engine's casts, and the concatenation of
# per-tensor recipes, a plain copy on the HBM curve.
CASTS = ("te-cast", "vector")


def test_per_tensor_casts_concatenate_q_k_v_and_cast_them_once() -> None:
    job = _gb200({"fp8": {"recipe": "delayed", "attention": "delayed"}})
    ops = _attention(job)
    shape = layer_shape(job)
    qkv = shape.tokens * (N * K + G * 2 * K)
    o = shape.tokens * N * K
    forward = [op.forward.bytes for op in ops if op.engine in CASTS and op.forward.bytes]
    # concatenation (read and write 2 bytes), one cast (read 2, write 1), O dequantized (1 → 2)
    assert forward == pytest.approx([4 * qkv, 3 * qkv, 3 * o])
    backward = [op.backward.bytes for op in ops if op.engine in CASTS and op.backward.bytes]
    # dO cast (read 2, write 1), then dQ, dK, dV dequantized from the kernel's FP8 (1 → 2)
    assert backward == pytest.approx([3 * o, 3 * qkv])
    # the concatenation is a copy; the casts are Transformer Engine's, at their measured rate
    engines = [op.engine for op in ops if op.engine in CASTS]
    assert engines == ["vector", "te-cast", "te-cast", "te-cast", "te-cast"]
    assert all(op.attention_core for op in ops)


def test_current_scaling_reads_twice_and_keeps_o_in_16_bits() -> None:
    ops = _attention(_gb200())
    shape = layer_shape(_gb200())
    qkv = shape.tokens * (N * K + G * 2 * K)
    forward = [op.forward.bytes for op in ops if op.engine in CASTS and op.forward.bytes]
    assert forward == pytest.approx([4 * qkv, 2 * qkv, 3 * qkv])  # concat, amax, cast


def test_mxfp8_casts_each_tensor_in_both_directions() -> None:
    job = _gb200({"fp8": {"recipe": "mxfp8", "attention": "mxfp8"}})
    ops = _attention(job)
    shape = layer_shape(job)
    qkv = shape.tokens * (N * K + G * 2 * K)
    forward = [op.forward.bytes for op in ops if op.engine in CASTS and op.forward.bytes]
    # no concatenation: read 2 bytes, write two copies of 1 + 1/32 bytes
    assert forward == pytest.approx([qkv * (2 + 2 * (1 + 1 / 32))])


def test_saved_q_k_v_in_fp8_unless_the_core_is_recomputed() -> None:
    s, b = 8192, 1
    bf16 = shape_of(_gb200({"fp8": {"recipe": "delayed"}}))
    fp8 = shape_of(_gb200({"fp8": {"recipe": "delayed", "attention": "delayed"}}))
    assert query(bf16) == 2 * s * b * N * K
    assert query(fp8) == s * b * N * K
    assert key(fp8) == s * b * G * K and value(fp8) == s * b * G * K
    mx = shape_of(_gb200({"fp8": {"recipe": "mxfp8", "attention": "mxfp8"}}))
    elements = s * b * N * K
    assert query(mx) == 2 * (elements + elements // 32)  # two directions, E8M0 scale per 32
    selective = shape_of(
        _gb200({"recompute": "selective", "fp8": {"recipe": "delayed", "attention": "delayed"}})
    )
    assert query(selective) == 2 * s * b * N * K  # the checkpoint keeps the core's bf16 inputs


def test_delayed_scaling_saves_o_in_fp8() -> None:
    job = _gb200({"fp8": {"recipe": "delayed", "attention": "delayed"}})
    x = shape_of(job)
    assert x.a_out_fp8
    current = shape_of(_gb200())
    assert not current.a_out_fp8


def test_a_gb200_spec_with_fp8_attention_is_clean() -> None:
    assert "PLC044" not in rules_fired(check_overlay(_spec()))


def _spec(**training: Any) -> dict[str, Any]:
    return {
        "hardware": {"gpu": "gb200-nvl72", "nodes": 2, "hosts": ["a", "b"]},
        "training": {
            "precision": "fp8",
            "fp8": {"recipe": "mxfp8", "attention": "mxfp8"},
            **training,
        },
    }


@pytest.mark.parametrize(
    ("overlay", "words"),
    [
        ({"training": {"framework": "fsdp2", "fp8": {"recipe": "mxfp8", "attention": "mxfp8"}}},
         "quantizes the linear layers only"),
        ({"training": {"attention": "eager"}}, "No dot product attention backend"),
        ({"training": {"attention_backend": "flash"}}, "Disabling FlashAttention 2"),
        ({"training": {"fp8": {"recipe": "blockwise", "attention": "delayed"}}},
         "not supported for Float8BlockScaling"),
        ({"hardware": {"gpu": "h100-sxm", "nodes": 1, "hosts": ["a"]},
          "training": {"fp8": {"recipe": "current", "attention": "current"}}}, "arch < sm100"),
        ({"model": {"preset": "llama3-8b", "head_dim": 256, "heads": 16}}, "Q/K 256"),
        ({"training": {"seq_len": 8000}}, "s_q % 128 == 0"),
    ],
)
def test_refusals_quote_the_frameworks(overlay: dict[str, Any], words: str) -> None:
    spec = _spec()
    for section, values in overlay.items():
        spec[section] = {**spec.get(section, {}), **values}
    result = check_overlay(spec)
    messages = [f.message for f in result.findings if f.rule == "PLC044"]
    assert any(words in m for m in messages), messages


def test_hopper_runs_delayed_fp8_attention_at_head_dim_128() -> None:
    spec = {
        "hardware": {"gpu": "h100-sxm", "nodes": 1, "hosts": ["a"]},
        "training": {"precision": "fp8", "fp8": {"recipe": "delayed", "attention": "delayed"}},
    }
    assert "PLC044" not in rules_fired(check_overlay(spec))


def test_megatron_notes_the_config_field_and_a_different_recipe_s_variable() -> None:
    same = compiled(job_of(_spec()))
    readme = megatron_files(same)["megatron/README.md"]
    assert "fp8_dot_product_attention: true" in readme
    assert "NVTE_DPA_FP8_RECIPE" not in readme
    other = compiled(job_of(_spec(fp8={"recipe": "mxfp8", "attention": "current"})))
    readme = megatron_files(other)["megatron/README.md"]
    assert "export NVTE_DPA_FP8_RECIPE=Float8CurrentScaling" in readme
    record: Any = quantized_record(other)["quantized"]
    assert record["attention"] == "current"
    plain: Any = quantized_record(compiled(job_of(_spec(fp8={"recipe": "mxfp8"}))))["quantized"]
    assert "attention" not in plain


def test_the_attention_recipe_is_read_only_under_fp8() -> None:
    # training.fp8 under bf16 states no FP8 attention, and check says the section is ignored
    overlay = {"training": {"precision": "bf16", "fp8": {"attention": "delayed"}}}
    assert resolved_of(overlay).training.fp8_attention is None
    assert job_of(overlay).numerics.quantized is None
    assert "PLC044" in rules_fired(check_overlay(overlay))
    # delayed scaling writes O in FP8; current scaling and MXFP8 keep it 16-bit
    formats = {r: attention_quant(Fp8Recipe(r)) for r in ("delayed", "current", "mxfp8")}
    assert [f is not None and f.output_fp8 for f in formats.values()] == [True, False, False]


# --- context parallelism: TE's AttnFuncWithCPAndKVP2P with fp8 (context_parallel.py, TE 2.18) ---

S, C, B = 32768, 4, 1
KV_BLOCK = B * (S // C) * G * (K + K)  # elements of one rank's K and V


def _cp(recipe: str | None, recompute: str = "selective") -> Plannable:
    fp8: dict[str, Any] = {"recipe": "current" if recipe != "mxfp8" else "mxfp8"}
    if recipe is not None:
        fp8["attention"] = recipe
    return job_of(
        {
            "hardware": {"gpu": "gb200-nvl72", "nodes": 2, "hosts": ["a", "b"]},
            "parallelism": {"tensor": 1, "context": C, "sequence_parallel": False},
            "training": {
                "seq_len": S, "global_batch": 16, "precision": "fp8", "fp8": fp8,
                "recompute": recompute,
            },
        }
    )


def _cp_ops(job: Plannable) -> list[CommOp]:
    return [op for op in analyse(job).ops if op.group == "cp" and op.stage == 0]


@pytest.mark.parametrize(("recipe", "kv_bytes"), [("current", 1), ("delayed", 1), ("mxfp8", 2)])
def test_the_ring_passes_fp8_k_v_and_returns_dk_dv_in_one_fp8_all_to_all(
    recipe: str, kv_bytes: int
) -> None:
    job = _cp(recipe)
    ring, a2a = _cp_ops(job)
    layers_m = 32 * job.m
    # forward, the recomputed forward (selective core_attn) and backward's K/V: 3 passes of c − 1
    assert (ring.op.value, ring.calls, ring.buffer_bytes) == (
        "send_recv", 3 * (C - 1) * layers_m, KV_BLOCK * kv_bytes
    )
    assert (a2a.op.value, a2a.calls, a2a.buffer_bytes) == ("all_to_all", layers_m, C * KV_BLOCK)


def test_sixteen_bit_attention_keeps_the_ring_s_dk_dv_pass() -> None:
    (ring,) = _cp_ops(_cp(None))
    assert ring.calls == 4 * (C - 1) * 32 * _cp(None).m  # + the dK/dV pass
    assert ring.buffer_bytes == 2 * KV_BLOCK


@pytest.mark.parametrize("recipe", ["current", "mxfp8"])
def test_the_compiled_cp_plan_verifies_and_its_recount_sees_a_wrong_size(recipe: str) -> None:
    data = json.loads(plan_json(compile_job(analyse(_cp(recipe)))))
    result = verify_text(json.dumps(data))
    assert result.ok, render(result)
    a2a = next(o for o in data["communication"]["ops"] if o["op"] == "all_to_all")
    a2a["buffer_bytes"] += 1
    assert not verify_text(json.dumps(data)).ok


@pytest.mark.parametrize(
    ("recipe", "reduce"),
    [
        ("delayed", C * B * (S // C) * N * K),  # dQ per step in FP8
        ("current", 4 * (B * (S // C) * N * K + KV_BLOCK)),  # fp32 dQ and dK/dV accumulators
    ],
)
def test_the_ring_backward_holds_its_fp8_dk_dv_buffers(recipe: str, reduce: int) -> None:
    terms = rank_memory(_cp(recipe), 0).terms
    (term,) = [t for t in terms if t.name.startswith("context-parallel FP8 dK/dV")]
    assert term.bytes == 2 * C * KV_BLOCK + reduce  # dkv send and receive, [c, *kv] uint8
    assert not [t for t in rank_memory(_cp(None), 0).terms if "FP8 dK/dV" in t.name]


# --- invariants over shapes ---------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    recipe=st.sampled_from(["delayed", "current", "mxfp8"]),
    seq=st.sampled_from([1024, 2048, 4096, 8192, 16384, 65536]),
    heads=st.sampled_from([(32, 8), (32, 32), (64, 8), (16, 4)]),
    batch=st.integers(1, 4),
)
def test_fp8_attention_keeps_the_flops_and_its_casts_move_only_bytes(
    recipe: str, seq: int, heads: tuple[int, int], batch: int
) -> None:
    n, g = heads
    shape = replace(layer_shape(_gb200()), s=seq, s_c=seq, s_r=seq, b=batch, n=n, g=g)
    (flash,) = [op for op in layer_ops(shape) if op.engine == "cudnn"]
    a = attention_quant(Fp8Recipe(recipe))
    assert a is not None
    ops = fp8_attention(flash, shape, a)
    (kernel,) = [op for op in ops if op.engine not in CASTS]
    # the kernel executes the 16-bit kernel's FLOPs, reading fewer bytes
    assert kernel.forward.flops == flash.forward.flops
    assert kernel.backward.flops == flash.backward.flops
    assert kernel.forward.bytes < flash.forward.bytes
    # each cast reads every 16-bit element at least once and does a few FLOPs an element
    casts = [op for op in ops if op.engine in CASTS]
    assert casts and all(op.attention_core for op in ops)
    assert all(
        w.flops <= 2 * w.bytes for op in casts for w in (op.forward, op.backward) if w.bytes
    )


# cudnn-frontend e99b0d0b, GB300, DeepSeek-V3's latent attention (128 heads, q/k 192, v 128),
# causal: TFLOPS at 2k-32k.
GB300_MLA_BF16 = ((1359, 1693, 1937, 2059, 2023), (923, 1157, 1274, 1316, 1304))
GB300_MLA_MXFP8 = ((2094, 2544, 2871, 3025, 3061), (1162, 1558, 1854, 2002, 1988))


@pytest.mark.parametrize("i", [1, 2])
def test_latent_attention_takes_the_speed_up_measured_at_its_head_dimension(i: int) -> None:
    job = job_of(
        {
            "model": {"preset": "deepseek-v3"},
            "hardware": {"gpu": "gb300-nvl72", "nodes": 2, "hosts": ["a", "b"]},
            "parallelism": {"tensor": 1, "expert": 8, "order": "tp-cp-ep-dp-pp"},
            "training": {
                "seq_len": SEQ[i], "precision": "fp8", "recompute": "none",
                "fp8": {"recipe": "mxfp8", "attention": "mxfp8"},
            },
        }
    )
    bf16_f, bf16_b = _kernel_times(job, "cudnn")
    fp8_f, fp8_b = _kernel_times(job, "cudnn-mxfp8")
    assert bf16_f / fp8_f == pytest.approx(GB300_MLA_MXFP8[0][i] / GB300_MLA_BF16[0][i], rel=2e-3)
    assert bf16_b / fp8_b == pytest.approx(GB300_MLA_MXFP8[1][i] / GB300_MLA_BF16[1][i], rel=2e-3)
