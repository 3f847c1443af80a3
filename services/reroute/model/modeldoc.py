"""A config file's keys as help text, made from its pydantic model (``reroute serve --help``):
each key, the shape of its value, its description, default and bounds. Made from the model,
it lists a key as soon as the model declares it."""

from __future__ import annotations

import textwrap
import types
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel


def keys_help(model: type[BaseModel], width: int = 96) -> str:
    """The keys of a config file, made from its model: each key, the shape of its value,
    what it is, its default and bounds (``reroute serve --help``)."""
    rows = []
    for name, field in model.model_fields.items():
        notes = ["required"] if field.is_required() else []
        if not field.is_required() and field.default not in (None, ()):
            notes.append(f"default {field.default}")
        notes += [f"{sign} {getattr(m, attr)}" for m in field.metadata for attr, sign in _BOUNDS
                  if getattr(m, attr, None) is not None]  # fmt: skip
        text = " ".join(filter(None, [field.description, f"({', '.join(notes)})" if notes else ""]))
        rows.append((f"{name}: {shape(field.annotation)}", text))
    column = min(max(len(key) for key, _ in rows) + 4, 28)
    lines = ["config keys (a YAML mapping; relative paths are taken from its directory):"]
    for key, text in rows:
        wrapped = textwrap.wrap(text, width - column)
        if len(key) + 4 > column or not wrapped:  # a long key: its text on the next lines
            lines.append(f"  {key}")
        else:
            lines.append(f"  {key:<{column - 2}}{wrapped.pop(0)}")
        lines += [" " * column + more for more in wrapped]
    return "\n".join(lines)


_BOUNDS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))


def shape(tp: Any) -> str:
    """How a value of type ``tp`` is written: ``FILE``, ``[TEXT, ...]``, ``{token, role}``."""
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return shape(args[0])
    if origin in (Union, types.UnionType):
        return " | ".join(shape(a) for a in args if a is not type(None))
    if origin is Literal:
        return "|".join(str(a) for a in args)
    if origin in (list, tuple, set, frozenset):
        return f"[{shape(args[0])}, ...]" if args else "[...]"
    if origin is dict:
        return f"{{{shape(args[0])}: {shape(args[1])}}}"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return (
            "{" + ", ".join(f"{k}: {shape(f.annotation)}" for k, f in tp.model_fields.items()) + "}"
        )
    if isinstance(tp, type) and issubclass(tp, Enum):
        return "|".join(str(m.value) for m in tp)
    names = {Path: "FILE", str: "TEXT", int: "N", float: "NUMBER", bool: "true|false"}
    return names.get(tp, getattr(tp, "__name__", str(tp)).upper())
