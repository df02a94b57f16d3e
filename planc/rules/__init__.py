"""The rule registry: every rule by its stable id, in id order."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from planc.rules import batch, experts, inputs, layout, memory, model, perf, sharding
from planc.rules.base import Rule, Violation

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
    sharding.host_memory_fits,
    sharding.data_shard_divides,
    experts.experts_over_expert_parallel,
    experts.expert_grid,
    experts.top_k_within_experts,
    experts.capacity_factor_at_least_one,
    experts.expert_order_accepted,
    experts.moe_tensor_parallel_needs_sequence_parallel,
    layout.schedule_on_framework,
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


def get(rule_id: str) -> Rule:
    """The rule with this id; ValueError for an unknown id."""
    try:
        return REGISTRY[rule_id.upper()]
    except KeyError:
        raise ValueError(f"unknown rule {rule_id!r}; 'planc rules' lists them") from None


__all__ = ["REGISTRY", "Rule", "Violation", "get"]
