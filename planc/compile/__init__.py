"""Compile an analysed, plannable job into a plan: rank placement, process groups and launcher files.

plan = compile_job(analyse(plannable_job))   # a plannable job always has a layout
write_plan(plan, Path("out"))                # OutputError if "out" cannot be written
"""

from planc.compile.plan import Plan, compile_job
from planc.compile.write import OutputError, render_files, write_plan

__all__ = ["OutputError", "Plan", "compile_job", "render_files", "write_plan"]
