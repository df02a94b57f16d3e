"""planc verify on a corrupted plan.json (issue 30, item 9): every corruption of a compiled plan
is refused with its exit code (2 when the file is not a usable plan, 1 when it is one but its
numbers are wrong) and one line naming the field; never a traceback, never "verified"."""

from __future__ import annotations

import json
import math
import os
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from planc.cli.main import main
from planc.compile.plan import FORMAT_VERSION as COMPILED_VERSION
from planc.compile.plan import plan_json
from planc.verify import verify_text
from planc.verify.plandata import FORMAT_VERSION
from planc.verify.source import MAX_PLAN_BYTES, SCHEMA_FILE, PlanFormatError

from conftest import ROOT, compiled, job_of

Plan = dict[str, Any]


@pytest.fixture(scope="module")
def text70() -> str:
    """Llama 3 70B on 64 H100s (t = 8, p = 4, d = 2): one record per rank."""
    return plan_json(compiled(job_of(None, "llama3-70b-8x8.yaml")))


def _verify(tmp_path: Path, text: str) -> tuple[int, str, str]:
    out = tmp_path / "plan"
    out.mkdir(exist_ok=True)
    (out / "plan.json").write_text(text, encoding="utf-8")
    result = CliRunner().invoke(main, ["verify", str(out)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def _edited(text: str, edit: Callable[[Plan], None]) -> str:
    data: Plan = json.loads(text)
    edit(data)
    return json.dumps(data)


def _set(*path: str | int, value: Any) -> Callable[[Plan], None]:
    def edit(data: Plan) -> None:
        node: Any = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


def _memory_total_plus_half(data: Plan) -> None:
    data["ranks"][37]["memory"]["total"] += 0.5


def _member_as_string(data: Plan) -> None:
    data["groups"]["dp"][20][1] = str(data["groups"]["dp"][20][1])  # 32 groups: a long list


def _member_as_float(data: Plan) -> None:
    data["groups"]["tp"][3][2] = float(data["groups"]["tp"][3][2])


def _op_time_doubled(data: Plan) -> None:
    # Stage 0's TP all-gather; stages 1 to 3 have the same one, of the same calls and bytes.
    data["communication"]["ops"][0]["time_s"] *= 2


def _smaller_buffer_slower(data: Plan) -> None:
    # Stage 0's last ZeRO-1 bucket (63,086,592 bytes, one call) made slower per call than the
    # full 80,000,000-byte buckets of the same reduce-scatter on the same tier.
    ops = data["communication"]["ops"]
    small = next(o for o in ops if o["op"] == "reduce_scatter" and o["buffer_bytes"] == 63_086_592)
    full = next(o for o in ops if o["op"] == "reduce_scatter" and o["buffer_bytes"] == 80_000_000)
    small["time_s"] = 2 * full["time_s"] / full["calls"] * small["calls"]


def _billion_members(data: Plan) -> None:
    # 31,250 starts × 32,000 offsets: 10^9 members, from a file of a few hundred KB.
    data["groups"]["tp"] = {"starts": list(range(31_250)), "offsets": list(range(32_000))}


def _written(value: str, *path: str | int) -> Callable[[str], str]:
    """The number at `path` written as `value` (NaN and Infinity are not JSON, but Python's
    json.dumps writes them, as a corrupting tool could)."""

    def edit(text: str) -> str:
        data = json.loads(text)
        _set(*path, value=12345.678)(data)
        return json.dumps(data).replace("12345.678", value, 1)

    return edit


def _time(value: str) -> Callable[[str], str]:
    return _written(value, "communication", "ops", 0, "time_s")


def _nested(text: str, depth: int) -> str:
    data = json.loads(text)
    data["findings"] = "NESTED"
    return json.dumps(data).replace('"NESTED"', "[" * depth + "]" * depth, 1)


# (what, edit of the plan, exit code, the field the message names)
REFUSED: list[tuple[str, Callable[[Plan], None], int, str]] = [
    ("degree of 2^62", _set("layout", "degrees", "tp", value=2**62), 2, "layout.degrees.tp"),
    (
        "memory of 10^30",
        _set("ranks", 5, "memory", "weights", value=10**30),
        2,
        "ranks[5].memory.weights",
    ),
    ("tp = 0", _set("layout", "degrees", "tp", value=0), 2, "layout.degrees.tp"),
    ("repeated axis", _set("layout", "order", value=["tp", "tp", "dp", "pp"]), 2, "layout.order"),
    ("groups null", _set("groups", value=None), 2, "groups"),
    ("group of 10^9", _billion_members, 2, "groups.tp"),
    ("seq_len -1", _set("training", "seq_len", value=-1), 2, "training.seq_len"),
    (
        "time_s -5",
        _set("communication", "ops", 0, "time_s", value=-5),
        2,
        "communication.ops[0].time_s",
    ),
    ("members as strings", _member_as_string, 2, "groups.dp[20][1]"),
    ("member as a float", _member_as_float, 2, "groups.tp[3][2]"),
    ("world_size a string", _set("world_size", value="64"), 2, "world_size"),
    ("memory total + 0.5", _memory_total_plus_half, 2, "ranks[37].memory.total"),
    ("format_version 1", _set("format_version", value=1), 2, "format_version"),
    ("format_version 3", _set("format_version", value=3), 2, "format_version"),
    ("world_size true", _set("world_size", value=True), 2, "world_size"),
    ("memory total + 1", _set("ranks", 0, "memory", "total", value=0), 1, "memory total"),
    ("bubble 0.5", _set("summary", "bubble_fraction", value=0.5), 1, "summary.bubble_fraction"),
    ("an op's time doubled", _op_time_doubled, 1, "tp all_gather on nvlink (n = 8)"),
    ("a smaller buffer slower", _smaller_buffer_slower, 1, "a smaller buffer (63,086,592 bytes)"),
]


@pytest.mark.parametrize(("what", "edit", "code", "field"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_corrupted_plan_is_refused_naming_the_field(
    tmp_path: Path, text70: str, what: str, edit: Callable[[Plan], None], code: int, field: str
) -> None:
    got, out, err = _verify(tmp_path, _edited(text70, edit))
    assert got == code, out + err
    said = err if code == 2 else out
    assert field in said, said
    if code == 2:
        assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "verified" not in out


TEXT_EDITS: list[tuple[str, Callable[[str], str], str]] = [
    ("time_s NaN", _time("NaN"), "communication.ops[0].time_s: NaN"),
    ("time_s Infinity", _time("Infinity"), "communication.ops[0].time_s: Infinity"),
    ("time_s 1e999", _time("1e999"), "communication.ops[0].time_s: 1e999"),
    ("bubble NaN", _written("NaN", "summary", "bubble_fraction"), "summary.bubble_fraction: NaN"),
    (
        "world 1e400",
        lambda t: t.replace('"world_size":64', '"world_size":1e400', 1),
        "world_size: 1e400",
    ),
    (
        "integer of 5000 digits",
        lambda t: t.replace('"world_size":64', '"world_size":' + "9" * 5000, 1),
        "integer of more than",
    ),
    ("nested 50 deep", lambda t: _nested(t, 50), "nests deeper than"),
    ("nested 100,000 deep", lambda t: _nested(t, 100_000), "nests deeper than"),
]


@pytest.mark.parametrize(("what", "edit", "said"), TEXT_EDITS, ids=[r[0] for r in TEXT_EDITS])
def test_a_corrupted_plan_text_is_refused_naming_the_field(
    tmp_path: Path, text70: str, what: str, edit: Callable[[str], str], said: str
) -> None:
    corrupted = edit(text70)
    assert corrupted != text70
    got, out, err = _verify(tmp_path, corrupted)
    assert got == 2, out + err
    assert said in err and len(err.splitlines()) == 1, err


def test_the_untouched_plan_still_verifies(tmp_path: Path, text70: str) -> None:
    got, out, err = _verify(tmp_path, text70)
    assert got == 0, out + err
    assert out.splitlines()[-1].startswith("verified")


def test_the_bubble_is_the_schedule_s(text70: str) -> None:
    """p = 4 stages of 1F1B, m = global batch 512 / (2 replicas × micro-batch 1) = 256:
    (p − 1)/(m + p − 1) = 3/259, by hand."""
    data = json.loads(text70)
    assert data["layout"]["degrees"]["pp"] == 4 and data["training"]["micro_batches"] == 256
    assert data["summary"]["bubble_fraction"] == round(3 / 259, 6)
    data["summary"]["bubble_fraction"] = round(3 / 259, 6) + 1e-6
    assert not verify_text(json.dumps(data)).ok


def test_a_group_of_a_billion_members_allocates_nothing_proportional(text70: str) -> None:
    data = json.loads(text70)
    _billion_members(data)
    text = json.dumps(data)
    tracemalloc.start()
    try:
        with pytest.raises(PlanFormatError, match=r"groups\.tp"):
            verify_text(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 200 * 2**20  # 10^9 int64 members would be 7.45 GiB


def test_a_file_above_the_limit_is_refused_unread(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    out.mkdir()
    with open(out / "plan.json", "wb") as handle:
        handle.truncate(2**30)  # sparse: 1 GiB that takes no disk
    result = CliRunner().invoke(main, ["verify", str(out)])
    assert result.exit_code == 2 and f"{MAX_PLAN_BYTES:,}" in result.stderr, result.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_or_a_directory_is_not_a_plan(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    out.mkdir()
    os.mkfifo(out / "plan.json")  # no writer: reading it would block
    result = CliRunner().invoke(main, ["verify", str(out)])
    assert result.exit_code == 2 and "a FIFO, not a regular file" in result.stderr
    (out / "plan.json").unlink()
    (out / "plan.json").mkdir()
    result = CliRunner().invoke(main, ["verify", str(out)])
    assert result.exit_code == 2 and "a directory, not a regular file" in result.stderr


def test_verify_reads_the_version_compile_writes_and_the_schema_publishes() -> None:
    schema = json.loads((ROOT / "schemas" / "plan.schema.json").read_text("utf-8"))
    assert FORMAT_VERSION == COMPILED_VERSION == schema["properties"]["format_version"]["const"]


def test_the_packaged_schema_is_the_published_one() -> None:
    assert SCHEMA_FILE.read_bytes() == (ROOT / "schemas" / "plan.schema.json").read_bytes()


def test_a_bad_value_hidden_in_a_long_list_is_found(text70: str) -> None:
    """Long arrays are summarised before validation; the one bad rank among 64 still fails,
    named by its index."""
    for rank in (0, 31, 63):
        data = json.loads(text70)
        data["ranks"][rank]["local_rank"] = -1
        with pytest.raises(PlanFormatError, match=rf"ranks\[{rank}\]\.local_rank: -1"):
            verify_text(json.dumps(data))


def test_finite_floats_still_pass_where_numbers_are_allowed(text70: str) -> None:
    data = json.loads(text70)
    times = [op["time_s"] for op in data["communication"]["ops"]]
    assert all(isinstance(t, float) and math.isfinite(t) and t >= 0 for t in times)
    assert verify_text(text70).ok


@pytest.fixture(scope="module")
def compact() -> str:
    """131,584 ranks (16,448 nodes × 8, t = 8, p = 16): the columnar form, groups as starts +
    offsets."""
    job = job_of(
        {
            "model": {"layers": 64},
            "hardware": {
                "nodes": 16448,
                "gpus_per_node": 8,
                "nvlink_domain": 8,
                "hosts": "n{00001..16448}",
            },
            "parallelism": {"tensor": 8, "pipeline": 16, "zero_stage": 1},
            "training": {"global_batch": 16448},
            "rules": {"ignore": ["PLC006", "PLC007"]},
        }
    )
    return plan_json(compiled(job))


def _column_float(data: Plan) -> None:
    data["ranks"]["columns"]["node"][70_000] = float(data["ranks"]["columns"]["node"][70_000])


def _column_short(data: Plan) -> None:
    data["ranks"]["columns"]["rail"].pop()


def _row_beyond_table(data: Plan) -> None:
    data["ranks"]["columns"]["memory_row"][5] = len(data["ranks"]["memory_table"])


def _negative_offset(data: Plan) -> None:
    data["groups"]["dp"]["offsets"][-1] = -1


def _empty_host(data: Plan) -> None:
    data["cluster"]["hosts"][9_000] = ""


def _memory_row_of_six(data: Plan) -> None:
    data["ranks"]["memory_table"][0].pop()


COMPACT: list[tuple[str, Callable[[Plan], None], str]] = [
    (
        "a float in a column",
        _column_float,
        r"ranks\.columns\.node\[70000\]: 8750\.0 is not of type 'integer'",
    ),
    ("a column one short", _column_short, r"ranks\.columns\.rail lists 131,583 ranks"),
    ("a row beyond the table", _row_beyond_table, r"ranks\.columns\.memory_row names row"),
    (
        "a negative offset",
        _negative_offset,
        r"groups\.dp\.offsets\[\d+\]: -1 is less than the minimum of 0",
    ),
    ("an empty host name", _empty_host, r"cluster\.hosts\[9000\]"),
    (
        "a memory row of six terms",
        _memory_row_of_six,
        r"ranks\.memory_table\[0\]: .* is too short",
    ),
]


@pytest.mark.parametrize(("what", "edit", "said"), COMPACT, ids=[r[0] for r in COMPACT])
def test_a_corrupted_columnar_plan_is_refused_naming_the_field(
    compact: str, what: str, edit: Callable[[Plan], None], said: str
) -> None:
    with pytest.raises(PlanFormatError, match=said):
        verify_text(_edited(compact, edit))
