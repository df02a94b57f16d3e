"""training.framework_release: the time per local expert a release's MoE layers spend beyond
their GPU work (planc.perf.expert_host, planc/presets/releases.json; issue 24)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from planc.analysis import Analysis, analyse, estimate_step
from planc.cli.main import main
from planc.fitting import solve_expert_host
from planc.perf.expert_host import expert_host_per_layer, release_key, tau_e
from planc.plannable import Plannable, plannable
from planc.presets.releases import fitted, table
from planc.spec.load import load_text

from conftest import ROOT

# Megatron-Bridge 25.11's Qwen3-30B-A3B on 8 B200 in MXFP8: 128 experts over EP 8, 48 MoE
# layers, one pipeline stage, m = 512 / (1 · 8) = 64 micro-batches.
QWEN3_B200 = ROOT / "validation" / "runs" / "bridge2511-qwen3-30b-a3b-8xb200-fp8mx.yaml"
RELEASE = ", framework_release: nemo-25.11}"


def _analysis(text: str) -> Analysis:
    loaded = load_text("spec.yaml", text)
    assert loaded.job is not None, loaded.findings
    plan = plannable(loaded.job)
    assert not isinstance(plan, tuple)
    return analyse(plan)


def _text(**swap: str) -> str:
    text = QWEN3_B200.read_text(encoding="utf-8")
    assert RELEASE in text
    for old, new in swap.items():
        text = text.replace(old, new)
    return text


def test_the_release_prices_each_local_expert_of_each_layer_and_micro_batch() -> None:
    """τ_e · E/EP per MoE layer and micro-batch, a third forward: 16 local experts."""
    analysis = _analysis(_text())
    tau = table()[("nemo-25.11", "mxfp8")]
    assert tau == fitted()[("nemo-25.11", "mxfp8")].seconds > 0
    assert tau_e(analysis.plan, analysis.efficiency) == tau
    forward, backward = expert_host_per_layer(analysis.plan, analysis.efficiency)
    assert forward == pytest.approx(16 * tau / 3, rel=1e-12)
    assert backward == pytest.approx(2 * 16 * tau / 3, rel=1e-12)


def test_the_step_grows_by_the_host_time_of_every_layer_and_micro_batch() -> None:
    """One stage: compute grows by m · L · E/EP · τ_e = 64 · 48 · 16 · τ_e, the step by as much
    (no gradient reduction hides behind the host's time: the buckets wait on the backward's
    kernels, which only start later)."""
    with_release = estimate_step(_analysis(_text()))
    latest = estimate_step(_analysis(_text(**{RELEASE: "}"})))
    want = 64 * 48 * 16 * table()[("nemo-25.11", "mxfp8")]
    assert with_release.expert_host_s == pytest.approx(want, rel=1e-9)
    assert latest.expert_host_s == 0.0
    assert with_release.compute_s - latest.compute_s == pytest.approx(want, rel=1e-9)
    assert with_release.step_time_s - latest.step_time_s == pytest.approx(want, rel=1e-3)


def test_what_the_release_prices_follows_the_recipe_and_the_framework() -> None:
    # BF16 experts of 25.11 are not fitted: nothing per expert. Nor under a framework that is
    # not Megatron-LM, nor for the software planc targets.
    bf16 = _analysis(
        _text(**{"precision: fp8, fp8: {recipe: mxfp8, param_gather: true}": "precision: bf16"})
    )
    assert release_key(bf16.plan) == ("nemo-25.11", "bf16")
    assert tau_e(bf16.plan, bf16.efficiency) == 0.0
    latest = _analysis(_text(**{RELEASE: "}"}))
    assert release_key(latest.plan) == ("latest", "mxfp8")
    assert tau_e(latest.plan, latest.efficiency) == 0.0
    current = _analysis(_text(**{"recipe: mxfp8": "recipe: current"}))
    assert tau_e(current.plan, current.efficiency) == table()[("nemo-25.11", "current")]
    assert table()[("nemo-25.11", "current")] > table()[("nemo-25.11", "mxfp8")]


def test_a_graph_that_holds_the_experts_replays_them_without_the_host() -> None:
    # Megatron-Core's per-layer graphs (token drop makes the layer static) and the full-iteration
    # graph hold the routed experts: no time per expert. Transformer Engine's partial graphs of
    # the router and preprocessing (this run's) leave the experts to the host.
    partial = _analysis(_text())
    assert partial.plan.training.cuda_graph_impl == "transformer_engine"
    assert tau_e(partial.plan, partial.efficiency) > 0
    graphs = "cuda_graph: {impl: transformer_engine, modules: [moe_router, moe_preprocess]}"
    assert graphs in _text()
    for impl in ("local", "full_iteration"):
        held = _analysis(_text(**{graphs: f"cuda_graph: {{impl: {impl}}}"}))
        assert held.plan.training.cuda_graph_impl == impl
        assert release_key(held.plan) == ("nemo-25.11", "mxfp8")
        assert tau_e(held.plan, held.efficiency) == 0.0
        assert expert_host_per_layer(held.plan, held.efficiency) == (0.0, 0.0)


def test_a_dense_model_has_no_key() -> None:
    dense = _analysis(
        (ROOT / "validation" / "runs" / "bridge2511-llama3-8b-8xb200-fp8mx.yaml").read_text()
    )
    assert release_key(dense.plan) is None
    assert tau_e(dense.plan, dense.efficiency) == 0.0


def test_explain_names_the_host_time_and_where_it_comes_from(tmp_path: Path) -> None:
    spec = tmp_path / "qwen3.yaml"
    spec.write_text(_text(), encoding="utf-8")
    text = CliRunner().invoke(main, ["explain", str(spec)]).output
    tau = table()[("nemo-25.11", "mxfp8")]
    line = next(line for line in text.splitlines() if "expert host time" in line)
    assert f"{tau * 1e3:.3g} ms per local expert × 16 experts" in line
    assert "nemo-25.11, mxfp8 experts" in line
    data = json.loads(CliRunner().invoke(main, ["explain", str(spec), "--format", "json"]).output)
    assert data["step"]["expert_host_s"] == pytest.approx(64 * 48 * 16 * tau, rel=1e-9)
    spec.write_text(_text(**{RELEASE: "}"}), encoding="utf-8")
    assert "expert host time" not in CliRunner().invoke(main, ["explain", str(spec)]).output


def test_an_unknown_release_is_a_finding_with_its_place(tmp_path: Path) -> None:
    spec = tmp_path / "old.yaml"
    text = _text(**{"nemo-25.11": "nemo-24.07"})
    spec.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(main, ["check", str(spec)])
    assert result.exit_code == 1
    first = result.output.splitlines()[0]
    value = "framework_release: nemo-24.07"
    line = next(n for n, row in enumerate(text.splitlines(), 1) if value in row)
    column = text.splitlines()[line - 1].index(value) + len("framework_release: ") + 1
    assert first.startswith(f"{spec}:{line}:{column}: error PLC110")
    releases = "latest, nemo-25.09, nemo-25.11, nemo-26.02, nemo-26.04"
    assert f"PLC110 training.framework_release must be one of {releases}" in first


def test_the_release_runs_transformer_engines_fused_loss(tmp_path: Path) -> None:
    # NeMo 25.11's Megatron-Core (0d8e0714) ran cross_entropy_fusion te; 0.19.2 refuses it.
    spec = tmp_path / "loss.yaml"
    spec.write_text(_text(), encoding="utf-8")
    assert "PLC048" not in CliRunner().invoke(main, ["check", str(spec)]).output
    spec.write_text(_text(**{RELEASE: "}"}), encoding="utf-8")
    assert "PLC048" in CliRunner().invoke(main, ["check", str(spec)]).output


def test_the_solve_meets_the_measured_step() -> None:
    # A step of 10 s plus 100 s per second of τ_e meets 12 s at τ_e = 0.02 s.
    assert solve_expert_host(lambda tau: 10 + 100 * tau, 12.0) == pytest.approx(0.02, rel=1e-5)
    # Already no faster than measured: nothing per expert.
    assert solve_expert_host(lambda tau: 13 + tau, 12.0) == 0.0
    with pytest.raises(ValueError, match="no τ_e up to 1 s"):
        solve_expert_host(lambda tau: 10 + tau, 12.0)


def test_a_fold_without_the_fit_run_prices_nothing_per_expert() -> None:
    # Leave-one-source-out: holding out NeMo 25.11 holds out its fit runs, so its runs are
    # scored with τ_e = 0, what planc would say without them.
    from planc.fitting import fold_tables, refit
    from planc.perf.validation import read_index

    runs = read_index(str(ROOT / "validation" / "runs.json"))
    run = next(r for r in runs if r.id == QWEN3_B200.stem)
    analysis = _analysis(_text())
    priors = refit((), lambda _: analysis)  # no fit run: every curve at its prior
    assert tau_e(analysis.plan, fold_tables(run, analysis, priors, {})) == 0.0
    key = ("nemo-25.11", "mxfp8")
    assert tau_e(analysis.plan, fold_tables(run, analysis, priors, {key: 1e-3})) == 1e-3


def test_every_gpus_tables_and_a_calibration_carry_the_releases() -> None:
    # planc calibrate starts from the GPU's tables, so a 25.11 MoE run it calibrates on is
    # priced with its release's τ_e, as planc check prices it.
    from planc.presets.efficiency import for_gpu, from_json, to_json

    for gpu in ("b200", "h100-sxm", "a100-80gb", "no-such-gpu"):
        assert for_gpu(gpu).expert_host == fitted_table()
    assert from_json(to_json(for_gpu("b200")), "calibration").expert_host == fitted_table()


def fitted_table() -> dict[tuple[str, str], float]:
    return {key: value.seconds for key, value in fitted().items()}


# ------------------------------------------------------------------------- planc calibrate


def _moe_job(ep: int, b: int, layers: int = 2) -> Plannable:
    text = (
        f"version: 1\nname: moe-{ep}-{b}\nmodel: {{preset: qwen3-30b-a3b, layers: {layers}}}\n"
        "hardware: {gpu: b200, nodes: 1}\n"
        f"parallelism: {{tensor: 1, expert: {ep}}}\n"
        f"training: {{seq_len: 4096, micro_batch: {b}, global_batch: {8 * b}, recompute: none, "
        "attention: flash}\n"
    )
    loaded = load_text("moe.yaml", text)
    assert loaded.job is not None, loaded.findings
    plan = plannable(loaded.job)
    assert not isinstance(plan, tuple)
    return plan


def test_calibrate_recovers_a_time_per_expert_of_the_users_software() -> None:
    # Runs on software planc knows nothing of (release latest, BF16 experts), measured under a
    # known truth: the GEMM curve at 0.45 of peak and 0.5 ms per local expert. The fit finds
    # both; 32, 16 and 8 local experts (EP 4, 8, 16 of 128) tell the per-expert time from the
    # GEMMs'.
    from planc.analysis import predictor
    from planc.perf.calibrate import Run, calibrate_runs
    from planc.presets.efficiency import for_gpu

    key = ("latest", "bf16")
    base = for_gpu("b200")
    truth = replace(
        base.with_gemm(peak_fraction=0.45),
        expert_host={**base.expert_host, key: 5e-4},
    )
    runs = []
    for ep, b in ((4, 1), (8, 1), (8, 2)):
        plan = _moe_job(ep, b)
        predict = predictor(analyse(plan))
        runs.append(Run(f"ep{ep}-b{b}", plan, predict(truth), predict))
    names = ("gemm.peak_fraction",)
    cal = calibrate_runs(runs, names=names, ridge=0.0)
    assert cal.fit.names == (*names, "expert_host:latest:bf16")
    assert cal.fit.values == pytest.approx((0.45, 5e-4), rel=1e-3)
    assert cal.fit.efficiency.expert_host[key] == pytest.approx(5e-4, rel=1e-3)
    # Before the fit the release costs nothing per expert: every run was priced too fast.
    assert all(error < -0.05 for error in cal.before)


def test_a_calibration_file_carries_its_time_per_expert() -> None:
    from planc.presets.efficiency import for_gpu, from_json, to_json

    base = for_gpu("b200")
    own = replace(base, expert_host={**base.expert_host, ("latest", "mxfp8"): 3e-4})
    data = to_json(own)
    assert data["expert_host"] == {"latest": {"mxfp8": 3e-4}}  # only what differs from presets
    assert from_json(data, "calibration").expert_host == own.expert_host
    for bad, message in (
        ({"nemo-24.07": {"bf16": 1e-4}}, "unknown key 'nemo-24.07'"),
        ({"latest": {"fp16": 1e-4}}, "unknown key 'fp16'"),
        ({"latest": {"bf16": -1.0}}, r"expert_host.latest.bf16 must be a number in \[0, 1\]"),
    ):
        with pytest.raises(ValueError, match=message):
            from_json({**data, "expert_host": bad}, "calibration")


def test_the_reports_step_bar_shows_the_host_time_in_its_own_colour() -> None:
    from planc.report.assets import CSS
    from planc.report.comm import step_parts

    step = estimate_step(_analysis(_text()))
    parts = {part.cls: part for part in step_parts(step)}
    assert parts["t-host"].seconds == step.expert_host_s > 0
    # Compute is what is left of compute_s once the parts inside it are shown apart.
    inside = sum(parts[c].seconds for c in ("t-compute", "t-ep", "t-host"))
    assert inside == pytest.approx(step.compute_s, rel=1e-12)
    light, dark = CSS.split("@media (prefers-color-scheme:dark)", 1)
    for scheme in (light, dark):
        assert "--t-host:#" in scheme
    latest = estimate_step(_analysis(_text(**{RELEASE: "}"})))
    assert "t-host" not in {part.cls for part in step_parts(latest)}


@pytest.mark.parametrize("release", ["nemo-25.09", "nemo-25.11", "nemo-26.02", "nemo-26.04"])
def test_each_release_prices_its_own_fit_and_runs_te_cross_entropy(release: str) -> None:
    # The same spec under each release: its own τ_e per recipe, the one its fit run named; every
    # release's Megatron-Core ran Transformer Engine's fused cross-entropy (PLC048 is silent),
    # which the Megatron-Core planc targets refuses. Megatron-Core 0.14 (nemo-25.09) has no
    # graphs of the router and preprocessing, so its spec runs without them.
    graphs = ", cuda_graph: {impl: transformer_engine, modules: [moe_router, moe_preprocess]}"
    text = _text(**{RELEASE: f", framework_release: {release}}}"})
    if release == "nemo-25.09":
        text = text.replace(graphs, "")
    for recipe in ("mxfp8", "current"):
        analysis = _analysis(text.replace("recipe: mxfp8", f"recipe: {recipe}"))
        assert release_key(analysis.plan) == (release, recipe)
        assert tau_e(analysis.plan, analysis.efficiency) == fitted()[(release, recipe)].seconds > 0
    checked = CliRunner().invoke(main, ["check", "-"], input=text)
    assert "PLC048" not in checked.output
    latest = CliRunner().invoke(main, ["check", "-"], input=_text(**{RELEASE: "}"}))
    assert "PLC048" in latest.output


# Each release's tables, its own first (validation/runs.json source_group).
RELEASE_TABLES = {
    "nemo-25.09": ("megatron-bridge-25.09",),
    "nemo-26.02": ("megatron-bridge-26.02", "megatron-bridge-26.02.01"),
    "nemo-26.04": ("megatron-bridge-26.04",),
}


@pytest.mark.parametrize("release", sorted(RELEASE_TABLES))
def test_the_fit_runs_follow_the_most_local_experts_rule(release: str) -> None:
    # A release's fit run of each recipe is its run of that recipe with the most local experts
    # (validation/README.md), counted here from the specs, not from the fit; a tie goes to the
    # release's first table, then to B300 (26.04's MXFP8 fit ran there).
    from planc.perf.validation import parse_index

    index = ROOT / "validation" / "runs.json"
    runs = parse_index(index.read_text(encoding="utf-8"))
    tables = RELEASE_TABLES[release]
    most: dict[str, tuple[int, int, bool, str]] = {}
    for run in runs:
        if run.source_group not in tables:
            continue
        analysis = _analysis((index.parent / run.spec).read_text(encoding="utf-8"))
        key = release_key(analysis.plan)
        if key is None:
            continue
        assert key[0] == release
        experts = analysis.plan.dims.experts
        assert experts is not None
        rank = (experts.E // experts.ep, -tables.index(run.source_group), run.gpu == "b300")
        most[key[1]] = max(most.get(key[1], (0, 0, False, "")), (*rank, run.id))
    # BF16 is not fitted (releases.json): its rows are GPT-OSS 120B's, whose gap is no per-expert
    # time (validation/README.md)
    assert (release, "bf16") not in fitted()
    assert {recipe: ranked[-1] for recipe, ranked in most.items() if recipe != "bf16"} == {
        recipe: fitted()[(release, recipe)].fit_run for recipe in ("mxfp8", "current")
    }
