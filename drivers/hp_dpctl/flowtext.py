"""Flow entries as OpenFlow 1.0 ``dpctl`` / ``ovs-ofctl`` text, both ways. Pure, no I/O.

Writing: ``add_line(rule)`` / ``delete_line(rule)`` give the lines of an ``add-flows`` file
(``add ...`` and ``delete_strict ...``; ``flow_spec`` is the bare entry). Field names are
the OpenFlow 1.0 ones both tools know (``in_port dl_vlan dl_type nw_src nw_dst nw_proto
tp_src tp_dst``); ``idle_timeout=0,hard_timeout=0`` always (the reference ``dpctl``
defaults to an idle timeout of 60 s). Actions: ``Output(n)`` -> ``output:n``,
``PushVlan(v)`` -> ``mod_vlan_vid:v`` (OpenFlow 1.0 has no push: setting the VID of an
untagged frame adds a tag), ``PopVlan`` -> ``strip_vlan``, none -> ``actions=`` (empty:
drop, for both tools; the reference dpctl has no ``drop`` keyword). The cookie is
hexadecimal unless the tool needs another form (``Tool.cookie_text``).

``unsupported(rule)`` says why a rule cannot be written in OpenFlow 1.0 (one table, 16-bit
ports, no second tag, match prerequisites OVS would otherwise silently drop), or None.

Reading: ``parse_flow(line)`` reads one ``dump-flows`` entry, tolerant of both tools'
layouts (statistics, ``table=``/``table_id=``, protocol shorthands such as ``tcp``,
``priority`` left out when it is the default 32768, ``cookie`` left out when 0).
``parse_ports(text)`` reads ``show`` output (Open vSwitch's and the reference dpctl's
layouts). ``dump-flows`` cookies are read as printed: ``Tool.table`` first turns the
reference dpctl's decimal ones back into the driver's (``cookies``). Text that does not
parse raises ``FlowTextError``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from drivers.base import (
    ETH_IPV4,
    Action,
    FlowMatch,
    FlowRule,
    ForeignEntry,
    Output,
    PopVlan,
    PortState,
    Prefix,
    PushVlan,
)

DEFAULT_PRIORITY = 32768
OFPP_MAX = 0xFF00  # highest physical port number in OpenFlow 1.0
L4_PROTOS = (6, 17)
SHORTHANDS: dict[str, tuple[int, int | None]] = {  # keyword -> (dl_type, nw_proto)
    "ip": (ETH_IPV4, None),
    "icmp": (ETH_IPV4, 1),
    "tcp": (ETH_IPV4, 6),
    "udp": (ETH_IPV4, 17),
    "sctp": (ETH_IPV4, 132),
    "arp": (0x0806, None),
    "rarp": (0x8035, None),
    "ipv6": (0x86DD, None),
}
IGNORED = frozenset(
    {
        "duration", "duration_sec", "duration_nsec", "n_packets", "n_bytes", "idle_age",
        "hard_age", "idle_timeout", "hard_timeout", "send_flow_rem", "reset_counts",
        "check_overlap", "importance",
    }
)  # fmt: skip
_PORT_HEAD = re.compile(r"^\s*([^\s(]+)\([^)]*\):")
_PORT_FIELD = re.compile(r"\b(?:config|state):\s*([^,]*)")  # the value, up to a comma


class FlowTextError(ValueError):
    """Text from the tool that this module cannot read (the driver makes it a ProtocolError)."""


# --------------------------------------------------------------------------------------
# writing


def add_line(rule: FlowRule, *, cookie: str | None = None) -> str:
    """The ``add`` line of a rule for ``dpctl``/``ovs-ofctl`` batches; ``cookie`` is the
    cookie as the tool takes it (default: hexadecimal)."""
    text = f"{rule.cookie:#x}" if cookie is None else cookie
    head = f"cookie={text},priority={rule.priority},idle_timeout=0,hard_timeout=0"
    return f"add {_join(head, match_text(rule.match))},actions={actions_text(rule.actions)}"


def delete_line(rule: FlowRule) -> str:
    """The ``delete_strict`` line of a rule."""
    return f"delete_strict {_join(f'priority={rule.priority}', match_text(rule.match))}"


def flow_spec(line: str) -> str:
    """The entry of an ``add-flows`` line without its command keyword."""
    return line.split(" ", 1)[1]


def match_text(m: FlowMatch) -> str:
    """The match in flow text (``in_port=1,ip,nw_src=...``)."""
    fields: list[tuple[str, object]] = [
        ("in_port", m.in_port),
        ("dl_vlan", m.vlan_vid),
        ("dl_type", None if m.eth_type is None else f"{m.eth_type:#06x}"),
        ("nw_src", _prefix(m.ipv4_src)),
        ("nw_dst", _prefix(m.ipv4_dst)),
        ("nw_proto", m.ip_proto),
        ("tp_src", m.l4_src),
        ("tp_dst", m.l4_dst),
    ]
    return ",".join(f"{k}={v}" for k, v in fields if v is not None)


def actions_text(actions: tuple[Action, ...]) -> str:
    """The actions in flow text; none is the empty text, which both tools read as drop
    (the reference dpctl has no ``drop`` keyword: "Unknown action: drop")."""
    return ",".join(_action_text(a) for a in actions)


def _action_text(action: Action) -> str:
    match action:
        case Output(port=port):
            return f"output:{port}"
        case PushVlan(vid=vid):
            return f"mod_vlan_vid:{vid}"
        case PopVlan():
            return "strip_vlan"


def _prefix(p: Prefix | None) -> str | None:
    if p is None:
        return None
    return str(p).removesuffix("/32")


def _join(*parts: str) -> str:
    return ",".join(p for p in parts if p)


# --------------------------------------------------------------------------------------
# what OpenFlow 1.0 cannot say


def unsupported(rule: FlowRule) -> str | None:
    """Why ``rule`` cannot be written in OpenFlow 1.0 (None: it can)."""
    checks: tuple[Callable[[FlowRule], str | None], ...] = (
        _bad_header,
        _bad_match,
        _bad_prerequisites,
        _bad_actions,
    )
    return next((why for check in checks if (why := check(rule)) is not None), None)


def _bad_header(rule: FlowRule) -> str | None:
    if rule.table != 0:
        return f"table {rule.table}: OpenFlow 1.0 has one table (0)"
    if not 0 <= rule.priority <= 0xFFFF:
        return f"priority {rule.priority} is not 0..65535"
    if not 0 <= rule.cookie < 1 << 64:
        return f"cookie {rule.cookie:#x} is not 64 bits"
    return None


def _bad_match(rule: FlowRule) -> str | None:
    m = rule.match
    if m.in_port is not None and not 1 <= m.in_port <= OFPP_MAX:
        return f"in_port {m.in_port} is not 1..{OFPP_MAX}"
    if m.vlan_vid is not None and not 1 <= m.vlan_vid <= 4094:
        return f"vlan {m.vlan_vid} is not 1..4094"
    if any(p is not None and p.plen == 0 for p in (m.ipv4_src, m.ipv4_dst)):
        return "a /0 prefix: leave the field out (None) to match any address"
    return None


def _bad_prerequisites(rule: FlowRule) -> str | None:
    m = rule.match
    ip_fields = (m.ipv4_src, m.ipv4_dst, m.ip_proto)
    if any(f is not None for f in ip_fields) and m.eth_type != ETH_IPV4:
        return "IPv4 fields need eth_type 0x0800 (OVS would drop them silently)"
    if (m.l4_src, m.l4_dst) != (None, None) and m.ip_proto not in L4_PROTOS:
        return "TCP/UDP ports need ip_proto 6 or 17 (OVS would drop them silently)"
    return None


def _bad_actions(rule: FlowRule) -> str | None:
    tagged = rule.match.vlan_vid is not None
    for action in rule.actions:
        match action:
            case Output(port=port) if not 1 <= port <= OFPP_MAX:
                return f"output port {port} is not 1..{OFPP_MAX}"
            case PushVlan(vid=vid) if tagged or not 1 <= vid <= 4094:
                return f"push_vlan:{vid} on a tagged frame or out of 1..4094 (no QinQ in 1.0)"
            case PushVlan():
                tagged = True
            case PopVlan():
                tagged = False
    return None


# --------------------------------------------------------------------------------------
# reading


def parse_flows(text: str) -> Iterator[tuple[int, str]]:
    """(cookie, line) of every flow entry in ``dump-flows`` output (reply headers skipped)."""
    for line in text.splitlines():
        if "actions=" in line:
            yield _cookie_of(line), line


def _cookie_of(line: str) -> int:
    found = re.search(r"\bcookie=(0x[0-9a-fA-F]+|\d+)", line)
    return int(found.group(1), 0) if found else 0


def parse_flow(line: str) -> FlowRule:
    """One ``dump-flows`` entry as a FlowRule."""
    head, sep, actions = line.partition("actions=")
    if not sep:
        raise FlowTextError(f"no actions in {line.strip()!r}")
    fields = dict(_tokens(head))
    try:
        return _rule(fields, parse_actions(actions.strip()))
    except (KeyError, ValueError) as exc:
        raise FlowTextError(f"cannot read {line.strip()!r}: {exc}") from exc


def _tokens(head: str) -> Iterator[tuple[str, str]]:
    for token in re.split(r"[,\s]+", head.strip()):
        key, _, value = token.partition("=")
        if not token or key in IGNORED:
            continue
        if key in SHORTHANDS:
            dl_type, nw_proto = SHORTHANDS[key]
            yield "dl_type", str(dl_type)
            if nw_proto is not None:
                yield "nw_proto", str(nw_proto)
        elif value:
            yield key, value
        else:
            raise FlowTextError(f"unknown keyword {token!r}")


MATCH_FIELDS = frozenset(
    {"in_port", "dl_vlan", "dl_type", "nw_src", "nw_dst", "nw_proto", "tp_src", "tp_dst"}
)


def _rule(fields: dict[str, str], actions: tuple[Action, ...]) -> FlowRule:
    cookie = int(fields.pop("cookie", "0"), 0)
    priority = int(fields.pop("priority", str(DEFAULT_PRIORITY)), 0)
    table = int(fields.pop("table", fields.pop("table_id", "0")), 0)
    unknown = sorted(set(fields) - MATCH_FIELDS)
    if unknown:
        raise ValueError(f"match fields {unknown} have no FlowMatch equivalent")
    match = _match(fields)
    return FlowRule(match=match, priority=priority, actions=actions, cookie=cookie, table=table)


def foreign_entry(line: str) -> ForeignEntry:
    """A ``dump-flows`` entry of another writer, as far as FlowMatch can say its match
    (``dl_src``, ``dl_dst`` and other fields set ``more``; its actions are not read)."""
    head, sep, _ = line.partition("actions=")
    if not sep:
        raise FlowTextError(f"no actions in {line.strip()!r}")
    fields = dict(_tokens(head))
    try:
        fields.pop("cookie", None)
        priority = int(fields.pop("priority", str(DEFAULT_PRIORITY)), 0)
        table = int(fields.pop("table", fields.pop("table_id", "0")), 0)
    except ValueError as exc:
        raise FlowTextError(f"cannot read {line.strip()!r}: {exc}") from exc
    known: dict[str, str] = {}
    for key, value in fields.items():
        try:
            if key in MATCH_FIELDS:
                _match({key: value})
                known[key] = value
        except ValueError:
            pass
    more = len(known) != len(fields)
    return ForeignEntry(
        table=table, priority=priority, match=_match(known), more=more, text=line.strip()
    )


def _match(fields: dict[str, str]) -> FlowMatch:
    def num(key: str) -> int | None:
        """The integer field ``key`` (any base), or None."""
        return None if key not in fields else int(fields[key], 0)

    def net(key: str) -> Prefix | None:
        """The prefix field ``key``, or None."""
        return None if key not in fields else Prefix.parse(fields[key])

    return FlowMatch(
        in_port=num("in_port"),
        eth_type=num("dl_type"),
        vlan_vid=num("dl_vlan"),
        ipv4_src=net("nw_src"),
        ipv4_dst=net("nw_dst"),
        ip_proto=num("nw_proto"),
        l4_src=num("tp_src"),
        l4_dst=num("tp_dst"),
    )


def parse_actions(text: str) -> tuple[Action, ...]:
    """The actions of flow text (``drop`` and empty: none)."""
    if text in ("drop", ""):
        return ()
    return tuple(_action(a) for a in text.split(","))


def _action(text: str) -> Action:
    name, _, arg = text.partition(":")
    if name == "output" and arg:
        return Output(int(arg, 0))
    if name.isdigit():  # the reference dpctl may print a bare port
        return Output(int(name))
    if name == "mod_vlan_vid" and arg:
        return PushVlan(int(arg, 0))
    if name == "strip_vlan":
        return PopVlan()
    raise ValueError(f"action {text!r} has no equivalent")


_DPID = re.compile(r"\bdpid:\s*(?:0x)?([0-9a-fA-F]{1,16})\b")


def parse_dpid(text: str) -> int | None:
    """The datapath id in ``show`` output (``OFPT_FEATURES_REPLY (xid=0x2): dpid:...``)."""
    found = _DPID.search(text)
    return int(found[1], 16) if found else None


def parse_ports(text: str) -> dict[int, PortState]:
    """Link state of each numbered port in ``show`` (or ``dump-ports-desc``) output, in
    either layout: Open vSwitch's, one field a line under the port's head line, or the
    reference dpctl's, one line a port (`` 1(eth1): addr:..., config: 0, state:0x1``).

    A port is DOWN when its config has PORT_DOWN (bit 0x1) or its state LINK_DOWN (0x1)."""
    ports: dict[int, PortState] = {}
    current: int | None = None
    for line in text.splitlines():
        if head := _PORT_HEAD.match(line):
            current = int(head[1]) if head[1].isdigit() else None  # LOCAL is not a port
            if current is not None:
                ports[current] = PortState.UP
        elif not line.startswith(" "):
            current = None  # a reply header: LOCAL's lines and others end here
        if current is not None and any(_down(v) for v in _PORT_FIELD.findall(line)):
            ports[current] = PortState.DOWN
    return ports


def _down(value: str) -> bool:
    value = value.strip()
    if re.fullmatch(r"0x[0-9a-fA-F]+|\d+", value):
        return bool(int(value, 0) & 1)
    return "PORT_DOWN" in value or "LINK_DOWN" in value
