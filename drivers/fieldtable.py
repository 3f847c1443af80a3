"""A REST API's JSON match read through a table of field readers. Pure, no I/O.

The REST drivers (OpenDaylight's RESTCONF, Ryu's ofctl_rest) each keep one table: the
API's match key -> a reader of its value giving the ``FlowMatch`` field and its value. The
table is the one place a driver says which fields it knows; ``strict_match`` reads an entry
of ours through it (a field it does not know is an error), ``lenient_match`` an entry of
another writer (a field it does not know is left out, and said so).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from drivers.base import FlowMatch

FieldReader = Callable[[Any], tuple[str, object]]  # a match field's value -> (name, value)


def integer(value: object, base: int = 10) -> int:
    """A JSON integer, or its text in ``base`` (0: as Python reads ``0x..``); ValueError
    for anything else, booleans too."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"expected an integer, got {value!r}")
    return int(value, base) if isinstance(value, str) else value


def strict_match(
    fields: Iterable[tuple[str, object]], readers: Mapping[str, FieldReader]
) -> FlowMatch:
    """The FlowMatch of the ``(key, value)`` match fields; ValueError naming the first key
    ``readers`` do not know."""
    found: dict[str, Any] = {}
    for key, value in fields:
        if key not in readers:
            raise ValueError(f"match field {key} has no FlowMatch equivalent")
        name, parsed = readers[key](value)
        found[name] = parsed
    return FlowMatch(**found)


def lenient_match(
    fields: Iterable[tuple[str, object]], readers: Mapping[str, FieldReader]
) -> tuple[FlowMatch, bool]:
    """The FlowMatch of the ``(key, value)`` match fields ``readers`` can read, and whether
    any was left out (a key they do not know, a value they cannot read): an entry of
    another writer, read as far as the planner's overlap check needs."""
    found: dict[str, Any] = {}
    more = False
    for key, value in fields:
        try:
            name, parsed = readers[key](value)
        except (KeyError, TypeError, ValueError, AttributeError):
            more = True
            continue
        found[name] = parsed
    return FlowMatch(**found), more
