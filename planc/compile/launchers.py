"""Launcher files: the strongest placement each launcher can honour (ecosystem notes §5.6).

- Open MPI rankfile: exact rank -> host and slot.
- Slurm: a hostfile with one line per task and `srun --distribution=arbitrary`, so task i runs on
  line i's host and SLURM_PROCID is the planned rank.
- DeepSpeed hostfile: ranks fill hosts in file order, then slots in order: the plan's order.
- torchrun: one command per node with a fixed --node-rank (static rendezvous). Global ranks
  follow node_rank · nproc + local_rank; a c10d or elastic rendezvous may renumber them.

Every function returns {relative path: text}; nothing here touches the file system.
"""

from __future__ import annotations

import re

from planc.comm.schedule import cp_a2a_size, layer_wise_all_reduce
from planc.compile.plan import Plan
from planc.compile.ranks import AXES
from planc.pipeline.placement import virtual_stage
from planc.pipeline.registry import definition
from planc.spec.job import GIB, NodeNames
from planc.spec.pipeline_layout import megatron_stages, write_layout
from planc.vocab import ChunkPlacement

MASTER_PORT = 29500
TRAIN_SCRIPT = '"${PLANC_TRAIN_SCRIPT:-train.py}"'

Files = dict[str, str]


def node_width(nodes: int) -> int:
    """Zero padding of per-node file names, so they sort in node order."""
    return max(3, len(str(nodes - 1)))


def _span(first: int, count: int) -> str:
    return f"rank {first}" if count == 1 else f"ranks {first}-{first + count - 1}"


def degree_env(plan: Plan) -> list[str]:
    """PLANC_* variables: the layout a training script needs besides its rank."""
    grid, lay, tr = plan.placement.grid, plan.job.layout, plan.job.training
    degrees = [f"PLANC_{axis.upper()}={grid.size(axis)}" for axis in AXES]
    return [
        *degrees,
        f"PLANC_VP={lay.v}",
        f"PLANC_ORDER={'-'.join(grid.order)}",
        f"PLANC_SP={int(lay.sp)}",
        f"PLANC_ZERO={lay.zero}",
        f"PLANC_SEQ_LEN={tr.s}",
        f"PLANC_MICRO_BATCH={tr.b}",
        f"PLANC_GLOBAL_BATCH={tr.B}",
    ]


# ----------------------------------------------------------------------------- torchrun


def _torchrun_env(plan: Plan, node: int) -> str:
    cl = plan.job.cluster
    lines = [
        f"# planc: environment of node {node} ({cl.hosts[node]}); KEY=VALUE, no quoting",
        f"MASTER_ADDR={cl.hosts[0]}",
        f"MASTER_PORT={MASTER_PORT}",
        f"WORLD_SIZE={plan.world}",
        f"NNODES={cl.nodes}",
        f"NODE_RANK={node}",
        f"NPROC_PER_NODE={cl.gpus_per_node}",
        f"PLANC_HOST={cl.hosts[node]}",
        *degree_env(plan),
    ]
    return "\n".join(lines) + "\n"


def _torchrun_script(plan: Plan, node: int, env_name: str) -> str:
    cl = plan.job.cluster
    per = cl.gpus_per_node
    command = (
        f"torchrun --nnodes={cl.nodes} --nproc-per-node={per} --node-rank={node} "
        f'--master-addr={cl.hosts[0]} --master-port={MASTER_PORT} {TRAIN_SCRIPT} "$@"'
    )
    return "\n".join(
        [
            "#!/bin/sh",
            f"# planc: node {node} of {cl.nodes} ({cl.hosts[node]}), {_span(node * per, per)}. Run it on that host.",
            "# Arguments go to the training script; PLANC_TRAIN_SCRIPT replaces train.py.",
            "# The static rendezvous keeps these ranks on this node; c10d/elastic may renumber them.",
            "set -eu",
            "set -a",
            f'. "$(dirname "$0")/{env_name}"',
            "set +a",
            f"exec {command}",
            "",
        ]
    )


# Up to this many nodes each node gets its own script and environment file; above it the nodes,
# which differ only in their node rank and host name, share one script that takes the node
# rank as its argument (a million one-GPU nodes would otherwise be two million files).
NODE_FILES_LIMIT = 1_024


def _torchrun_shared_env(plan: Plan) -> str:
    cl = plan.job.cluster
    lines = [
        "# planc: environment of every node; node.sh adds NODE_RANK and PLANC_HOST. KEY=VALUE",
        f"MASTER_ADDR={cl.hosts[0]}",
        f"MASTER_PORT={MASTER_PORT}",
        f"WORLD_SIZE={plan.world}",
        f"NNODES={cl.nodes}",
        f"NPROC_PER_NODE={cl.gpus_per_node}",
        *degree_env(plan),
    ]
    return "\n".join(lines) + "\n"


def _torchrun_shared_script(plan: Plan) -> str:
    cl = plan.job.cluster
    command = (
        f"torchrun --nnodes={cl.nodes} --nproc-per-node={cl.gpus_per_node} "
        f'--node-rank="$NODE_RANK" --master-addr={cl.hosts[0]} --master-port={MASTER_PORT} '
        f'{TRAIN_SCRIPT} "$@"'
    )
    return "\n".join(
        [
            "#!/bin/sh",
            f"# planc: node K of {cl.nodes} runs `node.sh K` on the host on line K + 1 of hosts,",
            f"# ranks K·{cl.gpus_per_node} … K·{cl.gpus_per_node} + {cl.gpus_per_node - 1}. Further arguments go to the training script.",
            "# The static rendezvous keeps these ranks on this node; c10d/elastic may renumber them.",
            "set -eu",
            'here="$(dirname "$0")"',
            'NODE_RANK="${1:?usage: node.sh NODE_RANK [training arguments]}"',
            "shift",
            'case "$NODE_RANK" in *[!0-9]*|"") echo "node.sh: NODE_RANK must be a number" >&2; exit 2;; esac',
            f'if [ "$NODE_RANK" -ge {cl.nodes} ]; then echo "node.sh: NODE_RANK must be below {cl.nodes}" >&2; exit 2; fi',
            'PLANC_HOST="$(sed -n "$((NODE_RANK + 1))p" "$here/hosts")"',
            "set -a",
            '. "$here/common.env"',
            "set +a",
            "export NODE_RANK PLANC_HOST",
            f"exec {command}",
            "",
        ]
    )


def torchrun_files(plan: Plan) -> Files:
    cl = plan.job.cluster
    if cl.nodes > NODE_FILES_LIMIT:
        return {
            "torchrun/common.env": _torchrun_shared_env(plan),
            "torchrun/node.sh": _torchrun_shared_script(plan),
            "torchrun/hosts": "".join(f"{host}\n" for host in cl.hosts),
        }
    width = node_width(cl.nodes)
    files: Files = {}
    for node in range(cl.nodes):
        stem = f"torchrun/node-{node:0{width}d}"
        files[f"{stem}.env"] = _torchrun_env(plan, node)
        files[f"{stem}.sh"] = _torchrun_script(plan, node, f"node-{node:0{width}d}.env")
    return files


# ----------------------------------------------------------------------------- slurm


def _job_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "planc"


def _sbatch(plan: Plan) -> str:
    cl, world = plan.job.cluster, plan.world
    exports = " ".join(degree_env(plan))
    task = (
        "export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS; "
        f'exec python {TRAIN_SCRIPT} "$@"'
    )
    return "\n".join(
        [
            "#!/bin/bash",
            f"# planc: {world} tasks, one per GPU, on {cl.nodes} nodes of {cl.gpus_per_node} GPUs.",
            "# Submit from the plan directory: sbatch slurm/job.sbatch [training arguments].",
            "# slurm/hostfile has one host per task in rank order; --distribution=arbitrary puts task i",
            "# on line i, so SLURM_PROCID is the planned rank. --nodelist reads slurm/nodes (a path).",
            f"#SBATCH --job-name={_job_name(plan.job.name)}",
            f"#SBATCH --nodes={cl.nodes}",
            f"#SBATCH --ntasks={world}",
            f"#SBATCH --ntasks-per-node={cl.gpus_per_node}",
            f"#SBATCH --gpus-per-node={cl.gpus_per_node}",
            "#SBATCH --nodelist=slurm/nodes",
            *_switches(plan),
            "set -euo pipefail",
            'plan_dir="${SLURM_SUBMIT_DIR:-$PWD}"',
            'export SLURM_HOSTFILE="$plan_dir/slurm/hostfile"',
            'export MASTER_ADDR="$(head -n 1 "$SLURM_HOSTFILE")"',
            f"export MASTER_PORT={MASTER_PORT}",
            f"export {exports}",
            f"srun --distribution=arbitrary --ntasks={world} --kill-on-bad-exit=1 \\",
            f"  bash -c '{task}' planc-task \"$@\"",
            "",
        ]
    )


def _switches(plan: Plan) -> list[str]:
    """`#SBATCH --switches=N` on a fabric with a leaf tier below the world (hardware.fabric or
    hardware.topology): N = ⌈nodes / nodes per leaf block⌉, the fewest leaf switches the hosts
    fill (Slurm's topology/tree: "the maximum count of leaf switches desired for the job
    allocation"). Nothing on the plain two tiers."""
    cl = plan.job.cluster
    fabric = cl.fabric
    if fabric.plain or len(fabric) < 3 or fabric.tiers[1].span % cl.gpus_per_node:
        return []
    leaf = fabric.tiers[1]
    per_leaf = leaf.span // cl.gpus_per_node
    count = -(-cl.nodes // per_leaf)
    return [
        f"# {leaf.shown} blocks of {per_leaf} nodes: the hosts fill {count} of them.",
        f"#SBATCH --switches={count}",
    ]


def slurm_files(plan: Plan) -> Files:
    hosts = plan.job.cluster.hosts
    per_task = [f"{hosts[node]}\n" for node in plan.placement.node.tolist()]
    return {
        "slurm/job.sbatch": _sbatch(plan),
        "slurm/hostfile": "".join(per_task),
        "slurm/nodes": "".join(f"{host}\n" for host in hosts),
    }


# ----------------------------------------------------------------------------- deepspeed, mpi


def deepspeed_hostfile(plan: Plan) -> str:
    cl = plan.job.cluster
    head = "# planc: DeepSpeed hostfile; ranks fill hosts in this order, then slots 0..N-1\n"
    return head + "".join(f"{host} slots={cl.gpus_per_node}\n" for host in cl.hosts)


def mpi_rankfile(plan: Plan) -> str:
    hosts = plan.job.cluster.hosts
    pl = plan.placement
    return "".join(
        f"rank {rank}={hosts[node]} slot={local}\n"
        for rank, (node, local) in enumerate(
            zip(pl.node.tolist(), pl.local_rank.tolist(), strict=True)
        )
    )


def _mpi_readme(plan: Plan) -> str:
    world = plan.world
    return f"""# Open MPI rankfile

`rankfile` pins every rank to a host: `rank N=HOST slot=K`, where K is the rank's local GPU
index. Open MPI reads a slot as a *logical CPU core* (hwloc numbering) and binds the process
to it; planc writes the GPU index there so every rank on a host gets a distinct slot. The
process still picks its GPU from `OMPI_COMM_WORLD_LOCAL_RANK`, which equals K. For NUMA-aware
binding rewrite the slots as `PACKAGE:CORES` (for example `slot=0:0-11`).

Host names must match the allocation's spelling exactly (short name vs FQDN).

    # Open MPI 5 (PRRTE)
    mpirun -np {world} --map-by rankfile:file=mpi/rankfile python train.py
    # Open MPI 4.x
    mpirun -np {world} --rankfile mpi/rankfile python train.py

Bridge to PyTorch in the training script: RANK=OMPI_COMM_WORLD_RANK,
LOCAL_RANK=OMPI_COMM_WORLD_LOCAL_RANK, WORLD_SIZE=OMPI_COMM_WORLD_SIZE, and MASTER_ADDR the
first host of the rankfile.
"""


def launcher_files(plan: Plan) -> Files:
    return {
        **torchrun_files(plan),
        **slurm_files(plan),
        "deepspeed/hostfile": deepspeed_hostfile(plan),
        "mpi/rankfile": mpi_rankfile(plan),
        "mpi/README.md": _mpi_readme(plan),
    }


# ----------------------------------------------------------------------------- recipes


# Megatron-FSDP's --data-parallel-sharding-strategy for each zero_stage: what it shards, as
# megatron_fsdp/fully_shard.py ShardingStrategy documents (0 no_shard "similar to DDP", 1 optim,
# 2 optim_grads "similar to ZeRO-2", 3 optim_grads_params; megatron-core 0.19.2).
MEGATRON_FSDP_STRATEGY = ("no_shard", "optim", "optim_grads", "optim_grads_params")


def megatron_fsdp_args(plan: Plan) -> list[str]:
    """The arguments that make Megatron-LM's data parallelism Megatron-FSDP (megatron/training/
    arguments.py, megatron-core 0.19.2): --use-megatron-fsdp, the sharding strategy of the
    zero_stage, the distributed optimizer it requires (validate_args sets it, with a warning,
    when absent) and --ckpt-format fsdp_dtensor ("Megatron-FSDP requires the `fsdp_dtensor`
    checkpointing format")."""
    return [
        "--use-megatron-fsdp",
        f"--data-parallel-sharding-strategy {MEGATRON_FSDP_STRATEGY[plan.job.layout.zero]}",
        "--use-distributed-optimizer",
        "--ckpt-format fsdp_dtensor",
    ]


def megatron_args(plan: Plan) -> tuple[list[str], list[str]]:
    """Megatron-LM arguments for the layout, and notes on what no argument expresses."""
    grid, lay, job = plan.placement.grid, plan.job.layout, plan.job
    args = [
        f"--tensor-model-parallel-size {lay.t}",
        f"--pipeline-model-parallel-size {lay.p}",
        f"--context-parallel-size {lay.c}",
        f"--num-layers {job.model.L}",
        f"--seq-length {job.training.s}",
        f"--micro-batch-size {job.training.b}",
        f"--global-batch-size {job.training.B}",
    ]
    notes: list[str] = []
    args += _pipeline_args(plan, notes)
    args += _cp_args(plan)
    if lay.sp:
        args.append("--sequence-parallel")
    if job.training.megatron_fsdp:
        args += megatron_fsdp_args(plan)
    elif lay.zero in (1, 2) and not layer_wise_all_reduce(job):
        # Muon's layer-wise optimizer before Megatron-Core 0.18 is --optimizer dist_muon alone
        args.append("--use-distributed-optimizer")
    if job.training.offload_optimizer:
        # Megatron's HybridDeviceOptimizer reuses the precision-aware optimizer's code path, and
        # validate_args refuses --optimizer-cpu-offload without it (arguments.py, megatron-core
        # 0.19.2); PLC048 holds the rest (adam, the distributed optimizer).
        args += ["--optimizer-cpu-offload", "--use-precision-aware-optimizer"]
    elif lay.zero == 3 and not job.training.megatron_fsdp:
        notes.append(
            "zero_stage 3 shards parameters: Megatron does that with FSDP "
            "(--use-torch-fsdp2), not with the distributed optimizer"
        )
    if job.training.offload_activation_layers:
        # validate_args turns cpu_offloading on with a positive layer count (arguments.py,
        # megatron-core 0.19.2); activations only, weights stay (cpu_offloading_weights False).
        args.append(f"--cpu-offloading-num-layers {job.training.offload_activation_layers}")
    order = "-".join(grid.order)
    if job.training.megatron_fsdp and lay.p == 1 and order == "tp-cp-pp-dp":
        # One pipeline stage: the groups of tp-cp-dp-pp, without the mapping flag, which
        # Megatron-Bridge refuses with Megatron-FSDP (its config.py validation).
        order = "tp-cp-dp-pp"
    if order == "tp-cp-pp-dp":
        args.append("--use-tp-pp-dp-mapping")
    elif order != "tp-cp-dp-pp":
        notes.append(
            f'order {order} has no Megatron flag: pass order="{order}" to '
            "megatron.core.parallel_state.initialize_model_parallel"
        )
    return args, notes


# parallelism.cp_comm_type as Megatron spells it (--cp-comm-type; arguments.py choices p2p,
# a2a, all_gather, a2a+p2p). p2p is Megatron's default and is not written.
_CP_COMM_ARG = {"a2a": "a2a", "allgather": "all_gather", "a2a+p2p": "a2a+p2p"}


def _cp_args(plan: Plan) -> list[str]:
    """--cp-comm-type for a context-parallel type other than p2p, with a2a+p2p's two levels
    (--hierarchical-context-parallel-sizes a c/a)."""
    lay = plan.job.layout
    if lay.c == 1 or lay.cp_comm == "p2p":
        return []
    args = [f"--cp-comm-type {_CP_COMM_ARG[lay.cp_comm]}"]
    if lay.cp_comm == "a2a+p2p":
        inner = cp_a2a_size(plan.job)
        args.append(f"--hierarchical-context-parallel-sizes {inner} {lay.c // inner}")
    return args


def _split_args(plan: Plan, notes: list[str]) -> list[str] | None:
    """The split as Megatron-Core states a chunk layout of its own: the embedding and loss
    counted as layers of the even split (--account-for-embedding/loss-in-pipeline-split), or
    the layout string (--pipeline-model-parallel-layout, which sets the chunks per stage
    itself); None for a split the older flags state."""
    lay = plan.job.layout
    accounted = lay.embedding_in_split or lay.loss_in_split
    if lay.pipeline_layout is None and not accounted:
        return None
    if lay.pipeline_layout is None:
        flags = [
            flag
            for flag, on in (
                ("--account-for-embedding-in-pipeline-split", lay.embedding_in_split),
                ("--account-for-loss-in-pipeline-split", lay.loss_in_split),
            )
            if on
        ]
        return flags + ([f"--num-virtual-stages-per-pipeline-rank {lay.v}"] if lay.v > 1 else [])
    placement = definition(lay.schedule).placement
    chunks = [0] * (lay.p * lay.v)  # decoder layers of each virtual stage, in run order
    for r in range(lay.p):
        for j, count in enumerate(lay.chunk_layers(r)):
            chunks[virtual_stage(lay.p, r, j, placement)] = count
    text = write_layout(megatron_stages(tuple(chunks), plan.job.model.mtp))
    if placement is not ChunkPlacement.LOOP:
        notes.append(
            f"the {definition(lay.schedule).title} schedule holds virtual stages r and "
            "2p − 1 − r on rank r; Megatron places virtual stage i on rank i mod p"
        )
    # No quotes: args.txt is read as $(cat megatron/args.txt), which splits words but removes
    # no quotes, so Megatron's parser would get them as part of the layout (it has no spaces).
    return [f"--pipeline-model-parallel-layout {text}"]


def _pipeline_args(plan: Plan, notes: list[str]) -> list[str]:
    lay, L = plan.job.layout, plan.job.model.L
    split = _split_args(plan, notes)
    if split is not None:
        return split
    given = lay.stage_layers
    if not given or len(set(given)) == 1:
        return (
            [f"--num-layers-per-virtual-pipeline-stage {L // (lay.p * lay.v)}"] if lay.v > 1 else []
        )
    args = [f"--num-virtual-stages-per-pipeline-rank {lay.v}"] if lay.v > 1 else []
    if len(set(given[1:-1])) <= 1:
        return [
            *args,
            f"--decoder-first-pipeline-num-layers {given[0]}",
            f"--decoder-last-pipeline-num-layers {given[-1]}",
        ]
    notes.append(
        f"stage_layers {list(given)}: Megatron's first/last-stage flags only express "
        "splits whose middle stages are equal"
    )
    return args


def device_mesh_recipe(plan: Plan) -> str:
    grid = plan.placement.grid
    shape = ", ".join(map(str, grid.mesh_shape))
    names = ", ".join(f'"{name}"' for name in grid.mesh_dim_names)
    lines = [
        "from torch.distributed.device_mesh import init_device_mesh",
        "",
        f'mesh = init_device_mesh("cuda", ({shape}), mesh_dim_names=({names}))',
    ]
    dims = grid.mesh_dim_names
    if abs(dims.index("dp") - dims.index("cp")) == 1:
        pair = ", ".join(f'"{name}"' for name in dims if name in ("dp", "cp"))
        lines.append(f'dp_cp = mesh[{pair}]._flatten("dp_cp")  # the optimizer shard group')
    return "\n".join(lines)


_COORDS_RECIPE = """import json, os

layout = json.load(open("coords.json"))
rank = int(os.environ["RANK"])
coords = {axis: rank // layout["strides"][axis] % layout["degrees"][axis] for axis in layout["order"]}
layers = layout["stage_layers"][coords["pp"]]  # [first, last) per model chunk"""


def _placeholder_warning(hosts: object) -> str:
    """A warning paragraph when the files name planc's placeholder hosts (no hardware.hosts)."""
    if not isinstance(hosts, NodeNames):
        return ""
    last = f"node-{len(hosts) - 1}"
    return (
        f"\n**Warning: placeholder host names.** The spec gives no `hardware.hosts`, so these files "
        f"name node-0 … {last}, and torchrun waits forever for a rendezvous host it cannot "
        "resolve. Set `hardware.hosts`, or compile again with `planc compile --hosts FILE` (a "
        "hostfile or a Slurm nodelist such as `gpu-[001-004]`).\n"
    )


def _torchrun_files_row(nodes: int) -> str:
    if nodes > NODE_FILES_LIMIT:
        return "| torchrun/node.sh, common.env, hosts | one torchrun command for every node: `node.sh K` on line K + 1 of hosts |"
    return "| torchrun/node-*.sh, node-*.env | one torchrun command and environment per node |"


def _torchrun_launch(nodes: int, width: int, first: str) -> str:
    if nodes > NODE_FILES_LIMIT:
        return (
            f"run `torchrun/node.sh K` on node K, the host on line K + 1 of `torchrun/hosts` "
            f"(`torchrun/node.sh 0` on {first}, and so on; `pdsh`/`clush` can fan it out)."
        )
    return f"run `torchrun/node-K.sh` on node K (`torchrun/node-{0:0{width}d}.sh` on {first}, and so on)."


def readme(plan: Plan) -> str:
    grid, cl, s = plan.placement.grid, plan.job.cluster, plan.summary
    args, notes = megatron_args(plan)
    degrees = ", ".join(f"{axis}={grid.size(axis)}" for axis in grid.order)
    note_text = "".join(f"\nNote: {note}." for note in notes)
    width = node_width(cl.nodes)
    return f"""# planc plan: {plan.job.name}

- {plan.world} ranks: {cl.nodes} nodes × {cl.gpus_per_node} {cl.gpu.name}
- order {"-".join(grid.order)} (fastest axis first): {degrees}
- peak memory {s.peak_memory_bytes:,} bytes ({s.peak_memory_bytes / GIB:.2f} of {s.hbm_bytes / GIB:.2f} GiB) on rank {s.peak_rank}, pipeline stage {s.peak_stage}

Written by `planc compile`: edit the spec and compile again rather than editing these files.
{_placeholder_warning(cl.hosts)}
| file | what |
|---|---|
| plan.json | every rank's place, coordinates, layers, optimizer shard and memory; the process groups; a summary (schema: schemas/plan.schema.json) |
| coords.json | order, degrees and strides: a rank's coordinates without reading plan.json |
{_torchrun_files_row(cl.nodes)}
| slurm/job.sbatch, hostfile, nodes | sbatch script placing task i on line i of hostfile |
| deepspeed/hostfile | `host slots=N` in node order |
| mpi/rankfile | `rank N=host slot=K` (see mpi/README.md) |

## Coordinates from RANK

```python
{_COORDS_RECIPE}
```

## PyTorch DeviceMesh

The mesh lists the axes slowest first, so its rank numbering equals planc's:

```python
{device_mesh_recipe(plan)}
```

## Megatron-LM

```
{" ".join(args)}
```
{note_text}
## Launch

- torchrun: {_torchrun_launch(cl.nodes, width, cl.hosts[0])} The static rendezvous keeps each
  node's ranks; a c10d or elastic rendezvous keeps the nodes but may renumber the ranks, so this
  placement is then not guaranteed.
- Slurm: `sbatch slurm/job.sbatch` from this directory.
- DeepSpeed: `deepspeed --hostfile deepspeed/hostfile train.py`.
- Open MPI: see mpi/README.md.
"""
