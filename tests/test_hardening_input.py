"""Issue 19, input side: each reproducer from the issue becomes a located finding, never a
traceback, a hang or a silently different reading.

Expected positions are computed from the text each test writes (the offset of a marker in it).
`SPEC` is examples/llama3-8b-1node.yaml, a valid spec.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from pydantic import ValidationError

from planc.analysis import analyse
from planc.check import check_paths
from planc.cli.main import main
from planc.compile import compile_job
from planc.compile.plan import plan_json
from planc.findings import FileResult, Finding, Severity
from planc.outputs.explain import explain, to_json
from planc.outputs.memory import to_json as memory_json
from planc.plannable import plannable, refusals
from planc.rules.layout import HOST_NAME
from planc.spec.fastcheck import fast_validate
from planc.spec.job import expand_hosts
from planc.spec.load import MAX_BYTES, load_text, read_input
from planc.spec.models import Spec
from planc.spec.nodes import MAX_INT_DIGITS, compose

from conftest import EXAMPLES, ROOT, check_text, example_data

SPEC = (EXAMPLES / "llama3-8b-1node.yaml").read_text(encoding="utf-8")
GOOD = EXAMPLES / "llama3-8b-1node.yaml"


def pos(text: str, marker: str, offset: int = 0) -> tuple[int, int]:
    """1-based (line, column) of the character `offset` places into the first `marker`."""
    index = text.index(marker) + offset
    return text.count("\n", 0, index) + 1, index - (text.rfind("\n", 0, index) + 1) + 1


def replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def only(result: FileResult) -> Finding:
    assert len(result.findings) == 1, result.findings
    return result.findings[0]


def at(finding: Finding) -> tuple[int, int]:
    return finding.line, finding.column


def both_paths_refuse(data: dict[str, Any]) -> None:
    """The fast path does not accept it and pydantic refuses it: the two paths agree."""
    assert fast_validate(data) is None
    with pytest.raises(ValidationError):
        Spec.model_validate(data)


# --- 1. whole-string matching ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "usable"),
    [("gpu-a01", True), ("n0.cluster:1", True), ("gpu-a\n", False), ("gpu a", False), ("", False)],
)
def test_host_name_matches_the_whole_name(name: str, usable: bool) -> None:
    assert (HOST_NAME.fullmatch(name) is not None) is usable


def test_host_name_ending_in_a_newline_is_refused() -> None:
    text = replace_once(SPEC, "hosts: [gpu-a01]", 'hosts: ["gpu-a\\n"]')
    finding = only(check_text(text))
    assert (finding.rule, finding.field) == ("PLC014", "hardware.hosts")
    assert at(finding) == pos(text, "hosts: ", len("hosts: "))
    assert "'gpu-a\\n' cannot go into a hostfile" in finding.message


def test_host_pattern_ending_in_a_newline_is_refused() -> None:
    text = replace_once(SPEC, "nodes: 1\n  hosts: [gpu-a01]", 'nodes: 2\n  hosts: "n{0..1}\\n"')
    finding = only(check_text(text))
    assert (finding.rule, finding.field) == ("PLC014", "hardware.hosts")
    assert "'n0\\n'" in finding.message


def test_compile_refuses_a_host_name_ending_in_a_newline() -> None:
    # the plannable job's own check (a job built by the library, not through `check`).
    text = replace_once(SPEC, "hosts: [gpu-a01]", 'hosts: ["gpu-a\\n"]')
    job = load_text("spec.yaml", text).job
    assert job is not None
    # No plan exists for it: compile, explain and verify all refuse it (planc.plannable).
    assert [r.rule for r in refusals(job)] == ["PLC014"]


def test_host_range_takes_ascii_digits_only() -> None:
    # `\d` would read Arabic-Indic digits as a range; they stay part of the (unusable) name.
    assert expand_hosts("n{\u0660..\u0661}") == ["n{\u0660..\u0661}"]
    assert expand_hosts("gpu-{08..10}") == ["gpu-08", "gpu-09", "gpu-10"]


@pytest.mark.parametrize(
    ("overlay", "field"),
    [
        ('rules: {ignore: ["PLC006\\n"]}\n', "rules.ignore[0]"),
        ('rules: {severity: {"PLC006\\n": warning}}\n', "rules.severity.PLC006\n"),
        ('rules: {ignore: ["PLC\u0660\u0660\u0666"]}\n', "rules.ignore[0]"),
    ],
)
def test_rule_id_with_a_final_newline_is_refused_on_both_paths(overlay: str, field: str) -> None:
    text = SPEC + overlay
    both_paths_refuse(yaml.safe_load(text))
    finding = only(check_text(text))
    assert (finding.rule, finding.field) == ("PLC110", field)


# --- 2. integers past Python's int-str limit ---------------------------------------------------


def test_name_of_5000_digits_is_a_located_size_finding() -> None:
    text = replace_once(SPEC, "name: llama3-8b-1x8xh100", "name: " + "1" * 5000)
    finding = only(check_text(text))
    assert finding.rule == "PLC102"
    assert at(finding) == pos(text, "name: ", len("name: "))
    assert "5,000 digits" in finding.message and "4,300" in finding.message


def test_integer_digit_limit_is_exact() -> None:
    at_limit = replace_once(SPEC, "nodes: 1", "nodes: " + "9" * MAX_INT_DIGITS)
    over = replace_once(SPEC, "nodes: 1", "nodes: " + "9" * (MAX_INT_DIGITS + 1))
    assert only(check_text(at_limit)).rule == "PLC110"  # read, then above the nodes bound
    assert only(check_text(over)).rule == "PLC102"


@pytest.mark.parametrize(
    "source", ["0x" + "f" * 4000, "0o" + "7" * 5000, "-" + "1" * 5000, '!!int "' + "1" * 5000 + '"']
)
def test_huge_integers_in_any_notation_are_refused(source: str) -> None:
    text = replace_once(SPEC, "nodes: 1", "nodes: " + source)
    finding = only(check_text(text))
    assert finding.rule == "PLC102"
    assert at(finding) == pos(text, "nodes: ", len("nodes: "))


@pytest.mark.parametrize(
    ("source", "reading"),
    [
        # PyYAML builds base-60 integers part by part in quadratic time: 200,000 parts took 14 s
        # and then failed to print the number.
        (":".join(["1"] * 200_000), "a base-60 number of 399,999 characters"),
        (":".join(["1"] * 3000), "a base-60 number of 5,999 characters"),
        ("1_" + "1" * 5000, "not a valid value"),
    ],
    ids=["base-60-200000-parts", "base-60-3000-parts", "underscored"],
)
def test_long_yaml11_integers_are_described_without_building_them(
    source: str, reading: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Bounded work: PyYAML's integer constructor never sees a base-60 scalar (it builds one
    # part by part in quadratic time); the underscored one it may refuse, in linear time.
    built: list[str] = []
    constructors = yaml.constructor.SafeConstructor.yaml_constructors
    construct_int = constructors["tag:yaml.org,2002:int"]

    def counted(constructor: Any, node: Any) -> Any:
        built.append(node.value)
        return construct_int(constructor, node)

    monkeypatch.setitem(constructors, "tag:yaml.org,2002:int", counted)
    text = replace_once(SPEC, "name: llama3-8b-1x8xh100", "name: " + source)
    finding = only(check_text(text))
    assert [value for value in built if ":" in value] == []
    assert (finding.rule, finding.field) == ("PLC107", "name")
    assert at(finding) == pos(text, "name: ", len("name: "))
    assert reading in finding.message
    assert len(finding.message) < 400  # the scalar is cut in the message


def test_host_range_of_5000_digits_is_a_located_finding() -> None:
    text = replace_once(SPEC, "hosts: [gpu-a01]", 'hosts: "n{0..' + "1" * 5000 + '}"')
    finding = only(check_text(text))
    assert (finding.rule, finding.field) == ("PLC110", "hardware.hosts")
    assert at(finding) == pos(text, "hosts: ", len("hosts: "))
    assert "5,000 digits" in finding.message
    assert len(finding.message) < 300  # the pattern is cut in the message


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("n{5..1}", "runs backwards (5 > 1)"),
        ("n{0..1}-{0..1}", "2 {first..last} ranges"),
        ("n{0..1000000}", "1,000,001 hosts"),
    ],
)
def test_bad_host_patterns_say_why(pattern: str, reason: str) -> None:
    with pytest.raises(ValueError, match=r"\S") as error:
        expand_hosts(pattern)
    assert reason in str(error.value)


def test_huge_integer_files_do_not_stop_the_others(tmp_path: Path) -> None:
    name = tmp_path / "name.yaml"
    name.write_text(replace_once(SPEC, "name: llama3-8b-1x8xh100", "name: " + "1" * 5000))
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(replace_once(SPEC, "hosts: [gpu-a01]", 'hosts: "n{0..' + "1" * 5000 + '}"'))
    results = check_paths([str(name), str(hosts), str(GOOD)])
    assert [[f.rule for f in r.findings] for r in results] == [["PLC102"], ["PLC110"], []]
    run = CliRunner().invoke(main, ["check", str(name), str(hosts), str(GOOD)])
    assert run.exit_code == 1, run.output
    assert "3 files checked" in run.output and "Traceback" not in run.output


# --- 3. physical bounds on every float field ---------------------------------------------------

CUSTOM_GPU = (
    "gpu: {memory_gib: 80, bf16_tflops: 989, intra_node: {bandwidth_gbs: 450}, "
    "inter_node: {bandwidth_gbs: 50}}"
)


@pytest.mark.parametrize(
    ("old", "new", "marker", "field", "shown"),
    [
        ("hosts: [gpu-a01]", "hosts: [gpu-a01]\n  reserve_gib: 1.0e+300", "reserve_gib: ",
         "hardware.reserve_gib", "≤ 1,000,000, got the number 1e+300"),
        ("gpu: h100-sxm", CUSTOM_GPU.replace("memory_gib: 80", "memory_gib: 1.0e+300"),
         "memory_gib: ", "hardware.gpu.memory_gib", "≤ 1,000,000, got the number 1e+300"),
        ("gpu: h100-sxm", CUSTOM_GPU.replace("memory_gib: 80", "memory_gib: 1.0e-12"),
         "memory_gib: ", "hardware.gpu.memory_gib", "≥ 0.001, got the number 1e-12"),
        ("gpu: h100-sxm", CUSTOM_GPU.replace("memory_gib: 80", "memory_gb: 1.0e-12"),
         "memory_gb: ", "hardware.gpu.memory_gb", "≥ 0.001, got the number 1e-12"),
        ("gpu: h100-sxm", CUSTOM_GPU.replace("bf16_tflops: 989", "bf16_tflops: 4.9e-324"),
         "bf16_tflops: ", "hardware.gpu.bf16_tflops", "≥ 0.001, got the number 5e-324"),
        ("gpu: h100-sxm", CUSTOM_GPU.replace("bf16_tflops: 989", "bf16_tflops: 1.0e+300"),
         "bf16_tflops: ", "hardware.gpu.bf16_tflops", "≤ 10,000,000"),
        ("gpu: h100-sxm", CUSTOM_GPU.replace("memory_gib: 80", "memory_gib: 80, memory_bandwidth_gbs: 4.9e-324"),
         "memory_bandwidth_gbs: ", "hardware.gpu.memory_bandwidth_gbs", "≥ 0.001"),
        ("hosts: [gpu-a01]", "hosts: [gpu-a01]\n  inter_node: {bandwidth_gbs: 4.9e-324}",
         "bandwidth_gbs: ", "hardware.inter_node.bandwidth_gbs", "≥ 0.001, got the number 5e-324"),
        ("hosts: [gpu-a01]", "hosts: [gpu-a01]\n  intra_node: {bandwidth_gbs: 1.0e+300}",
         "bandwidth_gbs: ", "hardware.intra_node.bandwidth_gbs", "≤ 10,000,000"),
        ("hosts: [gpu-a01]", "hosts: [gpu-a01]\n  inter_node: {latency_us: 1.0e+300}",
         "latency_us: ", "hardware.inter_node.latency_us", "≤ 1,000,000,000"),
        ("attention: flash", "attention: flash\n  efficiency: 4.9e-324",
         "efficiency: ", "training.efficiency", "≥ 0.01, got the number 5e-324"),
    ],
)  # fmt: skip
def test_numbers_outside_physical_bounds_are_located_findings(
    old: str, new: str, marker: str, field: str, shown: str
) -> None:
    text = replace_once(SPEC, old, new)
    both_paths_refuse(yaml.safe_load(text))
    finding = only(check_text(text))
    assert (finding.rule, finding.field) == ("PLC110", field)
    assert at(finding) == pos(text, marker, len(marker))
    assert shown in finding.message
    assert finding.fix.startswith("use a value")


def _finite_json(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


# Every float field of the spec at both of its bounds, all at once: the slowest and the fastest,
# the smallest and the largest machine planc accepts.
EXTREMES = {
    "low": {
        "gpu": {
            "name": "slow",
            "memory_gib": 0.001,
            "bf16_tflops": 0.001,
            "memory_bandwidth_gbs": 0.001,
            "intra_node": {"bandwidth_gbs": 0.001, "latency_us": 1_000_000_000},
            "inter_node": {"bandwidth_gbs": 0.001, "latency_us": 1_000_000_000},
        },
        "reserve_gib": 0.0,
        "efficiency": 0.01,
    },
    "high": {
        "gpu": {
            "name": "fast",
            "memory_gb": 1_000_000,
            "bf16_tflops": 10_000_000,
            "memory_bandwidth_gbs": 10_000_000,
            "intra_node": {"bandwidth_gbs": 10_000_000, "latency_us": 0},
            "inter_node": {"bandwidth_gbs": 10_000_000, "latency_us": 0},
        },
        "reserve_gib": 1_000_000,
        "efficiency": 1.0,
    },
}


@pytest.mark.parametrize("extreme", sorted(EXTREMES))
def test_every_output_stays_finite_at_the_bounds(extreme: str) -> None:
    values = EXTREMES[extreme]
    data = example_data()
    data["hardware"]["gpu"] = values["gpu"]
    data["hardware"]["reserve_gib"] = values["reserve_gib"]
    data["training"]["efficiency"] = values["efficiency"]
    loaded = load_text("spec.yaml", yaml.safe_dump(data, sort_keys=False))
    assert loaded.job is not None, loaded.findings
    assert fast_validate(data) is not None  # within bounds: the fast path accepts it
    plan = plannable(loaded.job)
    assert not isinstance(plan, tuple), plan
    analysis = analyse(plan)
    _finite_json(json.dumps(to_json(explain(analysis))))
    _finite_json(json.dumps(memory_json(plan, analysis.memory)))
    _finite_json(plan_json(compile_job(analysis)))


# --- 4. integer choices take integers only ------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "marker", "shown", "fix"),
    [
        ("zero_stage: 1", "zero_stage: true", "zero_stage: ", "the boolean true", "not numbers"),
        ("zero_stage: 1", "zero_stage: 1.0", "zero_stage: ", "the number 1.0", "e.g. 1"),
        # both neighbours: a bound may rule out the lower one (tensor 0.5 is not fixed by 0)
        ("zero_stage: 1", "zero_stage: 0.5", "zero_stage: ", "the number 0.5", "e.g. 0 or 1"),
        ("version: 1", "version: true", "version: ", "the boolean true", "not numbers"),
        ("version: 1", "version: 1.0", "version: ", "the number 1.0", "e.g. 1"),
    ],
)
def test_integer_choices_refuse_booleans_and_floats(
    old: str, new: str, marker: str, shown: str, fix: str
) -> None:
    text = replace_once(SPEC, old, new)
    both_paths_refuse(yaml.safe_load(text))
    finding = only(check_text(text))
    assert finding.rule == "PLC110"
    assert at(finding) == pos(text, marker, len(marker))
    assert f"must be an integer, got {shown}" in finding.message
    assert fix in finding.fix


def test_integer_choices_still_name_the_allowed_values() -> None:
    finding = only(check_text(replace_once(SPEC, "zero_stage: 1", "zero_stage: 4")))
    assert "must be one of 0, 1, 2, 3" in finding.message


# --- 5. YAML 1.1 line breaks ---------------------------------------------------------------------

BREAKS = [("\x85", "NEL (U+0085", "\\N"), ("\u2028", "U+2028", "\\L"), ("\u2029", "U+2029", "\\P")]


@pytest.mark.parametrize(("char", "name", "escape"), BREAKS)
@pytest.mark.parametrize(
    ("old", "new"),
    [
        # The reproducer: a comment to YAML 1.2, `gpus_per_node: 4` to YAML 1.1.
        ("nodes: 1\n", "nodes: 1 # c{}  gpus_per_node: 4\n"),
        # libyaml folds NEL inside a double-quoted string into a space.
        ("name: llama3-8b-1x8xh100", 'name: "llama3{}8b"'),
        ("name: llama3-8b-1x8xh100", "name: llama3{}8b"),
    ],
    ids=["comment", "double-quoted", "plain"],
)
def test_yaml11_line_breaks_are_refused_where_they_stand(
    char: str, name: str, escape: str, old: str, new: str
) -> None:
    text = replace_once(SPEC, old, new.format(char))
    finding = only(check_text(text))
    assert finding.rule == "PLC107" and finding.severity is Severity.ERROR
    assert at(finding) == pos(text, char)
    assert name in finding.message and "YAML 1.2" in finding.message
    assert escape in finding.fix


def test_yaml11_line_break_positions_count_yaml12_lines_only() -> None:
    # CR and CRLF are line breaks to both readers; the NEL before is not one to YAML 1.2.
    text = "a: 1\r\nb: 2\rc: x\x85y\x85\n"
    documents, problems = compose(text)
    assert documents == []
    [problem] = problems
    assert (problem.line, problem.column) == (3, 5)
    assert "(1 more in the file)" in problem.message


def test_escaped_line_separators_in_double_quotes_are_fine() -> None:
    documents, problems = compose('a: "x\\Ny\\Lz\\P"\n')
    assert problems == []
    assert documents[0].pairs()[0][1].value == "x\x85y\u2028z\u2029"


# --- 6. special files, a closed stdin, one-line names ---------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    # A real process with a timeout: a blocking open or read would hang the test, not fail it.
    proc = subprocess.run(
        [sys.executable, "-m", "planc", "check", str(fifo), str(GOOD)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # Nothing writes to it: refused at once, not waited on (a pipe a program writes is read).
    assert f"{fifo}:1:1: error PLC100 is a pipe (FIFO) with nothing written to it" in proc.stdout
    assert "2 files checked" in proc.stdout


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_character_device_is_refused_without_reading() -> None:
    data, failure = read_input("/dev/zero")
    assert data is None and failure is not None
    assert failure.rule == "PLC100" and "character device" in failure.message
    assert str(MAX_BYTES) not in failure.message


def test_closed_stdin_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", None)
    data, failure = read_input("-")
    assert data is None and failure is not None
    assert (failure.rule, failure.severity) == ("PLC100", Severity.FATAL)
    assert "standard input is closed" in failure.message


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell redirection")
def test_closed_stdin_as_a_program() -> None:
    proc = subprocess.run(
        ["sh", "-c", 'exec "$0" -m planc check - <&-', sys.executable],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "-:1:1: error PLC100 standard input is closed" in proc.stdout


@pytest.mark.parametrize(
    ("old", "new", "marker", "char"),
    [
        ("name: llama3-8b-1x8xh100", 'name: "x\\n## injected"', "name: ", "U+000A at character 2"),
        ("name: llama3-8b-1x8xh100", 'name: "x\\ty"', "name: ", "U+0009 at character 2"),
        ("name: llama3-8b-1x8xh100", 'name: "x\\r"', "name: ", "U+000D at character 2"),
        ("name: llama3-8b-1x8xh100", 'name: "x\\e[31m"', "name: ", "U+001B at character 2"),
        ("gpu: h100-sxm", CUSTOM_GPU.replace("{", '{name: "a\\nb", ', 1), 'name: "a', "U+000A"),
    ],
)
def test_names_are_one_line_of_printable_characters(
    old: str, new: str, marker: str, char: str
) -> None:
    text = replace_once(SPEC, old, new)
    both_paths_refuse(yaml.safe_load(text))
    finding = only(check_text(text))
    assert finding.rule == "PLC110"
    assert at(finding) == pos(text, marker, len("name: "))
    assert "must be one line of printable characters" in finding.message and char in finding.message


@pytest.mark.parametrize("name", ["llama3 8b – 64×H100 (run 2)", "训练-任务", "x" * 200])
def test_ordinary_names_still_pass_on_the_fast_path(name: str) -> None:
    data = example_data()
    data["name"] = name
    fast = fast_validate(data)
    assert fast is not None and fast["name"] == name
