"""parallelism.dispatcher_sms: the SMs a flex dispatcher's kernels hold while compute overlaps
the expert exchange (Megatron --moe-flex-dispatcher-num-sms).

The share of compute the exchange takes while it hides is σ/SMs (planc.perf.inputs
ep_processor_usage): the stated σ, else the SMs the GPU's measured rates were taken on, else the
library's default (DeepEP's 20, HybridEP's 24). Expected shares are those counts over the GPUs'
SMs: the H100 SXM's 132, the GB200's 148.
"""

from __future__ import annotations

from typing import Any

import pytest

from planc.compile.frameworks import megatron_arguments
from planc.perf.inputs import efficiency_of, ep_processor_usage
from planc.plannable import Plannable

from conftest import check_overlay, compiled, hybridep_job


def _h100(dispatcher: str, **parallelism: Any) -> Plannable:
    """Qwen3-30B-A3B on two 8-GPU H100 nodes, EP 16 across them, the exchange overlapped."""
    return hybridep_job(16, 2, "combined-1f1b", "h100-sxm", dispatcher, parallelism)


def _share(job: Plannable) -> float:
    return ep_processor_usage(job, efficiency_of(job))


def test_a_flex_dispatcher_holds_its_library_default_where_nothing_is_measured() -> None:
    # No HybridEP or DeepEP rate is measured across H100 nodes: the libraries' defaults hold.
    assert _share(_h100("hybridep")) == pytest.approx(24 / 132)
    assert _share(_h100("deepep")) == pytest.approx(20 / 132)


def test_stated_sms_are_what_the_overlapped_compute_loses() -> None:
    assert _share(_h100("hybridep", dispatcher_sms=32)) == pytest.approx(32 / 132)
    # Stated beside the GB200's measured rates (taken on 32 SMs), the statement holds.
    stated = hybridep_job(8, 2, "combined-1f1b")
    assert _share(stated) == pytest.approx(32 / 148)


def test_more_sms_make_the_step_slower_where_the_exchange_hides() -> None:
    from planc.analysis import analyse, estimate_step

    steps = [
        estimate_step(analyse(_h100("hybridep", dispatcher_sms=n))).step_time_s for n in (8, 32, 64)
    ]
    assert steps[0] < steps[1] < steps[2]


def test_nccl_dispatchers_keep_the_tiers_share() -> None:
    # NCCL's all-to-all across the nodes takes the network tier's processor_usage, whatever
    # dispatcher_sms would say.
    alltoall = _h100("alltoall")
    assert _share(alltoall) == efficiency_of(alltoall).network.processor_usage


def test_megatron_is_told_the_sms() -> None:
    args = megatron_arguments(compiled(_h100("hybridep", dispatcher_sms=32)))[0]
    assert "--moe-flex-dispatcher-num-sms 32" in args
    plain = megatron_arguments(compiled(_h100("hybridep")))[0]
    assert not any(a.startswith("--moe-flex-dispatcher-num-sms") for a in plain)


def test_sms_for_an_nccl_dispatcher_are_a_warning() -> None:
    overlay = {"parallelism": {"expert_dispatcher": "alltoall", "dispatcher_sms": 32}}
    findings = check_overlay(overlay, "mixtral-8x7b-64xh100.yaml").findings
    fired = [f for f in findings if f.field == "parallelism.dispatcher_sms"]
    assert [f.rule for f in fired] == ["PLC051"], [f.message for f in findings]
