"""Input rules PLC100-PLC111: what the loader reports for broken, odd or hostile YAML, and where.

Every expected position is computed from the text the test writes (the offset of a marker in
it), never read back from planc. `SPEC` is examples/llama3-8b-1node.yaml, a valid spec.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from planc.check import check_loaded, check_paths
from planc.cli.main import main
from planc.findings import FileResult, Finding, Severity
from planc.spec.load import decode, load_path, load_text

from conftest import EXAMPLES, check_text, job_of

SPEC = (EXAMPLES / "llama3-8b-1node.yaml").read_text(encoding="utf-8")
GOOD = EXAMPLES / "llama3-8b-1node.yaml"
INVALID_PLC005 = EXAMPLES / "invalid" / "PLC005" / "llama3-8b-1node.yaml"
WARNING_PLC011 = EXAMPLES / "invalid" / "PLC011" / "llama3-70b-8x8.yaml"


def pos(text: str, marker: str, offset: int = 0, occurrence: int = 1) -> tuple[int, int]:
    """1-based (line, column) of the character `offset` places into the `occurrence`-th
    occurrence of `marker` in `text`."""
    index = -1
    for _ in range(occurrence):
        index = text.index(marker, index + 1)
    index += offset
    return text.count("\n", 0, index) + 1, index - (text.rfind("\n", 0, index) + 1) + 1


def value_pos(text: str, key: str, occurrence: int = 1) -> tuple[int, int]:
    """Position of the value after `key: ` (the marker includes the colon and space)."""
    return pos(text, f"{key}: ", len(key) + 2, occurrence)


def key_pos(text: str, key: str, occurrence: int = 1) -> tuple[int, int]:
    """Position of a block-mapping key written as `key:` at the start of its line or after
    indentation."""
    lines = text.split("\n")
    seen = 0
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith(f"{key}:"):
            seen += 1
            if seen == occurrence:
                return number, len(line) - len(line.lstrip()) + 1
    raise AssertionError(f"no key {key!r}")


def replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def only(result: FileResult) -> Finding:
    assert len(result.findings) == 1, result.findings
    return result.findings[0]


def rules(result: FileResult) -> set[str]:
    return {f.rule for f in result.findings}


def where(finding: Finding) -> tuple[int, int]:
    return finding.line, finding.column


def check_bytes(data: bytes, path: str = "spec.yaml") -> FileResult:
    text, failure = decode(data)
    if failure is not None:
        return FileResult(path, (failure,))
    assert text is not None
    return check_loaded(load_text(path, text))


def test_the_base_spec_is_valid() -> None:
    assert check_text(SPEC).findings == ()


# --- PLC100 unreadable ------------------------------------------------------------------------


def test_missing_file_is_fatal(tmp_path: Path) -> None:
    (result,) = check_paths([str(tmp_path / "nope.yaml")])
    finding = only(result)
    assert (finding.rule, finding.severity, where(finding)) == ("PLC100", Severity.FATAL, (1, 1))
    assert "no such file" in finding.message


def test_directory_is_fatal_and_says_so(tmp_path: Path) -> None:
    (result,) = check_paths([str(tmp_path)])
    finding = only(result)
    assert (finding.rule, finding.severity) == ("PLC100", Severity.FATAL)
    assert "directory" in finding.message


def test_unreadable_file_is_fatal(tmp_path: Path) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text(SPEC, encoding="utf-8")
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as root: a mode-000 file is still readable")
        (result,) = check_paths([str(path)])
    finally:
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    finding = only(result)
    assert (finding.rule, finding.severity) == ("PLC100", Severity.FATAL)
    assert "permission" in finding.message


# --- PLC101 not text --------------------------------------------------------------------------


def test_latin1_byte_is_located() -> None:
    data = "version: 1\nname: caf\xe9\n".encode("latin-1")
    finding = only(check_bytes(data))
    # é is the single byte 0xe9 at line 2, column len("name: caf") + 1 = 10.
    assert (finding.rule, finding.severity, where(finding)) == ("PLC101", Severity.FATAL, (2, 10))
    assert "0xe9" in finding.message and "UTF-8" in finding.fix


def test_nul_byte_is_binary() -> None:
    finding = only(check_bytes(b"version: 1\nname: a\x00b\n"))
    assert (finding.rule, where(finding)) == ("PLC101", (2, 8))
    assert "binary" in finding.message


def test_utf16_file_is_refused_not_misread() -> None:
    finding = only(check_bytes(SPEC.encode("utf-16")))
    assert finding.rule == "PLC101" and finding.severity is Severity.FATAL


def test_non_utf8_column_counts_characters() -> None:
    # "name: é" is 7 characters, so the bad byte 0xff is character 8 of line 2.
    data = "version: 1\nname: é".encode() + b"\xff\n"
    assert where(only(check_bytes(data))) == (2, 8)


def test_utf8_bom_is_accepted_and_columns_stay() -> None:
    assert check_bytes(b"\xef\xbb\xbf" + SPEC.encode()).findings == ()
    bad = replace_once(SPEC, "version: 1", "version: 2")
    finding = only(check_bytes(b"\xef\xbb\xbf" + bad.encode()))
    assert (finding.rule, where(finding)) == ("PLC110", value_pos(bad, "version"))


def test_crlf_is_accepted_with_the_same_line_numbers() -> None:
    assert check_bytes(SPEC.replace("\n", "\r\n").encode()).findings == ()
    bad = SPEC + "  seq_len: 4096\n"
    lf = only(check_bytes(bad.encode()))
    crlf = only(check_bytes(bad.replace("\n", "\r\n").encode()))
    assert lf.rule == crlf.rule == "PLC104"
    assert where(lf) == where(crlf) == key_pos(bad, "seq_len", 2)
    assert lf.message == crlf.message


# --- PLC102 limits ----------------------------------------------------------------------------


def test_file_over_two_mib_is_refused_without_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(SPEC.encode() + b"# " + b"x" * (2 * 1024 * 1024) + b"\n")
    (result,) = check_paths([str(path)])
    finding = only(result)
    assert finding.rule == "PLC102" and "2,097,152" in finding.message


def test_file_just_under_two_mib_is_parsed(tmp_path: Path) -> None:
    # A valid spec padded with a comment to exactly 2 MiB = 2,097,152 bytes.
    body = SPEC.encode()
    pad = 2 * 1024 * 1024 - len(body) - 3
    path = tmp_path / "padded.yaml"
    path.write_bytes(body + b"# " + b"x" * pad + b"\n")
    assert path.stat().st_size == 2 * 1024 * 1024
    (result,) = check_paths([str(path)])
    assert result.findings == ()


ALIAS_BOMB = 'a: &a ["x","x","x","x","x","x","x","x","x","x"]\n' + "".join(
    f"{new}: &{new} [{','.join(['*' + old] * 10)}]\n"
    for old, new in zip("abcdefgh", "bcdefghi", strict=True)
)


def test_alias_bomb_is_stopped_where_it_grows_too_large() -> None:
    # A list of ten strings is 11 nodes; each level of ten aliases to the one before is
    # 1 + 10 × (previous): a 11, b 111, c 1,111, d 11,111, e 111,111, f 1,111,111. The whole
    # document up to e is 11 + 111 + ... + 111,111 = 123,455 nodes plus keys, under 200,000;
    # f is the first node over the limit. It starts at its anchor &f.
    finding = only(check_text(ALIAS_BOMB))
    assert finding.rule == "PLC102"
    assert "alias" in finding.message
    assert where(finding) == pos(ALIAS_BOMB, "&f")


def test_aliases_below_the_limit_are_plain_data() -> None:
    # The anchor comes first (pipeline, line 14), the alias after it (micro_batch, line 21).
    text = replace_once(SPEC, "  pipeline: 1", "  pipeline: &one 1")
    text = replace_once(text, "  micro_batch: 1", "  micro_batch: *one")
    assert check_text(text).findings == ()


def test_nesting_at_the_limit_reads_and_one_deeper_is_refused() -> None:
    # The top-level mapping is level 1; 63 brackets make 64 levels, 64 brackets make 65.
    at_limit = "a: " + "[" * 63 + "]" * 63 + "\n"
    assert "PLC102" not in rules(check_text(at_limit))
    too_deep = "a: " + "[" * 64 + "]" * 64 + "\n"
    finding = only(check_text(too_deep))
    assert finding.rule == "PLC102" and "64" in finding.message
    # The 65th level opens at the 64th bracket: column len("a: ") + 64 = 67.
    assert where(finding) == (1, 67)


def test_deep_block_mappings_are_refused_at_the_first_level_too_deep() -> None:
    text = "".join("  " * i + "k:\n" for i in range(200)) + "  " * 200 + "v: 1\n"
    finding = only(check_text(text))
    assert finding.rule == "PLC102"
    # Level 65 is the mapping whose first key is on line 65, indented 64 × 2 spaces.
    assert where(finding) == (65, 129)


# --- PLC103 syntax ----------------------------------------------------------------------------


def test_unclosed_bracket_is_a_located_syntax_error() -> None:
    text = replace_once(SPEC, "  tensor: 2", "  tensor: [2")
    finding = only(check_text(text))
    assert finding.rule == "PLC103" and "YAML syntax error" in finding.message
    # The parser notices at the next line, where it meets a key instead of ',' or ']'.
    assert finding.line == key_pos(text, "pipeline")[0]


@pytest.mark.parametrize("text", ["{", "a: ["])
def test_error_at_end_of_input_stays_in_the_file(text: str) -> None:
    # The file has one line; the parser runs out of input right after its last character.
    finding = only(check_text(text))
    assert finding.rule == "PLC103"
    assert where(finding) == (1, len(text) + 1)


def test_tab_indentation_points_at_the_tab() -> None:
    text = replace_once(SPEC, "  nodes: 1", "\tnodes: 1")
    finding = only(check_text(text))
    assert finding.rule == "PLC103"
    assert "tab" in finding.message and "spaces" in finding.fix
    assert where(finding) == pos(text, "\tnodes")


def test_tab_inside_a_value_is_fine() -> None:
    # A tab after "name:" separates key and value; only indentation tabs are errors.
    assert check_text(replace_once(SPEC, "name: llama3", "name:\tllama3")).findings == ()


def test_wrong_indentation_is_a_syntax_error() -> None:
    text = replace_once(SPEC, "  tensor: 2", "   tensor: 2")
    finding = only(check_text(text))
    assert finding.rule == "PLC103"
    assert finding.line == key_pos(text, "pipeline")[0]


def test_alias_without_anchor() -> None:
    text = replace_once(SPEC, "tensor: 2", "tensor: *two")
    finding = only(check_text(text))
    assert (finding.rule, where(finding)) == ("PLC103", pos(text, "*two"))


# --- PLC104 duplicate keys --------------------------------------------------------------------


def test_duplicate_key_names_the_first_line() -> None:
    text = SPEC + "  seq_len: 4096\n"
    finding = only(check_text(text))
    assert finding.rule == "PLC104"
    assert where(finding) == key_pos(text, "seq_len", 2)
    assert f"line {key_pos(text, 'seq_len', 1)[0]}" in finding.message
    assert "seq_len" in finding.message and finding.fix


def test_every_repeat_is_reported_against_the_first() -> None:
    text = SPEC + "  seq_len: 4096\n  seq_len: 2048\n"
    found = check_text(text).findings
    first = key_pos(text, "seq_len", 1)[0]
    assert [where(f) for f in found] == [key_pos(text, "seq_len", 2), key_pos(text, "seq_len", 3)]
    assert all(f"line {first}" in f.message for f in found)


def test_duplicate_top_level_section() -> None:
    text = SPEC + "model: {preset: llama3-70b}\n"
    finding = only(check_text(text))
    assert finding.rule == "PLC104" and where(finding) == key_pos(text, "model", 2)
    assert f"line {key_pos(text, 'model', 1)[0]}" in finding.message


def test_duplicate_key_in_a_flow_mapping() -> None:
    text = replace_once(
        SPEC,
        "  hosts: [gpu-a01]",
        "  hosts: [gpu-a01]\n  intra_node: {bandwidth_gbs: 1, bandwidth_gbs: 2}",
    )
    finding = only(check_text(text))
    assert finding.rule == "PLC104"
    assert where(finding) == pos(text, "bandwidth_gbs", occurrence=2)


def test_same_key_in_different_mappings_is_not_a_duplicate() -> None:
    # tensor appears nowhere else, but `bandwidth_gbs` in two sibling mappings is fine.
    text = replace_once(
        SPEC,
        "  hosts: [gpu-a01]",
        "  hosts: [gpu-a01]\n  intra_node: {bandwidth_gbs: 450}\n  inter_node: {bandwidth_gbs: 50}",
    )
    assert check_text(text).findings == ()


# --- PLC105 document shape --------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["", "   \n\n  \n", "# only a comment\n# and another\n", "---\n", "~\n", "\n"],
    ids=["empty", "whitespace", "comments", "bare-document-start", "null", "newline"],
)
def test_empty_documents(text: str) -> None:
    finding = only(check_text(text))
    assert (finding.rule, where(finding)) == ("PLC105", (1, 1))
    assert "empty" in finding.message and finding.fix


def test_two_documents_point_at_the_second() -> None:
    text = SPEC + "---\n" + SPEC
    finding = only(check_text(text))
    assert finding.rule == "PLC105" and "2 YAML documents" in finding.message
    # The second document's mapping starts at its `version:` key.
    assert where(finding) == key_pos(text, "version", 2)


def test_three_documents_are_counted() -> None:
    finding = only(check_text("a: 1\n---\nb: 2\n---\nc: 3\n"))
    assert finding.rule == "PLC105" and "3 YAML documents" in finding.message


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("- version: 1\n- name: x\n", "a list"),
        ("hello\n", "a single value"),
        ("42\n", "a single value"),
    ],
)
def test_top_level_that_is_not_a_mapping(text: str, what: str) -> None:
    finding = only(check_text(text))
    assert (finding.rule, where(finding)) == ("PLC105", (1, 1))
    assert what in finding.message


# --- PLC106 unsupported YAML ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ('!!python/object/apply:os.system ["echo pwned"]', "!!python/object/apply:os.system"),
        ("!!python/name:os.system", "!!python/name:os.system"),
        ("!!python/object:planc.spec.models.Spec {}", "!!python/object:planc.spec.models.Spec"),
        ("!!binary aGVsbG8=", "!!binary"),
        ("!foo bar", "!foo"),
        ("!!set {a, b}", "!!set"),
        ("!!timestamp 2024-01-02", "!!timestamp"),
    ],
)
def test_tags_that_build_objects_are_refused(value: str, shown: str) -> None:
    text = replace_once(SPEC, "name: llama3-8b-1x8xh100", f"name: {value}")
    finding = only(check_text(text))
    assert finding.rule == "PLC106"
    assert shown in finding.message
    assert where(finding) == value_pos(text, "name")


def test_core_tags_are_plain_data() -> None:
    # !!int '2' is the integer 2; !!str 2 is the string "2", wrong for an integer field.
    assert check_text(replace_once(SPEC, "tensor: 2", "tensor: !!int '2'")).findings == ()
    text = replace_once(SPEC, "tensor: 2", "tensor: !!str 2")
    finding = only(check_text(text))
    assert (finding.rule, finding.field) == ("PLC110", "parallelism.tensor")


def test_merge_key_is_refused() -> None:
    text = replace_once(SPEC, "  tensor: 2", "  <<: {tensor: 2}")
    finding = only(check_text(text))
    assert (finding.rule, where(finding)) == ("PLC106", pos(text, "<<"))
    assert "merge" in finding.message


@pytest.mark.parametrize(("key", "reading"), [("1", "1"), ("~", "null"), ("true", "True")])
def test_key_that_is_not_a_name(key: str, reading: str) -> None:
    text = SPEC + f"{key}: 2\n"
    finding = only(check_text(text))
    assert (finding.rule, where(finding)) == ("PLC106", key_pos(text, key))
    assert reading in finding.message and f'"{key}"' in finding.fix


def test_complex_key_is_refused() -> None:
    text = SPEC + "? [a, b]\n: 2\n"
    finding = only(check_text(text))
    assert (finding.rule, where(finding)) == ("PLC106", pos(text, "[a, b]"))


# --- PLC107 YAML 1.1 readings -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("word", "as_bool"),
    [
        ("on", "true"),
        ("yes", "true"),
        ("y", "true"),
        ("off", "false"),
        ("no", "false"),
        ("n", "false"),
        ("Yes", "true"),
        ("OFF", "false"),
    ],
)
def test_yaml11_booleans_in_a_boolean_field(word: str, as_bool: str) -> None:
    text = replace_once(SPEC, "sequence_parallel: true", f"sequence_parallel: {word}")
    finding = only(check_text(text))
    assert finding.rule == "PLC107"
    assert finding.field == "parallelism.sequence_parallel"
    assert where(finding) == value_pos(text, "sequence_parallel")
    assert f"boolean {as_bool}" in finding.message
    assert "true or false" in finding.fix and f'"{word}"' in finding.fix


@pytest.mark.parametrize("word", ["no", "n", "on", "off"])
def test_yaml11_booleans_in_a_string_field(word: str) -> None:
    # name is a string in planc (YAML 1.2) but a boolean to PyYAML (YAML 1.1).
    text = replace_once(SPEC, "name: llama3-8b-1x8xh100", f"name: {word}")
    finding = only(check_text(text))
    assert (finding.rule, finding.field, where(finding)) == (
        "PLC107",
        "name",
        value_pos(text, "name"),
    )


def test_yaml11_boolean_in_a_list_item() -> None:
    text = replace_once(SPEC, "hosts: [gpu-a01]", "hosts: [y]")
    finding = only(check_text(text))
    assert (finding.rule, finding.field, where(finding)) == (
        "PLC107",
        "hardware.hosts[0]",
        pos(text, "[y]", 1),
    )


def test_quoted_yaml11_words_are_plain_strings() -> None:
    text = replace_once(SPEC, "name: llama3-8b-1x8xh100", 'name: "no"')
    assert check_text(text).findings == ()


def test_on_as_a_key_is_an_unknown_key_named_on() -> None:
    # YAML 1.2 reads the key as the string "on"; the spec has no such key.
    text = SPEC + "on: 1\n"
    finding = only(check_text(text))
    assert (finding.rule, finding.field, where(finding)) == ("PLC108", "on", key_pos(text, "on"))
    assert "'on'" in finding.message


@pytest.mark.parametrize(
    ("source", "reading"),
    [
        ("010", "octal number 8"),  # 0o10 = 8
        ("0777", "octal number 511"),  # 7·64 + 7·8 + 7
        ("1:30", "base-60"),  # 1·60 + 30 = 90 to PyYAML
        ("8_192", "underscores"),
        ("0b10", "binary"),
    ],
)
def test_yaml11_numbers(source: str, reading: str) -> None:
    text = replace_once(SPEC, "seq_len: 8192", f"seq_len: {source}")
    finding = only(check_text(text))
    assert finding.rule == "PLC107" and finding.field == "training.seq_len"
    assert where(finding) == value_pos(text, "seq_len")
    assert reading in finding.message and source in finding.message


def test_octal_fix_gives_the_decimal_reading() -> None:
    text = replace_once(SPEC, "tensor: 2", "tensor: 010")
    finding = only(check_text(text))
    assert "write 10 without a leading zero" in finding.fix and '"010"' in finding.fix


def test_dates_are_ambiguous() -> None:
    text = replace_once(SPEC, "name: llama3-8b-1x8xh100", "name: 2024-01-02")
    finding = only(check_text(text))
    assert (finding.rule, where(finding)) == ("PLC107", value_pos(text, "name"))
    assert "date" in finding.message


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("tensor: 2", "tensor: 08"),
        ("tensor: 2", "tensor: 0o2"),
        ("attention: flash", "attention: flash\nrules: {max_bubble: 1e-1}"),
    ],
)
def test_numbers_that_pyyaml_reads_as_strings_are_flagged(old: str, new: str) -> None:
    assert "PLC107" in rules(check_text(replace_once(SPEC, old, new)))


# --- PLC108 unknown keys ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("anchor", "typo", "suggestion", "parent"),
    [
        ("training:", "trainig", "training", "the top level"),
        ("  preset: llama3-8b", "layerz", "layers", "model"),
        ("  nodes: 1", "gpus_pernode", "gpus_per_node", "hardware"),
        ("  tensor: 2", "tensr", "tensor", "parallelism"),
        ("  seq_len: 8192", "global_bach", "global_batch", "training"),
    ],
)
def test_unknown_key_with_did_you_mean(
    anchor: str, typo: str, suggestion: str, parent: str
) -> None:
    indent = "" if parent == "the top level" else "  "
    if parent == "the top level":
        text = SPEC + f"{typo}: {{}}\n"
    else:
        text = replace_once(SPEC, anchor, f"{anchor}\n{indent}{typo}: 1")
    finding = only(check_text(text))
    assert finding.rule == "PLC108"
    assert where(finding) == key_pos(text, typo)
    assert f"'{typo}'" in finding.message and parent in finding.message
    assert f"'{suggestion}'" in finding.fix


def test_unknown_key_in_a_nested_link_mapping() -> None:
    text = replace_once(SPEC, "  nodes: 1", "  nodes: 1\n  intra_node: {bandwith_gbs: 3}")
    finding = only(check_text(text))
    assert (finding.rule, finding.field) == ("PLC108", "hardware.intra_node.bandwith_gbs")
    assert where(finding) == pos(text, "bandwith_gbs")
    assert "'bandwidth_gbs'" in finding.fix


def test_unknown_key_in_rules() -> None:
    text = SPEC + "rules: {max_bubbel: 0.2}\n"
    finding = only(check_text(text))
    assert (finding.rule, where(finding)) == ("PLC108", pos(text, "max_bubbel"))
    assert "'max_bubble'" in finding.fix


def test_unknown_key_with_nothing_close_lists_the_known_ones() -> None:
    text = SPEC + "banana: 1\n"
    finding = only(check_text(text))
    assert finding.rule == "PLC108"
    assert all(name in finding.fix for name in ("version", "model", "hardware", "training"))


def test_unknown_key_in_a_custom_gpu_mapping() -> None:
    text = replace_once(SPEC, "gpu: h100-sxm", "gpu: {memory_gb: 80, bf16_tflops: 900, memry: 3}")
    finding = only(check_text(text))
    assert (finding.rule, where(finding)) == ("PLC108", pos(text, "memry"))
    assert "'memory_gb'" in finding.fix or "'memory_gib'" in finding.fix


# --- PLC109 missing fields --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "field", "section"),
    [
        ("  seq_len: 8192\n", "training.seq_len", "training"),
        ("  global_batch: 64\n", "training.global_batch", "training"),
        ("  nodes: 1\n", "hardware.nodes", "hardware"),
        ("  gpu: h100-sxm\n", "hardware.gpu", "hardware"),
    ],
)
def test_missing_required_field_points_at_its_section(line: str, field: str, section: str) -> None:
    text = replace_once(SPEC, line, "")
    finding = only(check_text(text))
    assert (finding.rule, finding.field) == ("PLC109", field)
    assert where(finding) == key_pos(text, section)
    assert field.split(".")[-1] in finding.message and field in finding.fix


@pytest.mark.parametrize("line", ["version: 1\n", "name: llama3-8b-1x8xh100\n"])
def test_missing_top_level_field(line: str) -> None:
    text = replace_once(SPEC, line, "")
    finding = only(check_text(text))
    assert finding.rule == "PLC109" and "top level" in finding.message


def test_missing_training_section() -> None:
    text = SPEC[: SPEC.index("training:")]
    finding = only(check_text(text))
    assert (finding.rule, finding.field) == ("PLC109", "training")


def test_model_without_preset_needs_its_dimensions() -> None:
    # hidden and heads are given; layers and vocab have no preset to come from.
    text = replace_once(SPEC, "  preset: llama3-8b\n", "  hidden: 4096\n  heads: 32\n")
    found = check_text(text).findings
    assert {(f.rule, f.field) for f in found} == {
        ("PLC109", "model.layers"),
        ("PLC109", "model.vocab"),
    }
    assert all(where(f) == key_pos(text, "model") for f in found)


def test_custom_gpu_without_memory() -> None:
    text = replace_once(SPEC, "gpu: h100-sxm", "gpu: {bf16_tflops: 900}")
    finding = only(check_text(text))
    assert (finding.rule, finding.field) == ("PLC109", "hardware.gpu")
    assert where(finding) == value_pos(text, "gpu")
    assert "memory_gb" in finding.message


def test_custom_gpu_without_links_needs_bandwidths() -> None:
    text = replace_once(SPEC, "gpu: h100-sxm", "gpu: {bf16_tflops: 900, memory_gb: 80}")
    fields = {f.field for f in check_text(text).findings if f.rule == "PLC109"}
    assert fields == {"hardware.intra_node.bandwidth_gbs", "hardware.inter_node.bandwidth_gbs"}


def test_complete_custom_gpu_passes() -> None:
    gpu = (
        "gpu: {name: my-gpu, bf16_tflops: 900, memory_gb: 80, "
        "intra_node: {bandwidth_gbs: 400}, inter_node: {bandwidth_gbs: 50}}"
    )
    assert check_text(replace_once(SPEC, "gpu: h100-sxm", gpu)).findings == ()


def test_custom_gpu_without_tflops_says_it_is_required() -> None:
    text = replace_once(SPEC, "gpu: h100-sxm", "gpu: {memory_gb: 80}")
    finding = only(check_text(text))
    assert (finding.rule, finding.field) == ("PLC109", "hardware.gpu.bf16_tflops")
    assert "required" in finding.message


# --- PLC110 bad values ------------------------------------------------------------------------


def value_finding(key: str, old: str, new: str) -> tuple[Finding, str]:
    text = replace_once(SPEC, f"{key}: {old}", f"{key}: {new}")
    return only(check_text(text)), text


def test_number_written_as_a_string() -> None:
    finding, text = value_finding("seq_len", "8192", '"8192"')
    assert (finding.rule, finding.field, where(finding)) == (
        "PLC110",
        "training.seq_len",
        value_pos(text, "seq_len"),
    )
    assert "integer" in finding.message and "'8192'" in finding.message
    assert "without quotes: 8192" in finding.fix


def test_word_where_a_number_belongs() -> None:
    finding, _ = value_finding("seq_len", "8192", '"lots"')
    assert finding.rule == "PLC110" and finding.fix == "write a number"


# 2e0 is a float only to a YAML 1.2 reader (PyYAML reads the string '2e0'): PLC107 covers it,
# see test_numbers_that_pyyaml_reads_as_strings_are_flagged.
@pytest.mark.parametrize(("source", "shown"), [("2.0", "2.0"), ("2.5", "2.5")])
def test_float_where_an_integer_belongs(source: str, shown: str) -> None:
    finding, text = value_finding("tensor", "2", source)
    assert (finding.rule, where(finding)) == ("PLC110", value_pos(text, "tensor"))
    assert "integer" in finding.message and shown in finding.message
    assert "whole number" in finding.fix


@pytest.mark.parametrize(("source", "shown"), [(".nan", "nan"), (".inf", "inf"), ("-.inf", "-inf")])
def test_nan_and_infinity_for_an_integer(source: str, shown: str) -> None:
    finding, text = value_finding("tensor", "2", source)
    assert (finding.rule, where(finding)) == ("PLC110", value_pos(text, "tensor"))
    assert f"number {shown}" in finding.message


@pytest.mark.parametrize(
    ("source", "shown"), [(".nan", "nan"), (".NaN", "nan"), (".inf", "inf"), ("-.Inf", "-inf")]
)
def test_nan_and_infinity_for_a_fraction(source: str, shown: str) -> None:
    text = SPEC + f"rules: {{max_bubble: {source}}}\n"
    finding = only(check_text(text))
    assert (finding.rule, finding.field) == ("PLC110", "rules.max_bubble")
    assert where(finding) == value_pos(text, "max_bubble")
    assert "finite" in finding.message and shown in finding.message


@pytest.mark.parametrize("source", ["null", "~", ""])
def test_null_value(source: str) -> None:
    text = replace_once(SPEC, "tensor: 2", f"tensor: {source}".rstrip())
    finding = only(check_text(text))
    assert (finding.rule, finding.field) == ("PLC110", "parallelism.tensor")
    assert "null" in finding.message and "remove the key" in finding.fix


def test_empty_section_is_null_not_a_mapping() -> None:
    # `rules:` with nothing under it is null; the empty value sits right after the colon.
    text = SPEC + "rules:\n"
    finding = only(check_text(text))
    assert (finding.rule, finding.field) == ("PLC110", "rules")
    assert "mapping" in finding.message and "null" in finding.message
    assert where(finding) == pos(text, "rules:", len("rules:"))


@pytest.mark.parametrize(
    ("key", "old", "new", "bound"),
    [
        ("tensor", "2", "0", "≥ 1"),
        ("tensor", "2", "-2", "≥ 1"),
        ("nodes", "1", "0", "≥ 1"),
        ("nodes", "1", "-8", "≥ 1"),
        ("global_batch", "64", "0", "≥ 1"),
        ("nodes", "1", "1000001", "≤ 1,000,000"),
    ],
)
def test_degrees_out_of_range(key: str, old: str, new: str, bound: str) -> None:
    finding, text = value_finding(key, old, new)
    assert (finding.rule, where(finding)) == ("PLC110", value_pos(text, key))
    assert bound in finding.message and new in finding.message
    assert bound in finding.fix


def test_huge_integer_is_shortened_in_the_message() -> None:
    finding, _ = value_finding("nodes", "1", "1" + "0" * 100)
    assert finding.rule == "PLC110"
    assert "101 digits" in finding.message and len(finding.message) < 200


@pytest.mark.parametrize(
    ("old", "new", "what"),
    [
        ("  preset: llama3-8b", "  - llama3-8b", "a list"),
        ("tensor: 2", "tensor: {a: 1}", "a mapping"),
        ("tensor: 2", "tensor: [2]", "a list"),
        ("tensor: 2", "tensor: true", "the boolean true"),
        ("sequence_parallel: true", "sequence_parallel: 1", "the number 1"),
        ("sequence_parallel: true", 'sequence_parallel: "true"', "the string 'true'"),
    ],
)
def test_wrong_types(old: str, new: str, what: str) -> None:
    text = replace_once(SPEC, old, new)
    finding = only(check_text(text))
    assert finding.rule == "PLC110" and what in finding.message


def test_list_where_a_section_belongs_is_located_at_the_list() -> None:
    text = replace_once(SPEC, "  preset: llama3-8b", "  - llama3-8b")
    finding = only(check_text(text))
    assert (finding.field, where(finding)) == ("model", pos(text, "- llama3-8b"))
    assert "mapping" in finding.message


@pytest.mark.parametrize(
    ("old", "new", "field", "hint"),
    [
        ("order: tp-cp-dp-pp", "order: tp-dp-pp", "parallelism.order", "tp-cp-dp-pp"),
        ("precision: bf16", "precision: bf61", "training.precision", "'bf16'"),
        ("zero_stage: 1", "zero_stage: 4", "parallelism.zero_stage", "0, 1, 2, 3"),
        ("recompute: selective", "recompute: selectve", "training.recompute", "'selective'"),
    ],
)
def test_values_outside_the_allowed_list(old: str, new: str, field: str, hint: str) -> None:
    text = replace_once(SPEC, old, new)
    finding = only(check_text(text))
    assert (finding.rule, finding.field) == ("PLC110", field)
    assert where(finding) == value_pos(text, old.split(":")[0])
    assert hint in finding.fix


@pytest.mark.parametrize(("source", "bound"), [("1.0", "< 1.0"), ("-0.1", "≥ 0.0")])
def test_fraction_bounds(source: str, bound: str) -> None:
    finding = only(check_text(SPEC + f"rules: {{max_bubble: {source}}}\n"))
    assert finding.rule == "PLC110" and bound in finding.message


def test_rule_id_pattern_in_ignore() -> None:
    text = SPEC + "rules: {ignore: [PLC6]}\n"
    finding = only(check_text(text))
    assert (finding.rule, finding.field, where(finding)) == (
        "PLC110",
        "rules.ignore[0]",
        pos(text, "PLC6"),
    )


def test_severity_override_with_a_bad_rule_id_blames_the_key() -> None:
    text = SPEC + "rules: {severity: {on: warning}}\n"
    finding = only(check_text(text))
    assert finding.rule in ("PLC107", "PLC110")
    assert "PLC001" in finding.message or "rule id" in finding.message


def test_host_list_with_a_number() -> None:
    text = replace_once(SPEC, "hosts: [gpu-a01]", "hosts: [5]")
    finding = only(check_text(text))
    assert (finding.field, where(finding)) == ("hardware.hosts[0]", pos(text, "5]"))
    assert "string" in finding.message


# --- host patterns ----------------------------------------------------------------------------


def test_host_pattern_expands_with_zero_padding() -> None:
    job = job_of(
        {
            "hardware": {"nodes": 8, "hosts": "gpu-{000..007}"},
            "parallelism": {"tensor": 8},
            "training": {"global_batch": 64},
        }
    )
    assert job.cluster.hosts == tuple(f"gpu-00{i}" for i in range(8))


def test_host_pattern_without_padding() -> None:
    job = job_of(
        {"hardware": {"nodes": 3, "hosts": "n{1..3}.dc"}, "training": {"global_batch": 60}}
    )
    assert job.cluster.hosts == ("n1.dc", "n2.dc", "n3.dc")


@pytest.mark.parametrize("pattern", ["gpu-{007..000}", "gpu-{0..1}-{0..1}"])
def test_bad_host_pattern(pattern: str) -> None:
    text = replace_once(SPEC, "hosts: [gpu-a01]", f'hosts: "{pattern}"')
    finding = only(check_text(text))
    assert (finding.rule, finding.field, where(finding)) == (
        "PLC110",
        "hardware.hosts",
        value_pos(text, "hosts"),
    )
    assert pattern in finding.message and "{000..063}" in finding.fix


def test_non_numeric_host_pattern_is_refused() -> None:
    # 'gpu-{a..b}' is no numeric range, and braces cannot appear in a host name either.
    text = replace_once(SPEC, "hosts: [gpu-a01]", 'hosts: "gpu-{a..b}"')
    finding = only(check_text(text))
    assert finding.rule in ("PLC014", "PLC110")
    assert (finding.field, where(finding)) == ("hardware.hosts", value_pos(text, "hosts"))


# --- PLC111 unknown presets -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "kind", "suggestion"),
    [
        ("gpu: h100-sxm", "gpu: h100", "GPU", "h100-sxm"),
        ("gpu: h100-sxm", "gpu: H100-SXM", "GPU", "h100-sxm"),
        ("preset: llama3-8b", "preset: llama-3-8b", "model", "llama3-8b"),
        ("preset: llama3-8b", "preset: llama3-7b", "model", "llama3-70b"),
    ],
)
def test_unknown_preset_with_suggestion(old: str, new: str, kind: str, suggestion: str) -> None:
    text = replace_once(SPEC, old, new)
    finding = only(check_text(text))
    assert finding.rule == "PLC111"
    assert where(finding) == value_pos(text, old.split(":")[0])
    assert f"unknown {kind} preset" in finding.message
    assert f"did you mean '{suggestion}'" in finding.fix


def test_unknown_preset_with_nothing_close_lists_them() -> None:
    text = replace_once(SPEC, "gpu: h100-sxm", "gpu: rtx4090")
    finding = only(check_text(text))
    assert finding.rule == "PLC111" and "did you mean" not in finding.fix
    assert "h100-sxm" in finding.fix and "mi300x" in finding.fix


# --- several files and the CLI ----------------------------------------------------------------


def test_one_bad_file_does_not_stop_the_others(tmp_path: Path) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\x00\x01")
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [\n", encoding="utf-8")
    paths = [
        str(tmp_path / "missing.yaml"),
        str(binary),
        str(broken),
        str(GOOD),
        str(INVALID_PLC005),
        str(tmp_path),
    ]
    results = check_paths(paths)
    assert [r.path for r in results] == paths
    assert [sorted(rules(r)) for r in results] == [
        ["PLC100"],
        ["PLC101"],
        ["PLC103"],
        [],
        ["PLC005"],
        ["PLC100"],
    ]


def test_load_path_reads_files_like_load_text(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC, encoding="utf-8")
    loaded = load_path(str(path))
    assert loaded.findings == () and loaded.job is not None


def cli(*args: str, stdin: str | bytes | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), input=stdin)
    assert not (result.exception and not isinstance(result.exception, SystemExit)), result.exception
    return result.exit_code, result.output


def test_cli_valid_example_exits_0() -> None:
    assert cli("check", str(GOOD))[0] == 0


def test_cli_invalid_example_exits_1() -> None:
    code, out = cli("check", str(INVALID_PLC005))
    assert code == 1 and f"{INVALID_PLC005}:" in out and "PLC005" in out


@pytest.mark.parametrize("kind", ["missing", "directory", "binary"])
def test_cli_unusable_input_exits_2(kind: str, tmp_path: Path) -> None:
    path = {
        "missing": tmp_path / "nope.yaml",
        "directory": tmp_path / "a-directory.yaml",  # a plain directory is walked for specs
        "binary": tmp_path / "b.yaml",
    }[kind]
    if kind == "directory":
        path.mkdir()
    if kind == "binary":
        path.write_bytes(b"version: 1\x00\xff")
    code, out = cli("check", str(path))
    assert code == 2
    assert f"{path}:1:" in out and ("PLC100" in out or "PLC101" in out)


def test_cli_fatal_and_error_together_exit_2(tmp_path: Path) -> None:
    code, out = cli("check", str(INVALID_PLC005), str(tmp_path / "nope.yaml"))
    assert code == 2 and "PLC005" in out and "PLC100" in out


def test_cli_strict_fails_on_a_warning() -> None:
    assert cli("check", str(WARNING_PLC011))[0] == 0
    assert cli("check", "--strict", str(WARNING_PLC011))[0] == 1


def test_cli_unknown_option_exits_2() -> None:
    assert cli("check", "--no-such-option", str(GOOD))[0] == 2


def test_cli_reads_stdin() -> None:
    assert cli("check", "-", stdin=SPEC)[0] == 0
    code, out = cli("check", "-", stdin=SPEC + "  seq_len: 1\n")
    assert code == 1 and "-:" in out and "PLC104" in out


def test_cli_empty_stdin_is_an_empty_file() -> None:
    code, out = cli("check", "-", stdin="")
    assert code == 1
    assert out.startswith("-:1:1: error PLC105")
