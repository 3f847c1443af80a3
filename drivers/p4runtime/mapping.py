"""``FlowRule`` <-> ``p4.v1.TableEntry`` of ``MyIngress.reroute`` (see ``program``), exact
both ways on what the program can express; ``unsupported`` names what it cannot. Every id
(table, field, action, parameter) comes from the ``Program`` passed in, which looked it up
by name in the device's P4Info.

Match: every field is ternary (value, mask); a wildcard field is left out of the entry, as
P4Runtime requires. ``in_port`` -> ingress_port/0x1ff; ``vlan_vid`` -> vlan.$valid$ 1/1
and vid/0xfff; ``eth_type`` 0x0800 -> ipv4.$valid$ 1/1; an IPv4 prefix -> address/prefix
mask; ``ip_proto``, ``l4_src``, ``l4_dst`` with full masks. Values are canonical byte
strings (big-endian, no leading zero bytes, zero as one byte). The priority is the
entry's priority (P4Runtime: > 0 in a ternary table); the cookie is the entry's
``metadata``, 8 bytes big-endian.

Actions: ``()`` -> drop; ``(Output(p),)`` -> forward(p); ``(PushVlan(v), Output(p))`` ->
push_vlan_forward(v, p); ``(PopVlan(), Output(p))`` -> pop_vlan_forward(p).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from google.protobuf import text_format

from drivers.base import Action as RuleAction
from drivers.base import FlowMatch, FlowRule, ForeignEntry, Output, PopVlan, Prefix, PushVlan
from drivers.p4runtime.program import PARAMS, PORT_BITS, WIDTHS, Action, Field, Program
from drivers.p4runtime.proto import p4runtime_pb2 as p4r

ETH_IPV4 = 0x0800
COOKIE_BYTES = 8
MAX_PRIORITY = 0x7FFF_FFFF


class MappingError(ValueError):
    """An entry or a rule that the program cannot express."""


# --------------------------------------------------------------------------------------
# byte strings


def encode(value: int) -> bytes:
    """The canonical byte string of a non-negative int."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def decode(data: bytes) -> int:
    """A P4Runtime bytestring as an int."""
    return int.from_bytes(data, "big")


def full(field: Field) -> int:
    """The all-ones mask of ``field``."""
    return (1 << WIDTHS[field]) - 1


# --------------------------------------------------------------------------------------
# what the program cannot express


def unsupported(rule: FlowRule) -> str | None:
    """Why the program cannot hold ``rule`` (None: it can). Runs for every change of a
    batch: the common case is a few comparisons, a message is made only for a bad rule."""
    m = rule.match
    fits = (
        rule.table == 0
        and 0 < rule.priority <= MAX_PRIORITY
        and 0 <= rule.cookie < 1 << 64
        and m.eth_type in (None, ETH_IPV4)
        and _fits(m.in_port, PORT_BITS)
        and (m.vlan_vid is None or 0 < m.vlan_vid < 0xFFF)
        and not (_zero_prefix(m.ipv4_src) or _zero_prefix(m.ipv4_dst))
        and _fits(m.ip_proto, 8)
        and _fits(m.l4_src, 16)
        and _fits(m.l4_dst, 16)
    )
    return (None if fits else _why(rule)) or _unsupported_actions(rule.actions)


def _why(rule: FlowRule) -> str | None:
    m = rule.match
    checks: tuple[tuple[bool, Callable[[], str]], ...] = (  # why: formatted only when bad
        (rule.table != 0, lambda: f"table {rule.table} (the program has one table)"),
        (not 0 < rule.priority <= MAX_PRIORITY, lambda: f"priority {rule.priority} (needs > 0)"),
        (not 0 <= rule.cookie < 1 << 64, lambda: f"cookie {rule.cookie}"),
        (m.eth_type not in (None, ETH_IPV4), lambda: f"eth_type {m.eth_type} (IPv4 only)"),
        (not _fits(m.in_port, PORT_BITS), lambda: f"in_port {m.in_port} (9 bits)"),
        (m.vlan_vid is not None and not 0 < m.vlan_vid < 0xFFF, lambda: f"vlan_vid {m.vlan_vid}"),
        (_zero_prefix(m.ipv4_src) or _zero_prefix(m.ipv4_dst), lambda: "an IPv4 /0 prefix"),
        (not _fits(m.ip_proto, 8), lambda: f"ip_proto {m.ip_proto}"),
        (not _fits(m.l4_src, 16) or not _fits(m.l4_dst, 16), lambda: "an L4 port beyond 16 bits"),
    )
    return next((text() for bad, text in checks if bad), None)


def _fits(value: int | None, bits: int) -> bool:
    return value is None or 0 <= value < 1 << bits


def _zero_prefix(prefix: Prefix | None) -> bool:
    return prefix is not None and prefix.plen == 0


def _unsupported_actions(actions: tuple[RuleAction, ...]) -> str | None:
    try:
        action_id, params = _action_of(actions)
    except MappingError as exc:
        return str(exc)
    if not all(_fits(v, bits) for v, (_, bits) in zip(params, PARAMS[action_id], strict=True)):
        return f"actions {actions}: a port beyond 9 bits or a VLAN id beyond 12"
    return None


# --------------------------------------------------------------------------------------
# rule -> entry


def to_entry(program: Program, rule: FlowRule) -> p4r.TableEntry:
    """The table entry of ``rule`` (check ``unsupported`` first)."""
    return p4r.TableEntry(**entry_fields(program, rule))


def key_entry(program: Program, rule: FlowRule) -> p4r.TableEntry:
    """Just the key of ``rule``'s entry (table, match, priority): what a DELETE carries."""
    return p4r.TableEntry(**entry_fields(program, rule, key_only=True))


def entry_fields(program: Program, rule: FlowRule, *, key_only: bool = False) -> dict[str, Any]:
    """The fields of ``rule``'s table entry, as nested dicts: protobuf builds a message
    from them in one call, several times faster than field by field (1000s per Write)."""
    fields: dict[str, Any] = {
        "table_id": program.table_id,
        "priority": rule.priority,
        "match": _ternaries(program.field_ids, rule.match),
    }
    if key_only:
        return fields
    action_id, params = _action_of(rule.actions)
    fields["metadata"] = rule.cookie.to_bytes(COOKIE_BYTES, "big")
    fields["action"] = {
        "action": {
            "action_id": program.action_ids[action_id],
            "params": [
                {"param_id": i, "value": encode(v)}
                for i, v in zip(program.param_ids[action_id], params, strict=True)
            ],
        }
    }
    return fields


_WHOLE = {f: encode(full(f)) for f in Field}  # the mask of a whole field, encoded
_PREFIX_MASKS = tuple(encode((0xFFFF_FFFF << (32 - n)) & 0xFFFF_FFFF) for n in range(33))


def _ternaries(ids: dict[Field, int], m: FlowMatch) -> list[dict[str, Any]]:
    """The ternary field matches of ``m`` (the masks are constants, encoded once)."""
    found: list[dict[str, Any]] = []
    if m.in_port is not None:
        found.append(
            _ternary(ids[Field.INGRESS_PORT], encode(m.in_port), _WHOLE[Field.INGRESS_PORT])
        )
    if m.vlan_vid is not None:
        found.append(_ternary(ids[Field.VLAN_VALID], b"\x01", b"\x01"))
        found.append(_ternary(ids[Field.VLAN_VID], encode(m.vlan_vid), _WHOLE[Field.VLAN_VID]))
    if m.eth_type is not None:
        found.append(_ternary(ids[Field.IPV4_VALID], b"\x01", b"\x01"))
    if m.ipv4_src is not None:
        addr, plen = m.ipv4_src
        found.append(_ternary(ids[Field.IPV4_SRC], encode(addr), _PREFIX_MASKS[plen]))
    if m.ipv4_dst is not None:
        addr, plen = m.ipv4_dst
        found.append(_ternary(ids[Field.IPV4_DST], encode(addr), _PREFIX_MASKS[plen]))
    if m.ip_proto is not None:
        found.append(_ternary(ids[Field.IPV4_PROTO], encode(m.ip_proto), _WHOLE[Field.IPV4_PROTO]))
    if m.l4_src is not None:
        found.append(_ternary(ids[Field.L4_SRC], encode(m.l4_src), _WHOLE[Field.L4_SRC]))
    if m.l4_dst is not None:
        found.append(_ternary(ids[Field.L4_DST], encode(m.l4_dst), _WHOLE[Field.L4_DST]))
    return found


def _ternary(field_id: int, value: bytes, mask: bytes) -> dict[str, Any]:
    return {"field_id": field_id, "ternary": {"value": value, "mask": mask}}


def _action_of(actions: tuple[RuleAction, ...]) -> tuple[Action, tuple[int, ...]]:
    match actions:
        case ():
            return Action.DROP, ()
        case (Output(port=port),):
            return Action.FORWARD, (port,)
        case (PushVlan(vid=vid), Output(port=port)):
            return Action.PUSH_VLAN_FORWARD, (vid, port)
        case (PopVlan(), Output(port=port)):
            return Action.POP_VLAN_FORWARD, (port,)
    text = ",".join(map(str, actions))
    raise MappingError(f"actions {text} (the program has forward, push/pop_vlan_forward, drop)")


# --------------------------------------------------------------------------------------
# entry -> rule


def to_rule(program: Program, entry: p4r.TableEntry) -> FlowRule:
    """The flow rule of a table entry; MappingError when the program's rules cannot say it."""
    if entry.table_id != program.table_id:
        raise MappingError(f"table id {entry.table_id:#x} is not {program.table_id:#x}")
    if len(entry.metadata) > COOKIE_BYTES:
        raise MappingError(f"metadata of {len(entry.metadata)} bytes (a cookie has 8)")
    return FlowRule(
        match=_match(_ternary_fields(program, entry)),
        priority=entry.priority,
        actions=_actions(program, entry.action),
        cookie=decode(entry.metadata),
    )


def _ternary_fields(program: Program, entry: p4r.TableEntry) -> dict[Field, tuple[int, int]]:
    found: dict[Field, tuple[int, int]] = {}
    for fm in entry.match:
        field = program.fields.get(fm.field_id)
        if field is None or fm.WhichOneof("field_match_type") != "ternary":
            raise MappingError(f"match field {fm.field_id} is not a ternary field of the table")
        if field in found:
            raise MappingError(f"match field {field} twice")
        found[field] = decode(fm.ternary.value), decode(fm.ternary.mask)
    return found


def _match(f: dict[Field, tuple[int, int]]) -> FlowMatch:
    vlan_valid = _exact(f, Field.VLAN_VALID)
    vid = _exact(f, Field.VLAN_VID)
    if (vlan_valid is None) != (vid is None) or vlan_valid == 0:
        raise MappingError("a VLAN match needs hdr.vlan.$valid$ 1 and a whole hdr.vlan.vid")
    ipv4_valid = _exact(f, Field.IPV4_VALID)
    if ipv4_valid == 0:
        raise MappingError("hdr.ipv4.$valid$ 0 (non-IPv4 packets) cannot be matched")
    return FlowMatch(
        in_port=_exact(f, Field.INGRESS_PORT),
        eth_type=None if ipv4_valid is None else ETH_IPV4,
        vlan_vid=vid,
        ipv4_src=_prefix(f, Field.IPV4_SRC),
        ipv4_dst=_prefix(f, Field.IPV4_DST),
        ip_proto=_exact(f, Field.IPV4_PROTO),
        l4_src=_exact(f, Field.L4_SRC),
        l4_dst=_exact(f, Field.L4_DST),
    )


def _exact(f: dict[Field, tuple[int, int]], field: Field) -> int | None:
    if field not in f:
        return None
    value, mask = f[field]
    if mask != full(field):
        raise MappingError(f"{field}: mask {mask:#x} (only whole values)")
    return value


def _prefix(f: dict[Field, tuple[int, int]], field: Field) -> Prefix | None:
    if field not in f:
        return None
    value, mask = f[field]
    plen = mask.bit_count()
    if mask != (0xFFFF_FFFF << (32 - plen)) & 0xFFFF_FFFF or plen == 0 or value & ~mask:
        raise MappingError(f"{field}: {value:#x}/{mask:#x} is not a prefix")
    return Prefix(value, plen)


def _actions(program: Program, table_action: p4r.TableAction) -> tuple[RuleAction, ...]:
    if table_action.WhichOneof("type") != "action":
        raise MappingError("an entry without a direct action")
    action = table_action.action
    action_id = program.actions.get(action.action_id)
    if action_id is None:
        raise MappingError(f"action id {action.action_id:#x} is not an action of the table")
    got = {p.param_id: decode(p.value) for p in action.params}
    want = program.param_ids[action_id]
    if sorted(got) != sorted(want):
        raise MappingError(f"{action_id}: parameters {sorted(got)}")
    return _action_tuple(action_id, [got[i] for i in want])


def _action_tuple(action_id: Action, params: list[int]) -> tuple[RuleAction, ...]:
    if action_id is Action.FORWARD:
        return (Output(params[0]),)
    if action_id is Action.PUSH_VLAN_FORWARD:
        return (PushVlan(params[0]), Output(params[1]))
    if action_id is Action.POP_VLAN_FORWARD:
        return (PopVlan(), Output(params[0]))
    return ()


# --------------------------------------------------------------------------------------
# other writers' entries


def entry_cookie(entry: p4r.TableEntry) -> int:
    """The cookie of an entry: its metadata (MappingError beyond 8 bytes)."""
    if len(entry.metadata) > COOKIE_BYTES:
        raise MappingError(f"metadata of {len(entry.metadata)} bytes (a cookie has 8)")
    return decode(entry.metadata)


def foreign_entry(program: Program, entry: p4r.TableEntry) -> ForeignEntry:
    """An entry of another writer in the table, as far as FlowMatch can say its match (a
    field matched partly, e.g. a mask that is not a prefix, sets ``more``)."""
    text = text_format.MessageToString(entry, as_one_line=True)
    try:
        return ForeignEntry(
            table=0, priority=entry.priority, match=to_rule(program, entry).match, text=text
        )
    except MappingError:
        pass
    found: dict[Field, tuple[int, int]] = {}
    for fm in entry.match:
        field = program.fields.get(fm.field_id)
        if field is not None and fm.WhichOneof("field_match_type") == "ternary":
            found[field] = decode(fm.ternary.value), decode(fm.ternary.mask)
    fields: dict[str, Any] = {}
    for name, read in _LENIENT:
        with contextlib.suppress(MappingError):
            fields[name] = read(found)
    match = FlowMatch(**{k: v for k, v in fields.items() if v is not None})
    return ForeignEntry(table=0, priority=entry.priority, match=match, more=True, text=text)


def _vlan_only(f: dict[Field, tuple[int, int]]) -> int | None:
    if _exact(f, Field.VLAN_VALID) != 1:
        return None
    return _exact(f, Field.VLAN_VID)


def _ipv4_only(f: dict[Field, tuple[int, int]]) -> int | None:
    return ETH_IPV4 if _exact(f, Field.IPV4_VALID) == 1 else None


_LENIENT: tuple[tuple[str, Callable[[dict[Field, tuple[int, int]]], Any]], ...] = (
    ("in_port", lambda f: _exact(f, Field.INGRESS_PORT)),
    ("eth_type", _ipv4_only),
    ("vlan_vid", _vlan_only),
    ("ipv4_src", lambda f: _prefix(f, Field.IPV4_SRC)),
    ("ipv4_dst", lambda f: _prefix(f, Field.IPV4_DST)),
    ("ip_proto", lambda f: _exact(f, Field.IPV4_PROTO)),
    ("l4_src", lambda f: _exact(f, Field.L4_SRC)),
    ("l4_dst", lambda f: _exact(f, Field.L4_DST)),
)
