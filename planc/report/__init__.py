"""`planc report`: the plan as pictures, in one self-contained HTML page.

SVG is generated here from planc's own numbers (no charting library, nothing fetched): memory
bars per stage against HBM (`memory`), the simulated pipeline schedule (`gantt`), the rank
placement (`placement`), communication and the step-time split (`comm`), put together with the
check findings by `page`. Every number on the page is computed in Python; the page's script only
highlights a stage across the charts, and the page reads the same without it.
"""

from __future__ import annotations

from planc.report.build import TOLERATED, Built, build_report
from planc.report.page import render_page

__all__ = ["TOLERATED", "Built", "build_report", "render_page"]
