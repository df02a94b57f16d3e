"""Host names from a file for `planc compile --hosts`: hostfiles, DeepSpeed slots, Slurm
nodelists; bad lines and names are located PLC014 findings; placeholder hosts are warned about."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from planc.cli.main import main
from planc.spec.hostfile import HostfileError, check_hosts, expand_nodelist, parse_hosts

ROOT = Path(__file__).resolve().parent.parent
NO_HOSTS = ROOT / "examples" / "gpt3-175b-gb200-nvl72.yaml"  # 36 nodes, no hardware.hosts
EIGHT = ROOT / "examples" / "llama3-70b-8x8.yaml"  # 8 nodes


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("gpu-[001-003,007]", ["gpu-001", "gpu-002", "gpu-003", "gpu-007"]),
        ("n[8-11]", ["n8", "n9", "n10", "n11"]),
        ("rack[1-2]-gpu[01-02]", ["rack1-gpu01", "rack1-gpu02", "rack2-gpu01", "rack2-gpu02"]),
        ("gpu-[01-02],cpu-01", ["gpu-01", "gpu-02", "cpu-01"]),
        ("plain.example.com", ["plain.example.com"]),
        ("x[5]", ["x5"]),
    ],
)
def test_slurm_nodelists_expand_like_scontrol(text: str, names: list[str]) -> None:
    assert expand_nodelist(text) == names


@pytest.mark.parametrize(
    ("text", "message", "column"),
    [
        ("gpu-[01-03", "'[' without ']'", 5),
        ("gpu-01]", "']' without '['", 7),
        ("gpu-[03-01]", "runs backwards", 6),
        ("gpu-[a-b]", "not a number", 6),
        ("gpu-[[1-2]]", "nested", 6),
        ("gpu-01,,gpu-02", "empty name", 8),
        ("g[0-999999]h[0-9]", "more than", 1),
    ],
)
def test_bad_nodelists_say_where(text: str, message: str, column: int) -> None:
    with pytest.raises(HostfileError, match=re.escape(message)) as caught:
        expand_nodelist(text, 1_000_000)
    assert caught.value.column == column


def test_hostfile_lines_comments_and_slots() -> None:
    hosts = parse_hosts(
        "# DeepSpeed style\n"
        "gpu-a01 slots=8\n"
        "\n"
        "gpu-a02 slots=8 max_slots=8   # trailing comment\n"
        "gpu-b[01-02]\n"
    )
    assert hosts.findings == ()
    assert hosts.names == ("gpu-a01", "gpu-a02", "gpu-b01", "gpu-b02")
    assert hosts.lines == (2, 4, 5, 5)


def test_unreadable_lines_are_located_findings() -> None:
    hosts = parse_hosts("gpu-a01\ngpu-a02 eight\n  gpu-[2-1]\n")
    assert [(f.line, f.column, f.rule) for f in hosts.findings] == [
        (2, 9, "PLC014"),
        (3, 8, "PLC014"),
    ]
    assert parse_hosts("# nothing\n").findings[0].message == "the file names no hosts"


def _hosts_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "hosts"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_names_meet_the_host_rule(tmp_path: Path) -> None:
    result, names = check_hosts(_hosts_file(tmp_path, "gpu-[01-08]\n"), 8)
    assert result.findings == () and names == tuple(f"gpu-{i:02d}" for i in range(1, 9))
    result, names = check_hosts(_hosts_file(tmp_path, "gpu-[01-07]\ngpu-03\nbad/name\n"), 8)
    assert names == ()
    assert [(f.line, f.rule, f.message) for f in result.findings] == [
        (2, "PLC014", "host name gpu-03 repeats"),
        (3, "PLC014", "9 host names for 8 nodes"),
        (3, "PLC014", "host name 'bad/name' cannot go into a hostfile or rankfile"),
    ]
    missing, _ = check_hosts(str(tmp_path / "nope"), 8)
    assert [(f.rule, f.severity.value) for f in missing.findings] == [("PLC100", "fatal")]


def test_compiled_readme_warns_about_placeholder_hosts() -> None:
    from planc.compile.launchers import _placeholder_warning
    from planc.spec.load import load_path

    placeholder = load_path(str(NO_HOSTS)).job
    named = load_path(str(EIGHT)).job
    assert placeholder is not None and named is not None
    warning = _placeholder_warning(placeholder.cluster.hosts)
    assert "placeholder host names" in warning and "node-35" in warning
    assert _placeholder_warning(named.cluster.hosts) == ""


def _compile(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["compile", *args])
    return result.exit_code, result.stdout, result.stderr


def test_compile_warns_on_stderr_without_hosts(tmp_path: Path) -> None:
    code, _, err = _compile(str(NO_HOSTS), "-o", str(tmp_path / "plan"))
    assert code == 0 and "warning: no hardware.hosts" in err and "node-35" in err
    code, _, err = _compile(str(EIGHT), "-o", str(tmp_path / "named"))
    assert code == 0 and "warning" not in err


def test_compile_takes_hosts_from_a_file(tmp_path: Path) -> None:
    hosts = _hosts_file(tmp_path, "dgx-[001-008] slots=8\n")
    out = tmp_path / "plan"
    code, _, err = _compile(str(EIGHT), "-o", str(out), "--hosts", hosts)
    assert code == 0 and "warning" not in err, err
    deepspeed = (out / "deepspeed" / "hostfile").read_text().splitlines()
    assert next(line for line in deepspeed if not line.startswith("#")) == "dgx-001 slots=8"
    plan = json.loads((out / "plan.json").read_text())
    assert "dgx-008" in json.dumps(plan) and "gpu-" not in (out / "slurm" / "hostfile").read_text()


def test_compile_refuses_bad_hosts_with_findings_in_the_file(tmp_path: Path) -> None:
    hosts = _hosts_file(tmp_path, "dgx-[001-007]\n")
    out = tmp_path / "plan"
    code, _, err = _compile(str(EIGHT), "-o", str(out), "--hosts", hosts)
    assert code == 1 and f"{hosts}:1:1: error PLC014 7 host names for 8 nodes" in err
    assert not out.exists()


def test_slots_must_match_the_gpus_per_node(tmp_path: Path) -> None:
    # planc puts gpus_per_node ranks on every node; a hostfile saying otherwise is refused at
    # the slots= word (line 2, column 9), and a count that is not a number too.
    text = "gpu-a01 slots=8\ngpu-a02 slots=4 max_slots=8\ngpu-a03\ngpu-a04\n"
    result, names = check_hosts(_hosts_file(tmp_path, text), 4, 8)
    assert names == ()
    assert [(f.line, f.column, f.rule) for f in result.findings] == [(2, 9, "PLC014")]
    assert "slots=4" in result.findings[0].message and "8 GPUs" in result.findings[0].message
    words = check_hosts(_hosts_file(tmp_path, text.replace("=4 ", "=eight ")), 4, 8)
    assert [(f.line, f.column) for f in words[0].findings] == [(2, 9)]
    matching = "gpu-a01 slots=8\ngpu-a02 slots=8 max_slots=8\ngpu-[03-04]\n"
    result, names = check_hosts(_hosts_file(tmp_path, matching), 4, 8)
    assert result.findings == () and len(names) == 4
    digits = check_hosts(_hosts_file(tmp_path, "gpu-a01 slots=" + "9" * 5000 + "\n"), 1, 8)
    assert [(f.line, f.column) for f in digits[0].findings] == [(1, 9)]


def test_compile_hosts_refuses_a_slots_count_the_spec_does_not_run(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from planc.cli.main import main

    spec = Path(__file__).resolve().parent.parent / "examples" / "llama3-8b-1node.yaml"
    hosts = _hosts_file(tmp_path, "gpu-a01 slots=4\n")
    result = CliRunner().invoke(
        main, ["compile", str(spec), "--hosts", hosts, "-o", str(tmp_path / "plan")]
    )
    assert result.exit_code == 1  # an error finding, as check exits
    assert "slots=4" in result.stderr and f"{hosts}:1:9" in result.stderr
    assert not (tmp_path / "plan").exists()


def test_compile_takes_a_slurm_nodelist_written_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `--hosts 'gpu-[001-004,007-010]'`, as the README promises: the names, not a file.
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "plan"
    code, _, err = _compile(str(EIGHT), "-o", str(out), "--hosts", "gpu-[001-004,007-010]")
    assert code == 0 and "warning" not in err, err
    names = [f"gpu-{i:03d}" for i in (1, 2, 3, 4, 7, 8, 9, 10)]
    hostfile = (out / "deepspeed" / "hostfile").read_text().splitlines()
    assert [line.split()[0] for line in hostfile if not line.startswith("#")] == names
    # Too few names: located in the nodelist itself; a lone name is still taken for a file.
    code, _, err = _compile(str(EIGHT), "-o", str(tmp_path / "short"), "--hosts", "gpu-[001-004]")
    assert code == 1 and "gpu-[001-004]:1:1: error PLC014 4 host names for 8 nodes" in err
    code, _, err = _compile(str(EIGHT), "-o", str(tmp_path / "typo"), "--hosts", "hostz.txt")
    assert code == 2 and "PLC100" in err
