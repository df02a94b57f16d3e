"""Closed vocabularies: the parallel axes, process-group kinds, collectives, link classes and
pipeline directions, one name each across the spec, the plan and the code.

The members are `str` enums, so a member equals its plain name (`Axis.TP == "tp"`), serialises
as that name in JSON, and reads back with `Axis("tp")`. Behaviour keys on the member, never on a
description string.

One name per axis (`Axis`), and the one documented mapping to the spec's field names:

| axis | spec field (`parallelism.`) | symbol | plan.json (`layout.degrees`, `coords`) |
|------|-----------------------------|--------|----------------------------------------|
| tp   | tensor                      | t      | tp                                     |
| cp   | context                     | c      | cp                                     |
| dp   | data                        | d      | dp                                     |
| pp   | pipeline                    | p      | pp                                     |
| ep   | expert                      | EP     | layout.expert.degrees.ep               |

`ep` places expert parallelism in an order string; the dense grid (AXES) does not hold it.
The expert layers use their own grid over the same ranks, in the same order, with tp =
expert_tensor (ETP), cp = 1, ep = expert (EP), dp = EDP = W/(ETP·EP·PP) and the same pp
(Megatron-Core's expert RankGenerator, parallel_state.py).
"""

from __future__ import annotations

from enum import Enum


class Axis(str, Enum):
    """A parallel axis of the rank grid. `order` strings name these, fastest-varying first."""

    TP = "tp"
    CP = "cp"
    DP = "dp"
    PP = "pp"
    EP = "ep"

    def __str__(self) -> str:
        return self.value


AXES: tuple[Axis, ...] = (Axis.TP, Axis.CP, Axis.DP, Axis.PP)


class GroupKind(str, Enum):
    """A kind of process group in the plan.

    `dp_cp` is the data × context group (ranks sharing tp and pp); `dp_shard` the ranks ZeRO or
    FSDP shards over (`parallelism.data_shard` contiguous members of a dp_cp group; the whole
    dp_cp group by default) and `dp_replicate` the ranks holding the same shard (HSDP; groups of
    one by default); `embedding` pairs the first and last pipeline rank (tied-embedding
    gradients); `model_parallel` is tp × pp. With experts, `ep`, `etp` and `edp` are the
    expert grid's ep, tp and dp groups (expert-parallel all-to-all, expert tensor parallelism,
    expert data parallelism: Megatron-Core's expert RankGenerator).
    """

    TP = "tp"
    CP = "cp"
    DP = "dp"
    PP = "pp"
    DP_CP = "dp_cp"
    DP_SHARD = "dp_shard"
    DP_REPLICATE = "dp_replicate"
    EMBEDDING = "embedding"
    MODEL_PARALLEL = "model_parallel"
    EP = "ep"
    ETP = "etp"
    EDP = "edp"

    def __str__(self) -> str:
        return self.value


class Collective(str, Enum):
    """A communication primitive. `send_recv` is a point-to-point message; `all_to_all` sends
    each member of the group its own chunk of the buffer (the expert-parallel token exchange)."""

    ALL_REDUCE = "all_reduce"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_GATHER = "all_gather"
    SEND_RECV = "send_recv"
    ALL_TO_ALL = "all_to_all"

    @property
    def ring(self) -> bool:
        """A ring collective (all-reduce, reduce-scatter, all-gather), not a p2p message or an
        all-to-all exchange."""
        return self not in (Collective.SEND_RECV, Collective.ALL_TO_ALL)

    def __str__(self) -> str:
        return self.value


class LinkClass(str, Enum):
    """The wire a group's traffic uses: inside one NVLink domain, or the inter-node network."""

    NVLINK = "nvlink"
    NETWORK = "network"

    def __str__(self) -> str:
        return self.value


class Direction(str, Enum):
    """Which way a pipeline message goes: activations forward to the next stage, activation
    gradients backward to the previous one."""

    FORWARD = "fwd"
    BACKWARD = "bwd"

    def __str__(self) -> str:
        return self.value
