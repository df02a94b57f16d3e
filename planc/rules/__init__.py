"""The rule registry: every rule by its stable id, in id order, and the options they own."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from planc.rules import (
    batch,
    context,
    experts,
    fabric,
    frameworks,
    inputs,
    layout,
    memory,
    model,
    notes,
    optimizer,
    perf,
    precision,
    run,
    sharding,
)
from planc.rules.base import Option, Rule, RuleKind, Violation

_ALL: tuple[Rule, ...] = (
    layout.world_size,
    layout.tensor_in_nvlink,
    model.head_and_width_divisibility,
    model.layers_over_pipeline,
    batch.batch_divisibility,
    batch.pipeline_bubble,
    memory.memory_fits,
    layout.sequence_parallel_needs_tp,
    layout.context_parallel_sequence,
    layout.interleaved_schedule,
    layout.zero_with_pipeline,
    model.attention_heads,
    layout.sequence_parallel_split,
    layout.topology,
    layout.world_limit,
    model.sequence_fits_positions,
    layout.context_parallel_attention,
    layout.zero_without_group,
    perf.dp_traffic_hides,
    perf.pp_traffic_hides,
    perf.expert_exchange_hides,
    perf.step_traffic_representable,
    sharding.host_memory_fits,
    sharding.data_shard_divides,
    experts.experts_over_expert_parallel,
    experts.expert_grid,
    experts.top_k_within_experts,
    experts.capacity_factor_at_least_one,
    experts.padding_has_capacity_and_alltoall,
    experts.expert_order_accepted,
    experts.moe_tensor_parallel_needs_sequence_parallel,
    layout.schedule_on_framework,
    fabric.pipeline_inside_tier,
    fabric.data_parallel_on_rails,
    fabric.oversubscription_exposed,
    run.checkpoint_fits_interval,
    run.interval_near_optimum,
    run.goodput_above_threshold,
    precision.recipe_on_gpu,
    precision.recipe_options,
    notes.unmodelled_attention,
    notes.key_not_read,
    notes.value_approximated,
    notes.search_spec_fits,
    frameworks.megatron_refuses,
    frameworks.deepspeed_refuses,
    frameworks.torchtitan_refuses,
    frameworks.framework_runs_otherwise,
    frameworks.megatron_fsdp_refuses,
    context.ulysses_heads_divide,
    context.hierarchical_context_splits,
    context.cp_type_on_framework,
    optimizer.muon_runs,
    inputs.unreadable,
    inputs.not_text,
    inputs.too_large,
    inputs.yaml_syntax,
    inputs.duplicate_key,
    inputs.document_shape,
    inputs.unsupported_yaml,
    inputs.yaml11_ambiguity,
    inputs.unknown_key,
    inputs.missing_field,
    inputs.bad_value,
    inputs.unknown_preset,
)

REGISTRY: Mapping[str, Rule] = MappingProxyType({r.id: r for r in sorted(_ALL, key=lambda r: r.id)})


def declared_options(rules: Iterable[Rule]) -> tuple[Option, ...]:
    """Every option the rules declare, in rule-id order, then in each rule's order; ValueError
    when two rules declare the same name (a name is one key of the spec's `rules:` section) or
    a name is not snake_case."""
    found: dict[str, Option] = {}
    for each in sorted(rules, key=lambda r: r.id):
        for option in each.options:
            if not re.fullmatch(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*", option.name):
                raise ValueError(f"{each.id}: option {option.name!r} is not a snake_case name")
            if option.name in found or option.name in RESERVED:
                owner = found[option.name].rule if option.name in found else "planc"
                raise ValueError(f"{each.id}: option {option.name!r} is taken by {owner}")
            found[option.name] = option
    return tuple(found.values())


# The rules that say "the chosen framework (training.framework) refuses this layout, or does not
# run it as planned": the frameworks' own checks (PLC048-PLC052, and PLC074 on Muon), and those of other families
# that quote a framework's refusal (context parallelism on eager attention, Megatron-Core's
# orders, Megatron's MoE without sequence parallelism, schedules, FP8 options, the
# context-parallel type on the framework). `planc search` leaves out a layout with a finding of
# one of them unless asked to keep it (--allow-framework-warnings). PLC011 (ZeRO-2/3 with a
# pipeline) is not one: Megatron and torchtitan run it at a cost, and DeepSpeed's refusal is
# PLC049's error.
FRAMEWORK_RULES = frozenset(
    {
        "PLC017",
        "PLC027",
        "PLC029",
        "PLC030",
        "PLC044",
        "PLC048",
        "PLC049",
        "PLC050",
        "PLC051",
        "PLC052",
        "PLC062",
        "PLC074",
    }
)

# Keys of `rules:` and `[tool.planc]` that are not a rule's option.
RESERVED = frozenset({"ignore", "severity", "select", "exclude"})
OPTIONS: tuple[Option, ...] = declared_options(_ALL)


def get(rule_id: str) -> Rule:
    """The rule with this id; ValueError for an unknown id."""
    try:
        return REGISTRY[rule_id.upper()]
    except KeyError:
        raise ValueError(f"unknown rule {rule_id!r}; 'planc rules' lists them") from None


__all__ = [
    "FRAMEWORK_RULES",
    "OPTIONS",
    "REGISTRY",
    "Option",
    "Rule",
    "RuleKind",
    "Violation",
    "declared_options",
    "get",
]
