"""Issue 30, items 6-8: the files planc reads besides a spec (calibration files, measurement
CSVs, project configuration) and the directories `planc check` walks.

Each reproducer of the issue is a test: a one-line error with exit 2, or a located finding,
never a traceback, a hang or a silent pass. Positions are computed from the text each test
writes; the stat counts of the deep walk are compared with each other (a walk that lists each
directory once costs the same per level), not with numbers the code printed.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from planc.cli.main import main
from planc.presets.efficiency import for_gpu, from_json, to_json

from conftest import EXAMPLES, ROOT

SPEC = (EXAMPLES / "llama3-8b-1node.yaml").read_text(encoding="utf-8")
# The same spec, but tensor 3 does not divide the node's 8 GPUs: an error (exit 1) if checked.
FAILING = SPEC.replace("  tensor: 2\n", "  tensor: 3\n")
CALIBRATED = SPEC.replace("hardware:\n", "hardware:\n  calibration: cal.json\n", 1)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def one_line_error(result: Result, code: int = 2) -> str:
    """The error of a run that must exit `code` with a one-line message and no traceback."""
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


def run_planc(
    *args: str, cwd: Path, limit_bytes: int | None = None
) -> subprocess.CompletedProcess[str]:
    """planc in its own process (a FIFO or a memory limit must not reach the test's process);
    the timeout turns a hang into a failure."""

    def limit() -> None:
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "planc", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        preexec_fn=limit,
        check=False,
    )


# --------------------------------------------------------------------------- item 6: calibrate


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    (tmp_path / "s.yaml").write_text(SPEC, encoding="utf-8")
    return tmp_path


def calibrate(folder: Path, csv_text: str) -> Result:
    (folder / "m.csv").write_text(csv_text, encoding="utf-8")
    return invoke("calibrate", str(folder / "m.csv"), "-o", str(folder / "cal.json"))


@pytest.mark.parametrize("seconds", ["1e-300", "1e300", "1e-9", "1e9", "nan", "inf", "0", "-1"])
def test_calibrate_refuses_an_implausible_step_time_naming_the_row(
    runs: Path, seconds: str
) -> None:
    error = one_line_error(calibrate(runs, f"spec,seconds\ns.yaml,{seconds}\n"))
    assert f"m.csv:2: {seconds} s per step is outside" in error
    assert not (runs / "cal.json").exists()


def test_calibrate_refuses_a_200000_character_field(runs: Path) -> None:
    error = one_line_error(calibrate(runs, "s.yaml," + "1" * 200_000 + "\n"))
    assert "m.csv:1:" in error
    assert not (runs / "cal.json").exists()


def test_a_bad_first_row_is_an_error_not_a_header(runs: Path) -> None:
    error = one_line_error(calibrate(runs, "s.yaml,fast\ns.yaml,6.0\n"))
    assert "m.csv:1: 'fast' is not a number of seconds" in error
    # A header names its columns; after a comment it is still the first row.
    assert calibrate(runs, "# runs\nspec,seconds per step\ns.yaml,6.0\n").exit_code == 0
    # A header only comes first: the same row later is a bad row.
    error = one_line_error(calibrate(runs, "s.yaml,6.0\nspec,seconds per step\n"))
    assert "m.csv:2: 'seconds per step' is not a number of seconds" in error


def test_calibrate_refuses_measurements_a_fit_cannot_mean(runs: Path) -> None:
    # The set: a billion times apart, both in and out of the range a step takes.
    one_line_error(calibrate(runs, "s.yaml,1e-9\ns.yaml,1e9\n"))
    # Within the range, but the same spec measured at 0.01 s and 3,000 s: 300,000 times apart,
    # at least one of them more than 20 times from any step time the model can give.
    error = one_line_error(calibrate(runs, "s.yaml,0.01\ns.yaml,3000\n"))
    assert "times the model's" in error
    assert not (runs / "cal.json").exists()


def test_calibrate_refuses_a_fifo_without_waiting(runs: Path) -> None:
    os.mkfifo(runs / "m.csv")
    done = run_planc("calibrate", "m.csv", "-o", "cal.json", cwd=runs)
    assert done.returncode == 2
    assert done.stderr.strip() == "error: m.csv: is a named pipe (FIFO), not a regular file"


# ----------------------------------------------------------------- item 6: calibration files

GOOD = to_json(for_gpu("h100-sxm"))


def with_value(path: tuple[str, ...], value: Any) -> str:
    """The h100-sxm entry as JSON text with the field at `path` set to `value` (JSON text)."""
    marker = "__PLANC_VALUE__"
    data = json.loads(json.dumps(GOOD))
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = marker
    return json.dumps(data).replace(f'"{marker}"', value)


PEAK = ("gemm", "peak_fraction")
HOSTILE = {
    "Infinity": with_value(PEAK, "Infinity"),
    "NaN": with_value(PEAK, "NaN"),
    "1e400": with_value(PEAK, "1e400"),
    "zero fraction": with_value(PEAK, "0"),
    "fraction above 1": with_value(PEAK, "1.0000001"),
    "negative": with_value(("hbm", "half_bytes"), "-1"),
    "a list": with_value(PEAK, "[0.8]"),
    "a boolean": with_value(PEAK, "true"),
    "a string": with_value(PEAK, '"0.8"'),
    "10^400": with_value(("gemm", "half_dim"), "1" + "0" * 400),
    "10^30 half_dim": with_value(("gemm", "half_dim"), "1" + "0" * 30),
    "deep nesting": "[" * 100_000 + "]" * 100_000,
    "nesting in a field": with_value(PEAK, "[" * 50 + "]" * 50),
    "a list at the top": "[1]",
    "an unknown key": with_value(("gemm", "peak"), "0.8"),
    "zero link efficiency": with_value(("network", "nvlink", "efficiency", "all_reduce"), "0"),
    "not JSON": "{",
}


def check_calibrated(folder: Path) -> tuple[Result, tuple[int, int]]:
    """`planc check` of the spec naming cal.json, and where `cal.json` stands in it."""
    (folder / "s.yaml").write_text(CALIBRATED, encoding="utf-8")
    index = CALIBRATED.index("cal.json")
    line = CALIBRATED.count("\n", 0, index) + 1
    column = index - CALIBRATED.rfind("\n", 0, index)
    return invoke("check", str(folder / "s.yaml")), (line, column)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_calibration_file_is_a_located_finding(tmp_path: Path, name: str) -> None:
    (tmp_path / "cal.json").write_text(HOSTILE[name], encoding="utf-8")
    result, (line, column) = check_calibrated(tmp_path)
    assert result.exit_code == 1, result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    first = result.output.splitlines()[0]
    assert first.startswith(f"{tmp_path / 's.yaml'}:{line}:{column}: error PLC110 ")
    assert "hardware.calibration:" in first


def test_the_calibration_bounds_are_inclusive_where_a_value_can_be_reached(tmp_path: Path) -> None:
    # A fraction of exactly 1 (the peak) and a processor usage of 0 (no SMs taken) are valid.
    data = json.loads(with_value(PEAK, "1"))
    data["network"]["network"]["processor_usage"] = 0
    (tmp_path / "cal.json").write_text(json.dumps(data), encoding="utf-8")
    result, _ = check_calibrated(tmp_path)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("kind", ["fifo", "device", "directory", "too large"])
def test_a_calibration_that_is_not_a_small_regular_file_is_refused_unread(
    tmp_path: Path, kind: str
) -> None:
    target = tmp_path / "cal.json"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "device":
        target.symlink_to("/dev/zero")
    elif kind == "directory":
        target.mkdir()
    else:
        target.write_text(" " * (1024 * 1024) + json.dumps(GOOD), encoding="utf-8")
    (tmp_path / "s.yaml").write_text(CALIBRATED, encoding="utf-8")
    done = run_planc("check", "s.yaml", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "error PLC110 hardware.calibration: ./cal.json cannot be used: " in done.stdout
    assert "Traceback" not in done.stderr


def test_nan_in_a_calibration_reaches_no_output(tmp_path: Path) -> None:
    (tmp_path / "cal.json").write_text(HOSTILE["NaN"], encoding="utf-8")
    (tmp_path / "s.yaml").write_text(CALIBRATED, encoding="utf-8")
    explained = invoke("explain", str(tmp_path / "s.yaml"), "--format", "json")
    assert explained.exit_code == 1

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in explain's JSON")

    report = json.loads(explained.output, parse_constant=refuse)  # no NaN value anywhere
    assert report["ok"] is False
    compiled = invoke("compile", str(tmp_path / "s.yaml"), "-o", str(tmp_path / "plan"))
    assert compiled.exit_code == 1 and not (tmp_path / "plan").exists()


def test_a_valid_calibration_round_trips_through_the_strict_model(tmp_path: Path) -> None:
    (tmp_path / "cal.json").write_text(json.dumps(GOOD), encoding="utf-8")
    result, _ = check_calibrated(tmp_path)
    assert result.exit_code == 0, result.output
    assert from_json(GOOD) == for_gpu("h100-sxm")


# ---------------------------------------------------------------- item 7: project configuration


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / ".git").mkdir()
    (tmp_path / "s.yaml").write_text(FAILING, encoding="utf-8")
    return tmp_path


def check_in(folder: Path, *args: str) -> Result:
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        return invoke("check", *args)
    finally:
        os.chdir(cwd)


def test_a_5000_level_planc_toml_is_a_config_error(project: Path) -> None:
    (project / ".planc.toml").write_text("a = " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    error = one_line_error(check_in(project, "s.yaml"))
    assert error.startswith(f"planc: error: {project / '.planc.toml'}: ")


def test_an_integer_past_pythons_digit_limit_is_a_config_error(project: Path) -> None:
    (project / ".planc.toml").write_text("max_bubble = 1" + "0" * 5000 + "\n", encoding="utf-8")
    one_line_error(check_in(project, "s.yaml"))


@pytest.mark.parametrize(
    "text",
    [
        'tool = """\n[tool.planc]\nselect = 3\n"""\n',
        '[project]\ndescription = """\n[tool.planc]\nselect = 3\n"""\n',
        "# [tool.planc]\n[project]\nname = 'x'\n",
    ],
)
def test_a_tool_planc_header_inside_a_string_is_not_a_table(project: Path, text: str) -> None:
    # Passed over as a pyproject.toml without [tool.planc]: the spec is checked (and fails,
    # exit 1) with planc's defaults, not stopped by `select = 3` or a traceback.
    (project / "pyproject.toml").write_text(text, encoding="utf-8")
    result = check_in(project, "s.yaml")
    assert result.exit_code == 1, result.output
    assert "PLC001" in result.output


def test_a_real_tool_planc_table_is_still_read(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.planc]\nignore = ["PLC001"]\n', "utf-8")
    assert "PLC001" not in check_in(project, "s.yaml").output


def test_config_dev_zero_is_refused_unread(project: Path) -> None:
    error = one_line_error(check_in(project, "--config", "/dev/zero", "s.yaml"))
    assert error == "planc: error: /dev/zero: is a character device, not a regular file"


def test_config_fifo_is_refused_without_waiting(project: Path) -> None:
    os.mkfifo(project / "fifo.toml")
    done = run_planc("check", "--config", "fifo.toml", "s.yaml", cwd=project)
    assert done.returncode == 2
    assert (
        done.stderr.strip() == "planc: error: fifo.toml: is a named pipe (FIFO), not a regular file"
    )


def test_a_300_mb_config_is_refused_in_bounded_memory(project: Path) -> None:
    with open(project / "big.toml", "wb") as handle:
        handle.truncate(300 * 1024 * 1024)  # sparse: 300 MB of NUL bytes, no disk used
    # 600 MiB of address space: reading the whole file (what planc did) cannot fit beside the
    # interpreter, so a run that succeeds here read a bounded prefix.
    done = run_planc("check", "--config", "big.toml", "s.yaml", cwd=project, limit_bytes=600 << 20)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == "planc: error: big.toml: is larger than 1,048,576 bytes"


# ---------------------------------------------------------------------- item 8: walking trees


def chain(root: Path, depth: int, spec: str) -> Path:
    """`depth` nested directories `d/d/...` below `root`, a spec at the bottom; `root` holds
    .git, so the configuration lookup stops there. Built with mkdir: os.makedirs recurses."""
    (root / ".git").mkdir(parents=True)
    path = str(root)
    for _ in range(depth):
        path = os.path.join(path, "d")
        os.mkdir(path)
    with open(os.path.join(path, "s.yaml"), "w", encoding="utf-8") as handle:
        handle.write(spec)
    return Path(path)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every os.stat and os.scandir call (os.path.isfile, exists and isdir stat through os.stat)."""
    calls: list[str] = []
    real_stat, real_scandir = os.stat, os.scandir

    def stat(*args: Any, **kwargs: Any) -> Any:
        calls.append("stat")
        return real_stat(*args, **kwargs)

    def scandir(*args: Any, **kwargs: Any) -> Any:
        calls.append("scandir")
        return real_scandir(*args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "scandir", scandir)
    yield calls


def remove_chain(root: Path) -> None:
    """Remove what `chain` built, deepest first (shutil.rmtree recurses, and pytest's cleanup
    of its temporary directories with it)."""
    path, levels = str(root), []
    while os.path.isdir(os.path.join(path, "d")):
        path = os.path.join(path, "d")
        levels.append(path)
    for level in reversed(levels):
        for name in os.listdir(level):
            os.remove(os.path.join(level, name))
        os.rmdir(level)


@pytest.fixture
def deep(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    for root in (tmp_path, *tmp_path.iterdir()):
        remove_chain(root)


def test_a_1200_deep_tree_is_walked_and_its_spec_checked(deep: Path) -> None:
    tmp_path = deep
    chain(tmp_path, 1200, FAILING)
    result = check_in(tmp_path / "d", ".")  # relative names: under PATH_MAX at every level
    assert result.exit_code == 1, result.output[-2000:]
    assert "PLC001" in result.output
    assert "1 file checked" in result.output


def test_walk_and_config_lookup_cost_grows_linearly_with_depth(
    deep: Path, counted: list[str]
) -> None:
    tmp_path = deep

    def calls(depth: int) -> int:
        root = tmp_path / str(depth)
        chain(root, depth, SPEC)
        counted.clear()
        assert check_in(root, ".").exit_code == 0
        return len(counted)

    calls(1)  # imports planc's lazily imported modules, which stat files of their own
    c100, c200, c400 = calls(100), calls(200), calls(400)
    # The same work per level: twice the extra depth costs exactly twice the extra calls. A
    # lookup that walks up again from every directory costs depth² (61,106 calls at 200).
    assert c400 - c200 == 2 * (c200 - c100)
    assert c200 - c100 <= 10 * 100


def test_an_unreadable_directory_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "ok.yaml").write_text(SPEC, encoding="utf-8")
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "s.yaml").write_text(FAILING, encoding="utf-8")
    real_scandir = os.scandir

    def scandir(path: Any = ".") -> Any:
        if os.path.basename(os.fspath(path)) == "locked":
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    error = one_line_error(invoke("check", str(tmp_path)))
    assert error.startswith(
        f"planc: error: cannot read directory {tmp_path / 'locked'}: Permission denied"
    )
    # Excluded, it is not listed, and the run checks the rest.
    assert invoke("check", str(tmp_path), "--exclude", "locked").exit_code == 0


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 directory")
def test_a_chmod_000_directory_fails_the_run(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "s.yaml").write_text(FAILING, encoding="utf-8")
    locked.chmod(0)
    try:
        error = one_line_error(invoke("check", str(tmp_path)))
    finally:
        locked.chmod(0o755)
    assert f"cannot read directory {locked}" in error
