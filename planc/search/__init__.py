"""`planc search`: from judging one layout to finding the fastest ones.

`space` (the axes as data, pinning and narrowing), `evaluate` (the rules `planc check` runs,
cheapest first, and the step estimate), `rank` (order and counts), `run` (the loop, on one or
more processes), `workers` (the processes of `-j N`, which die with the search), `output`
(text, JSON, CSV and the winner as a spec); the command itself is `planc.cli.search`.
"""
