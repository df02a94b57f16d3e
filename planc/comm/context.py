"""Context parallelism's attention exchange, by `parallelism.cp_comm_type` (Megatron
`--cp-comm-type`): what each type sends per layer, which of it hides behind attention, and the
buffers it holds.

Symbols: c context-parallel degree, b micro-batch, s sequence, s/c the tokens of a rank, n/t
and g/t the query and key/value heads of a tensor-parallel rank (`RankDims.n`, `.g`; g/t reads
n/t where K and V are repeated to every query head before the attention, `RankDims.g_core`), k
the query/key channels per head, k_v the value channels, β_a bytes per activation element.

- p2p: ring attention (Liu et al. 2023; Megatron-Core/TE `AttnFuncWithCPAndKVP2P`): c − 1 ring
  steps per layer, each passing one K/V block of b·(s/c)·(g/t)·(k + k_v)·β_a to the next rank,
  forward once (again where the attention core is recomputed: `ring_passes`) and backward
  twice (K/V and dK/dV); each step runs beside the attention core of
  the block it holds, so only what exceeds the core is exposed.
- allgather: TE `AttnFuncWithCPAndKVAllGather` (Megatron `--cp-comm-type all_gather`): the K/V of
  every rank all-gathered before the attention core, forward and again in backward, and dK/dV
  reduce-scattered in backward; not overlapped. The gathered K/V of one layer, b·s·(g/t)·
  (k + k_v)·β_a, is held while the core runs.
- torch's ring attention (`framework: fsdp2`, torchtitan's context parallelism:
  torch.distributed.tensor.experimental context_parallel, `_templated_ring_attention` and its
  backward): K/V rotated by one all-gather (allgather, torch's default `_AllGatherRotater`),
  issued before the rank's own causal block and waited on after it, or by c − 1 permutes to the
  next rank (p2p, torch's `_AllToAllRotater`), each beside a block's attention; forward and
  again in backward. Backward passes dK/dV in fp32 (`_cp_options.convert_to_f32`) round the
  ring: c permutes of b·(s/c)·(g/t)·(k + k_v)·4 bytes, each beside the next block's backward
  and the last waited on after the loop. No reduce-scatter. Load-balanced (head and tail
  chunks), so each of the c blocks is 1/c of the rank's attention core.
- a2a: DeepSpeed-Ulysses (Jacobs et al. 2023 §3; TE `AttnFuncWithCPAndQKVOA2A`): q, k and v
  all-to-all'd from a sequence shard of every head to the whole sequence of (n/t)/c heads, and the
  output back; backward the same four in reverse. The all-to-alls sit between the projections
  and the core, so none hides. Needs n/t and g/t divisible by c (PLC060).
- a2a+p2p: Megatron `--hierarchical-context-parallel-sizes a p`: a2a over the inner a ranks (the
  largest divisor of c whose a·t ranks fit the NVLink domain and divide the heads), then a ring
  of p = c/a steps across, each block b·(s/p)·(g/(t·a))·(k + k_v)·β_a.
- The ring under FP8 attention (`training.fp8.attention`; TE 2.18 `AttnFuncWithCPAndKVP2P` with
  fp8): per-tensor recipes pass K and V round the ring as their FP8 data (one byte per
  element), MXFP8 in 16 bits; backward passes K/V once more and returns each step's dK/dV,
  quantized to FP8, to its owner in one all-to-all after the last step (dkv_send_buffer, one
  byte per element, c blocks a rank), which nothing hides.
"""

from __future__ import annotations

from planc.dims import RankDims


def kv_block_bytes(dims: RankDims, beta: int) -> int:
    """b·(s/c)·(g/t)·(k + k_v)·β_a: the K and V of one rank's tokens, bytes (Ring Attention,
    Liu et al. 2023 §3). a2a+p2p's ring passes a·(s/c) tokens of g/(t·a) heads: the same bytes.
    Where K and V are repeated to every query head before the attention (`training.repeat_kv`:
    torchtitan's repeat_kv ahead of SDPA, which torch's ring attention wraps), n/t heads pass
    in place of g/t (`RankDims.g_core`)."""
    return dims.b * dims.s_c * dims.g_core * (dims.k + dims.v_head) * beta


def ring_steps_per_layer(c: int) -> int:
    """c − 1 ring steps per layer and pass (Liu et al. 2023 §3): each rank meets every other
    rank's K/V block once."""
    return c - 1


def qkv_a2a_bytes(dims: RankDims, beta: int) -> int:
    """b·(s/c)·(n/t·k + g/t·k + g/t·k_v)·β_a: the q, k and v one rank all-to-alls before the
    core (Jacobs et al. 2023 §3: three all-to-alls of N·h/P per rank for q, k, v; with grouped
    keys k and v carry g/n of it; all of it where they are repeated first, `RankDims.g_core`),
    bytes."""
    return dims.b * dims.s_c * (dims.n * dims.k + dims.g_core * (dims.k + dims.v_head)) * beta


def output_a2a_bytes(dims: RankDims, beta: int) -> int:
    """b·(s/c)·(n/t)·k_v·β_a: the attention output all-to-all'd back to a sequence shard
    (Jacobs et al. 2023 §3, the fourth all-to-all), bytes."""
    return dims.b * dims.s_c * dims.n * dims.v_head * beta


def gathered_kv_bytes(dims: RankDims, beta: int, c: int) -> int:
    """c·b·(s/c)·(g/t)·(k + k_v)·β_a: one layer's K and V gathered from all c ranks
    (TE AttnFuncWithCPAndKVAllGather), bytes."""
    return c * kv_block_bytes(dims, beta)


def a2a_sub_group(c: int, t: int, nvlink_span: int, n_t: int, g_t: int) -> int:
    """a: the inner all-to-all size of a2a+p2p: the largest divisor of c, below c, whose a·t
    ranks fit the NVLink domain and which divides the rank's query and key/value heads (1 when
    none does; PLC061 then refuses a2a+p2p)."""
    best = 1
    for a in range(2, c):
        if c % a == 0 and a * t <= nvlink_span and n_t % a == 0 and g_t % a == 0:
            best = a
    return best


FP32_BYTES = 4  # torch's ring accumulates and passes dK/dV in fp32 (convert_to_f32)


def fp32_kv_block_bytes(dims: RankDims) -> int:
    """b·(s/c)·(g/t)·(k + k_v)·4: one rank's dK and dV as torch's ring passes them, bytes
    (torch `_templated_ring_attention_backward`: grad_key/grad_value accumulated in fp32)."""
    return kv_block_bytes(dims, FP32_BYTES)


def torch_ring_exposed_per_layer(
    kv_s: float,
    dkv_s: float,
    c: int,
    gathered: bool,
    core_forward_s: float,
    core_backward_s: float,
    redone: bool = False,
) -> float:
    """Seconds of one layer's exchange left exposed under torch's ring attention: `kv_s` one
    K/V all-gather (`gathered`) or one K/V permute, `dkv_s` one fp32 dK/dV permute.

    Each of the c load-balanced blocks is 1/c of the core (f_c = core_f/c, b_c = core_b/c).
    all-gather: forward max(0, g − f_c), the rank's own block beside it (twice where the core is
    recomputed); backward max(0, g − b_c) + max(0, (c − 1)·(d − b_c)) + d: the gather beside the
    first block, each of the first c − 1 dK/dV sends beside a later block, the last exposed.
    permutes: forward max(0, (c − 1)·(s − f_c)); backward max(0, (c − 1)·(s + d − b_c)) + d."""
    f_c, b_c = core_forward_s / c, core_backward_s / c
    steps = c - 1
    if gathered:
        forward = max(0.0, kv_s - f_c)
        backward = max(0.0, kv_s - b_c) + max(0.0, steps * (dkv_s - b_c)) + dkv_s
    else:
        forward = max(0.0, steps * (kv_s - f_c))
        backward = max(0.0, steps * (kv_s + dkv_s - b_c)) + dkv_s
    return forward * (2 if redone else 1) + backward


def torch_ring_traced_per_layer(
    kv_s: float, dkv_s: float, c: int, gathered: bool, redone: bool = False
) -> float:
    """Seconds of one layer's exchange under torch's ring attention traced by torch.compile
    (torchtitan's `kernels: compiled`, a compiled block around the ring): all of it.

    Traced, each functional collective is waited on where it is issued
    (torch.distributed._functional_collectives `_maybe_wrap_tensor`: `wait_tensor` at once when
    `_are_we_tracing()`; eager returns an AsyncCollectiveTensor, waited on at first use), and
    Inductor moves no wait unless `reorder_for_compute_comm_overlap` is set, which defaults off
    and torchtitan does not set. So no block's attention runs beside an exchange: forward one
    K/V all-gather (`gathered`) or c − 1 permutes, twice where the core is recomputed; backward
    the same again and c fp32 dK/dV permutes."""
    kv = kv_s if gathered else (c - 1) * kv_s
    return kv * (2 if redone else 1) + kv + c * dkv_s


def ring_passes(redone: bool, fp8: bool = False) -> int:
    """Ring exchanges per step and layer, in units of one pass's c − 1 steps: the forward's
    (K/V), the backward's two (K/V and dK/dV; under FP8 attention only K/V, its dK/dV an
    all-to-all), and the forward's again where the attention core is recomputed (`redone`)."""
    return (4 if redone else 3) - (1 if fp8 else 0)


def fp8_kv_bytes(mx: bool, beta: int) -> int:
    """Bytes per K/V element the ring passes under FP8 attention: the FP8 data (1) for
    per-tensor scaling, the 16-bit tensor (β_a) for MXFP8, which each step quantizes itself."""
    return beta if mx else 1


def fp8_dkv_a2a_bytes(dims: RankDims, ring: int) -> int:
    """ring·b·(s/c)·(g/t)·(k + k_v)·1: the FP8 dK/dV of every ring step a rank computed, sent
    to their owners in one all-to-all (TE's dkv_send_buffer, [ring, *kv.shape] of uint8)."""
    return ring * kv_block_bytes(dims, 1)


def exposed_per_layer(
    ring_s: float,
    blocking_s: float,
    core_forward_s: float,
    core_backward_s: float,
    redone: bool = False,
    fp8: bool = False,
) -> float:
    """Seconds of one layer's context-parallel exchange left exposed, forward and backward.

    The ring's steps (`ring_s`: p2p, and a2a+p2p's outer ring; `ring_passes` passes of them)
    run beside the attention core, forward one exchange of K/V per step and backward two (K/V
    and dK/dV): with r = ring/passes, max(0, r − core_f) per forward (twice where the core is
    recomputed, `redone`) + max(0, 2r − core_b), or max(0, r − core_b) under FP8 attention
    (`fp8`), whose dK/dV all-to-all is blocking. The all-to-alls and the all-gather
    (`blocking_s`) sit between the projections and the core and are exposed whole (Jacobs et
    al. 2023 §3; TE AttnFuncWithCPAndKVAllGather waits for the gather before the core).
    """
    one = ring_s / ring_passes(redone, fp8)
    forward = max(0.0, one - core_forward_s) * (2 if redone else 1)
    backward = (1 if fp8 else 2) * one
    return forward + max(0.0, backward - core_backward_s) + blocking_s
