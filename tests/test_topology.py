"""hardware.topology: Slurm's topology.conf (tree and block) and topology.yaml (tree and block)
as fabric tiers, the hosts placed by their position in the file, and every bad or hostile file
a located finding, never a traceback or a hang.

The files are the examples of Slurm's own manual pages (topology.conf(5), topology.yaml(5));
the spans are counted by hand from them: a tier's block is the job's hosts under one switch or
block (× 8 GPUs a node).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from planc.cli.main import main
from planc.comm.schedule import link_class
from planc.findings import Finding
from planc.plannable import plannable
from planc.spec.load import load_path
from planc.vocab import Axis

from conftest import EXAMPLES

# topology.conf(5), EXAMPLE, topology/tree.
TREE_CONF = """\
##################################################################
# Slurm's network topology configuration file for use with the
# topology/tree plugin
##################################################################
SwitchName=s0 Nodes=dev[0-5]
SwitchName=s1 Nodes=dev[6-11]
SwitchName=s2 Nodes=dev[12-17]
SwitchName=s3 Switches=s[0-2]
"""
# topology.conf(5), EXAMPLE, topology/block.
BLOCK_CONF = """\
##################################################################
# Slurm's network topology configuration file for use with the
# topology/block plugin
##################################################################
BlockName=block1 Nodes=node[1-32]
BlockName=block2 Nodes=node[33-64]
BlockName=block3 Nodes=node[65-96]
BlockName=block4 Nodes=node[97-128]
BlockSizes=30,120
"""
# topology.yaml(5), EXAMPLE.
TOPOLOGY_YAML = """\
- topology: topo1
  cluster_default: True
  tree:
    switches:
    - switch: sw_root
      nodes: node[01-04]
- topology: topo2
  cluster_default: False
  block:
    block_sizes:
      - 4
      - 16
    blocks:
    - block: b1
      nodes: node[01-04]
    - block: b2
      nodes: node[05-08]
    - block: b3
      nodes: node[09-12]
    - block: b4
      nodes: node[13-16]
- topology: topo3
  cluster_default: False
  flat: True
"""


def spec(
    tmp_path: Path, topology: str, nodes: int, name: str = "topology.conf", **hardware: Any
) -> Path:
    """Llama 3 70B (t = 8, p = 4 on the example; d follows) on `nodes` nodes of 8 H100 with
    hardware.topology naming `name`, whose text is `topology`."""
    (tmp_path / name).write_text(topology, encoding="utf-8")
    data = yaml.safe_load((EXAMPLES / "llama3-70b-8x8.yaml").read_text("utf-8"))
    data["hardware"].pop("hosts")
    data["hardware"].update({"nodes": nodes, "topology": name, **hardware})
    data["training"]["global_batch"] = 64 * nodes
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def tiers(path: Path) -> list[tuple[str, int]]:
    loaded = load_path(str(path))
    assert loaded.job is not None, loaded.findings
    return [(tier.name, tier.span) for tier in loaded.job.cluster.fabric]


def findings(path: Path) -> tuple[Finding, ...]:
    return load_path(str(path)).findings


# --- Slurm's examples ---------------------------------------------------------------------------


def test_the_tree_example_of_topology_conf(tmp_path: Path) -> None:
    # Three leaf switches of 6 nodes under s3: leaf blocks of 6·8 = 48 GPUs, s3 joins all 144.
    assert tiers(spec(tmp_path, TREE_CONF, 18)) == [("nvlink", 8), ("leaf", 48), ("spine", 144)]


def test_the_block_example_of_topology_conf(tmp_path: Path) -> None:
    # Four blocks of 32 nodes (256 GPUs); BlockSizes 30,120: a higher block joins 120/30 = 4
    # blocks, all 128 nodes (1,024 GPUs).
    assert tiers(spec(tmp_path, BLOCK_CONF, 128)) == [
        ("nvlink", 8),
        ("block", 256),
        ("blocks4", 1024),
    ]


def test_the_tree_example_of_topology_yaml(tmp_path: Path) -> None:
    # topo1 is the cluster default: one switch over node01-04 (32 GPUs).
    path = spec(tmp_path, TOPOLOGY_YAML, 4, "topology.yaml")
    assert tiers(path) == [("nvlink", 8), ("leaf", 32)]
    job = load_path(str(path)).job
    assert job is not None
    assert tuple(job.cluster.hosts) == ("node01", "node02", "node03", "node04")


def test_the_block_example_of_topology_yaml(tmp_path: Path) -> None:
    # topo2 made the default: blocks of 4 nodes (32 GPUs); block_sizes 4, 16 join 4 blocks.
    text = TOPOLOGY_YAML.replace("cluster_default: True", "cluster_default: False", 1)
    text = text.replace("cluster_default: False\n  block", "cluster_default: True\n  block")
    path = spec(tmp_path, text, 16, "topology.yaml")
    assert tiers(path) == [("nvlink", 8), ("block", 32), ("blocks4", 128)]


# --- the hosts' positions place the ranks -------------------------------------------------------

LEAVES = """\
SwitchName=s0 Nodes=gpu-[000-001]
SwitchName=s1 Nodes=gpu-[002-003]
SwitchName=s2 Nodes=gpu-[004-005]
SwitchName=s3 Nodes=gpu-[006-007]
SwitchName=root Switches=s[0-3]
"""
# The job's hosts in an order that splits every leaf.
SCRAMBLED = ["gpu-006", "gpu-000", "gpu-004", "gpu-002", "gpu-001", "gpu-007", "gpu-003", "gpu-005"]


def test_hosts_are_placed_in_topology_order(tmp_path: Path) -> None:
    path = spec(tmp_path, LEAVES, 8, hosts=SCRAMBLED)
    loaded = load_path(str(path))
    assert loaded.job is not None, loaded.findings
    assert tuple(loaded.job.cluster.hosts) == tuple(f"gpu-00{i}" for i in range(8))
    plan = plannable(loaded.job)
    assert not isinstance(plan, tuple)
    # t = 8, p = 4, d = 2, order tp-cp-dp-pp: DP pairs r, r + 8 are nodes 2k, 2k + 1, one leaf;
    # the pipeline r, r + 16, r + 32, r + 48 spans 4 leaves: the spine.
    assert link_class(plan, (Axis.TP,)) == "nvlink"
    assert link_class(plan, (Axis.DP,)) == "leaf"
    assert link_class(plan, (Axis.PP,)) == "spine"


def test_compile_places_the_hosts_given_with_hosts(tmp_path: Path) -> None:
    path = spec(tmp_path, LEAVES, 8)
    out = tmp_path / "plan"
    hosts = ",".join(reversed([f"gpu-00{i}" for i in range(8)]))
    result = CliRunner().invoke(main, ["compile", str(path), "-o", str(out), "--hosts", hosts])
    assert result.exit_code == 0, result.output
    plan = json.loads((out / "plan.json").read_text("utf-8"))
    assert plan["cluster"]["hosts"] == [f"gpu-00{i}" for i in range(8)]
    assert [(t["name"], t["span"]) for t in plan["cluster"]["fabric"]] == [
        ("nvlink", 8),
        ("leaf", 16),
        ("spine", 64),
    ]
    # 8 nodes on leaves of 2: the job asks Slurm for 4 leaf switches.
    sbatch = (out / "slurm" / "job.sbatch").read_text("utf-8")
    assert "#SBATCH --switches=4\n" in sbatch
    assert (out / "slurm" / "nodes").read_text("utf-8").split() == [f"gpu-00{i}" for i in range(8)]


def test_compile_refuses_a_host_the_topology_does_not_list(tmp_path: Path) -> None:
    path = spec(tmp_path, LEAVES, 8)
    hosts = ",".join([f"gpu-00{i}" for i in range(7)] + ["gpu-099"])
    result = CliRunner().invoke(
        main, ["compile", str(path), "-o", str(tmp_path / "p"), "--hosts", hosts]
    )
    assert result.exit_code == 2, result.output
    assert "host gpu-099 is in no switch or block of the file" in result.output


def test_a_level_of_unequal_switches_is_left_out_with_a_warning(tmp_path: Path) -> None:
    # Leaves of 3, 3 and 2 of the job's 8 nodes: no tier of equal blocks; the root joins all.
    uneven = "SwitchName=a Nodes=n[0-2]\nSwitchName=b Nodes=n[3-5]\nSwitchName=c Nodes=n[6-7]\nSwitchName=r Switches=a,b,c\n"
    path = spec(tmp_path, uneven, 8)
    assert tiers(path) == [("nvlink", 8), ("spine", 64)]
    (warning,) = findings(path)
    assert warning.severity.value == "warning" and warning.rule == "PLC110"
    assert "level leaf: its groups hold 2 to 3 of the job's hosts" in warning.message


def test_a_topology_and_a_fabric_together_are_refused(tmp_path: Path) -> None:
    path = spec(tmp_path, LEAVES, 8, fabric="dgx-superpod-h100")
    assert any(f.field == "hardware.topology" and "give one" in f.message for f in findings(path))


# --- bad and hostile files ------------------------------------------------------------------------

BAD = [
    (
        "SwitchName=s0 Nodes=a[0-7]\nSwitchName=s1 Switches=s0,s9\n",
        2,
        "switch s1 names s9, which is not defined",
    ),
    (
        "SwitchName=s0 Switches=s1\nSwitchName=s1 Switches=s0\nSwitchName=s2 Nodes=a[0-7]\n",
        2,
        "each other's children",
    ),
    (
        "SwitchName=s0 Nodes=a[0-7]\nSwitchName=s1 Nodes=a[7-8]\n",
        2,
        "node a7 is under two leaf switches",
    ),
    ("SwitchName=s0 Nodes=a[0-7]\nBlockName=b Nodes=a[0-7]\n", 0, "mixes switches and blocks"),
    ("RingName=r0 Nodes=a[0-7]\n", 1, "topology/ring is not a tree or blocks"),
    ("SwitchName=s0 Nodes=a[0-7] garbage\n", 1, "'garbage' is not Key=Value"),
    ("SwitchName=s0 Nodes=a[7-0]\n", 1, "a[7-0]"),
    ("SwitchName=s0 Nodes=a[0-9999999]\n", 1, "names more than 1,000,000 hosts"),
    ("SwitchName=s0 Nodes=a[0-6]\n", 0, "the file lists 7 nodes, fewer than hardware.nodes 8"),
    (
        "BlockName=b1 Nodes=a[0-7]\nBlockSizes=8,24\n",
        0,
        "block size 24 is not a power of two times the base 8",
    ),
    ("# nothing\n", 0, "the file defines no switch and no block"),
]


@pytest.mark.parametrize(("text", "line", "message"), BAD)
def test_a_bad_topology_conf_is_a_located_finding(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    path = spec(tmp_path, text, 8)
    (finding,) = findings(path)
    assert finding.rule == "PLC110" and finding.field == "hardware.topology"
    where = f"topology.conf:{line}: " if line else "topology.conf: "
    assert where in finding.message and message in finding.message, finding.message
    # At the hardware.topology value of the spec.
    lines = path.read_text("utf-8").splitlines()
    assert lines[finding.line - 1].strip() == "topology: topology.conf"


def test_a_tree_deeper_than_planc_takes(tmp_path: Path) -> None:
    chain = "SwitchName=s0 Nodes=a[0-7]\n" + "".join(
        f"SwitchName=s{i} Switches=s{i - 1}\n" for i in range(1, 20)
    )
    (finding,) = findings(spec(tmp_path, chain, 8))
    assert "the tree has 20 levels; planc takes at most 12" in finding.message


BAD_YAML = [
    ("topology: t\n", "topology.yaml is one list of topologies"),
    ("- topology: t\n  flat: true\n", "neither a tree nor a block topology"),
    ("- topology: t\n  tree:\n    switches: []\n", "tree: switches is a list"),
    (
        "- topology: t\n  tree:\n    switches:\n    - nodes: a[0-7]\n",
        "each of switches is a mapping with switch: NAME",
    ),
    ("- &a topology: t\n  tree: *a\n", ""),
    (
        "- topology: t\n  block:\n    block_sizes: [two]\n    blocks:\n    - block: b\n      nodes: a[0-7]\n",
        "block_sizes is a list of node counts",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD_YAML)
def test_a_bad_topology_yaml_is_a_located_finding(tmp_path: Path, text: str, message: str) -> None:
    (finding,) = findings(spec(tmp_path, text, 8, "topology.yaml"))
    assert finding.rule == "PLC110" and finding.field == "hardware.topology"
    assert "topology.yaml" in finding.message and message in finding.message, finding.message


def test_a_yaml_entry_s_problem_names_its_line(tmp_path: Path) -> None:
    text = "- topology: t\n  tree:\n    switches:\n    - switch: s0\n      nodes: a[0-7]\n    - switch: s1\n      children: s0\n      nodes: b[0-1]\n"
    (finding,) = findings(spec(tmp_path, text, 8, "topology.yaml"))
    assert "topology.yaml:6: switch s1 has both nodes and switches" in finding.message


def test_files_that_are_not_topologies(tmp_path: Path) -> None:
    def message(name: str) -> str:
        data = yaml.safe_load((EXAMPLES / "llama3-70b-8x8.yaml").read_text("utf-8"))
        data["hardware"]["topology"] = name
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        (finding,) = load_path(str(path)).findings
        assert finding.rule == "PLC110" and finding.field == "hardware.topology"
        return finding.message

    assert "cannot be read" in message("missing.conf")
    (tmp_path / "dir.conf").mkdir()
    assert "is a directory, not a regular file" in message("dir.conf")
    os.mkfifo(tmp_path / "fifo.conf")  # no writer: a blocking open would hang
    assert "is a named pipe (FIFO), not a regular file" in message("fifo.conf")
    assert "is a character device, not a regular file" in message("/dev/zero")
    with open(tmp_path / "big.conf", "wb") as handle:
        handle.truncate(17 * 2**20)
    assert "is larger than 16,777,216 bytes" in message("big.conf")
    (tmp_path / "latin.conf").write_bytes(b"SwitchName=s\xe9 Nodes=a[0-7]\n")
    assert "is not UTF-8" in message("latin.conf")


def test_the_shipped_slurm_example() -> None:
    # examples/slurm/topology.conf: leaf1 over gpu-000..003, leaf2 over gpu-004..007, spine1
    # over both: leaf blocks of 4 nodes (32 GPUs). t = 8, p = 4, d = 2 in order tp-cp-pp-dp:
    # PP stride 8 spans 32 GPUs (a leaf), DP r and r + 32 cross the spine.
    loaded = load_path(str(EXAMPLES / "slurm" / "llama3-70b-topology.yaml"))
    assert loaded.findings == ()
    assert loaded.job is not None
    assert [(t.name, t.span) for t in loaded.job.cluster.fabric] == [
        ("nvlink", 8),
        ("leaf", 32),
        ("spine", 64),
    ]
    assert tuple(loaded.job.cluster.hosts) == tuple(f"gpu-00{i}" for i in range(8))
    plan = plannable(loaded.job)
    assert not isinstance(plan, tuple)
    assert (link_class(plan, (Axis.PP,)), link_class(plan, (Axis.DP,))) == ("leaf", "spine")


def test_search_prices_candidates_on_the_topology_s_tiers() -> None:
    # Resolving the spec alone gives the two-tier default; the search's setup carries the
    # fabric loading built from the file, so every candidate is placed on leaf and spine.
    from planc.cli.search import Request, setup_of
    from planc.search.evaluate import spec_job

    path = EXAMPLES / "slurm" / "llama3-70b-topology.yaml"
    setup = setup_of(load_path(str(path)), Request(str(path)))
    assert spec_job(setup).cluster.fabric.names == ("nvlink", "leaf", "spine")
    result = CliRunner().invoke(main, ["search", str(path), "--top", "1"])
    assert result.exit_code == 0, result.output
