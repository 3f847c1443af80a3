"""A small reader of the declarations of a P4_16 v1model program that a P4Info describes:
headers and structs (field widths), the controls' actions (parameters) and tables (keys
with match kinds, actions, const default action, size). Not a P4 parser: enough of the
language for ``p4/reroute.p4``, and loud (AssertionError) about what it does not know.

The P4Info names follow p4c: a control's action or table ``C.name``; a key expression as
written, ``h.isValid()`` as ``h.$valid$``; field ids 1.. in key order, parameter ids 1..
in declaration order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

V1MODEL_STANDARD_METADATA = {"ingress_port": 9, "egress_spec": 9, "egress_port": 9}


@dataclass(frozen=True, slots=True, kw_only=True)
class Key:
    name: str
    bits: int
    match_kind: str  # "exact", "ternary", "lpm", ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Table:
    name: str
    keys: tuple[Key, ...]
    actions: tuple[str, ...]
    const_default_action: str | None
    size: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Program:
    actions: dict[str, tuple[tuple[str, int], ...]]  # name -> ((param, bits), ...)
    tables: dict[str, Table]


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def block(text: str, start: int) -> str:
    """The text between the ``{`` at or after ``start`` and its matching ``}``."""
    opening = text.index("{", start)
    depth = 0
    for i in range(opening, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[opening + 1 : i]
    raise AssertionError("unbalanced braces")


def types(text: str) -> dict[str, dict[str, str]]:
    """header/struct name -> {field: type}, types as written (``bit<9>``, ``vlan_t``)."""
    found = {}
    for m in re.finditer(r"\b(header|struct)\s+(\w+)\s*\{", text):
        body = block(text, m.start())
        fields = re.findall(r"([\w<>]+)\s+(\w+)\s*;", body)
        found[m.group(2)] = {name: kind for kind, name in fields}
    return found


def width(kind: str) -> int:
    m = re.fullmatch(r"bit<(\d+)>", kind)
    assert m, f"not a bit<W> type: {kind}"
    return int(m.group(1))


def key_width(expr: str, params: dict[str, str], known: dict[str, dict[str, str]]) -> int:
    """The bit width of a key expression (``hdr.ipv4.dstAddr``, ``hdr.vlan.isValid()``)."""
    parts = expr.removesuffix(".isValid()").split(".")
    if expr.endswith(".isValid()"):
        return 1
    kind = params[parts[0]]
    if kind == "standard_metadata_t":
        return V1MODEL_STANDARD_METADATA[parts[1]]
    for part in parts[1:]:
        kind = known[kind][part]
    return width(kind)


def p4info_name(expr: str) -> str:
    return expr.removesuffix(".isValid()") + ".$valid$" if expr.endswith(".isValid()") else expr


def parse(source: str) -> Program:
    text = strip_comments(source)
    known = types(text)
    actions: dict[str, tuple[tuple[str, int], ...]] = {}
    tables: dict[str, Table] = {}
    for m in re.finditer(r"\bcontrol\s+(\w+)\s*\(([^)]*)\)\s*\{", text):
        control, body = m.group(1), block(text, m.start())
        params = {name: kind for kind, name in re.findall(r"(\w+)\s+(\w+)\s*(?:,|$)", m.group(2))}
        for a in re.finditer(r"\baction\s+(\w+)\s*\(([^)]*)\)", body):
            declared = re.findall(r"bit<(\d+)>\s+(\w+)", a.group(2))
            actions[f"{control}.{a.group(1)}"] = tuple((n, int(w)) for w, n in declared)
        for t in re.finditer(r"\btable\s+(\w+)\s*\{", body):
            tables[f"{control}.{t.group(1)}"] = _table(
                control, t.group(1), block(body, t.start()), params, known
            )
    return Program(actions=actions, tables=tables)


def _table(
    control: str, name: str, body: str, params: dict[str, str], known: dict[str, dict[str, str]]
) -> Table:
    key_text = block(body, body.index("key"))
    keys = tuple(
        Key(name=p4info_name(expr), bits=key_width(expr, params, known), match_kind=kind)
        for expr, kind in re.findall(r"([\w.]+(?:\(\))?)\s*:\s*(\w+)\s*;", key_text)
    )
    action_text = block(body, body.index("actions"))
    names = tuple(f"{control}.{a}" for a in re.findall(r"(\w+)\s*;", action_text))
    default = re.search(r"const\s+default_action\s*=\s*(\w+)\s*\(", body)
    size = re.search(r"\bsize\s*=\s*(\d+)\s*;", body)
    return Table(
        name=f"{control}.{name}",
        keys=keys,
        actions=names,
        const_default_action=f"{control}.{default.group(1)}" if default else None,
        size=int(size.group(1)) if size else None,
    )


# --------------------------------------------------------------------------------------
# p4c's ids and aliases


def jenkins_one_at_a_time(name: str) -> int:
    """The 32-bit hash p4c gives a name (its P4Runtime symbol table)."""
    h = 0
    for byte in name.encode():
        h = (h + byte) & 0xFFFF_FFFF
        h = (h + (h << 10)) & 0xFFFF_FFFF
        h ^= h >> 6
    h = (h + (h << 3)) & 0xFFFF_FFFF
    h ^= h >> 11
    return (h + (h << 15)) & 0xFFFF_FFFF


def p4c_ids(prefix: int, names: list[str]) -> dict[str, int]:
    """Ids as p4c assigns them: names in sorted order, ``prefix << 24 | low 24 bits of the
    hash``, the next free value on a collision (linear probing)."""
    taken: set[int] = set()
    ids = {}
    for name in sorted(names):
        low = jenkins_one_at_a_time(name)
        while (prefix << 24 | (low & 0xFF_FFFF)) in taken:
            low += 1
        ids[name] = prefix << 24 | (low & 0xFF_FFFF)
        taken.add(ids[name])
    return ids


def alias(name: str, all_names: list[str]) -> str:
    """The shortest dot-separated suffix of ``name`` that no other name ends with."""
    parts = name.split(".")
    for n in range(1, len(parts) + 1):
        suffix = ".".join(parts[-n:])
        if not any(o != name and (o == suffix or o.endswith("." + suffix)) for o in all_names):
            return suffix
    return name
