"""Optimizer rules: what the frameworks run of the optimizer a spec names."""

from __future__ import annotations

from collections.abc import Iterator

from planc.rules.base import Context, Violation, rule


@rule("PLC074")
def muon_runs(ctx: Context) -> Iterator[Violation]:
    """Optimizer: Muon (training.optimizer: muon) as Megatron-LM runs it.

    Read from Megatron-LM: Muon is Megatron-Core's (optimizer/muon.py, emerging_optimizers.py);
    DeepSpeed and torchtitan have none. validate_args (megatron/training/arguments.py, 0.17 to
    0.19) refuses it with Torch-FSDP2 and Megatron-FSDP ("Emerging optimizer does not support
    Megatron-FSDP for now"), and get_megatron_muon_optimizer with fp16 ("muon with fp16 is not
    supported"); its state is replicated (zero_stage 0) or sharded whole tensor by whole tensor
    over the data-parallel ranks by the layer-wise distributed optimizer (zero_stage 1), which
    keeps every rank's gradients whole: no ZeRO-2 or 3, and one optimizer instance over the whole
    data-parallel group ("LayerWiseDistributedOptimizer does not support
    num_distributed_optimizer_instances > 1"): no parallelism.data_shard below data × context.
    Megatron-Core 0.14.0 (training.framework_release nemo-25.09) has no Muon (muon.py is in
    megatron/core/optimizer from 0.16). Megatron-Core 0.17 (nemo-26.04) refuses the replicated
    Muon with --overlap-grad-reduce ("Muon optimizer does not support overlap grad reduce. Use
    dist_muon instead."). training.muon sets Muon's options and means nothing under another
    optimizer.

    Passes:
        training: {optimizer: muon}
        parallelism: {zero_stage: 1}

    Fails:
        training: {optimizer: muon}
        parallelism: {zero_stage: 2}
    """
    tr, zero = ctx.job.training, ctx.job.layout.zero
    if tr.optimizer != "muon":
        if tr.muon_given:
            yield Violation(
                "training.muon",
                f"training.muon sets Muon's options, and the optimizer is {tr.optimizer}",
                "set training.optimizer: muon, or remove training.muon",
                ("training.optimizer",),
            )
        return
    if tr.framework_release == "nemo-25.09":
        yield Violation(
            "training.optimizer",
            "Megatron-Core 0.14.0 (NeMo 25.09) has no Muon (megatron/core/optimizer/muon.py is "
            "in 0.16, not 0.14 or 0.15)",
            "state a later training.framework_release, or training.optimizer: adam",
            ("training.framework_release",),
        )
    if tr.framework != "megatron" or tr.megatron_fsdp:
        name = "megatron-fsdp" if tr.megatron_fsdp else tr.framework
        yield Violation(
            "training.optimizer",
            f"Muon is Megatron-Core's optimizer and {name} does not run it (Megatron-LM: "
            "'Emerging optimizer does not support Megatron-FSDP' nor Torch-FSDP2)",
            "set training.framework: megatron, or training.optimizer: adam",
            ("training.framework",),
        )
    if zero > 1:
        yield Violation(
            "parallelism.zero_stage",
            f"Muon's layer-wise distributed optimizer shards the optimizer state only (zero_stage "
            f"1); it keeps every gradient and weight whole, and zero_stage is {zero}",
            "set parallelism.zero_stage: 1 (the layer-wise distributed optimizer) or 0",
            ("training.optimizer",),
        )
    lay = ctx.job.layout
    if (
        zero == 1
        and lay.data_shard is not None
        and lay.d is not None
        and lay.data_shard < lay.d * lay.c
    ):
        yield Violation(
            "parallelism.data_shard",
            f"Muon's layer-wise distributed optimizer shards over the whole data × context group "
            f"({lay.d * lay.c} ranks) and refuses optimizer instances (HSDP); data_shard is "
            f"{lay.data_shard}",
            "remove parallelism.data_shard",
            ("training.optimizer",),
        )
    if zero == 0 and tr.framework_release == "nemo-26.04" and tr.overlap_grad_reduce:
        yield Violation(
            "training.overlap_grad_reduce",
            "Megatron-Core 0.17 (NeMo 26.04) refuses the replicated Muon (zero_stage 0) with "
            "--overlap-grad-reduce: 'Muon optimizer does not support overlap grad reduce. Use "
            "dist_muon instead.'",
            "set parallelism.zero_stage: 1 (dist_muon), or training.overlap_grad_reduce: false",
            ("parallelism.zero_stage", "training.framework_release"),
        )
    if tr.precision == "fp16":
        yield Violation(
            "training.precision",
            "Megatron-Core's Muon refuses fp16 ('muon with fp16 is not supported'): it runs "
            "without a loss scale",
            "set training.precision: bf16",
            ("training.optimizer",),
        )
