"""Uneven virtual stages: every model chunk its own layers, stated as Megatron-Core states them.

Megatron-LM's pipeline layout string (`--pipeline-model-parallel-layout`, read by
`megatron/core/transformer/pipeline_parallel_layer_layout.py`) and its even split with the
embedding and the loss counted as layers (`--account-for-embedding-in-pipeline-split`,
`--account-for-loss-in-pipeline-split`). Expected values are worked by hand below.

Base: examples/llama3-70b-8x8.yaml (pipeline 4, 80 layers) with 78 layers, so that the 78 + 2
"layers" split into 4 × 2 chunks of 10, the first chunk E + 9 and the last 9 + L.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from planc.compile.launchers import megatron_args
from planc.spec.pipeline_layout import parse_layout, write_layout

from conftest import check_overlay, compiled, job_of, rules_fired

BASE = "llama3-70b-8x8.yaml"
ACCOUNTED = {
    "model": {"layers": 78},
    "parallelism": {
        "virtual_stages": 2,
        "embedding_in_pipeline_split": True,
        "loss_in_pipeline_split": True,
    },
}
# The same split, written out: virtual stages 0..7 in run order (chunk·4 + stage).
LAYOUT = "Et*9|(t*10|)*6,t*9L"


def layout_overlay(text: str, layers: int = 78, virtual: int = 2) -> dict[str, object]:
    return {
        "model": {"layers": layers},
        "parallelism": {"virtual_stages": virtual, "pipeline_layout": text},
    }


def plc004(overlay: dict[str, object]) -> list[str]:
    result = check_overlay(overlay, BASE)
    return [f.message for f in result.findings if f.rule == "PLC004"]


# ----------------------------------------------------------------------------- the string


def test_megatron_docstring_example_parses() -> None:
    # parse_str_to_list's own example: "Ettt|(tt|)*29,m|L" is
    # [["E","t","t","t"]] + [["t","t"]]*29 + [["m"],["L"]].
    parsed = parse_layout("Ettt|(tt|)*29,m|L")
    assert parsed.error is None
    assert parsed.stages == ("Ettt",) + ("tt",) * 29 + ("m", "L")
    assert parsed.decoder_layers() == (3,) + (2,) * 29 + (0, 0)


def test_layout_syntax_refused_as_megatron_does() -> None:
    assert "invalid layer character 'x'" in (parse_layout("Ex|L").error or "")
    assert "invalid layer character '('" in (parse_layout("E(t|L").error or "")
    # A short string that unrolls to 10^10 characters is refused before it is unrolled.
    assert "unrolls to more than" in (parse_layout("(t*99999|)*99999").error or "")


@given(st.lists(st.text(alphabet="tm", max_size=6), min_size=1, max_size=12))
def test_written_layout_reads_back(middle: list[str]) -> None:
    stages = ("E" + middle[0], *middle[1:-1], *(middle[-1:] if len(middle) > 1 else ()))
    stages = (*stages[:-1], stages[-1] + "L")
    assert parse_layout(write_layout(stages)).stages == stages


# ----------------------------------------------------------------------------- the split


def test_embedding_and_loss_counted_split_the_chunks() -> None:
    # (78 + 2) / (4 · 2) = 10 per chunk; chunk 0 (virtual stage 0) has E + 9, the last (virtual
    # stage 7 = stage 3, chunk 1) 9 + L. Run order: [0,9) [9,19) [19,29) [29,39) | [39,49)
    # [49,59) [59,69) [69,78).
    lay = job_of(ACCOUNTED, BASE).layout
    assert lay.stage_layers == (19, 20, 20, 19)
    assert lay.chunks == (
        ((0, 9), (39, 49)),
        ((9, 19), (49, 59)),
        ((19, 29), (59, 69)),
        ((29, 39), (69, 78)),
    )


def test_layout_string_gives_the_same_split() -> None:
    assert job_of(layout_overlay(LAYOUT), BASE).layout.chunks == job_of(ACCOUNTED, BASE).layout.chunks


def test_layout_chunks_need_not_divide_their_stage() -> None:
    # Stage 0: 3 + 16 layers, stage 3: 16 + 3 (19 each, which v = 2 does not divide).
    text = "Et*3|(t*10|)*2,t*16|t*16|(t*10|)*2,t*3L"
    lay = job_of(layout_overlay(text), BASE).layout
    assert [lay.chunk_layers(r) for r in range(4)] == [(3, 16), (10, 10), (10, 10), (16, 3)]
    assert "PLC004" not in rules_fired(check_overlay(layout_overlay(text), BASE))


def test_first_stage_weights_follow_its_chunks() -> None:
    # Llama 3 70B at t = 8: a layer holds (2·h·k·(n+g) + 3·h·f)/t + 2·h parameters per TP rank,
    # h = 8192, k = 128, n = 64, g = 8, f = 28672: (150,994,944 + 704,643,072)/8 + 16,384 =
    # 106,971,136; stage 0 holds 9 + 10 = 19 layers, stage 1 20.
    from planc.memory.params import rank_parameters

    plan = job_of(ACCOUNTED, BASE)
    per_layer = (2 * 8192 * 128 * 72 + 3 * 8192 * 28672) // 8 + 2 * 8192
    assert per_layer == 106_971_136
    for stage, layers in enumerate((19, 20, 20, 19)):
        params = rank_parameters(plan, stage)
        assert (params.layers, params.per_layer) == (layers, per_layer)


# ----------------------------------------------------------------------------- PLC004


def test_layout_with_wrong_stage_count() -> None:
    (message,) = plc004(layout_overlay("Et*9|(t*10|)*6,t*9|L"))
    assert "9 stages, not a multiple of pipeline = 4" in message


def test_layout_chunks_must_match_virtual_stages() -> None:
    (message,) = plc004(layout_overlay(LAYOUT, virtual=1))
    assert "8 stages = 4 × 2 chunks, but virtual_stages = 1" in message


def test_layout_must_hold_every_layer_once() -> None:
    assert "the layout has 79 decoder layers (t), the model 78" in plc004(
        layout_overlay("Et*10|(t*10|)*6,t*9L")
    )[0]
    assert "first layer must be the embedding" in plc004(layout_overlay("t*10|(t*10|)*6,Et*8L"))[0]
    assert "last layer must be the loss" in plc004(layout_overlay("Et*9|(t*10|)*6,Lt*9"))[0]
    assert "MTP layers (m), the model 0" in plc004(layout_overlay("Et*9|(t*10|)*6,t*9mL"))[0]


def test_layout_with_an_empty_stage_is_refused_not_a_traceback() -> None:
    # Virtual stage 2 holds nothing: Megatron passes the input on; planc refuses it.
    (message,) = plc004(layout_overlay("Et*12|t*11||(t*11|)*4,t*11L"))
    assert "virtual stage 2 is empty" in message
    # A stage with only the embedding is a stage.
    assert plc004(layout_overlay("E|(t*11|)*6,t*12L")) == []


def test_layout_excludes_stage_layers_and_counted_split() -> None:
    overlay = layout_overlay(LAYOUT)
    overlay["parallelism"] = {**overlay["parallelism"], "stage_layers": [19, 20, 20, 19]}  # type: ignore[dict-item]
    assert any("both split the layers" in m for m in plc004(overlay))


def test_counted_split_must_divide() -> None:
    # 80 + 2 = 82 over 4 × 2 chunks.
    overlay = {**ACCOUNTED, "model": {"layers": 80}}
    (message,) = plc004(overlay)
    assert "layers + embedding + loss = 82" in message


# ----------------------------------------------------------------------------- Megatron args


def test_megatron_gets_the_counted_split() -> None:
    args, _ = megatron_args(compiled(job_of(ACCOUNTED, BASE)))
    assert "--account-for-embedding-in-pipeline-split" in args
    assert "--account-for-loss-in-pipeline-split" in args
    assert "--num-virtual-stages-per-pipeline-rank 2" in args
    assert not any(a.startswith("--decoder-first") for a in args)


def test_megatron_gets_the_layout_string() -> None:
    text = "Et*3|(t*10|)*2,t*16|t*16|(t*10|)*2,t*3L"
    args, _ = megatron_args(compiled(job_of(layout_overlay(text), BASE)))
    (flag,) = [a for a in args if a.startswith("--pipeline-model-parallel-layout")]
    written = flag.split(" ", 1)[1].strip('"')
    assert parse_layout(written).stages == parse_layout(text).stages
    # Megatron takes the layout instead of any virtual-stage flag (validate_args).
    assert not any("virtual" in a for a in args)
