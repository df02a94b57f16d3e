"""How far a routed token travels: the distinct ranks and NVLink domains its experts live on,
and the bytes each dispatcher moves per row.

**Why it matters.** Megatron-Core's alltoall dispatcher sends one row per (token, chosen
expert): T·k rows per rank and layer (`planc.comm.schedule.dispatch_rows`). The flex dispatcher
(`--moe-token-dispatcher-type flex`) with the DeepEP or HybridEP backend sends a token once to
each rank that holds one of its experts, and across NVLink domains once to each *domain*: the
row crosses the network to the rank of the same local index there and is forwarded over
NVLink to the ranks that need it (DeepEP csrc/kernels/legacy/internode.cu: the RDMA sender
counts a token once per destination `rdma_rank`, `total_count += (is_token_in_rank_uint64 !=
0)`, and the forwarder writes it to each NVL peer in `is_token_in_rank`, deepseek-ai/DeepEP
dd758ca; HybridEP, DeepEP branch hybrid-ep 94a9f8f, docs/Hybrid-EP_Implementation.md §8:
"Hybrid-EP first performs IB communication between peer GPUs, then each rank distributes the
received inter-node data locally"). Its bytes are T·E[domains reached] on the network and
T·E[ranks reached] inside the domains, not T·k.

**The routing model (uniform load).** The runs planc is validated on force the router's load to
balance (Megatron `--moe-router-force-load-balancing`: the router's logits are replaced by i.i.d.
normal ones, moe_utils.RandomSTE, megatron-core 0.19.2). Without group-limited routing the
top k of i.i.d. scores are a uniformly random k-subset of the E experts. With it (DeepSeek-V3's
node-limited routing, Megatron `--moe-router-num-groups G --moe-router-group-topk k_G`,
moe_utils.group_limited_topk) the experts form G equal groups of s = E/G; a token's k_G
groups are those with the largest sum of their top k/k_G scores, a uniformly random k_G-subset
by exchangeability, and its k experts are the top k of those groups' experts. Only 16 % of
DeepSeek-V3's tokens take exactly k/k_G = 2 of each group; most take 3, 2, 2 and 1. What holds
is that a chosen group's best expert, whose score put the group among the chosen, is nearly
always among the token's top k. planc's model: each chosen group gives its best expert, and the
other k − k_G are a uniform draw from the k_G·(s − 1) remaining experts of the chosen groups.
Against a Monte Carlo of Megatron's own algorithm on i.i.d. normal logits it is within 1 % for
every block width from 2 to 64 experts on DeepSeek-V3's shape (tests/test_comm_dispatch.py);
taking k/k_G of each group instead is 6 % off where a group spans two domains. Without groups
(G = k_G = 1) it is the uniform k-subset, exactly.

**Where experts live.** Expert e is on rank ⌊e/(E/EP)⌋ of the expert-parallel group
(Megatron-Core MoELayer local_expert_indices: rank r holds experts [r·E/EP, (r+1)·E/EP)), and
ranks of the group fill NVLink domains g at a time (the group's members are listed in rank
order, `planc.comm.schedule.members_per_block`), so a rank holds a block of E/EP consecutive
experts and a domain a block of g·E/EP.

**Derivation of E[blocks reached].** Blocks of b consecutive experts (b divides E). A token
misses block β when none of its experts falls in it. Given its groups S, the best expert of group
j (uniform in the group) avoids β with probability (s − c_jβ)/s, c_jβ = |group j ∩ β|,
independently across groups; then all C_S = Σ_{j∈S} c_jβ experts of β in the chosen groups are
still in the pool of k_G·(s − 1), and the k − k_G further draws avoid them with probability
h(C_S) = C(k_G·(s − 1) − C_S, k − k_G)/C(k_G·(s − 1), k − k_G). S is uniform, so

    P(β missed) = Σ_{|S| = k_G} Π_{j∈S} (s − c_jβ)/s · h(C_S) / C(G, k_G),

and the sum over subsets is a coefficient of Π_j (1 + y·z^{c_jβ}·(s − c_jβ)/s): the terms
in y^{k_G} z^C, collected by a recurrence over the groups, each weighed by h(C). Then

    E[blocks reached] = Σ_β (1 − P(β missed)).

Without groups this is (E/b)·(1 − C(E − b, k)/C(E, k)), the hypergeometric miss probability.
All of it is exact rational arithmetic.

**Round-robin routing** (training.expert_routing round_robin). NeMo AutoModel's benchmark
recipes replace the router by FakeBalancedGate (backend.fake_balanced_gate; with its default
noise 0 the indices are arange(T·k).view(T, k) % E: token t of the rank's batch goes to experts
t·k, …, t·k + k − 1 mod E, nemo_automodel/components/moe/layers.py FakeBalancedGate.forward,
NVIDIA-NeMo/Automodel e45812012). The experts are consecutive, so a token reaches the few blocks
its run of k experts overlaps, not the ~min(k, E/b) a random choice spreads over: on Qwen3-30B-A3B
(E 128, k 8) with 16 experts per rank every token's 8 experts sit on one rank. The starts t·k mod
E repeat every E/gcd(k, E) tokens, so E[blocks reached] is the mean over one such period, exact by
enumeration (`round_robin_blocks_reached`); groups do not enter (the gate ignores them).
"""

from __future__ import annotations

from fractions import Fraction
from functools import cache
from math import comb, gcd

from planc.record import record


@record
class Routing:
    """What the router picks per token: k of E experts, from k_G of G equal groups (G = k_G = 1
    without group-limited routing)."""

    experts: int  # E
    top_k: int  # k
    groups: int = 1  # G (DeepSeek-V3 n_group, Megatron --moe-router-num-groups)
    group_top_k: int = 1  # k_G (DeepSeek-V3 topk_group, Megatron --moe-router-group-topk)
    round_robin: bool = False  # FakeBalancedGate: token t to experts t·k … t·k + k − 1 mod E


def subset_weights(factors: tuple[tuple[int, Fraction], ...], order: int) -> dict[int, Fraction]:
    """{C: Σ over the `order`-subsets S with Σ_{j∈S} c_j = C of Π_{j∈S} x_j} for factors
    (c_j, x_j): the coefficients of y^order z^C in Π_j (1 + y·x_j·z^{c_j}), by the recurrence
    over j that multiplies one factor in at a time (O(n·order·C))."""
    layers: list[dict[int, Fraction]] = [{0: Fraction(1)}] + [{} for _ in range(order)]
    for c, x in factors:
        if x == 0:
            continue
        for i in range(order, 0, -1):
            below = layers[i - 1]
            here = layers[i]
            for total, weight in below.items():
                here[total + c] = here.get(total + c, Fraction(0)) + weight * x
    return layers[order]


def _overlap(group: int, size: int, block: int, width: int) -> int:
    """c: the experts group `group` (of `size` consecutive) shares with block `block` (of
    `width` consecutive)."""
    lo = max(group * size, block * width)
    hi = min((group + 1) * size, (block + 1) * width)
    return max(0, hi - lo)


def miss_probability(routing: Routing, block: int, width: int) -> Fraction:
    """P(β missed) = Σ_{|S| = k_G} Π_{j∈S} (s − c_jβ)/s · h(C_S) / C(G, k_G): the chance that
    none of a token's experts lies in block `block` of `width` consecutive experts (the module
    docstring's derivation; h(C) = C(k_G·(s − 1) − C, k − k_G)/C(k_G·(s − 1), k − k_G))."""
    G, kg, k = routing.groups, routing.group_top_k, routing.top_k
    size = routing.experts // G
    pool, draws = kg * (size - 1), k - kg
    factors = tuple(
        (c, Fraction(size - c, size))
        for c in (_overlap(j, size, block, width) for j in range(G))
    )
    whole = comb(pool, draws)
    missed = sum(
        (weight * Fraction(comb(pool - c, draws), whole)
         for c, weight in subset_weights(factors, kg).items()),
        Fraction(0),
    )
    return missed / comb(G, kg)


@cache
def blocks_reached(routing: Routing, width: int) -> Fraction:
    """E[blocks reached]: the expected number of distinct blocks of `width` consecutive experts
    (a rank's E/EP, an NVLink domain's g·E/EP) holding at least one of a token's experts,
    Σ_β (1 − P(β missed)) under the uniform-load routing model (module docstring). Unitless;
    between 1 and min(k, E/width). Blocks that mirror one another (every group cut the same
    way) have the same miss probability, which is computed once per distinct cut."""
    if width <= 0 or routing.experts % width:
        raise ValueError(f"blocks of {width} experts do not tile {routing.experts}")
    if routing.round_robin:
        return round_robin_blocks_reached(routing.experts, routing.top_k, width)
    blocks = routing.experts // width
    size = routing.experts // routing.groups
    seen: dict[tuple[int, ...], Fraction] = {}
    total = Fraction(0)
    for beta in range(blocks):
        cut = tuple(sorted(_overlap(j, size, beta, width) for j in range(routing.groups)))
        if cut not in seen:
            seen[cut] = miss_probability(routing, beta, width)
        total += 1 - seen[cut]
    return total


def round_robin_blocks_reached(experts: int, top_k: int, width: int) -> Fraction:
    """E[blocks reached] under round-robin routing (module docstring): the mean, over the
    E/gcd(k, E) tokens after which the gate's starting expert t·k mod E repeats, of the distinct
    blocks of `width` consecutive experts among experts t·k … t·k + k − 1 mod E. Unitless."""
    period = experts // gcd(top_k, experts)
    total = sum(
        len({(t * top_k + j) % experts // width for j in range(top_k)}) for t in range(period)
    )
    return Fraction(total, period)


# --- bytes per row -------------------------------------------------------------------------
# DeepEP's per-token record: an 8-byte SourceMeta (source rank, destination NVL ranks' bits),
# rounded up to 16 bytes with the hidden state and the routing (legacy internode.cu
# get_num_bytes_per_token; sizeof(SourceMeta) == 8, `int4` alignment).
DEEPEP_SOURCE_META_BYTES = 8
DEEPEP_ALIGN_BYTES = 16
# Routing weights and indices travel as 4-byte float and int (internode.cu; Megatron's
# fused_a2a.FusedDispatch passes float32 probabilities: 'DeepEP only supports float32 probs').
ROUTING_ENTRY_BYTES = 4


def _align(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def deepep_dispatch_row_bytes(hidden_bytes: int, top_k: int) -> int:
    """align16(h·β + 8 + 4k + 4k): one token in DeepEP's dispatch, its hidden state, source
    record and its k expert indices and weights (internode.cu dispatch:
    get_num_bytes_per_token(hidden_int4, num_scales = 0, num_topk, num_topk); BF16, as
    Megatron-Core 0.19.2 passes it). Bytes."""
    raw = hidden_bytes + DEEPEP_SOURCE_META_BYTES + 2 * top_k * ROUTING_ENTRY_BYTES
    return _align(raw, DEEPEP_ALIGN_BYTES)


def deepep_combine_row_bytes(hidden_bytes: int, top_k: int) -> int:
    """align16(h·β + 8 + 4k): one token in DeepEP's combine, its hidden state, source record
    and k weights (internode.cu combine: get_num_bytes_per_token(hidden_int4, 0, 0,
    num_topk)). Bytes."""
    raw = hidden_bytes + DEEPEP_SOURCE_META_BYTES + top_k * ROUTING_ENTRY_BYTES
    return _align(raw, DEEPEP_ALIGN_BYTES)


def hybridep_dispatch_row_bytes(hidden_bytes: int, domain_experts: int) -> int:
    """h·β + 4·(experts of the destination domain): one token in HybridEP's dispatch, its
    hidden state and the float32 probabilities of the destination domain's experts (Hybrid-EP
    implementation guide §4.2: rdma_prob_buffer holds num_of_experts_per_rank ×
    num_of_ranks_per_node floats per token; the intra-node probability buffer likewise). Bytes."""
    return hidden_bytes + domain_experts * ROUTING_ENTRY_BYTES


def hybridep_combine_row_bytes(hidden_bytes: int) -> int:
    """h·β: one token in HybridEP's combine ('Combine kernel only supports BF16', §8). Bytes."""
    return hidden_bytes
