"""PLC045 a checkpoint's save finishes inside the interval between saves.

Base: llama3-8b on one 8-GPU H100 node, t = 2, d = 4, ZeRO-1, Megatron. One TP rank holds
Ψ_r = 32·[2·4096·128·(32 + 8) / 2 + 3·4096·14336 / 2 + 2·4096] + 2·64128·4096 + 4096 =
4,015,263,744 parameters; with the fully parallel save each rank writes 2Ψ_r/4 + 12Ψ_r/4 =
14,053,423,104 bytes, a node 8 × that = 112.43 GB.
"""

from __future__ import annotations

from conftest import check_overlay, rules_fired

LAYER = 2 * 4096 * 128 * 20 + 3 * 4096 * 7168 + 2 * 4096
PSI_R = 32 * LAYER + 2 * 64128 * 4096 + 4096
NODE_BYTES = 8 * (14 * PSI_R // 4)


def _findings(overlay: dict[str, object]) -> list[object]:
    return [f for f in check_overlay(overlay).findings if f.rule == "PLC045"]


def test_a_slow_node_cannot_save_in_its_interval() -> None:
    """0.1 GB/s per node: 112.43 GB in 1,124.3 s = 18.7 min, above 100 steps of about 6 s."""
    assert PSI_R == 4_015_263_744
    (finding,) = _findings(
        {
            "hardware": {"storage": {"write_gbs": 100, "node_write_gbs": 0.1}},
            "checkpoint": {"interval": 100},
        }
    )
    assert finding.severity.value == "error"  # type: ignore[attr-defined]
    assert f"{NODE_BYTES / 1e9:,.1f} GB per node" in finding.message  # type: ignore[attr-defined]
    assert f"{NODE_BYTES / 0.1e9 / 60:.1f} min" in finding.message  # type: ignore[attr-defined]
    assert "interval: optimal" in finding.fix  # type: ignore[attr-defined]


def test_the_same_save_fits_a_longer_interval() -> None:
    """18.7 min fits in 200 steps of about 6 s (20 min)."""
    assert not _findings(
        {
            "hardware": {"storage": {"write_gbs": 100, "node_write_gbs": 0.1}},
            "checkpoint": {"interval": 200},
        }
    )


def test_an_async_background_write_must_finish_before_the_next_save() -> None:
    """Asynchronous, the write still takes 18.7 min in the background; 100 steps is too short."""
    overlay = {
        "hardware": {"storage": {"write_gbs": 100, "node_write_gbs": 0.1}},
        "checkpoint": {"interval": 100, "async_save": True},
    }
    (finding,) = _findings(overlay)
    assert "background write" in finding.message  # type: ignore[attr-defined]


def test_no_checkpoint_section_no_finding() -> None:
    assert "PLC045" not in rules_fired(check_overlay({}))
