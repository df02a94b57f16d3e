"""Blackwell Ultra presets (`b300`, `gb300-nvl72`): the datasheets' capacities and peaks, and
efficiencies that are the B200's and GB200's (no measurement of Blackwell Ultra is published).

Expected values are the vendor numbers typed here from the datasheets (GB300 NVL72 rack: 20 TB
HBM3e and 1,080 / 360 / 180 PFLOPS dense FP4 / FP8 / BF16 over 72 GPUs; HGX B300: 108 PFLOPS
dense FP4 over 8 GPUs), not read back from gpus.json.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from planc.perf.inputs import efficiency_of, ep_processor_usage
from planc.plannable import Plannable
from planc.presets.efficiency import for_gpu, to_json
from planc.spec.load import load_text
from planc.vocab import DType

from conftest import plannable_of


def _job(gpu: str, nodes: int, **training: Any) -> Plannable:
    spec = {
        "version": 1,
        "name": "t",
        "model": {"preset": "qwen3-30b-a3b"},
        "hardware": {"gpu": gpu, "nodes": nodes},
        "parallelism": {
            "tensor": 1, "pipeline": 1, "expert": 8, "expert_tensor": 1,
            "expert_dispatcher": "hybridep", "pipeline_schedule": "combined-1f1b",
        },
        "training": {
            "seq_len": 4096, "micro_batch": 1, "global_batch": 64, "precision": "bf16",
            "recompute": "none", **training,
        },
    }
    loaded = load_text("t.yaml", yaml.safe_dump(spec))
    assert loaded.job is not None, loaded.findings
    return plannable_of(loaded.job)


@pytest.mark.parametrize(
    ("gpu", "nodes", "hbm_bytes", "per_node", "domain"),
    [("gb300-nvl72", 2, 279 * 10**9, 4, 72), ("b300", 1, 270 * 10**9, 8, 8)],
)
def test_capacity_and_layout_are_the_datasheets(
    gpu: str, nodes: int, hbm_bytes: int, per_node: int, domain: int
) -> None:
    hw = _job(gpu, nodes).cluster
    assert hw.gpu.memory_bytes == hbm_bytes
    assert hw.gpus_per_node == per_node
    assert hw.nvlink_domain == domain  # the preset's domain, whatever the job's size


def test_peaks_are_the_datasheets() -> None:
    gb300 = _job("gb300-nvl72", 2).cluster.gpu.peaks
    assert [gb300[d] for d in (DType.BF16, DType.FP8, DType.FP4)] == [
        180e3 / 72, 360e3 / 72, 1080e3 / 72
    ]
    b300 = _job("b300", 1).cluster.gpu.peaks
    assert b300[DType.FP4] == 108e3 / 8
    # As the B200's: Blackwell Ultra adds FP4 throughput only.
    assert (b300[DType.BF16], b300[DType.FP8]) == (2250, 4500)


@pytest.mark.parametrize(("ultra", "base"), [("gb300-nvl72", "gb200-nvl72"), ("b300", "b200")])
def test_the_efficiencies_are_the_base_gpus_but_the_sm_count(ultra: str, base: str) -> None:
    mine, theirs = to_json(for_gpu(ultra)), to_json(for_gpu(base))
    for section in ("gemm", "hbm", "vector", "flash_attention"):
        numbers = {k: v for k, v in mine[section].items() if k not in ("source", "sms")}
        assert numbers == {k: v for k, v in theirs[section].items() if k not in ("source", "sms")}
    assert mine["gemm"]["sms"] == 160
    for link in ("nvlink", "network"):
        assert mine["network"][link]["efficiency"] == theirs["network"][link]["efficiency"]


def test_hybridep_on_gb300_holds_32_of_its_160_sms() -> None:
    job = _job("gb300-nvl72", 2)
    assert ep_processor_usage(job, efficiency_of(job)) == pytest.approx(32 / 160)
