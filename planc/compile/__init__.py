"""Compile a checked job into a plan: rank placement, process groups and launcher files.

plan = compile_job(job)           # PlanError if the job has no valid layout
write_plan(plan, Path("out"))     # OutputError if "out" is not a planc directory
"""

from planc.compile.plan import Plan, PlanError, compile_job
from planc.compile.write import OutputError, render_files, write_plan

__all__ = ["OutputError", "Plan", "PlanError", "compile_job", "render_files", "write_plan"]
