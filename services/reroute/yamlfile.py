"""YAML as our config files read it: safe (no Python objects) and strict (a key given twice
in one mapping is an error, not "the last one wins")."""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["YAMLError", "strict_yaml"]

YAMLError = yaml.YAMLError


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that rejects duplicate mapping keys instead of keeping the last."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            line = key_node.start_mark.line + 1
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (line {line})", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def strict_yaml(text: str) -> object:
    """The document in ``text``; ``yaml.YAMLError`` on bad YAML or a duplicate key."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
