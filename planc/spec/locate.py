"""Map spec paths (pydantic `loc` tuples, dotted fields) onto YAML node positions."""

from __future__ import annotations

from collections.abc import Sequence

from planc.record import record
from planc.spec.nodes import Node

Path = Sequence[str | int]


def dotted(path: Path) -> str:
    """`('model', 'layers')` -> `model.layers`; `('parallelism', 'stage_layers', 3)` -> `...stage_layers[3]`."""
    out = ""
    for segment in path:
        if isinstance(segment, int):
            out += f"[{segment}]"
        else:
            out += f".{segment}" if out else str(segment)
    return out


def parse_dotted(field: str) -> tuple[str | int, ...]:
    parts: list[str | int] = []
    for piece in field.split("."):
        name, _, rest = piece.partition("[")
        if name:
            parts.append(name)
        for index in rest.rstrip("]").split("]["):
            if index.isdigit():
                parts.append(int(index))
    return tuple(parts)


@record
class Locator:
    """Finds where a spec path stands in the file; falls back to the deepest part that exists."""

    root: Node | None

    def resolve(self, path: Path) -> tuple[list[str | int], Node | None, Node | None]:
        """(the segments found, the key node of the last one, its value node)."""
        node: Node | None = self.root
        key: Node | None = None
        found: list[str | int] = []
        for segment in path:
            if node is None:
                break
            if node.kind == "map" and isinstance(segment, str):
                pair = node.get(segment)
                if pair is None:
                    continue  # a union tag or a field absent from the file: skip it
                key, node = pair
            elif node.kind == "seq" and isinstance(segment, int) and 0 <= segment < len(node.value):
                key, node = None, node.value[segment]
            else:
                continue
            found.append(segment)
        return found, key, node

    def position(self, path: Path, at_key: bool = False) -> tuple[int, int]:
        _, key, value = self.resolve(path)
        target = key if (at_key or value is None) and key is not None else value
        if target is None:
            return (1, 1)
        return (target.line, target.column)

    def present(self, path: Path) -> bool:
        found, _, _ = self.resolve(path)
        return len(found) == len(path)

    def first_present(self, fields: Sequence[str]) -> tuple[int, int]:
        """The position of the first field written in the file, else of the nearest ancestor."""
        for field in fields:
            path = parse_dotted(field)
            if self.present(path):
                return self.position(path)
        return self.position(parse_dotted(fields[0]), at_key=True) if fields else (1, 1)
