"""HybridEP inside one GB200 NVL72 domain: its measured rates by group size and its SMs.

Expected values come from DeepEP's hybrid-ep README table ('GB200 Platform', Torch API,
32 SMs, BF16 dispatch) as planc/presets/efficiency.json copies it, worked by hand here.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from planc.analysis import analyse
from planc.perf.inputs import call_time_s, efficiency_of, ep_processor_usage
from planc.presets.efficiency import KernelRate, for_gpu, from_json, to_json
from planc.vocab import GroupKind

from conftest import hybridep_job

# The GB200 table's 32-SM rows (dispatch, combine) at 8, 16, 24, 32 and 36 ranks.
DISPATCH = {8: 545.71, 16: 523.48, 24: 507.32, 32: 484.22, 36: 479.02}
COMBINE = {8: 568.94, 16: 521.55, 24: 483.76, 32: 464.54, 36: 447.89}
NVL72_NVLINK_GBS = 900.0  # GB200's NVLink 5, per direction
# gb200-nvl72's NVLink all_to_all efficiency: NCCL's SM100_NVLINK_BW, 40.1 of 50 GB/s a link
A2A_EFFICIENCY = 0.802


def test_rate_is_linear_between_measured_sizes_and_flat_beyond() -> None:
    rate = for_gpu("gb200-nvl72").nvlink.kernels["hybridep_dispatch"]
    assert rate.sms == 32
    assert rate.at(8) == DISPATCH[8] and rate.at(36) == DISPATCH[36]
    assert rate.at(12) == pytest.approx((DISPATCH[8] + DISPATCH[16]) / 2)
    assert rate.at(20) == pytest.approx((DISPATCH[16] + DISPATCH[24]) / 2)
    assert rate.at(2) == DISPATCH[8]  # below the table: its first measurement
    assert rate.at(64) == DISPATCH[36]  # beyond it: its last
    assert KernelRate(points=((1, 51.0),)).at(1024) == 51.0


@pytest.mark.parametrize(("ep", "nodes"), [(8, 2), (16, 4), (32, 8)])
def test_hybridep_inside_the_domain_runs_at_the_measured_rate(ep: int, nodes: int) -> None:
    # One call of n ranks carries its rows at R(n) (rows counting the own rank), well below
    # NVLink's 900 GB/s at the all-to-all efficiency 0.802 the link alone would give.
    job = hybridep_job(ep, nodes)
    eff = efficiency_of(job)
    ops = [op for op in analyse(job).ops if op.group is GroupKind.EP and op.calls]
    dispatch, combine = (next(op for op in ops if op.kernel == k)
                         for k in ("hybridep_dispatch", "hybridep_combine"))
    assert dispatch.group_size == combine.group_size == ep
    assert dispatch.link == "nvlink"
    for op, table in ((dispatch, DISPATCH), (combine, COMBINE)):
        seconds = call_time_s(job, eff, op)
        latency = seconds - op.buffer_bytes / (table[ep] * 1e9)
        assert 0 < latency < 1e-4  # the call's rounds at 2 µs each, no more
        assert op.buffer_bytes / (table[ep] * 1e9) > op.buffer_bytes * (ep - 1) / ep / (
            NVL72_NVLINK_GBS * A2A_EFFICIENCY * 1e9
        )


def test_hybridep_slows_the_compute_it_hides_behind_by_its_sms() -> None:
    # Paired with the other micro-batch's compute (combined 1F1B), HybridEP's 32 SMs of the
    # GB200's 148 are what that compute loses, not NCCL's NVLink share of 0.15.
    paired = hybridep_job(8, 2, "combined-1f1b")
    assert ep_processor_usage(paired, efficiency_of(paired)) == pytest.approx(32 / 148)
    unpaired = hybridep_job(8, 2)  # nothing hides the exchange, so nothing is slowed
    assert ep_processor_usage(unpaired, efficiency_of(unpaired)) == 0.0


def _tables() -> dict[str, Any]:
    return copy.deepcopy(to_json(for_gpu("gb200-nvl72")))


def test_the_tables_round_trip_through_a_calibration_file() -> None:
    eff = for_gpu("gb200-nvl72")
    data = to_json(eff)
    assert data["network"]["nvlink"]["kernels"]["hybridep_combine"] == {
        "gbs": {str(n): gbs for n, gbs in COMBINE.items()}, "sms": 32,
    }
    assert from_json(data) == eff
    h800 = for_gpu("h800")  # a number stays a number: one rate at every size
    assert to_json(h800)["network"]["network"]["kernels"]["deepep_dispatch"] == 51.0
    assert from_json(to_json(h800)) == h800


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"gbs": {"0": 500.0}}, "key '0' must be a group size, an integer from 1 to 1,048,576"),
        ({"gbs": {"eight": 500.0}}, "key 'eight' must be a group size"),
        ({"gbs": {"8": -1.0}}, "kernels.hybridep_dispatch.gbs.8 must be a number in (0, 1e+06]"),
        ({"gbs": {}}, "gbs must give the rate at one group size at least"),
        ({"gbs": [500.0]}, "gbs must be an object of GB/s by group size, got a list"),
        ({"sms": 32}, "gbs must be an object of GB/s by group size, got missing"),
        ({"gbs": {"8": 500.0}, "sms": 2.5}, "sms must be a whole number of SMs, got 2.5"),
        ({"gbs": {"8": 500.0}, "sms": 0}, "sms must be a number in [1, 100000]"),
        ({"gbs": {"8": 500.0}, "warps": 4}, "unknown key 'warps'; it takes gbs, sms, source"),
        ("fast", "kernels.hybridep_dispatch must be a number in (0, 1e+06], got a str"),
    ],
)
def test_a_calibration_files_kernel_rates_are_checked(entry: object, message: str) -> None:
    data = _tables()
    data["network"]["nvlink"]["kernels"]["hybridep_dispatch"] = entry
    with pytest.raises(ValueError) as caught:
        from_json(data, "cal")
    assert message in str(caught.value)
    assert str(caught.value).startswith("cal.network.nvlink.kernels")


# DeepEP's hybrid-ep README, 'B200 Platform': 8 ranks, 16 SMs, BF16, Torch API.
B200_DISPATCH, B200_COMBINE = 535.94, 530.86


@pytest.mark.parametrize("gpu", ["b200", "b300"])
def test_hybridep_inside_a_b200_node_runs_at_its_measured_rate(gpu: str) -> None:
    # One node of 8, EP 8: the exchange at the B200's measured rates (the B300 takes them),
    # below NVLink 5's 900 GB/s at the all-to-all efficiency 0.802.
    job = hybridep_job(8, 1, gpu=gpu)
    eff = efficiency_of(job)
    ops = [op for op in analyse(job).ops if op.group is GroupKind.EP and op.calls]
    for kernel, rate in (("hybridep_dispatch", B200_DISPATCH), ("hybridep_combine", B200_COMBINE)):
        op = next(op for op in ops if op.kernel == kernel)
        latency = call_time_s(job, eff, op) - op.buffer_bytes / (rate * 1e9)
        assert 0 < latency < 1e-4


def test_deepep_holds_its_default_sms_where_no_measurement_states_them() -> None:
    # Megatron-Bridge 26.04.01's DeepSeek-V3 on 256 B200: DeepEP over EP 32 (four nodes), paired
    # by combined 1F1B. No DeepEP rate is measured for B200, so no SM count either; DeepEP's
    # kernels run on Buffer.num_sms = 20 (deep_ep/buffer.py), whatever link they drive, and the
    # compute they hide behind loses 20 of the B200's 148 SMs, not the network proxy's 0.02.
    from planc.plannable import plannable
    from planc.spec.load import load_text

    from conftest import ROOT

    path = ROOT / "validation" / "runs" / "bridge2604-deepseek-v3-256xb200-fp8mx.yaml"
    loaded = load_text(str(path), path.read_text(encoding="utf-8"))
    assert loaded.job is not None
    job = plannable(loaded.job)
    assert not isinstance(job, tuple)
    eff = efficiency_of(job)
    assert job.layout.dispatcher == "deepep" and job.layout.schedule.value == "combined-1f1b"
    assert eff.gemm.sms == 148
    assert ep_processor_usage(job, eff) == pytest.approx(20 / 148)
