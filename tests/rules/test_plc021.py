"""PLC021 what a node's GPUs offload fits in its host memory.

Base: llama3-8b (8,030,261,248 parameters) on one 8-GPU H100 node, tensor 2, data 4, ZeRO-1.
"""

from __future__ import annotations

from typing import Any

import pytest

from planc.findings import FileResult, Finding, Severity

from conftest import check_overlay, check_text, rules_fired, spec_text

OFFLOAD: dict[str, Any] = {"training": {"framework": "deepspeed", "offload": {"optimizer": True}}}


def findings_of(result: FileResult, rule: str = "PLC021") -> list[Finding]:
    return [f for f in result.findings if f.rule == rule]


def offloaded_per_node() -> int:
    # DeepSpeed ZeRO-1 with the optimizer offloaded: fp32 gradient partition, master, m and v,
    # 16 bytes per parameter of each rank's shard. One TP rank holds Ψ_r (V = 128,256 pads to
    # 128,256 at t = 2; 32 layers of attention 2·4096·128·(16+4) + SwiGLU 3·4096·7168 + 2·4096,
    # plus the embedding and head 64,128·4096 each and the final norm 4096).
    layer = 2 * 4096 * 128 * (16 + 4) + 3 * 4096 * 7168 + 2 * 4096
    psi = 32 * layer + 2 * 64128 * 4096 + 4096
    return 8 * 16 * -(-psi // 4)


def test_host_memory_too_small_fails() -> None:
    text = spec_text({**OFFLOAD, "hardware": {"host_memory_gb": 100}})
    result = check_text(text)
    (finding,) = findings_of(result)
    assert finding.severity is Severity.ERROR
    assert finding.field == "training.offload"
    need = offloaded_per_node()
    assert f"{need / 1e9:,.1f} GB" in finding.message and "100.0 GB" in finding.message
    assert "host_memory_gb" in finding.fix
    # Located at the offload mapping's value (its first key, on the line after `offload:`).
    assert finding.line == text.splitlines().index("  offload:") + 2


def test_preset_host_memory_passes() -> None:
    # A DGX H100 node has 2 TB; 128.5 GB offloaded fits.
    assert offloaded_per_node() < 2000e9
    assert "PLC021" not in rules_fired(check_overlay(OFFLOAD))


@pytest.mark.parametrize("host_gb", [100, 128])
def test_boundary(host_gb: int) -> None:
    # 128.48 GB needed: 100 and 128 GB fail, 10 MB more than needed passes.
    result = check_overlay({**OFFLOAD, "hardware": {"host_memory_gb": host_gb}})
    assert "PLC021" in rules_fired(result)
    enough = offloaded_per_node() / 1e9 + 0.01
    assert "PLC021" not in rules_fired(
        check_overlay({**OFFLOAD, "hardware": {"host_memory_gb": enough}})
    )


def test_no_offload_needs_no_host_memory() -> None:
    overlay = {"hardware": {"host_memory_gb": 1}, "training": {"framework": "deepspeed"}}
    assert "PLC021" not in rules_fired(check_overlay(overlay))


def test_custom_gpu_without_host_memory_fails_when_offloading() -> None:
    custom = {
        "memory_gb": 80,
        "bf16_tflops": 989,
        "intra_node": {"bandwidth_gbs": 450},
        "inter_node": {"bandwidth_gbs": 50},
    }
    result = check_overlay({**OFFLOAD, "hardware": {"gpu": custom}})
    assert "0.0 GB of host memory" in findings_of(result)[0].message


def test_the_listed_fix_fits_when_applied() -> None:
    # Doubling the nodes doubles data (4 → 8), so each rank's ZeRO shard, and with it the node's
    # offload, halves: 128.5 GB / 2 = 64.2 GB ≤ 100 GB. Nothing smaller than 2 nodes exists at
    # this layout, and ZeRO-2/3 shard the same optimizer state over the same 4 ranks.
    overlay = {**OFFLOAD, "hardware": {"host_memory_gb": 100}}
    (finding,) = findings_of(check_text(spec_text(overlay)))
    half = offloaded_per_node() // 2
    assert f"nodes: 2 (data 8; list 2 hosts) ({half / 1e9:,.1f} GB per node)" in finding.fix
    grown = {**overlay, "hardware": {"host_memory_gb": 100, "nodes": 2, "hosts": "gpu-{1..2}"}}
    assert findings_of(check_text(spec_text(grown))) == []


def test_a_larger_shard_group_is_offered_under_hsdp() -> None:
    # data_shard 2 of data 4 (HSDP) shards the optimizer over 2 ranks: twice the unsharded
    # per-node offload of the ZeRO-1 spec above, 257.0 GB; data_shard 4 brings it back to 128.5 GB.
    need = offloaded_per_node()
    overlay = {
        **OFFLOAD,
        "hardware": {"host_memory_gb": 200},
        "parallelism": {"data_shard": 2},
    }
    (finding,) = findings_of(check_text(spec_text(overlay)))
    assert f"data_shard: 4 ({need / 1e9:,.1f} GB per node)" in finding.fix
    fixed = {**overlay, "parallelism": {"data_shard": 4}}
    assert findings_of(check_text(spec_text(fixed))) == []


def test_async_checkpoint_staging_counts_in_host_memory() -> None:
    """An asynchronous save copies each rank's saved state to pinned host memory: Megatron
    ZeRO-1, 2Ψ_r weights + 12Ψ_r/4 optimizer shards = 20,076,318,720 bytes a rank, 160.6 GB a
    node, above 100 GB."""
    layer = 2 * 4096 * 128 * (16 + 4) + 3 * 4096 * 7168 + 2 * 4096
    psi = 32 * layer + 2 * 64128 * 4096 + 4096
    staged = 8 * (2 * psi + 12 * psi // 4)
    overlay = {
        "hardware": {"host_memory_gb": 100, "storage": {"write_gbs": 100}},
        "checkpoint": {"async_save": True},
    }
    (finding,) = findings_of(check_overlay(overlay))
    assert finding.field == "checkpoint.async_save"
    assert f"{staged / 1e9:,.1f} GB per node" in finding.message
    sync = {**overlay, "checkpoint": {"async_save": False}}
    assert "PLC021" not in rules_fired(check_overlay(sync))
