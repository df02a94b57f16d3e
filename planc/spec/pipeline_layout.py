"""Megatron-Core's pipeline layout string (`--pipeline-model-parallel-layout`), read and written.

The string lists the virtual stages in run order, virtual stage i = chunk·p + rank (Megatron-LM
`megatron/core/transformer/pipeline_parallel_layer_layout.py`, PipelineParallelLayerLayout, at
NVIDIA/Megatron-LM 00caa53): stages are separated by `|`; in a stage `E` is the embedding, `t` a
decoder layer, `m` a multi-token-prediction layer and `L` the loss; `x*n` repeats one character,
`(…)*n` a group (stage separators included); commas are cosmetic. `parse_str_to_list` removes the
commas, unrolls the groups and then the single characters, and splits on `|`; this module does the
same with the expansion bounded (a short string can ask for billions of characters).

Stdlib only: `planc check` reads it.
"""

from __future__ import annotations

import re

from planc.record import record

#: The longest unrolled layout read: stages and layers together.
MAX_UNROLLED = 1_000_000

_GROUP = re.compile(r"\(([^)]+)\)\*(\d+)")
_SINGLE = re.compile(r"(.)\*(\d+)")
_LAYER_CHARS = frozenset("EtmL")

@record
class ParsedLayout:
    """A layout string unrolled: each virtual stage's layer characters, in run order.

    `error` is Megatron's reason to refuse the text's syntax (None when it parsed)."""

    stages: tuple[str, ...]
    error: str | None = None

    def decoder_layers(self) -> tuple[int, ...]:
        """The decoder layers (`t`) of each virtual stage."""
        return tuple(stage.count("t") for stage in self.stages)

    def count(self, char: str) -> int:
        return sum(stage.count(char) for stage in self.stages)

def _unroll(pattern: re.Pattern[str], text: str) -> str | None:
    """`text` with every match of `pattern` repeated its count, or None past MAX_UNROLLED."""
    size = len(text)
    for found in pattern.finditer(text):
        size += len(found.group(1)) * int(found.group(2)) - len(found.group(0))
        if size > MAX_UNROLLED:
            return None
    return pattern.sub(lambda found: found.group(1) * int(found.group(2)), text)

def parse_layout(text: str) -> ParsedLayout:
    """The virtual stages of a Megatron layout string (as `parse_str_to_list` reads it)."""
    flat = text.replace(",", "").replace(" ", "")
    for pattern in (_GROUP, _SINGLE):
        unrolled = _unroll(pattern, flat)
        if unrolled is None:
            return ParsedLayout((), f"unrolls to more than {MAX_UNROLLED:,} characters")
        flat = unrolled
    stages = tuple(flat.split("|"))
    for stage in stages:
        bad = sorted(set(stage) - _LAYER_CHARS)
        if bad:
            return ParsedLayout(
                (),
                f"invalid layer character {bad[0]!r} in stage {stage[:40]!r} (Megatron knows "
                "E, t, m and L; a group is written (…)*n)",
            )
    return ParsedLayout(stages)

def _stage_text(stage: str) -> str:
    """One stage, runs of a layer written `x*n` (n > 2)."""
    parts: list[str] = []
    for found in re.finditer(r"(.)\1*", stage):
        run = found.group(0)
        parts.append(f"{run[0]}*{len(run)}" if len(run) > 2 else run)
    return "".join(parts)

def write_layout(stages: tuple[str, ...]) -> str:
    """A layout string Megatron's parser unrolls to `stages`: equal neighbouring stages as a
    group `(stage|)*n` (a cosmetic comma after it), runs of a layer as `x*n`."""
    out: list[str] = []
    index = 0
    while index < len(stages):
        run = 1
        while index + run < len(stages) and stages[index + run] == stages[index]:
            run += 1
        text = _stage_text(stages[index])
        last = index + run == len(stages)
        if run > 2 and stages[index]:
            # The group carries its separators; the layout's last stage has none after it.
            out.append(f"({text}|)*{run - 1}," + text if last else f"({text}|)*{run},")
        else:
            out.append("|".join([text] * run) + ("" if last else "|"))
        index += run
    return "".join(out)

def megatron_stages(chunks: tuple[int, ...], mtp: int) -> tuple[str, ...]:
    """The virtual stages of a split with `chunks[i]` decoder layers on virtual stage i: the
    embedding first on stage 0, the MTP layers and the loss last on the last stage (where planc
    places them)."""
    stages = ["t" * count for count in chunks]
    stages[0] = "E" + stages[0]
    stages[-1] = stages[-1] + "m" * mtp + "L"
    return tuple(stages)
