"""YAML as our config files read it: safe (no Python objects) and strict (a key given twice
in one mapping is an error, not "the last one wins"); ``strict_document`` also keeps the
line of every key and item, so errors can name it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

__all__ = [
    "Document",
    "YAMLError",
    "strict_document",
    "strict_yaml",
    "yaml_error_line",
    "yaml_error_text",
]

YAMLError = yaml.YAMLError


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that rejects duplicate mapping keys instead of keeping the last."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {key!r} (first at line {seen[key]})",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def strict_yaml(text: str) -> object:
    """The document in ``text``; ``yaml.YAMLError`` on bad YAML or a duplicate key."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass


Loc = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Document:
    """A YAML document and where each of its values is: ``lines`` maps the path of every
    mapping key and sequence item (``("topology", "links", 0)``) to its 1-based line."""

    data: object
    lines: Mapping[Loc, int]

    def line(self, loc: Sequence[str | int]) -> int | None:
        """The line of the deepest value of ``loc`` the document has (a missing key: its
        mapping's line); None for an empty path."""
        path: Loc = ()
        for part in loc:
            step = next((p for p in (part, str(part)) if (*path, p) in self.lines), None)
            if step is None:
                break
            path += (step,)
        return self.lines.get(path)


def strict_document(text: str) -> Document:
    """``strict_yaml`` with the line of every key and item (``yaml.YAMLError`` alike)."""
    loader = _UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    lines: dict[Loc, int] = {}
    if node is not None:
        _walk(node, (), lines)
    return Document(data=data, lines=lines)


def _walk(node: yaml.Node, path: Loc, lines: dict[Loc, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                key = (*path, key_node.value)
                lines.setdefault(key, key_node.start_mark.line + 1)
                _walk(value, key, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            _walk(item, (*path, index), lines)


def yaml_error_line(exc: yaml.YAMLError) -> int | None:
    """The line a YAML error points at (1-based), if it says."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return None if mark is None else int(mark.line) + 1


def yaml_error_text(exc: yaml.YAMLError) -> str:
    """What a YAML error says, without the parser's excerpt of the text (the line is
    named apart): ``expected ',' or ']', but got '<stream end>' (while parsing a flow
    sequence, from line 2)``."""
    problem = getattr(exc, "problem", None)
    if not problem:
        return str(exc)
    context, mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and mark is not None:
        return f"{problem} ({context}, from line {mark.line + 1})"
    return f"{problem} ({context})" if context else str(problem)
