"""Rules reported without a check function of their own. Notes on how planc read the input: info
findings the loader reports about `model.hf_config` (an attention pattern planc does not model,
a key it does not read, a value read as the nearest thing it models); unlike input rules they
can be ignored and re-levelled (`rules: {ignore: [PLC067]}`, `[tool.planc] ignore`, `--ignore`),
since the spec is usable with or without them. And PLC069, what `planc check` says about a
search spec (planc/cli/searchspec.py). Each function only documents its rule."""

from __future__ import annotations

from planc.findings import Severity
from planc.rules.base import RuleKind, documented


@documented("PLC066", Severity.INFO, RuleKind.NOTE)
def unmodelled_attention() -> None:
    """hf_config: an attention pattern planc counts as full causal attention.

    A sliding window from max_window_layers on (Qwen2's and Qwen3's `use_sliding_window`) or
    chunked attention (Llama 4's `attention_chunk_size`) attends to fewer tokens than full causal
    attention; planc does not read these from a Hugging Face config (it reads Mistral's and
    Mixtral's window, every layer, and GPT-OSS's, alternate layers) and counts
    the full attention in every layer, so attention FLOPs and the step time are over-estimated
    for sequences longer than the window. Memory is the same with flash attention. A sliding
    window can be stated: model.sliding_window (with full_attention_every where windowed and
    full layers alternate). Ignore it once you have read it: `rules: {ignore: [PLC066]}`.
    """


@documented("PLC067", Severity.INFO, RuleKind.NOTE)
def key_not_read() -> None:
    """hf_config: a key planc does not read, and why that does not change its numbers.

    A RoPE scaling kind other than the ones model.rope_scaling holds (RoPE has no parameters and
    costs no FLOPs planc counts), partial rotary, parallel residual, multi-token prediction layers
    transformers does not build, `quantization_config` (not the training precision), a vision
    tower of a multimodal config, or a key planc does not know whose name does not say it sizes
    the model (one that does is an error, PLC110).
    """


@documented("PLC068", Severity.INFO, RuleKind.NOTE)
def value_approximated() -> None:
    """hf_config: a value read as the nearest thing planc models.

    An activation with the cost of the one planc models (GELU variants in a gated MLP as swiglu),
    several dropout probabilities as their largest, or parameters planc does not model (biases
    of some architectures), which counts, memory and FLOPs leave out and the note counts.
    """


@documented("PLC069", Severity.ERROR, RuleKind.RUN)
def search_spec_fits() -> None:
    """Search spec: some layout of its search space fits in memory.

    A spec with a `search:` section and no `parallelism:` section is the input of `planc
    search`, not a layout: `planc check` checks it as such. The input rules run; the layout
    rules are left to `planc search`, which judges every candidate with them; and PLC069 judges
    the space's most parallel tensor × pipeline × context degrees (at most eight, those the
    world divides), each with every memory saving the space allows (its highest ZeRO stage, most
    recomputation, sequence parallelism, smallest micro-batch), with PLC007's memory model. One
    that fits is an info finding naming it; none fitting is an error, since planc search would
    find no feasible layout either. A pinned field outside its `search:` values is an error too.
    """
