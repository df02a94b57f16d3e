"""The options the rules own, generated from the rule registry (`planc.rules`) by
scripts/regenerate.py: do not edit. Declare an option in its rule
(`@rule(ID, options=(OPTION,))`) and run the script; the spec's `rules:` and `search:`
fields, `[tool.planc]`, the resolved `Rules` and `planc search`'s flags read this table.
"""

from planc.spec.options import Option

OPTIONS: tuple[Option, ...] = (
    Option(
        "max_bubble",
        0.1,
        "Largest pipeline bubble fraction allowed",
        value_type=float,
        ge=0.0,
        lt=1.0,
        rule="PLC006",
    ),
    Option(
        "memory_headroom",
        0.1,
        "Fraction of HBM kept free on every rank",
        value_type=float,
        ge=0.0,
        lt=1.0,
        rule="PLC007",
    ),
    Option(
        "max_goodput_loss",
        0.01,
        "Goodput the checkpoint interval may lose against Daly's optimal interval, as a fraction",
        value_type=float,
        ge=0.0,
        lt=1.0,
        rule="PLC046",
    ),
    Option(
        "min_goodput",
        0.8,
        "Least goodput (training time over wall time, with checkpoints, lost work and restarts)",
        value_type=float,
        ge=0.0,
        le=1.0,
        rule="PLC047",
    ),
)
