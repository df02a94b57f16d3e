"""The published-runs corpus (validation/runs.json, validation/runs/) and the harness that scores
the step model on it (planc.perf.validation, planc.scoring, scripts/validation_table.py).

No accuracy target is asserted here: the model is changing (issue 24). What is held: every run
loads and plans, the index and the spec files match, the fit set is the declared one, and the
error arithmetic is right on a hand-made index.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from planc.perf.validation import (
    CorpusError,
    Run,
    Scored,
    aggregates,
    comparisons,
    held_out_errors,
    leave_one_source_out,
    parse_index,
    read_index,
    repeats,
    score,
)
from planc.plannable import plannable
from planc.scoring import (
    analysed,
    check_rules,
    comparable,
    job_of,
    one_configuration,
    price,
    score_corpus,
    spec_path,
    tokens_per_gpu,
)
from planc.vocab import DType, FitTarget, Generation, RunCategory, RunRole

ROOT = Path(__file__).resolve().parent.parent
INDEX = ROOT / "validation" / "runs.json"
SPECS = ROOT / "validation" / "runs"
DOC = ROOT / "docs" / "validation.md"
RUNS = read_index(str(INDEX))

# The fit set, declared. The GEMM curves': Korthikanti et al. 2022 Table 5's four full-recompute
# rows (what the A100 GEMM curve was fitted to), the three H100 runs validation/README.md names,
# all from one source (NVIDIA's DGX Cloud benchmarks v24.11.1), and the one GB200 run it names
# (v25.05's Llama 3.1 405B on 128 GB200), and the one GB300 run (Megatron-Bridge 26.06's Llama
# 3.1 405B in FP8 current scaling on 256 GB300). The releases' time per expert (issue 24): each
# release's run with the most local experts of each FP8 recipe (NeMo 25.11: 32 on B200 with MXFP8,
# 16 on H100 with current scaling; 26.04: 32 on B300, 8 on H100; 26.02: 32 on B300 of four tied,
# 16 on H100; 25.09: 32 on B200 for both). A change to the fit set is a change to these lists.
DECLARED_GEMM_FIT = (
    "korthikanti2022-22b-full",
    "korthikanti2022-175b-full",
    "korthikanti2022-530b-full",
    "korthikanti2022-1t-full",
    "dgxc-llama31-8b-8xh100",
    "dgxc-llama31-70b-64xh100",
    "dgxc-gpt3-175b-128xh100",
    "dgxc-llama31-405b-128xgb200",
    "bridge2606-llama31-405b-256xgb300-fp8cs",
)
DECLARED_HOST_FIT = (
    "bridge2511-deepseek-v3-256xb200-fp8mx",
    "bridge2511-qwen3-30b-a3b-16xh100-fp8cs",
    "bridge2604-deepseek-v3-256xb300-fp8mx",
    "bridge2604-qwen3-30b-a3b-16xh100-fp8cs",
    "bridge2602-deepseek-v3-256xb300-fp8mx",
    "bridge2602-qwen3-30b-a3b-16xh100-fp8cs",
    "bridge2509-deepseek-v3-256xb200-fp8cs",
    "bridge2509-deepseek-v3-256xb200-fp8mx",
)
# The 500 W H100's sustained clock (planc.fitting.CLOCKED): torchtitan's compiled 8B on 8 GPUs.
DECLARED_CLOCK_FIT = ("torchtitan-llama31-8b-8xh100-compile",)
DECLARED_FIT = DECLARED_GEMM_FIT + DECLARED_HOST_FIT + DECLARED_CLOCK_FIT


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "planc_validation_table", ROOT / "scripts" / "validation_table.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("run", RUNS, ids=[run.id for run in RUNS])
def test_every_run_loads_and_plans(run: Run) -> None:
    priced = price(spec_path(str(INDEX), run))
    # MFU is against the 16-bit peak (docs/explain.md): an FP8/FP4 run may pass 1, never the
    # ratio of its quantized peak to that one.
    plan = plannable(job_of(spec_path(str(INDEX), run)))
    assert not isinstance(plan, tuple)
    q, gpu = plan.numerics.quantized, plan.cluster.gpu
    ceiling = 1.0 if q is None else (gpu.peak_tflops(q.gemm) or 0.0) / gpu.peak_tflops(DType.BF16)
    assert priced.step_s > 0 and 0 < priced.mfu < ceiling
    # The spec is usable input (it loads and plans), and what check reports on it is recorded in
    # the index: a rule that starts or stops firing on a published layout is a visible diff.
    assert check_rules(spec_path(str(INDEX), run)) == run.check_rules


# Published runs whose heaviest rank planc counts above the whole card they ran on, and why:
# each would be a setting no spec field states, so planc's count would be too high there.
ABOVE_CAPACITY: dict[str, str] = {}


@pytest.mark.parametrize("run", RUNS, ids=[run.id for run in RUNS])
def test_a_published_run_fits_the_card_it_ran_on(run: Run) -> None:
    # The run was measured, so it fitted: planc's peak is at most the capacity the device
    # reports (PLC007's headroom is a policy below that, which NVIDIA's runs often eat into).
    job, analysis = analysed(spec_path(str(INDEX), run))
    fits = analysis.memory.peak.memory.total <= job.cluster.gpu.memory_bytes
    assert fits != (run.id in ABOVE_CAPACITY), (run.id, analysis.memory.peak.memory.total)


# Each GPU preset's generation (NVIDIA's architecture names); a run names the GPU its spec names.
GENERATIONS = {
    "a100-80gb": Generation.AMPERE,
    "a100-40gb": Generation.AMPERE,
    "h100-sxm": Generation.HOPPER,
    "h100-sxm-hbm2e": Generation.HOPPER,
    "h800": Generation.HOPPER,
    "h200": Generation.HOPPER,
    "b200": Generation.BLACKWELL,
    "b300": Generation.BLACKWELL,
    "gb200-nvl72": Generation.BLACKWELL,
    "gb300-nvl72": Generation.BLACKWELL,
}


@pytest.mark.parametrize("run", RUNS, ids=[run.id for run in RUNS])
def test_the_index_says_what_the_spec_says(run: Run) -> None:
    job = job_of(spec_path(str(INDEX), run))
    assert job.cluster.gpu.name == run.gpu
    assert GENERATIONS[run.gpu] is run.generation
    # A mixture-of-experts run is one whose model has experts, and only such a run.
    assert (run.category is RunCategory.MOE) == (job.model.moe is not None)


def test_the_index_and_the_spec_files_match() -> None:
    listed = sorted(run.spec for run in RUNS)
    on_disk = sorted(f"runs/{path.name}" for path in SPECS.glob("*"))
    assert listed == on_disk
    assert len(set(listed)) == len(listed)
    # Each spec is named after its run and says where its numbers come from.
    for run in RUNS:
        assert run.spec == f"runs/{run.id}.yaml"
        assert (SPECS / f"{run.id}.yaml").read_text().startswith("# source:")


def test_ids_are_unique_and_roles_are_fit_or_validation() -> None:
    assert len({run.id for run in RUNS}) == len(RUNS)
    assert {run.role for run in RUNS} == {RunRole.FIT, RunRole.VALIDATION}


def test_the_fit_set_is_the_declared_one() -> None:
    assert sorted(run.id for run in RUNS if run.role is RunRole.FIT) == sorted(DECLARED_FIT)


def test_each_gpu_is_fitted_to_runs_of_one_source() -> None:
    # validation/README.md: each fitted GPU's few fit runs come from ONE source group, so that
    # its fit can be scored leave-one-source-out (hold that group out and the GPU falls back to
    # its prior; hold any other out and the group is scored by a fit that never saw it).
    sources: dict[str, set[str]] = {}
    for run in RUNS:
        if run.role is RunRole.FIT and run.fits is FitTarget.GEMM:
            sources.setdefault(run.gpu, set()).add(run.source_group)
    assert sources == {
        "a100-80gb": {"korthikanti2022"},
        "h100-sxm": {"dgxc-24.11"},
        "gb200-nvl72": {"dgxc-25.05"},
        "gb300-nvl72": {"megatron-bridge-26.06"},
    }


def test_each_fit_reads_exactly_its_declared_runs() -> None:
    # planc.fitting refits the A100 curve to the Korthikanti rows, the H100 curve to the
    # dgxc-24.11 rows, the GB200 curve to its dgxc-25.05 row and the GB300 curve to its 26.06 row,
    # and to nothing else: every fit run is read by one fit, no validation run
    # by any.
    # The releases' τ_e read the expert-host runs and nothing else, and releases.json names
    # each value's run.
    from planc.fitting import CLOCKED, FITTED, clock_runs, expert_host_runs, fit_runs
    from planc.presets.releases import fitted

    read = [run.id for curve in FITTED for run in fit_runs(RUNS, curve.gpu)]
    read += [run.id for run in expert_host_runs(RUNS)]
    read += [run.id for part in CLOCKED for run in clock_runs(RUNS, part.gpu)]
    assert {part.gpu: [r.id for r in clock_runs(RUNS, part.gpu)] for part in CLOCKED} == {
        "h100-sxm-hbm2e": list(DECLARED_CLOCK_FIT)
    }
    assert sorted(read) == sorted(DECLARED_FIT)
    assert {curve.gpu: [r.id for r in fit_runs(RUNS, curve.gpu)] for curve in FITTED} == {
        "a100-80gb": list(DECLARED_GEMM_FIT[:4]),
        "h100-sxm": list(DECLARED_GEMM_FIT[4:7]),
        "gb200-nvl72": list(DECLARED_GEMM_FIT[7:8]),
        "gb300-nvl72": list(DECLARED_GEMM_FIT[8:]),
    }
    assert tuple(run.id for run in expert_host_runs(RUNS)) == DECLARED_HOST_FIT
    assert sorted(value.fit_run for value in fitted().values()) == sorted(DECLARED_HOST_FIT)


@pytest.mark.slow
def test_the_preset_curves_are_the_fit_of_the_declared_runs() -> None:
    # Refitting from the index reproduces efficiency.json's fitted curves (to 0.5 %): the
    # presets are what the declared fit set gives, not numbers of their own.
    from planc.fitting import refit
    from planc.presets.efficiency import for_gpu
    from planc.scoring import analysed

    cache = {
        run.id: analysed(spec_path(str(INDEX), run))[1] for run in RUNS if run.role is RunRole.FIT
    }
    fitted = refit(RUNS, lambda run: cache[run.id])
    for gpu in ("a100-80gb", "h100-sxm", "gb200-nvl72", "gb300-nvl72", "h100-sxm-hbm2e"):
        assert fitted[gpu].gemm.peak_fraction == pytest.approx(
            for_gpu(gpu).gemm.peak_fraction, rel=0.005
        )
    assert fitted["a100-80gb"].gemm.half_dim == pytest.approx(
        for_gpu("a100-80gb").gemm.half_dim, rel=0.005
    )


@pytest.mark.slow
def test_the_release_times_are_the_fit_of_the_declared_runs() -> None:
    # Refitting from the index reproduces releases.json's τ_e (to 0.5 %), each on the run it
    # names; and each fit run is then priced at its measured step (the fit's definition).
    from planc.fitting import refit, refit_expert_host
    from planc.perf.expert_host import release_key
    from planc.presets.releases import fitted
    from planc.scoring import analysed

    cache = {
        run.id: analysed(spec_path(str(INDEX), run))[1] for run in RUNS if run.role is RunRole.FIT
    }
    host = refit_expert_host(
        RUNS, lambda run: cache[run.id], refit(RUNS, lambda run: cache[run.id])
    )
    held = fitted()
    assert set(host) == set(held)
    for key, seconds in host.items():
        assert seconds == pytest.approx(held[key].seconds, rel=0.005)
        assert release_key(cache[held[key].fit_run].plan) == key


def test_a_validation_run_informs_no_parameter() -> None:
    with pytest.raises(CorpusError, match="only a fit run informs"):
        parse_index(json.dumps([_entry(role="validation", fits="expert_host")]))
    with pytest.raises(CorpusError, match="fits 'gpu' is not one of gemm, expert_host, clock"):
        parse_index(json.dumps([_entry(fits="gpu")]))
    (run,) = parse_index(json.dumps([_entry(fits="expert_host")]))
    assert run.fits is FitTarget.EXPERT_HOST
    (run,) = parse_index(json.dumps([_entry()]))
    assert run.fits is FitTarget.GEMM


@pytest.mark.slow
def test_the_committed_table_is_current() -> None:
    assert _script().main(["--check", str(DOC)]) == 0


# --------------------------------------------------------------------------- the arithmetic


def _entry(**overrides: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": "a",
        "spec": "runs/a.yaml",
        "gpu": "h100-sxm",
        "generation": "hopper",
        "category": "dense",
        "framework": "megatron",
        "measured_s": 10.0,
        "measured_note": "stated",
        "source": "somewhere, Table 1",
        "source_group": "g1",
        "role": "fit",
        "check_rules": [],
    }
    return {**entry, **overrides}


TWO = [
    _entry(),
    _entry(
        id="b",
        spec="runs/b.yaml",
        generation="ampere",
        category="moe",
        measured_s=4.0,
        source_group="g2",
        role="validation",
    ),
]
# Hand-priced: a takes 11 s against 10 measured (+10 %), b 3 s against 4 (−25 %).
PREDICTED = {"a": 11.0, "b": 3.0}


def _scored() -> tuple[Scored, ...]:
    return score(parse_index(json.dumps(TWO)), lambda run: PREDICTED[run.id])


def test_signed_errors_by_hand() -> None:
    a, b = _scored()
    assert a.error == pytest.approx(0.10) and b.error == pytest.approx(-0.25)
    assert (a.predicted_s, b.predicted_s) == (11.0, 3.0)


def test_aggregates_by_hand() -> None:
    found = {(x.axis, x.group): x for x in aggregates(_scored())}
    fit, held = found["role", "fit"], found["role", "validation"]
    assert (fit.runs, fit.mean_abs_error, fit.worst_id) == (1, pytest.approx(0.10), "a")
    assert (held.runs, held.mean_abs_error) == (1, pytest.approx(0.25))
    assert held.worst_error == pytest.approx(-0.25)
    # Generation, category, source and unpriced count only the validation run b, which has no
    # unpriced cost (the default: none known).
    assert set(found) == {
        ("role", "fit"),
        ("role", "validation"),
        ("generation", "ampere"),
        ("category", "moe"),
        ("generation and category", "ampere moe"),
        ("source", "g2"),
        ("unpriced", "none"),
    }


def test_mean_and_worst_over_two_runs() -> None:
    both = [{**entry, "role": "validation", "source_group": "g"} for entry in TWO]
    found = {(x.axis, x.group): x for x in aggregates(_scored_of(both))}
    pooled = found["source", "g"]
    # mean |e| = (0.10 + 0.25)/2; the worst is b's −25 %, sign kept; the signed mean
    # (0.10 − 0.25)/2 = −0.075.
    assert pooled.mean_abs_error == pytest.approx(0.175)
    assert (pooled.worst_error, pooled.worst_id) == (pytest.approx(-0.25), "b")
    assert pooled.mean_error == pytest.approx(-0.075)


def test_model_aggregates_group_validation_runs_by_the_preset_named() -> None:
    # Both runs validation, both naming one preset: one model group of two, signed mean −7.5 %;
    # a run stated field by field (model_of None) is in no model group.
    both = [{**entry, "role": "validation", "source_group": "g"} for entry in TWO]
    scored = _scored_of(both)
    found = {(x.axis, x.group): x for x in aggregates(scored, lambda run: "llama3-8b")}
    pooled = found["model", "llama3-8b"]
    assert (pooled.runs, pooled.mean_error) == (2, pytest.approx(-0.075))
    only_a = {
        (x.axis, x.group): x for x in aggregates(scored, lambda r: "m" if r.id == "a" else None)
    }
    assert only_a["model", "m"].runs == 1
    assert [k for k in only_a if k[0] == "model"] == [("model", "m")]


def _scored_of(entries: list[dict[str, Any]]) -> tuple[Scored, ...]:
    return score(parse_index(json.dumps(entries)), lambda run: PREDICTED[run.id])


# Three validation runs of one publication and a fourth of another, hand-priced. Tokens per step
# per GPU: a 8,000, b 4,000, c 8,000, d 8,000.
RANKED = [
    _entry(id="a", measured_s=10.0, role="validation"),
    _entry(id="b", spec="runs/b.yaml", measured_s=4.0, role="validation"),
    _entry(id="c", spec="runs/c.yaml", measured_s=10.1, role="validation"),
    _entry(id="d", spec="runs/d.yaml", measured_s=5.0, role="validation", source_group="g2"),
    _entry(id="e", spec="runs/e.yaml", measured_s=5.0),  # a fit run: in no pair
]
RANK_PREDICTED = {"a": 9.0, "b": 5.0, "c": 9.5, "d": 6.0, "e": 5.0}
RANK_TOKENS = {"a": 8000.0, "b": 4000.0, "c": 8000.0, "d": 8000.0, "e": 8000.0}


def test_comparisons_by_hand() -> None:
    runs = parse_index(json.dumps(RANKED))
    scored = score(runs, lambda run: RANK_PREDICTED[run.id])
    pairs = comparisons(scored, lambda run: run.source_group, lambda run: RANK_TOKENS[run.id])
    # Tokens/s per GPU measured: a 800, b 1,000, c 792.1; planc: a 888.9, b 800, c 842.1.
    # a–c differ by 1.0 % measured, a tie; d is another publication's, e a fit run.
    assert [(p.first, p.second) for p in pairs] == [("a", "b"), ("b", "c")]
    ab, bc = pairs
    assert ab.measured_ratio == pytest.approx(800 / 1000)
    assert ab.predicted_ratio == pytest.approx((8000 / 9.0) / 800)
    assert not ab.concordant  # b is faster per GPU, planc says a
    assert bc.measured_ratio == pytest.approx(1000 / (8000 / 10.1))
    assert bc.predicted_ratio == pytest.approx(800 / (8000 / 9.5))
    assert not bc.concordant  # measured b over c 1.26, planc 0.95
    # with planc pricing b at 3 s (1,333 tokens/s per GPU) both orders are right
    flipped = score(runs, lambda run: {**RANK_PREDICTED, "b": 3.0}[run.id])
    again = comparisons(flipped, lambda run: run.source_group, lambda run: RANK_TOKENS[run.id])
    assert [p.concordant for p in again] == [True, True]


def test_the_corpus_pairs_are_one_publication_one_model_gpu_and_format() -> None:
    # scored at the measured times (the pairing does not read planc's): the pairs of the
    # Ranking section of docs/validation.md, whose currency test_the_committed_table_is_current
    # holds
    jobs = {run.id: job_of(spec_path(str(INDEX), run)) for run in RUNS}
    by_id = {run.id: run for run in RUNS}
    pairs = comparisons(
        score(RUNS, lambda run: run.measured_s),
        lambda run: comparable(run, jobs[run.id]),
        lambda run: tokens_per_gpu(jobs[run.id]),
    )
    assert len(pairs) >= 50 and all(pair.concordant for pair in pairs)
    for pair in pairs:
        a, b = by_id[pair.first], by_id[pair.second]
        ja, jb = jobs[a.id], jobs[b.id]
        assert a.role is RunRole.VALIDATION and b.role is RunRole.VALIDATION
        assert (a.source_group, a.gpu, ja.model) == (b.source_group, b.gpu, jb.model)
        assert (ja.training.precision, ja.training.fp8_recipe) == (
            jb.training.precision,
            jb.training.fp8_recipe,
        )
        per_gpu = [
            j.training.B * j.training.s / (r.measured_s * j.cluster.world)
            for r, j in ((a, ja), (b, jb))
        ]
        assert pair.measured_ratio == pytest.approx(per_gpu[0] / per_gpu[1])


def test_repeats_by_hand() -> None:
    # a and c are one configuration (key "x"), b another, d has no key: one pair, a–c. c ran
    # 10.1 s where a ran 10.0 s, so a's throughput over c's is 10.1/10.0; planc prices them
    # 9.0 and 9.5 s here, 9.5/9.0.
    runs = parse_index(json.dumps(RANKED))
    scored = score(runs, lambda run: RANK_PREDICTED[run.id])
    keys = {"a": "x", "b": "y", "c": "x", "d": None, "e": "y"}
    (pair,) = [p for p in repeats(scored, lambda run: keys[run.id]) if p.first == "a"]
    assert (pair.first, pair.second) == ("a", "c")
    assert pair.measured_ratio == pytest.approx(10.1 / 10.0)
    assert pair.predicted_ratio == pytest.approx(9.5 / 9.0)
    # b and e share "y" although e is a fit run: a repeat counts runs of any role
    assert [(p.first, p.second) for p in repeats(scored, lambda run: keys[run.id])] == [
        ("a", "c"),
        ("b", "e"),
    ]


def test_the_corpus_repeats_are_one_spec_on_one_release() -> None:
    # Each repeat: both specs equal but for their names, on a stated release (not latest);
    # its measured ratio is the two measured steps' (the same tokens per GPU)
    jobs = {run.id: job_of(spec_path(str(INDEX), run)) for run in RUNS}
    by_id = {run.id: run for run in RUNS}
    found = repeats(score(RUNS, lambda run: run.measured_s), lambda r: one_configuration(jobs[r.id]))
    assert len(found) >= 4
    for pair in found:
        a, b = jobs[pair.first], jobs[pair.second]
        assert replace(a, name="", rules=b.rules, run=b.run) == replace(b, name="")
        assert a.training.framework_release != "latest"
        measured = by_id[pair.second].measured_s / by_id[pair.first].measured_s
        assert pair.measured_ratio == pytest.approx(measured)


def test_leave_one_source_out_fits_without_the_held_out_group() -> None:
    runs = parse_index(json.dumps(TWO))
    splits = {split.held_out: split for split in leave_one_source_out(runs)}
    assert [r.id for r in splits["g1"].fit] == [] and [r.id for r in splits["g1"].test] == ["a"]
    assert [r.id for r in splits["g2"].fit] == ["a"] and [r.id for r in splits["g2"].test] == ["b"]
    # A "fit" that doubles the step when it saw run a: g2 is scored by that predictor.
    seen: list[tuple[str, ...]] = []

    def fitted(fit: tuple[Run, ...]) -> Any:
        seen.append(tuple(r.id for r in fit))
        factor = 2.0 if fit else 1.0
        return lambda run: factor * PREDICTED[run.id]

    g1, g2 = held_out_errors(runs, fitted)
    assert seen == [(), ("a",)]
    assert (g1.group, g1.mean_abs_error) == ("g1", pytest.approx(0.10))
    assert (g2.group, g2.worst_error) == ("g2", pytest.approx(6.0 / 4.0 - 1))


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        (_entry(colour="red"), "run a: unknown key(s) colour"),
        ({k: v for k, v in _entry().items() if k != "source"}, "run a: missing field(s) source"),
        (_entry(role="test"), "run a: role 'test' is not one of fit, validation"),
        (_entry(generation="volta"), "run a: generation 'volta' is not one of"),
        (_entry(measured_s=0), "run a: measured_s must be positive"),
        (_entry(measured_s="12.9"), "run a: measured_s must be a number"),
        (_entry(measured_s=True), "run a: measured_s must be a number"),
        (_entry(spec="../a.yaml"), "run a: spec '../a.yaml' must be a relative path"),
        (_entry(check_rules=["E501"]), "run a: check_rules must be a list of rule ids"),
        (_entry(source=""), "run a: source must be a non-empty string"),
        ({**_entry(), "id": 7}, "run at entry 0: id must be a non-empty string"),
    ],
)
def test_a_bad_entry_is_an_error_naming_the_run(entry: dict[str, Any], words: str) -> None:
    with pytest.raises(CorpusError, match=re.escape(words)):
        parse_index(json.dumps([entry]))


def test_a_repeated_id_and_a_bad_file_are_errors() -> None:
    with pytest.raises(CorpusError, match="run a: the id is used twice"):
        parse_index(json.dumps([_entry(), _entry(spec="runs/other.yaml")]))
    with pytest.raises(CorpusError, match="must be a JSON list"):
        parse_index(json.dumps(_entry()))
    with pytest.raises(CorpusError, match="not valid JSON"):
        parse_index('[{"id": NaN}]')


def test_a_spec_planc_cannot_load_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "a.yaml").write_text("version: 1\nname: a\n")
    (tmp_path / "runs.json").write_text(json.dumps([_entry()]))
    with pytest.raises(CorpusError, match=r"a\.yaml: PLC"):
        score_corpus(str(tmp_path / "runs.json"))


def test_a_spec_planc_refuses_is_an_error_naming_the_rule(tmp_path: Path) -> None:
    # 32 layers over 3 pipeline stages: PLC004, a precondition, so there is no plan to price.
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "a.yaml").write_text(
        "version: 1\nname: a\nmodel: {preset: llama3-8b}\nhardware: {gpu: h100-sxm, nodes: 3}\n"
        "parallelism: {pipeline: 3}\ntraining: {seq_len: 4096, global_batch: 64}\n"
    )
    (tmp_path / "runs.json").write_text(json.dumps([_entry()]))
    with pytest.raises(CorpusError, match=r"a\.yaml: refused by PLC004"):
        score_corpus(str(tmp_path / "runs.json"))


def test_explain_quotes_the_validation_error_of_the_gpus_generation() -> None:
    # The error bar is the validation runs' aggregate for the GPU's generation, as
    # docs/validation.md's table states it, not a number of its own.
    import json as _json

    from click.testing import CliRunner

    from planc.cli.main import main
    from planc.presets.accuracy import ACCURACY

    table = _json.loads(Path(ACCURACY).read_text(encoding="utf-8"))["generations"]["hopper"]
    spec = Path(__file__).parent.parent / "examples" / "llama3-70b-8x8.yaml"
    text = CliRunner().invoke(main, ["explain", str(spec)]).output
    mean = f"±{table['mean_abs_error'] * 100:.1f} % mean"
    assert (
        f"{mean}, worst {table['worst_error'] * 100:+.1f} %, on {table['runs']} validated hopper runs"
        in text
    )
    out = CliRunner().invoke(main, ["explain", str(spec), "--format", "json"]).output
    bar = _json.loads(out)["step"]["model_error"]
    assert bar == {
        "generation": "hopper",
        "validated_runs": table["runs"],
        "mean_abs_error": table["mean_abs_error"],
        "worst_error": table["worst_error"],
    }
    runs = [
        r
        for r in read_index(str(INDEX))
        if r.generation.value == "hopper" and r.role.value == "validation"
    ]
    assert len(runs) == table["runs"]


def test_search_and_the_report_quote_the_same_error_bar(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from planc.cli.main import main
    from planc.presets.accuracy import ACCURACY

    table = json.loads(Path(ACCURACY).read_text(encoding="utf-8"))["generations"]["hopper"]
    words = (
        f"±{table['mean_abs_error'] * 100:.1f} % mean, worst {table['worst_error'] * 100:+.1f} %"
    )
    spec = ROOT / "examples" / "llama3-8b-1node.yaml"
    found = CliRunner().invoke(main, ["search", str(spec), "--format", "json"]).output
    assert json.loads(found)["model_error"]["validated_runs"] == table["runs"]
    assert words in CliRunner().invoke(main, ["search", str(spec)]).output
    page = tmp_path / "report.html"
    assert CliRunner().invoke(main, ["report", str(spec), "-o", str(page)]).exit_code == 0
    assert words in page.read_text(encoding="utf-8")


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.id)
def test_each_runs_declared_category_is_the_rule_explain_applies(run: Run) -> None:
    # explain quotes the error bar of the spec's category; the category is what runs.json
    # declares for the runs like it: MoE first, then fully sharded, pipeline, context, dense.
    from planc.comm.schedule import sharding_stage
    from planc.perf.validation import category_of
    from planc.plannable import plannable

    plan = plannable(job_of(spec_path(str(INDEX), run)))
    assert not isinstance(plan, tuple)
    found = category_of(
        plan.model.moe is not None, sharding_stage(plan) == 3, plan.layout.p, plan.layout.c
    )
    assert found is run.category


def _doc_row(axis: str, group: str) -> list[str]:
    """The cells of docs/validation.md's aggregate row of `group` by `axis`, as printed: by,
    group, runs, mean |error|, worst, worst run, signed mean."""
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[:2] == [axis, group]:
            return cells
    raise AssertionError(f"no {axis} row {group}")


def _category_row(axis: str, group: str) -> tuple[int, str, str]:
    """(runs, mean, worst) of docs/validation.md's row of `group` by `axis`, as printed."""
    cells = _doc_row(axis, group)
    return int(cells[2]), cells[3], cells[4]


def test_explain_quotes_the_error_of_runs_of_the_specs_category() -> None:
    # A FSDP2 spec on H100 (NeMo AutoModel's 70B layout) gets the bar of the Hopper fsdp runs
    # as docs/validation.md prints it, beside the generation's; JSON the same numbers.
    from click.testing import CliRunner

    from planc.cli.main import main

    runs, mean, worst = _category_row("generation and category", "hopper fsdp")
    spec = SPECS / "automodel-llama3-70b-64xh100.yaml"
    text = CliRunner().invoke(main, ["explain", str(spec)]).output
    expected = (
        f"model error on hopper fsdp runs: ±{mean.replace(' %', '')} % mean, worst {worst}, "
        f"on {runs} validated hopper fsdp runs"
    )
    assert expected in text
    out = CliRunner().invoke(main, ["explain", str(spec), "--format", "json"]).output
    bar = json.loads(out)["step"]["model_error_category"]
    assert bar["category"] == "fsdp" and bar["validated_runs"] == runs
    assert bar["generation"] == "hopper"
    assert f"{bar['mean_abs_error'] * 100:.1f} %" == mean
    declared = [
        r
        for r in RUNS
        if r.category is RunCategory.FSDP
        and r.role is RunRole.VALIDATION
        and r.generation == "hopper"
    ]
    assert len(declared) == runs


def test_the_category_bar_is_the_generations_where_it_has_enough_runs() -> None:
    from planc.presets.accuracy import MIN_CELL_RUNS, _table, category_bar, category_json

    cells = _table()["cells"]
    # Hopper's MoE runs (7 validated) are quoted as such, not all generations' MoE runs.
    assert cells["hopper"]["moe"]["runs"] >= MIN_CELL_RUNS
    bar = category_bar("moe", "h100-sxm")
    assert bar is not None and bar.group == "hopper moe"
    assert bar.runs == cells["hopper"]["moe"]["runs"]
    data = category_json("moe", None, "h100-sxm")
    assert data is not None and (data["category"], data["generation"]) == ("moe", "hopper")
    # Hopper has fewer dense runs than that: every generation's dense runs are quoted.
    assert cells["hopper"]["dense"]["runs"] < MIN_CELL_RUNS
    dense = category_bar("dense", "h100-sxm")
    assert dense is not None and dense.group == "dense"
    assert dense.runs == _table()["categories"]["dense"]["runs"]
    # A GPU of no generation (MI300X) gets the category's.
    other = category_bar("moe", "mi300x")
    assert other is not None and other.group == "moe"


def test_a_moe_search_names_the_error_of_moe_runs_on_its_generation() -> None:
    from planc.presets.accuracy import category_bar
    from planc.search.output import describe
    from planc.spec.load import load_path

    examples = Path(__file__).resolve().parent.parent / "examples"
    loaded = load_path(str(examples / "mixtral-8x7b-64xh100.yaml"))
    assert loaded.job is not None
    bar = category_bar("moe", "h100-sxm")
    assert bar is not None
    assert f"on {bar.runs} validated hopper moe runs" in describe(loaded.job)
    dense = load_path(str(examples / "llama3-70b-8x8.yaml"))
    assert dense.job is not None and "moe runs" not in describe(dense.job)


def test_a_calibrated_spec_quotes_no_corpus_category_bar() -> None:
    from planc.presets.accuracy import category_json, category_words

    assert category_words("fsdp", {"accuracy": {}}) == ""
    assert category_json("fsdp", {"accuracy": {}}) is None
    assert category_words("no-such-category", None) == ""


def _model_row(preset: str) -> tuple[int, str, str, str]:
    """(runs, mean |error|, worst, signed mean) of docs/validation.md's row of model `preset`."""
    cells = _doc_row("model", preset)
    return int(cells[2]), cells[3], cells[4], cells[6]


def _validation_runs_naming(preset: str) -> list[Run]:
    """The validation runs whose spec names model preset `preset`, read from the YAML itself."""
    import yaml

    def named(run: Run) -> Any:
        data = yaml.safe_load(Path(spec_path(str(INDEX), run)).read_text(encoding="utf-8"))
        return (data.get("model") or {}).get("preset")

    return [r for r in RUNS if r.role is RunRole.VALIDATION and named(r) == preset]


def test_explain_quotes_the_error_of_runs_of_the_specs_model_preset() -> None:
    # A GPT-OSS spec gets the bar of the validation runs naming its preset, as
    # docs/validation.md prints it, called a bias where nearly every run errs one way; JSON the
    # same numbers. The count is the specs naming the preset, read from the YAML.
    from click.testing import CliRunner

    from planc.cli.main import main

    runs, mean, worst, signed = _model_row("gpt-oss-120b")
    assert runs == len(_validation_runs_naming("gpt-oss-120b"))
    spec = SPECS / "bridge2604-gpt-oss-120b-64xh100-bf16.yaml"
    text = CliRunner().invoke(main, ["explain", str(spec)]).output
    expected = (
        f"model error on gpt-oss-120b runs: ±{mean.replace(' %', '')} % mean, worst {worst}, "
        f"signed mean {signed} (a bias: planc too fast), on {runs} validated runs of this preset"
    )
    assert expected in text
    out = CliRunner().invoke(main, ["explain", str(spec), "--format", "json"]).output
    bar = json.loads(out)["step"]["model_error_preset"]
    assert bar["preset"] == "gpt-oss-120b" and bar["validated_runs"] == runs
    assert f"{bar['mean_error'] * 100:+.1f} %" == signed


def test_a_preset_with_few_validated_runs_has_no_model_bar() -> None:
    # Kimi K2 has one validated run: too few to quote (MIN_CELL_RUNS); a model stated field by
    # field has no preset; a calibration replaces the corpus's bars with the user's own.
    from planc.presets.accuracy import MIN_CELL_RUNS, model_bar, model_json, model_words

    assert len(_validation_runs_naming("kimi-k2")) < MIN_CELL_RUNS
    assert model_bar("kimi-k2") is None and model_words("kimi-k2", None) == ""
    assert model_bar(None) is None
    assert model_bar("llama3-70b") is not None
    assert model_words("llama3-70b", {"accuracy": None}) == ""
    assert model_json("llama3-70b", {"accuracy": None}) is None
    # Llama 3 70B errs both ways: no bias is claimed.
    assert "bias" not in model_words("llama3-70b", None)


def test_a_config_json_of_a_preset_model_gets_that_presets_bar(tmp_path: Path) -> None:
    # GPT-OSS 120B's own config.json, read field by field, is the gpt-oss-120b preset's model:
    # explain quotes that preset's validated runs for it; one layer fewer is another model.
    from click.testing import CliRunner

    from planc.cli.main import main
    from planc.spec.job import matching_preset

    config = tmp_path / "gpt-oss-120b" / "config.json"
    config.parent.mkdir()
    config.write_bytes(
        (ROOT / "tests" / "data" / "hf" / "gpt-oss-120b" / "config.json").read_bytes()
    )
    spec = SPECS / "bridge2604-gpt-oss-120b-64xh100-bf16.yaml"
    text = spec.read_text(encoding="utf-8").replace(
        "model: {preset: gpt-oss-120b}", f"model: {{hf_config: {config}}}"
    )
    written = tmp_path / "spec.yaml"
    written.write_text(text, encoding="utf-8")
    out = CliRunner().invoke(main, ["explain", str(written)]).output
    runs = _model_row("gpt-oss-120b")[0]
    assert f"on {runs} validated runs of this preset" in out
    plan = job_of(str(written))
    assert plan.model.preset is None and matching_preset(plan.model, 4096) == "gpt-oss-120b"
    from dataclasses import replace

    assert matching_preset(replace(plan.model, L=plan.model.L - 2), 4096) is None


def test_search_json_quotes_the_model_presets_bar() -> None:
    from click.testing import CliRunner

    from planc.cli.main import main

    runs, _, _, signed = _model_row("llama3-70b")
    spec = ROOT / "examples" / "llama3-70b-8x8.yaml"
    found = json.loads(CliRunner().invoke(main, ["search", str(spec), "--format", "json"]).output)
    bar = found["model_error_preset"]
    assert bar["preset"] == "llama3-70b" and bar["validated_runs"] == runs
    assert f"{bar['mean_error'] * 100:+.1f} %" == signed
