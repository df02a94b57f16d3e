"""A rule's option: one threshold a rule reads, with its type, default, bounds and meaning.

A rule declares its options (`@rule("PLC006", options=(MAX_BUBBLE,))`, as yamllint's rules own
`CONF` and `DEFAULT`); `scripts/regenerate.py` writes every declared option into
`planc.spec.rule_options`, and from that table come the spec's `rules:` and `search:` fields
(and so the JSON Schema), the `[tool.planc]` keys, the resolved `Rules` record and
`planc search`'s command-line options. The input side reads the table, never the registry: the
registry imports the whole analysis stack.

Nothing here imports pydantic or click: the spec models and the command line build their
fields from these records.
"""

from __future__ import annotations

import math

from planc.record import record


@record
class Option:
    """One threshold of one rule: `name` is its key in the spec's `rules:` section, in
    `[tool.planc]` and (with dashes) on `planc search`'s command line.

    `ge`/`gt` and `le`/`lt` are the inclusive and exclusive bounds (JSON Schema's minimum,
    exclusiveMinimum, maximum and exclusiveMaximum); `description` is a phrase without a
    full stop, completed per place it is shown. `rule` is filled in by the rule that declares it.
    """

    name: str
    default: float
    description: str
    value_type: type[int] | type[float] = float
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    rule: str = ""

    @property
    def json_type(self) -> str:
        """The JSON Schema type: "integer" or "number"."""
        return "integer" if self.value_type is int else "number"

    @property
    def flag(self) -> str:
        """`planc search`'s command-line option: `--max-bubble`."""
        return "--" + self.name.replace("_", "-")

    def rules_description(self) -> str:
        """The description of `rules.<name>` (the spec and the schema)."""
        return f"{self.description} ({self.rule})."

    def search_description(self) -> str:
        """The description of `search.<name>`: the same threshold, while searching."""
        return (
            f"{self.description}, replacing rules.{self.name} while searching (and in the spec "
            f"--write writes). Default: rules.{self.name}."
        )

    def flag_help(self) -> str:
        """The help of `planc search`'s option."""
        return f"{self.description} (default: search.{self.name}, then rules.{self.name})."

    def bounds_text(self) -> str:
        """The bounds in words: "at least 0 and below 1"."""
        words = []
        if self.ge is not None:
            words.append(f"at least {self.ge:g}")
        if self.gt is not None:
            words.append(f"above {self.gt:g}")
        if self.le is not None:
            words.append(f"at most {self.le:g}")
        if self.lt is not None:
            words.append(f"below {self.lt:g}")
        return " and ".join(words)

    def interval(self) -> str:
        """The bounds as an interval: "[0, 1)"; "(0, ∞)" when unbounded above."""
        low = "[" if self.ge is not None else "("
        high = "]" if self.le is not None else ")"
        lower = self.ge if self.ge is not None else self.gt
        upper = self.le if self.le is not None else self.lt
        left = "−∞" if lower is None else f"{lower:g}"
        right = "∞" if upper is None else f"{upper:g}"
        return f"{low}{left}, {right}{high}"

    def within(self, value: float) -> bool:
        """Whether `value` lies inside the bounds."""
        return (
            (self.ge is None or value >= self.ge)
            and (self.gt is None or value > self.gt)
            and (self.le is None or value <= self.le)
            and (self.lt is None or value < self.lt)
        )

    def problem(self, value: object) -> str | None:
        """What is wrong with `value` for this option (None: nothing), as "must be ..., got ...";
        a bool is not a number, and an integer option takes no float."""
        wanted = (int,) if self.value_type is int else (int, float)
        if (
            isinstance(value, bool)
            or not isinstance(value, wanted)
            or (isinstance(value, float) and not math.isfinite(value))
        ):
            return f"must be {'an integer' if self.value_type is int else 'a number'}, got {value!r}"
        if not self.within(value):
            return f"must be {self.bounds_text()}, got {value}"
        return None


__all__ = ["Option"]
