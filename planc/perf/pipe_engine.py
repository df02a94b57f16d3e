"""DeepSpeed's pipeline engine, as the step model prices it under `training.framework: deepspeed`
with a pipeline (p > 1).

What the engine does differently from Megatron's schedules, read in DeepSpeed v0.5.10 (the
2021 line Megatron-Turing NLG 530B trained on) and v0.19.5, where it is unchanged:

* **Instruction stream** (`deepspeed/runtime/pipe/schedule.py` `TrainSchedule.steps`): 2·(m + p − 1)
  slots; in each a stage runs a forward or a backward by the parity of slot and stage, with the
  exchanges of that slot first: a forward slot `RecvActivation` and `SendGrad` (of the previous
  slot's backward), a backward slot `SendActivation` (of the previous slot's forward) and
  `RecvGrad`. Its dependencies are 1F1B's (p forwards before stage 0's first backward), so the
  simulation runs it as `ScheduleKind.ONE_F_ONE_B`.
* **Blocking, serial messages** (`deepspeed/runtime/pipe/p2p.py` `send`/`recv`: `dist.send` and
  `dist.recv`, `async_op` refused): every transfer holds both stages' streams until it is done,
  one after the other and beside no compute. Each carries one TP rank's 1/t share of the
  boundary tensor (`engine.py` `_exec_forward_pass`/`_exec_send_grads`: `PartitionedTensor`
  over the slice-parallel group, `pipe_partitioned` and `grad_partitioned` default on), and the
  receiver all-gathers it over the TP group before use (`PartitionedTensor.full()` in
  `_exec_forward_pass` and `_exec_backward_pass`): `planc.perf.inputs.boundary_transfer`. A
  stage that sent its output kept only its own 1/t share of it (`outputs.data = torch.zeros(1)`
  after partitioning) and all-gathers it again before that micro-batch's backward
  (`_exec_backward_pass`: `part_output.full()`, to restore the tensor autograd backpropagates
  from): one more TP all-gather per micro-batch.
* **Gradient reduction after the schedule** (`engine.py` `PipelineEngine.__init__`:
  `enable_backward_allreduce = False`; `TrainSchedule.steps` issues `ReduceTiedGrads`,
  `ReduceGrads`, `OptimizerStep` after the last slot; `_exec_reduce_grads` →
  `allreduce_gradients` → ZeRO's `reduce_gradients`): no bucket overlaps the last backward.
* **Parameter all-gather inside the optimizer step** (ZeRO-1/2,
  `deepspeed/runtime/zero/stage_1_and_2.py` `step`): the updated shards are gathered before the
  step returns; nothing of it hides behind the next step's forward (Megatron's
  `--overlap-param-gather` has no DeepSpeed counterpart).
"""

from __future__ import annotations

from collections.abc import Sequence

from planc.plannable import Plannable
from planc.record import record


def runs_pipe_engine(job: Plannable) -> bool:
    """True when DeepSpeed's PipelineEngine runs the step: framework deepspeed and p > 1."""
    return job.training.framework == "deepspeed" and job.layout.p > 1


@record
class Transfer:
    """One pipeline message, in seconds: the 1/t share on the pipeline link (under DeepSpeed's
    engine both stages wait for it) and the TP all-gather the receiver runs on arrival."""

    send_s: float
    gather_s: float


@record
class BlockingP2p:
    """A stage's blocking transfers per micro-batch, in seconds, on its own stream."""

    forward_s: float  # RecvActivation (stage > 0) and SendActivation (stage < p − 1)
    backward_s: float  # RecvGrad (stage < p − 1) and SendGrad (stage > 0)


def blocking_p2p(job: Plannable, transfers: Sequence[Transfer], stage: int) -> BlockingP2p:
    """Stage r's transfers per micro-batch, serial on its stream (p2p.send/recv block), with
    `before` the transfer across boundary r − 1 (from the previous stage) and `after` across
    boundary r (to the next), `transfers` indexed by boundary:

    forward  = [r > 0]·(before.send + before.gather)  (RecvActivation, then the gather in the
                                                       forward)
             + [r < p − 1]·after.send                 (SendActivation of this forward, in the
                                                       next slot)
    backward = [r < p − 1]·(after.send + 2·after.gather)  (RecvGrad, then the gathers of the
                                                           gradient and of the stage's own
                                                           output in the backward)
             + [r > 0]·before.send                    (SendGrad of this backward, in the next
                                                       slot)

    Each transfer holds both stages, so the step simulation runs with no separate message delay
    (`hop_s`); on the fill and drain path this counts each hop's transfer twice, once on each
    side, at most 2·(p − 1) transfers in all. Source: deepspeed/runtime/pipe/schedule.py
    `TrainSchedule.steps`, p2p.py `send`, `recv`, engine.py `_exec_backward_pass` (v0.5.10,
    v0.19.5)."""
    p = job.layout.p
    if p == 1 or not transfers:  # no engine, no blocking transfers
        return BlockingP2p(0.0, 0.0)
    before, after = transfers[(stage - 1) % p], transfers[stage]
    has_prev, has_next = stage > 0, stage < p - 1
    forward = (before.send_s + before.gather_s if has_prev else 0.0) + (
        after.send_s if has_next else 0.0
    )
    backward = (after.send_s + 2 * after.gather_s if has_next else 0.0) + (
        before.send_s if has_prev else 0.0
    )
    return BlockingP2p(forward, backward)


def hop_s(job: Plannable, megatron_hop_s: float) -> float:
    """The message delay the pipeline simulation puts between stages: none under DeepSpeed's
    engine, whose transfers are on the stages' own times (`blocking_p2p`); else Megatron's."""
    return 0.0 if runs_pipe_engine(job) else megatron_hop_s


def overlaps_grad_reduce(job: Plannable) -> bool:
    """Whether gradient buckets may run during the last backward: `training.overlap_grad_reduce`,
    except under DeepSpeed's engine, which reduces after the schedule (ReduceGrads)."""
    return job.training.overlap_grad_reduce and not runs_pipe_engine(job)


def overlaps_param_gather(job: Plannable) -> bool:
    """Whether ZeRO-1/2's parameter all-gather may hide behind the next forward:
    `training.overlap_param_gather`, except under DeepSpeed's engine, whose ZeRO optimizer
    gathers inside its step."""
    return job.training.overlap_param_gather and not runs_pipe_engine(job)
