"""What is wrong with a config file, every problem at once, each at its line.

A file checked against a pydantic model (topology, inventory, service config) fails with
one ``Problem`` per fault, each naming its line and place, and an unknown key with the
nearest key the model knows there::

    lab.yaml: 2 problems
      lab.yaml:8: link 1: endpionts: unknown key; did you mean `endpoints`?
      lab.yaml:8: link 1: endpoints: missing (required)

Nothing here knows a particular file: the keys come from walking the model along each
error's location (following the tags pydantic puts in it for union members), so a key a
model gains is covered as soon as it is declared.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from services.reroute.model.yamlfile import Document, Loc

Namer = Callable[[Loc], tuple[str, str]]  # clean location -> (place, key path within it)
MISSING = "missing (required)"
_SCALAR_TAGS = {"str", "int", "float", "bool", "none", "list", "dict", "tuple", "set"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """One fault of a file: its line (None: the file as a whole), the place (``node br1``,
    ``device ost1``, or empty), the key within it, and what is wrong."""

    line: int | None
    where: str = ""
    key: str = ""
    message: str

    def render(self, file: object) -> str:
        """``FILE:LINE: place: key: message`` (the parts it has)."""
        at = f"{file}:{self.line}" if self.line else f"{file}"
        return ": ".join(p for p in (at, self.where, self.key, self.message) if p)


def report(file: object, problems: Sequence[Problem]) -> str:
    """All ``problems`` of ``file``, one per line, in file order."""
    ordered = sorted(problems, key=lambda p: (p.line or 0, p.message == MISSING))
    if len(ordered) == 1:
        return ordered[0].render(file)
    lines = "\n".join(f"  {p.render(file)}" for p in ordered)
    return f"{file}: {len(ordered)} problems\n{lines}"


def dotted(loc: Loc) -> tuple[str, str]:
    """The generic place of a location: none; the key path ``tokens[0].role``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return "", text


def nearest(word: str, known: Iterable[str]) -> str:
    """``; did you mean `x`?`` for the known word nearest ``word``, else the known words."""
    names = sorted(known)
    close = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    if close:
        return f"; did you mean `{close[0]}`?"
    return f" (known: {', '.join(names)})" if names else ""


def validation_problems(
    exc: ValidationError, model: type[BaseModel], doc: Document, name: Namer = dotted
) -> list[Problem]:
    """Every error of ``exc`` (validating ``doc`` against ``model``) as a Problem."""
    problems = []
    for error in exc.errors():
        loc, parent = walk(model, error["loc"])
        where, key = name(loc)
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden" and loc:
            message = "unknown key" + nearest(str(loc[-1]), keys_of(parent))
        elif error["type"] == "missing":
            message = MISSING
        problems.append(Problem(line=doc.line(loc), where=where, key=key, message=message))
    return problems


def walk(model: Any, loc: Sequence[int | str]) -> tuple[Loc, Any]:
    """``loc`` without the union tags pydantic adds, and the type holding its last part
    (None where the model says nothing)."""
    clean: list[int | str] = []
    holder: Any = None
    tp: Any = model
    for part in loc:
        members = _members(tp)
        if members:
            tagged = _tagged(members, part)
            if tagged is not None or (isinstance(part, str) and _is_tag(part)):
                tp = tagged
                continue
        holder = tp
        clean.append(part)
        tp = _child(tp, part)
    return tuple(clean), holder


def keys_of(tp: Any) -> list[str]:
    """The keys a mapping of type ``tp`` may have (a model's fields, by alias)."""
    tp = _plain(tp)
    members = _members(tp)
    if members:
        return sorted({k for m in members for k in keys_of(m)})
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [f.alias or n for n, f in tp.model_fields.items()]
    return []


def _plain(tp: Any) -> Any:
    """``tp`` without ``Annotated`` and without ``None`` in an optional."""
    while True:
        if get_origin(tp) is Annotated:
            tp = get_args(tp)[0]
            continue
        if _is_union(tp):
            args = [a for a in get_args(tp) if a is not type(None)]
            if len(args) == 1:
                tp = args[0]
                continue
        return tp


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _members(tp: Any) -> list[Any]:
    tp = _plain(tp)
    return [_plain(a) for a in get_args(tp) if a is not type(None)] if _is_union(tp) else []


def _tagged(members: list[Any], part: int | str) -> Any:
    """The union member pydantic's location tag ``part`` names (a discriminator value or
    the member's name), or None."""
    for member in members:
        if getattr(member, "__name__", None) == part:
            return member
        if isinstance(member, type) and issubclass(member, BaseModel):
            for field in member.model_fields.values():
                if get_origin(field.annotation) is Literal and part in get_args(field.annotation):
                    return member
    return None


def _is_tag(part: str) -> bool:
    return part in _SCALAR_TAGS or "[" in part


def _child(tp: Any, part: int | str) -> Any:
    """The type of ``tp``'s element ``part`` (None when unknown)."""
    tp = _plain(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        for name, field in tp.model_fields.items():
            if part in (name, field.alias):
                return field.annotation
        return None
    origin, args = get_origin(tp), get_args(tp)
    if origin is dict and len(args) == 2:
        return args[1]
    if origin is tuple and args and args[-1] is not Ellipsis:
        return args[part] if isinstance(part, int) and part < len(args) else None
    if origin in (list, tuple, set, frozenset) and args:
        return args[0]
    return None
