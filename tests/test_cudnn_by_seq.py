"""cuDNN's fused attention on Blackwell, priced by sequence length as NVIDIA measured it.

NVIDIA's cudnn-frontend SDPA training benchmark on a GB200 (d48a60eb,
benchmark/sdpa_benchmark_training/artifacts/sdpa_bf16_benchmark_results_NVIDIA_GB200.csv, backend
cudnn_fe; BF16, causal, batch 1, 128 query and 8 key/value heads of 128 channels) times the
forward and backward at each length. The milliseconds below are typed from that file; the
expected seconds of planc's op are the benchmark's, not planc's own output.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from planc.perf.compute import Device, cudnn_fraction, work_time_s
from planc.perf.ops import GemmShape, OpShape, flash_attention
from planc.presets.efficiency import for_gpu, from_json, to_json
from planc.vocab import DType

ROOT = Path(__file__).resolve().parent.parent
# s: (forward ms, backward ms) on the GB200, cudnn_fe
GB200_MS = {2048: (0.129, 0.525), 4096: (0.397, 1.304), 8192: (1.389, 4.542), 16384: (5.273, 16.863)}
GB200_BF16 = 2500e12


def _shape(s: int, c: int = 1) -> OpShape:
    """The benchmark's problem as planc's op shape: 128 heads, 8 K/V heads, 128 channels, b 1,
    causal, on cuDNN's kernel (c context ranks: s/c queries over s keys)."""
    return OpShape(
        b=1, s=s, s_c=s // c, s_r=s // c, h=16384, n=128, g=8, k=128, f=1, vocab=128,
        flash=True, cudnn=True,
    )


@pytest.mark.parametrize("s", sorted(GB200_MS))
def test_attention_is_priced_at_the_measured_times(s: int) -> None:
    op = flash_attention(_shape(s))
    eff, device = for_gpu("gb200-nvl72"), Device(GB200_BF16, 8e12, DType.BF16)
    forward_ms, backward_ms = GB200_MS[s]
    # the table holds TFLOPS rounded to a unit and fractions to 1e-4: 0.5 % covers both
    assert work_time_s(op, op.forward, device, eff) == pytest.approx(forward_ms * 1e-3, rel=5e-3)
    assert work_time_s(op, op.backward, device, eff, True) == pytest.approx(
        backward_ms * 1e-3, rel=5e-3
    )


def test_between_lengths_the_fraction_is_interpolated_in_log_s() -> None:
    eff = for_gpu("gb200-nvl72")
    rows = {s: (f, b) for s, f, b in eff.cudnn_by_seq}
    at = 4096 * math.sqrt(2)  # halfway between 4k and 8k in log2
    middle = cudnn_fraction(eff, False, GemmShape(round(at), round(at), 128))
    assert middle == pytest.approx((rows[4096][0] + rows[8192][0]) / 2, rel=1e-3)
    # beyond the table's ends, its end points
    assert cudnn_fraction(eff, True, GemmShape(64, 64, 128)) == eff.cudnn_by_seq[0][2]
    assert cudnn_fraction(eff, False, GemmShape(1 << 20, 1 << 20, 128)) == eff.cudnn_by_seq[-1][1]


def test_a_context_parallel_block_counts_as_its_square_causal_equivalent() -> None:
    # s/c queries over s keys execute the score tiles of a √(s²/c) square: at c = 4 and 16k,
    # the 8k fraction.
    eff = for_gpu("gb200-nvl72")
    op = flash_attention(_shape(16384, 4))
    assert op.shape is not None
    assert cudnn_fraction(eff, False, op.shape) == pytest.approx(
        {s: f for s, f, _ in eff.cudnn_by_seq}[8192]
    )


def test_gpus_without_a_table_keep_their_constant() -> None:
    eff = for_gpu("h100-sxm")
    assert eff.cudnn_by_seq == ()
    assert cudnn_fraction(eff, False, GemmShape(4096, 4096, 128)) == eff.cudnn_forward
    assert cudnn_fraction(eff, True, GemmShape(4096, 4096, 128)) == eff.cudnn_backward


def _entry() -> dict[str, object]:
    data = json.loads((ROOT / "planc" / "presets" / "efficiency.json").read_text("utf-8"))
    entry: dict[str, object] = data["gb200-nvl72"]
    return entry


def test_the_table_round_trips_through_a_calibration_file() -> None:
    eff = for_gpu("gb200-nvl72")
    assert from_json(to_json(eff)).cudnn_by_seq == eff.cudnn_by_seq


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({"seq": [4096, 2048], "forward": [0.5, 0.6], "backward": [0.4, 0.5]}, "ascending"),
        ({"seq": [2048, 4096], "forward": [0.5], "backward": [0.4, 0.5]}, "one length"),
        ({"seq": [2048], "forward": [0.5], "backward": [0.4]}, "at least two"),
        ({"seq": [2048.5, 4096], "forward": [0.5, 0.6], "backward": [0.4, 0.5]}, "whole"),
        ({"seq": [2048, 4096], "forward": [0.5, 1.6], "backward": [0.4, 0.5]}, "forward"),
        ({"seq": [2048, 4096], "forward": [0.5, 0.6]}, "one length"),
    ],
)
def test_a_malformed_table_is_refused_by_name(table: dict[str, object], words: str) -> None:
    entry = copy.deepcopy(_entry())
    flash = entry["flash_attention"]
    assert isinstance(flash, dict)
    flash["cudnn_by_seq"] = table
    with pytest.raises(ValueError, match="cudnn_by_seq") as caught:
        from_json(entry)
    assert words in str(caught.value)


def test_flash_attention_2_runs_at_its_measured_blackwell_rate() -> None:
    # PyTorch's SDPA flash backend (torchtitan's attention: kernels compiled) on the GB200 at
    # 8,192 tokens, the same file's pyt_flash_attention row: 5.308 ms forward, 16.249 backward.
    op = flash_attention(replace(_shape(8192), cudnn=False, compiled=True))
    eff, device = for_gpu("gb200-nvl72"), Device(GB200_BF16, 8e12, DType.BF16)
    assert op.engine == "sdpa"
    assert work_time_s(op, op.forward, device, eff) == pytest.approx(5.308e-3, rel=5e-3)
    assert work_time_s(op, op.backward, device, eff, True) == pytest.approx(16.249e-3, rel=5e-3)


# The same benchmark on a GB300 at the GB200 table's commit and cuDNN (d48a60eb, cuDNN 9.17,
# sdpa_fp8_benchmark_results_NVIDIA_GB300.csv, its bf16 rows: cuDNN's frontend graph, what
# Transformer Engine runs), milliseconds forward and backward typed from the file.
GB300_MS = {
    4096: (0.327, 1.238),
    8192: (1.158, 4.253),
    16384: (4.453, 15.717),
    32768: (17.538, 61.182),
}
# the GB200's bf16 rows in the same commit's sdpa_fp8_benchmark_results_NVIDIA_GB200.csv
GB200_SAME_RUN_MS = {4096: 0.399, 8192: 1.389, 16384: 5.257, 32768: 20.855}


@pytest.mark.parametrize("s", sorted(GB300_MS))
def test_blackwell_ultra_attention_is_priced_at_its_own_measured_times(s: int) -> None:
    # Blackwell Ultra's doubled softmax exponent rate shows in cuDNN's kernel: its own rows,
    # not the GB200's fractions (which it ran 14 to 24 % faster than, forward).
    op = flash_attention(_shape(s))
    eff, device = for_gpu("gb300-nvl72"), Device(2500e12, 8e12, DType.BF16)
    forward_ms, backward_ms = GB300_MS[s]
    # the table's TFLOPS are the file's, rounded to a unit; the milliseconds to a microsecond
    assert work_time_s(op, op.forward, device, eff) == pytest.approx(forward_ms * 1e-3, rel=5e-3)
    assert work_time_s(op, op.backward, device, eff, True) == pytest.approx(
        backward_ms * 1e-3, rel=5e-3
    )
    assert forward_ms < GB200_SAME_RUN_MS[s] / 1.15
