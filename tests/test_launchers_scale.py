"""Launcher files stay few at scale: above NODE_FILES_LIMIT nodes one torchrun script serves
every node, and it launches each node exactly as the per-node scripts would."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from planc.compile import render_files
from planc.compile.launchers import NODE_FILES_LIMIT

from conftest import compiled, job_of

NODES = NODE_FILES_LIMIT + 1


def _files(nodes: int) -> dict[str, str]:
    job = job_of(
        {
            "hardware": {
                "nodes": nodes,
                "gpus_per_node": 1,
                "nvlink_domain": 1,
                "hosts": f"h{{0001..{nodes:04d}}}",
            },
            "parallelism": {"tensor": 1, "zero_stage": 1, "sequence_parallel": False},
            "training": {"global_batch": nodes},
            "rules": {"ignore": ["PLC007"]},
        }
    )
    return render_files(compiled(job))


def test_many_nodes_share_one_script(tmp_path: Path) -> None:
    files = _files(NODES)
    torchrun = sorted(name for name in files if name.startswith("torchrun/"))
    assert torchrun == ["torchrun/common.env", "torchrun/hosts", "torchrun/node.sh"]
    assert len(files) < 30
    assert files["torchrun/hosts"].splitlines()[3] == "h0004"
    assert "torchrun/node.sh K" in files["README.md"]
    # Run it with a stand-in torchrun that prints its arguments and the node's environment.
    for name in torchrun:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(files[name])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "torchrun"
    fake.write_text(
        '#!/bin/sh\necho "args: $*"\necho "host: $PLANC_HOST rank: $NODE_RANK world: $WORLD_SIZE"\n'
    )
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["sh", str(tmp_path / "torchrun" / "node.sh"), "3", "--lr", "1e-4"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert f"--nnodes={NODES} --nproc-per-node=1 --node-rank=3 --master-addr=h0001" in done.stdout
    assert "--lr 1e-4" in done.stdout
    assert f"host: h0004 rank: 3 world: {NODES}" in done.stdout
    bad = subprocess.run(
        ["sh", str(tmp_path / "torchrun" / "node.sh"), str(NODES)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode == 2 and "below" in bad.stderr


def test_few_nodes_keep_a_script_each() -> None:
    files = _files(4)
    assert {name for name in files if name.startswith("torchrun/")} == {
        f"torchrun/node-{i:03d}.{ext}" for i in range(4) for ext in ("sh", "env")
    }
