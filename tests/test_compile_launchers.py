"""Launcher files and the plan directory (planc.compile.launchers, planc.compile.write).

Launcher files are parsed back with small readers written here from each format's rules
(ecosystem.md §5) and compared with plan.json rank by rank.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from syrupy.assertion import SnapshotAssertion
from test_compile_plan import job_from, topologies

from planc.compile import OutputError, render_files, write_plan
from planc.compile import write as write_module
from planc.compile.launchers import megatron_args
from planc.spec.load import load_path

from conftest import EXAMPLES, ROOT, compiled, job_of, plannable_of, spec_text

SMALL = ["llama3-8b-1node.yaml", "llama3-70b-8x8.yaml", "gpt3-175b-gb200-nvl72.yaml"]
LARGE = "gpt3-175b-1024xa100.yaml"

Slots = list[tuple[str, int]]


def example_files(name: str) -> dict[str, str]:
    return render_files(compiled(plannable_of(load_path(str(EXAMPLES / name)).job)))


def plan_slots(files: dict[str, str]) -> Slots:
    return [(r["host"], r["local_rank"]) for r in json.loads(files["plan.json"])["ranks"]]


# ----------------------------------------------------------------------------- readers


def slurm_slots(files: dict[str, str]) -> Slots:
    """Arbitrary distribution: task i on line i's host; local ids count up per host."""
    seen: dict[str, int] = {}
    slots = []
    for host in files["slurm/hostfile"].splitlines():
        slots.append((host, seen.get(host, 0)))
        seen[host] = seen.get(host, 0) + 1
    return slots


def deepspeed_slots(files: dict[str, str]) -> Slots:
    """DeepSpeed: hosts in file order, then slots 0..N-1; comment lines skipped."""
    slots = []
    for line in files["deepspeed/hostfile"].splitlines():
        if line.startswith("#"):
            continue
        found = re.fullmatch(r"(\S+)\s+slots=(\d+)", line)
        assert found, line
        slots += [(found[1], k) for k in range(int(found[2]))]
    return slots


def mpi_slots(files: dict[str, str]) -> Slots:
    entries = {}
    for line in files["mpi/rankfile"].splitlines():
        found = re.fullmatch(r"rank (\d+)=(\S+) slot=(\d+)", line)
        assert found, line
        entries[int(found[1])] = (found[2], int(found[3]))
    return [entries[rank] for rank in range(len(entries))]


def torchrun_slots(files: dict[str, str]) -> Slots:
    """Static rendezvous: node K's local rank j is global rank K·nproc + j."""
    by_node: dict[int, Slots] = {}
    for name, text in files.items():
        if not name.endswith(".env"):
            continue
        env = dict(line.split("=", 1) for line in text.splitlines() if not line.startswith("#"))
        script = files[name.removesuffix(".env") + ".sh"]
        assert f"--node-rank={env['NODE_RANK']} " in script
        assert f"--nproc-per-node={env['NPROC_PER_NODE']} " in script
        assert f"--master-addr={env['MASTER_ADDR']} " in script
        by_node[int(env["NODE_RANK"])] = [(env["PLANC_HOST"], j) for j in range(int(env["NPROC_PER_NODE"]))]
    return [slot for node in sorted(by_node) for slot in by_node[node]]


READERS = [slurm_slots, deepspeed_slots, mpi_slots, torchrun_slots]


@pytest.mark.parametrize("name", [*SMALL, LARGE])
@pytest.mark.parametrize("reader", READERS, ids=lambda r: r.__name__)
def test_launchers_agree_with_plan_on_examples(name: str, reader: Any) -> None:
    files = example_files(name)
    assert reader(files) == plan_slots(files)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(topologies())
def test_launchers_agree_with_plan(text: str) -> None:
    files = render_files(compiled(job_from(text)))
    expected = plan_slots(files)
    for reader in READERS:
        assert reader(files) == expected, reader.__name__


# ----------------------------------------------------------------------------- snapshots


def excerpt(files: dict[str, str], full: bool) -> dict[str, str]:
    """Every format; per-node and per-rank files in full only for the small examples."""
    torchrun = sorted(name for name in files if name.startswith("torchrun/"))
    shown = {name: files[name] for name in ("README.md", "mpi/README.md", "slurm/job.sbatch",
                                             "slurm/nodes", "deepspeed/hostfile", ".planc-plan")}
    keep = torchrun if full else torchrun[:2] + torchrun[-2:]
    shown |= {name: files[name] for name in keep}
    for name in ("slurm/hostfile", "mpi/rankfile", ".planc-plan"):
        lines = files[name].splitlines(keepends=True)
        shown[name] = "".join(lines if full else [*lines[:10], f"... {len(lines)} lines\n"])
    return shown


@pytest.mark.parametrize("name", [*SMALL, LARGE])
def test_launcher_files_snapshot(name: str, snapshot: SnapshotAssertion) -> None:
    files = example_files(name)
    full = name != LARGE and name != "gpt3-175b-gb200-nvl72.yaml"
    assert excerpt(files, full) == snapshot
    assert sorted(files) == sorted(set(files))


# ----------------------------------------------------------------------------- recipes


def test_megatron_order_flags() -> None:
    default, _ = megatron_args(compiled(job_of()))
    assert "--use-tp-pp-dp-mapping" not in default
    assert "--tensor-model-parallel-size 2" in default
    assert "--use-distributed-optimizer" in default and "--sequence-parallel" in default
    swapped, _ = megatron_args(compiled(job_of({"parallelism": {"order": "tp-cp-pp-dp"}})))
    assert "--use-tp-pp-dp-mapping" in swapped
    _, notes = megatron_args(compiled(job_of({"parallelism": {"order": "tp-dp-cp-pp"}})))
    assert any('order="tp-dp-cp-pp"' in note for note in notes)


def test_megatron_virtual_and_uneven_stages() -> None:
    base = "llama3-70b-8x8.yaml"
    args, _ = megatron_args(compiled(job_of({"parallelism": {"virtual_stages": 2}}, base)))
    assert "--num-layers-per-virtual-pipeline-stage 10" in args
    args, notes = megatron_args(compiled(job_of({"parallelism": {"stage_layers": [19, 21, 21, 19]}}, base)))
    assert "--decoder-first-pipeline-num-layers 19" in args and not notes
    args, notes = megatron_args(compiled(job_of({"parallelism": {"stage_layers": [20, 19, 21, 20]}}, base)))
    assert not any("decoder-first" in a for a in args) and notes


def test_device_mesh_recipe_follows_order() -> None:
    readme = render_files(compiled(job_of({"parallelism": {"order": "tp-cp-pp-dp"}})))["README.md"]
    assert 'init_device_mesh("cuda", (4, 1, 1, 2), mesh_dim_names=("dp", "pp", "cp", "tp"))' in readme
    assert "_flatten" not in readme  # dp and cp are not adjacent in this mesh


# ----------------------------------------------------------------------------- write_plan


@pytest.fixture(scope="module")
def small_plan() -> Any:
    return compiled(job_of())


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".planc-" in p.name)


def test_write_plan_writes_every_file(tmp_path: Path, small_plan: Any) -> None:
    out = tmp_path / "plan"
    written = write_plan(small_plan, out, overwrite=False)
    assert sorted(p.relative_to(out).as_posix() for p in written) == sorted(render_files(small_plan))
    assert (out / "plan.json").read_text() == render_files(small_plan)["plan.json"]
    assert os.access(out / "torchrun" / "node-000.sh", os.X_OK)
    assert os.access(out / "slurm" / "job.sbatch", os.X_OK)
    assert not os.access(out / "plan.json", os.X_OK)
    assert leftovers(tmp_path) == []


def test_write_plan_replaces_a_previous_plan(tmp_path: Path, small_plan: Any) -> None:
    out = tmp_path / "plan"
    write_plan(compiled(job_of(base="llama3-70b-8x8.yaml")), out)
    assert (out / "torchrun" / "node-007.sh").exists()
    write_plan(small_plan, out)
    assert not (out / "torchrun" / "node-007.sh").exists()  # the old tree is gone, not merged
    assert json.loads((out / "plan.json").read_text())["world_size"] == 8
    assert leftovers(tmp_path) == []


def test_write_plan_into_an_empty_directory(tmp_path: Path, small_plan: Any) -> None:
    (tmp_path / "plan").mkdir()
    write_plan(small_plan, tmp_path / "plan")
    assert (tmp_path / "plan" / "plan.json").exists()


def test_write_plan_refuses_a_foreign_directory(tmp_path: Path, small_plan: Any) -> None:
    out = tmp_path / "src"
    out.mkdir()
    (out / "keep.py").write_text("precious\n")
    with pytest.raises(OutputError, match=r"holds files planc did not write .*: keep.py; .* --overwrite"):
        write_plan(small_plan, out)
    assert (out / "keep.py").read_text() == "precious\n"
    write_plan(small_plan, out, overwrite=True)
    assert not (out / "keep.py").exists() and (out / "plan.json").exists()


def test_write_plan_refuses_a_file(tmp_path: Path, small_plan: Any) -> None:
    target = tmp_path / "plan"
    target.write_text("x")
    with pytest.raises(OutputError, match="is not a directory"):
        write_plan(small_plan, target, overwrite=True)


def test_plan_json_alone_does_not_make_a_plan_directory(tmp_path: Path, small_plan: Any) -> None:
    out = tmp_path / "plan"
    write_plan(small_plan, out)
    (out / ".planc-plan").unlink()
    with pytest.raises(OutputError, match=r"no \.planc-plan manifest\): README\.md, coords\.json"):
        write_plan(small_plan, out)


@pytest.mark.parametrize("error", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_failure_midway_keeps_the_previous_plan(
    tmp_path: Path, small_plan: Any, monkeypatch: pytest.MonkeyPatch, error: BaseException
) -> None:
    out = tmp_path / "plan"
    write_plan(compiled(job_of(base="llama3-70b-8x8.yaml")), out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    real_fill = write_module._fill

    def failing_fill(root: Path, files: dict[str, str]) -> None:
        real_fill(root, dict(list(files.items())[:5]))  # some files land, then it breaks
        raise error

    monkeypatch.setattr(write_module, "_fill", failing_fill)
    with pytest.raises(type(error)):
        write_plan(small_plan, out)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert leftovers(tmp_path) == []


def test_failed_swap_restores_the_previous_plan(
    tmp_path: Path, small_plan: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "plan"
    write_plan(small_plan, out)
    before = (out / "plan.json").read_text()
    real_rename = Path.rename

    def rename(self: Path, target: Any) -> Any:
        if Path(target) == out.absolute() and ".planc-" in self.name and not self.name.endswith(".old"):
            raise OSError("rename failed")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(OutputError, match="rename failed"):
        write_plan(compiled(job_of(base="llama3-70b-8x8.yaml")), out)
    assert (out / "plan.json").read_text() == before
    assert leftovers(tmp_path) == []


SIGTERM_SCRIPT = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from conftest import compiled, job_of
from planc.compile import write_plan
from planc.compile import write as write_module

real_fill = write_module._fill
def fill(root, files):
    real_fill(root, dict(list(files.items())[:3]))
    os.kill(os.getpid(), signal.SIGTERM)
    real_fill(root, files)
write_module._fill = fill
write_plan(compiled(job_of()), Path({out!r}))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_midway_keeps_the_previous_plan(tmp_path: Path, small_plan: Any) -> None:
    out = tmp_path / "plan"
    write_plan(compiled(job_of(base="llama3-70b-8x8.yaml")), out)
    before = (out / "plan.json").read_text()
    script = SIGTERM_SCRIPT.format(tests=str(ROOT / "tests"), out=str(out))
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, timeout=120)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr.decode()
    assert (out / "plan.json").read_text() == before
    assert leftovers(tmp_path) == []


def test_unwritable_parent_is_an_output_error(tmp_path: Path, small_plan: Any) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="cannot write"):
        write_plan(small_plan, tmp_path / "file" / "plan")


def test_written_directory_is_deterministic(tmp_path: Path) -> None:
    text = spec_text(base="llama3-70b-8x8.yaml")
    trees = []
    for name in ("a", "b"):
        write_plan(compiled(job_from(text)), tmp_path / name)
        root = tmp_path / name
        trees.append({p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()})
    assert trees[0] == trees[1]
