"""Refit the step model's GEMM curves and the releases' time per expert to the declared fit runs.

    python scripts/refit.py            # print each fitted value, before and after
    python scripts/refit.py --write    # write planc/presets/efficiency.json and releases.json
    python scripts/refit.py --check    # exit 1 when either file is not the fit (to 0.05 %)

`planc.fitting.refit` does the fit (each fitted GPU's parameters to the runs
validation/runs.json declares `fit` on that GPU, and to no other run). This script only writes
what it found: a fitted GPU's e_max (and the A100's d½), every GPU derived from it scaled by the
same factor as its fitted GPU moved or set at its fixed ratio of it (`planc.fitting.tables_for`),
and d½ on every entry that
inherits the A100's. A change to the step model that moves a fit run is followed by this, then
`python scripts/validation_table.py -o docs/validation.md`.

The releases' τ_e (planc/presets/releases.json) are `planc.fitting.refit_expert_host` of the runs
declaring `fits: expert_host`, on the GEMM curves the same fit gives.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# Runnable as a script from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planc.fitting import CLOCKED, FITTED, refit, refit_expert_host, tables_for
from planc.perf.validation import read_index
from planc.presets.efficiency import Efficiency, for_gpu
from planc.scoring import analysed, spec_path
from planc.vocab import RunRole

ROOT = Path(__file__).resolve().parent.parent
INDEX = ROOT / "validation" / "runs.json"
PRESETS = ROOT / "planc" / "presets" / "efficiency.json"
RELEASES = ROOT / "planc" / "presets" / "releases.json"
# The digits releases.json keeps: τ_e to a tenth of a microsecond.
HOST_DIGITS = 7
# The digits efficiency.json keeps: e_max to 1e-4 of peak, d½ to a tenth of an element.
PEAK_DIGITS = 4
VECTOR_DIGITS = 1  # the vector peak to a tenth of a TFLOPS
HALF_DIM_DIGITS = 1
CHECK_TOLERANCE = 5e-4


def fitted_entries() -> tuple[dict[str, Efficiency], dict[tuple[str, str], float]]:
    """The tables of every GPU a fit reaches (`planc.fitting.tables_for`), and τ_e of every
    release and recipe fitted, as the declared fit runs give them."""
    runs = read_index(str(INDEX))
    cache = {
        run.id: analysed(spec_path(str(INDEX), run))[1] for run in runs if run.role is RunRole.FIT
    }
    fitted = refit(runs, lambda run: cache[run.id])
    host = dict(refit_expert_host(runs, lambda run: cache[run.id], fitted))
    reached = [gpu for curve in FITTED for gpu in (curve.gpu, *curve.derived)]
    reached += [part.gpu for part in CLOCKED]
    out: dict[str, Efficiency] = {}
    for gpu in reached:
        tables = tables_for(gpu, fitted)
        assert tables is not None  # every GPU of `reached` is a fitted or derived one
        out[gpu] = tables
    return out, host


def updated_releases(data: dict[str, Any], host: dict[tuple[str, str], float]) -> dict[str, Any]:
    """releases.json's data with the fit's τ_e."""
    out = json.loads(json.dumps(data))
    for (release, recipe), seconds in host.items():
        out[release]["expert_host_s"][recipe]["seconds"] = round(seconds, HOST_DIGITS)
    return out


def stale_releases(data: dict[str, Any], host: dict[tuple[str, str], float]) -> list[str]:
    """The (release, recipe) entries of releases.json that are not the fit, and any the fit
    has and the file lacks or the file has and the fit lacks."""
    held = {
        (release, recipe): float(value["seconds"])
        for release, entry in data.items()
        if not release.startswith("_")
        for recipe, value in entry["expert_host_s"].items()
    }
    stale = sorted(set(held) ^ set(host))
    for key in sorted(set(held) & set(host)):
        was, now = held[key], host[key]
        print(f"{key[0]} {key[1]}: τ_e {was * 1e3:.4f} ms -> {now * 1e3:.4f} ms")
        if abs(now - was) > CHECK_TOLERANCE * max(was, now):
            stale.append(key)
    return [f"{release} {recipe}" for release, recipe in stale]


def inherited_half_dim(data: dict[str, Any], fitted_gpu: str) -> list[str]:
    """The entries whose d½ is the fitted GPU's (the A100's, which every other curve takes)."""
    own = data[fitted_gpu]["gemm"]["half_dim"]
    return [
        gpu
        for gpu, entry in data.items()
        if not gpu.startswith("_") and entry["gemm"]["half_dim"] == own
    ]


def attention_fractions(tables: Efficiency) -> dict[str, float]:
    """The attention kernels' fractions as efficiency.json's flash_attention names them."""
    return {
        "forward": tables.flash_forward,
        "backward": tables.flash_backward,
        "cudnn_forward": tables.cudnn_forward,
        "cudnn_backward": tables.cudnn_backward,
        "sdpa_forward": tables.sdpa_forward,
        "sdpa_backward": tables.sdpa_backward,
    }


def updated(data: dict[str, Any], found: dict[str, Efficiency]) -> dict[str, Any]:
    """efficiency.json's data with the fit's numbers: each GPU's e_max and its data types'
    curves as the fit's tables have them (moved with e_max, Efficiency.with_peak_fraction, or
    at a fixed ratio of the fitted GPU's, planc.fitting.at_ratio)."""
    out = json.loads(json.dumps(data))
    for gpu, tables in found.items():
        out[gpu]["gemm"]["peak_fraction"] = round(tables.gemm.peak_fraction, PEAK_DIGITS)
        for dtype, curve in tables.gemm_by_dtype.items():
            out[gpu]["gemm_by_dtype"][dtype.value]["peak_fraction"] = round(
                curve.peak_fraction, PEAK_DIGITS
            )
    for part in CLOCKED:
        # a die at its own clock: the attention kernels and the vector peak move with it too
        tables = found[part.gpu]
        flash = out[part.gpu]["flash_attention"]
        for key, value in attention_fractions(tables).items():
            flash[key] = round(value, PEAK_DIGITS)
        out[part.gpu]["vector"]["tflops"] = round(tables.vector_tflops, VECTOR_DIGITS)
    for curve in FITTED:
        if "gemm.half_dim" in curve.parameters:
            half = round(found[curve.gpu].gemm.half_dim, HALF_DIM_DIGITS)
            for gpu in inherited_half_dim(data, curve.gpu):
                out[gpu]["gemm"]["half_dim"] = half
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="write efficiency.json")
    mode.add_argument("--check", action="store_true", help="exit 1 when it is not the fit")
    args = parser.parse_args(argv)
    text = PRESETS.read_text(encoding="utf-8")
    data = json.loads(text)
    found, host = fitted_entries()
    releases = json.loads(RELEASES.read_text(encoding="utf-8"))
    stale = stale_releases(releases, host)
    for gpu, tables in found.items():
        was, peak, half = for_gpu(gpu).gemm, tables.gemm.peak_fraction, tables.gemm.half_dim
        print(f"{gpu}: e_max {was.peak_fraction:.4f} -> {peak:.4f}, d½ {was.half_dim} -> {half:.1f}")
        moved = (abs(peak / was.peak_fraction - 1), abs(half / was.half_dim - 1))
        if max(moved) > CHECK_TOLERANCE:
            stale.append(gpu)
    for part in CLOCKED:
        die, tables = found[part.die], found[part.gpu]
        clock = tables.gemm.peak_fraction / die.gemm.peak_fraction
        print(f"{part.gpu}: clock {clock:.4f} of {part.die}")
        held = for_gpu(part.gpu)
        rates = zip(
            (*attention_fractions(tables).values(), tables.vector_tflops),
            (*attention_fractions(held).values(), held.vector_tflops),
            strict=True,
        )
        if any(abs(new / was - 1) > CHECK_TOLERANCE for new, was in rates):
            stale.append(f"{part.gpu} (attention, vector)")
    if args.check:
        if stale:
            print(f"the presets are not the fit of the declared runs: {', '.join(stale)}")
        return 1 if stale else 0
    if args.write:
        new = json.dumps(updated(data, found), indent=2, ensure_ascii=False) + "\n"
        PRESETS.write_text(new, encoding="utf-8")
        host_text = json.dumps(updated_releases(releases, host), indent=2, ensure_ascii=False)
        RELEASES.write_text(host_text + "\n", encoding="utf-8")
        print(f"wrote {PRESETS.relative_to(ROOT)} and {RELEASES.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
