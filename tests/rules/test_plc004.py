"""PLC004 layers split over the pipeline stages (and virtual chunks).

Base: examples/llama3-70b-8x8.yaml: 80 layers, pipeline 4, virtual_stages 1, m = 512 / 2 = 256.
"""

from __future__ import annotations

from planc.findings import FileResult, Finding, Severity

from conftest import check_overlay, check_text, rules_fired, spec_text, value_position

BASE = "llama3-70b-8x8.yaml"


def findings_of(result: FileResult, rule: str = "PLC004") -> list[Finding]:
    return [f for f in result.findings if f.rule == rule]


def list_item_position(text: str, key_line: str, index: int) -> tuple[int, int]:
    """(line, column) of item `index` of the block list under `key_line` (`- item` lines)."""
    lines = text.splitlines()
    item = lines.index(key_line) + 1 + index
    assert lines[item].lstrip().startswith("- ")
    return item + 1, lines[item].index("- ") + 3


def list_position(text: str, key_line: str) -> tuple[int, int]:
    """(line, column) where the block list under `key_line` starts: its first dash."""
    lines = text.splitlines()
    first = lines.index(key_line) + 1
    return first + 1, lines[first].index("- ") + 1


def stage_overlay(stages: list[int], virtual: int = 1) -> dict[str, object]:
    return {"parallelism": {"stage_layers": stages, "virtual_stages": virtual}}


def test_even_split_passes() -> None:
    # 80 / 4 = 20 layers per stage.
    assert "PLC004" not in rules_fired(check_overlay(None, BASE))


def test_layers_not_divisible_by_pipeline() -> None:
    # 78 / 4 = 19.5; the nearest multiples of 4 are 76 and 80.
    text = spec_text({"model": {"layers": 78}}, BASE)
    result = check_text(text)
    assert rules_fired(result) == {"PLC004"}
    (finding,) = findings_of(result)
    assert finding.field == "model.layers"
    assert finding.severity is Severity.ERROR
    assert "78" in finding.message and "= 4 chunks" in finding.message
    assert "19.50" in finding.message
    assert "76" in finding.fix and "80" in finding.fix
    assert (finding.line, finding.column) == value_position(text, "  layers: 78")


def test_layers_divisible_by_pipeline_but_not_by_virtual_chunks() -> None:
    # 84 % 4 = 0 but with virtual_stages 2 there are 4 × 2 = 8 chunks: 84 / 8 = 10.5; the
    # nearest multiples of 8 are 80 and 88.
    result = check_overlay({"model": {"layers": 84}, "parallelism": {"virtual_stages": 2}}, BASE)
    (finding,) = findings_of(result)
    assert "4 × 2 = 8 chunks" in finding.message and "10.50" in finding.message
    assert "80" in finding.fix and "88" in finding.fix
    # Without virtual stages the same 84 layers split 21 per stage.
    assert "PLC004" not in rules_fired(check_overlay({"model": {"layers": 84}}, BASE))


def test_preset_layers_are_located_at_the_pipeline_degree() -> None:
    # 80 preset layers over pipeline 32 (tensor 2, data 1: 2 × 32 = 64 GPUs): 80 / 32 = 2.5.
    # model.layers is not in the file, so the finding points at parallelism.pipeline.
    overlay = {"parallelism": {"tensor": 2, "pipeline": 32, "data": 1, "zero_stage": 0}}
    text = spec_text(overlay, BASE)
    (finding,) = findings_of(check_text(text))
    assert "80" in finding.message and "32" in finding.message
    assert (finding.line, finding.column) == value_position(text, "  pipeline: 32")


def test_uneven_stage_layers_that_add_up_pass() -> None:
    # 19 + 21 + 21 + 19 = 80, four entries, none empty.
    assert "PLC004" not in rules_fired(check_overlay(stage_overlay([19, 21, 21, 19]), BASE))


def test_stage_layers_with_the_wrong_length() -> None:
    # Two entries for pipeline 4; the sum 40 + 40 = 80 is right.
    text = spec_text(stage_overlay([40, 40]), BASE)
    (finding,) = findings_of(check_text(text))
    assert finding.field == "parallelism.stage_layers"
    assert "2 entries" in finding.message and "pipeline = 4" in finding.message
    assert "4 entries" in finding.fix
    assert (finding.line, finding.column) == list_position(text, "  stage_layers:")


def test_stage_layers_with_the_wrong_sum() -> None:
    # 20 + 20 + 20 + 19 = 79 ≠ 80.
    (finding,) = findings_of(check_overlay(stage_overlay([20, 20, 20, 19]), BASE))
    assert finding.field == "parallelism.stage_layers"
    assert "79" in finding.message and "80" in finding.message
    assert "80" in finding.fix


def test_an_empty_stage_is_located_at_its_entry() -> None:
    # 0 + 27 + 27 + 26 = 80 with four entries, but stage 0 holds nothing.
    text = spec_text(stage_overlay([0, 27, 27, 26]), BASE)
    (finding,) = findings_of(check_text(text))
    assert finding.field == "parallelism.stage_layers[0]"
    assert "stage 0" in finding.message
    assert finding.fix
    assert (finding.line, finding.column) == list_item_position(text, "  stage_layers:", 0)


def test_stages_not_divisible_by_virtual_stages() -> None:
    # virtual_stages 2: 19 and 19 are odd (stages 0 and 3), 21 and 21 are odd too (1 and 2).
    # [18, 22, 22, 18] has even stages and passes.
    text = spec_text(stage_overlay([19, 21, 21, 19], virtual=2), BASE)
    found = findings_of(check_text(text))
    assert {f.field for f in found} == {f"parallelism.stage_layers[{i}]" for i in range(4)}
    third = next(f for f in found if f.field == "parallelism.stage_layers[2]")
    assert "21" in third.message and "virtual_stages = 2" in third.message
    assert (third.line, third.column) == list_item_position(text, "  stage_layers:", 2)
    assert "PLC004" not in rules_fired(check_overlay(stage_overlay([18, 22, 22, 18], 2), BASE))


def test_every_stage_layers_problem_is_reported() -> None:
    # [0, 40] on pipeline 4: wrong length (2 ≠ 4), wrong sum (40 ≠ 80), stage 0 empty.
    found = findings_of(check_overlay(stage_overlay([0, 40]), BASE))
    messages = " | ".join(f.message for f in found)
    assert len(found) == 3, messages
    assert "2 entries" in messages and "40" in messages and "stage 0" in messages


def test_a_preset_keeps_its_layers_so_the_fix_changes_the_layout() -> None:
    """Llama 3.1 405B's 126 layers on 8 nodes (64 GPUs), tensor 8, pipeline 4: 126 / 4 = 31.5.
    A preset's depth is the model's, so the fix is a layout: stage_layers [32, 32, 31, 31]
    (126 = 2·32 + 2·31), or a pipeline degree p' with 126 % p' == 0 that 64 / 8 = 8 splits
    into (p' ∈ {1, 2, 4, 8}): 1 or 2. With virtual_stages 2: 63 chunks of 2 over 4 stages,
    [32, 32, 32, 30], and only p' = 1 splits 126 into 2·p' chunks."""
    overlay = {"model": {"preset": "llama3-405b"}, "parallelism": {"pipeline": 4, "data": 2}}
    (finding,) = findings_of(check_overlay(overlay, BASE))
    # Megatron's own way first, as NVIDIA's 405B recipes split it: the embedding and the loss
    # counted as layers, 126 + 2 = 128 = 4 · 32.
    counted = "set parallelism.embedding_in_pipeline_split and loss_in_pipeline_split"
    assert finding.fix == (
        f"{counted} (126 + 2 = 128 over 4 chunks) or "
        "give parallelism.stage_layers [32, 32, 31, 31] or use pipeline 1 or 2 "
        "(the llama3-405b preset's 126 layers are the model's)"
    )
    both = {"parallelism": {"pipeline": 4, "data": 2, "virtual_stages": 2}}
    overlay_v = {"model": {"preset": "llama3-405b"}, **both}
    (finding,) = findings_of(check_overlay(overlay_v, BASE))
    assert finding.fix.startswith(
        f"{counted} (126 + 2 = 128 over 8 chunks) or "
        "give parallelism.stage_layers [32, 32, 32, 30] or use pipeline 1 "
    )
    split = {"embedding_in_pipeline_split": True, "loss_in_pipeline_split": True}
    counted_v = {**overlay_v, "parallelism": {**both["parallelism"], **split}}
    assert "PLC004" not in rules_fired(check_overlay(counted_v, BASE))
    # The layout it gives passes PLC004.
    fixed = {**overlay, "parallelism": {**overlay["parallelism"], "stage_layers": [32, 32, 31, 31]}}
    assert "PLC004" not in rules_fired(check_overlay(fixed, BASE))


def test_layers_one_short_of_a_split_get_megatron_s_counted_split_first() -> None:
    # 78 layers over pipeline 4 (19.5 each) with no preset to keep: 78 + 2 = 80 = 4 · 20 once the
    # embedding and the loss count as layers (Megatron's --account-for-*-in-pipeline-split), and
    # that layout passes.
    overlay = {"model": {"layers": 78}}
    (finding,) = findings_of(check_overlay(overlay, BASE))
    assert finding.fix.startswith(
        "set parallelism.embedding_in_pipeline_split and loss_in_pipeline_split "
        "(78 + 2 = 80 over 4 chunks) or give parallelism.stage_layers explicitly"
    )
    split = {"embedding_in_pipeline_split": True, "loss_in_pipeline_split": True}
    assert "PLC004" not in rules_fired(check_overlay({**overlay, "parallelism": split}, BASE))
