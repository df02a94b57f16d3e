"""planc search -j N: workers die with the search and hold none of its output; -j is capped at
the cores available."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from planc.cli.main import main
from planc.search import workers
from planc.search.workers import available_cores

ROOT = Path(__file__).resolve().parent.parent

# Llama 3 8B on two nodes, the whole space: several seconds of judging on two processes.
SPEC = """\
version: 1
name: small
model: {preset: llama3-8b}
hardware: {gpu: h100-sxm, nodes: 2}
training: {seq_len: 4096, global_batch: 64}
"""

GENEROUS_S = 60.0  # a bound on waiting, never a measured duration


def _stat(pid: str) -> tuple[str, int, int] | None:
    """(state, parent, process group) of a process from /proc/PID/stat, None once gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    return fields[0], int(fields[1]), int(fields[2])


def _group(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group `pgid`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(entry)
            if stat is not None and stat[2] == pgid and stat[0] != "Z":
                found.append(int(entry))
    return found


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + GENEROUS_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.05)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.skipif(available_cores() < 2, reason="-j 2 is capped at one core: no workers")
@pytest.mark.parametrize("kill", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killing_the_search_kills_its_workers_and_ends_its_output(
    tmp_path: Path, kill: signal.Signals
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    search = subprocess.Popen(
        [sys.executable, "-m", "planc", "search", str(spec), "-j", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,  # its own process group: the workers join it
    )
    try:
        _wait_for(lambda: len(_group(search.pid)) >= 3, "the search and its two workers")
        search.send_signal(kill)
        # End of output on both pipes: no worker holds them.
        out, _ = search.communicate(timeout=GENEROUS_S)
        assert search.returncode == -kill
        assert out == b""
        _wait_for(lambda: not _group(search.pid), "the workers to exit")
    finally:
        for pid in _group(search.pid):
            os.kill(pid, signal.SIGKILL)
        search.kill()
        search.wait()


def test_jobs_are_capped_at_the_cores_available(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC + "search: {tensor: [8], pipeline: [2], zero_stage: [1]}\n")
    many = available_cores() + 7
    capped = CliRunner().invoke(main, ["search", str(spec), "--format", "json", "-j", str(many)])
    alone = CliRunner().invoke(main, ["search", str(spec), "--format", "json"])
    assert capped.exit_code == alone.exit_code == 0
    assert capped.stdout == alone.stdout
    cores = available_cores()
    assert f"--jobs {many} capped at {cores}" in capped.stderr
    assert "capped" not in alone.stderr


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.skipif(available_cores() < 2, reason="one core: the default is one process")
def test_without_jobs_a_large_space_runs_on_the_cores_available(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    search = subprocess.Popen(
        [sys.executable, "-m", "planc", "search", str(spec)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    try:
        _wait_for(lambda: len(_group(search.pid)) >= 3, "the search and two workers")
    finally:
        for pid in _group(search.pid):
            # A worker may have exited between the listing and the kill.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        search.wait()


def test_a_space_of_one_task_starts_no_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_pool(jobs: int) -> None:
        raise AssertionError(f"a pool of {jobs} workers for one task")

    monkeypatch.setattr(workers, "pool", no_pool)
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC + "search: {tensor: [8], pipeline: [2], zero_stage: [1]}\n")
    result = CliRunner().invoke(main, ["search", str(spec), "--format", "json", "-j", "2"])
    assert result.exit_code == 0, result.output


def test_the_collector_is_as_before_after_a_search(tmp_path: Path) -> None:
    before = gc.get_threshold()
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC + "search: {tensor: [8], pipeline: [2], zero_stage: [1]}\n")
    assert CliRunner().invoke(main, ["search", str(spec), "--format", "json"]).exit_code == 0
    assert gc.get_threshold() == before


@pytest.mark.parametrize(
    ("files", "limit"),
    [
        ({"cpu.max": "200000 100000\n"}, 2),  # cgroup v2, --cpus 2
        ({"cpu.max": "150000 100000\n"}, 2),  # 1.5 cores: two processes share them
        ({"cpu.max": "max 100000\n"}, None),  # v2 without a limit
        ({"cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1),  # v1
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({"cpu.max": "garbage\n"}, None),
        ({}, None),  # no cgroup files at all
    ],
)
def test_a_containers_cpu_limit_caps_the_cores(
    tmp_path: Path, files: dict[str, str], limit: int | None
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert workers.cgroup_cpu_limit(tmp_path) == limit
    unlimited = workers.available_cores(tmp_path / "none")
    expected = unlimited if limit is None else max(1, min(unlimited, limit))
    assert workers.available_cores(tmp_path) == expected
