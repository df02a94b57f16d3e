"""Verify a compiled plan as written, independently of the code that wrote it.

`planc verify DIR` reads `DIR/plan.json`; `planc verify SPEC` compiles the spec in memory and
reads the plan.json it would write. Either way the verifier sees only the JSON text. It reads
that text bounded (a regular file of at most 256 MiB, no NaN or Infinity, bounded nesting) and
validates it against the published schema with exact types and bounds before reading anything
from it (`planc.verify.source`; exit 2 naming the field), then recomputes what the plan promises
from first principles:

* the rank grid: every rank's coordinates, node, local rank and NVLink domain from the degrees,
  the order and the hardware (`planc.verify.grid`);
* the process groups: each kind partitions the ranks, has the degrees' size, and holds exactly
  the ranks that share every other coordinate (`planc.verify.grid`);
* every op's calls and bytes from tensor shapes (hidden, sequence, micro-batch, heads, the
  parameters a stage holds, counted here again from the model's shape), the link class from the
  groups' NVLink domains, and every rank's wire totals (`planc.verify.traffic`);
* the ring collectives simulated by `planc.sim` on the plan's real group members, with buffers
  seeded per rank id, against the sum over the ranks that should be in the group
  (`planc.verify.rings`);
* the pipeline: the schedule pattern against the warm-up formula, expanded by the plan's
  documented order and run through the discrete-event simulation, which pairs every send with
  one receive and refuses a deadlock, and the summary's bubble from p, m and v
  (`planc.verify.pipeline`).

None of it imports planc's memory, communication or compile code.
"""

from planc.verify.report import Problem, Verification, render, verify_text

__all__ = ["Problem", "Verification", "render", "verify_text"]
