"""How the EMULATOR's Open vSwitch bridge carries ``p4/reroute.p4``: one OpenFlow flow per
entry of ``MyIngress.reroute``, found by NAME in the installed P4Info (the ids are the
P4Info's).

Match (ternary value/mask): ``standard_metadata.ingress_port`` whole -> in_port;
``hdr.vlan.$valid$`` 1/1 with a whole ``hdr.vlan.vid`` -> vlan_vid; ``hdr.ipv4.$valid$``
1/1 -> eth_type 0x0800; ``hdr.ipv4.srcAddr``/``dstAddr`` with a prefix mask -> an IPv4
prefix; ``hdr.ipv4.protocol``, ``meta.l4_src``, ``meta.l4_dst`` whole -> ip_proto, TCP/UDP
ports. Actions: ``forward(port)`` -> output; ``push_vlan_forward(vid, port)`` -> push a
tag, output; ``pop_vlan_forward(port)`` -> pop, output; ``drop()`` -> no action. The
entry's priority is the flow's; its controller metadata (up to 8 bytes) the cookie.

What a valid entry asks and OpenFlow cannot say here (a partial mask on a port, a
non-prefix address mask, untagged-only, an IPv4 field without ``hdr.ipv4.$valid$`` 1 or
an L4 port without protocol 6 or 17: OpenFlow's prerequisites) is ``Unrealisable``: the
update fails UNIMPLEMENTED. So distinct entries are distinct flows: the mapping from an
entry's key (priority, match) to the flow's (priority, match) is one-to-one (each
``$valid$`` bit has one realisable value, every other field maps to its own OXM field),
and no entry can replace or delete another's flow.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulators.p4rt.flow import FIELDS, PREFIXED, WHOLE, Flow
from emulators.p4rt.program import Examined, Pipeline, short, value
from emulators.p4rt.proto import p4runtime_pb2

TABLE = "MyIngress.reroute"
ETH_IPV4 = 0x0800
MAX_OPENFLOW_PRIORITY = 0xFFFF
L4_PROTOS = (6, 17)  # TCP, UDP
ROLES = {  # match field name -> the bridge's field ($: a validity bit)
    "standard_metadata.ingress_port": "in_port",
    "hdr.vlan.$valid$": "$vlan",
    "hdr.vlan.vid": "dl_vlan",
    "hdr.ipv4.$valid$": "$ipv4",
    "hdr.ipv4.srcAddr": "nw_src",
    "hdr.ipv4.dstAddr": "nw_dst",
    "hdr.ipv4.protocol": "nw_proto",
    "meta.l4_src": "tp_src",
    "meta.l4_dst": "tp_dst",
}
ACTIONS = {  # the program's action -> the bridge's actions (their arguments by parameter)
    "drop": (),
    "forward": (("output", "port"),),
    "push_vlan_forward": (("push_vlan", "vid"), ("output", "port")),
    "pop_vlan_forward": (("pop_vlan", ""), ("output", "port")),
}


class Unrealisable(ValueError):
    """A valid entry the bridge cannot carry."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Dataplane:
    table_id: int
    fields: dict[int, tuple[str, str | None, int]]  # match field id -> (name, role, all-ones)
    actions: dict[int, tuple[str, dict[int, str]]]  # id -> (name, {param id: name})

    @classmethod
    def of(cls, pipeline: Pipeline) -> Dataplane:
        """The bridge's view of a pipeline that has ``MyIngress.reroute`` (ValueError: not),
        also under a pipeline's prefix as Tofino's compiler writes it
        (``pipe.MyIngress.reroute``)."""
        named = [t for t in pipeline.tables.values() if t.name == TABLE]
        found = named or [t for t in pipeline.tables.values() if t.name.endswith(f".{TABLE}")]
        if len(found) != 1:
            raise ValueError(f"the P4Info has {len(found)} tables {TABLE} (needs one)")
        table = found[0]
        return cls(
            table_id=table.id,
            fields={
                i: (name, ROLES.get(name), (1 << bits) - 1)
                for i, (name, bits, _) in table.fields.items()
            },
            actions={
                a: (
                    pipeline.actions[a].name,
                    {i: p[0] for i, p in pipeline.actions[a].params.items()},
                )
                for a in table.actions
            },
        )

    def entry(self, flow: Flow) -> p4runtime_pb2.TableEntry:
        """The entry a flow of the bridge carries (``flow`` read backwards: a warm start
        takes the table from the bridge); Unrealisable for a flow no entry makes."""
        fields = {role: (i, ones) for i, (_, role, ones) in self.fields.items() if role}
        found = p4runtime_pb2.TableEntry(table_id=self.table_id, priority=flow.priority)
        found.metadata = flow.cookie.to_bytes(8, "big")

        def add(role: str, v: int, mask: int = WHOLE) -> None:
            """One ternary field of the entry (a whole one with mask ``WHOLE``)."""
            if role not in fields:
                raise Unrealisable(f"the program has no field for {role}")
            field_id, ones = fields[role]
            fm = found.match.add(field_id=field_id)
            fm.ternary.value = short(v)
            fm.ternary.mask = short(ones if mask == WHOLE else mask)

        for name, v, mask in flow.match:
            if name == "dl_type" and v != ETH_IPV4:
                raise Unrealisable(f"eth_type {v:#x}")
            if name == "dl_type":
                add("$ipv4", 1)
                continue
            if name == "dl_vlan":
                add("$vlan", 1)
            add(name, v, mask)
        self._set_action(found, flow.actions)
        return found

    def _set_action(
        self, found: p4runtime_pb2.TableEntry, actions: tuple[tuple[str, int], ...]
    ) -> None:
        shape = tuple(name for name, _ in actions)
        names = [a for a, bridge in ACTIONS.items() if tuple(n for n, _ in bridge) == shape]
        if not names:
            raise Unrealisable(f"no action does {actions}")
        name = names[0]
        params = {param: arg for (_, param), (_, arg) in zip(ACTIONS[name], actions, strict=True)}
        for action_id, (full_name, param_names) in self.actions.items():
            if full_name.rsplit(".", 1)[-1] == name:
                found.action.action.action_id = action_id
                for param_id, param in param_names.items():
                    found.action.action.params.add(param_id=param_id, value=short(params[param]))
                return
        raise Unrealisable(f"the table has no action {name}")

    def flow(self, entry: p4runtime_pb2.TableEntry, examined: Examined) -> Flow:
        """The bridge's flow of a valid entry (``examine`` decoded its values)."""
        table_id, priority, match = examined.key
        if table_id != self.table_id:
            raise Unrealisable(f"only {TABLE} has a dataplane")
        if priority > MAX_OPENFLOW_PRIORITY:
            raise Unrealisable(f"priority {priority} (OpenFlow's end at 65535)")
        return Flow(
            priority=priority,
            cookie=value(entry.metadata[-8:]),
            match=self._match(match),
            actions=self._actions(examined.action_id, examined.params),
        )

    def _match(self, match: tuple[tuple[int, int, int], ...]) -> tuple[tuple[str, int, int], ...]:
        """The bridge's match of an entry's (field id, value, mask)s, one pass."""
        whole: dict[str, int] = {}
        found: dict[str, tuple[int, int]] = {}
        fields = self.fields
        for field_id, v, mask in match:
            name, role, all_ones = fields[field_id]
            if role is None:
                raise Unrealisable(f"no OpenFlow match for {name}")
            if role in PREFIXED:
                found[role] = (v, _prefix(name, mask))
            elif mask != all_ones:
                raise Unrealisable(f"{name}: mask {mask:#x} (OpenFlow here takes whole values)")
            elif role.startswith("$"):
                whole[role] = v
            else:
                found[role] = (v, WHOLE)
        vlan_valid = whole.get("$vlan")
        if (vlan_valid, "dl_vlan" in found) not in ((None, False), (1, True)):
            raise Unrealisable("a VLAN match needs hdr.vlan.$valid$ 1 and a whole hdr.vlan.vid")
        ipv4_valid = whole.get("$ipv4")
        if ipv4_valid == 0:
            raise Unrealisable("hdr.ipv4.$valid$ 0 (non-IPv4 packets only)")
        if ipv4_valid == 1:
            found["dl_type"] = (ETH_IPV4, WHOLE)
        _prerequisites(found)
        return tuple((n, *found[n]) for n in FIELDS if n in found)

    def _actions(self, action_id: int, params: dict[int, int]) -> tuple[tuple[str, int], ...]:
        name, param_names = self.actions[action_id]
        p = {param_names[i]: v for i, v in params.items()}
        bridge = ACTIONS.get(name.rsplit(".", 1)[-1])
        if bridge is None:
            raise Unrealisable(f"no OpenFlow actions for {name}")
        return tuple((action, p.get(param, 0)) for action, param in bridge)


def _prerequisites(found: dict[str, tuple[int, int]]) -> None:
    """OpenFlow's match prerequisites, checked here rather than left to the bridge: an
    IPv4 field needs eth_type 0x0800 (``hdr.ipv4.$valid$`` 1), an L4 port ip_proto 6 or
    17. Without them the entry is still a valid P4 entry, but the flow would be refused
    (and with them added silently, two distinct entries could become one flow)."""
    ipv4 = "nw_src" in found or "nw_dst" in found or "nw_proto" in found
    if ipv4 and "dl_type" not in found:
        raise Unrealisable("an IPv4 field without hdr.ipv4.$valid$ 1 (OpenFlow needs it)")
    protocol = found.get("nw_proto", (None, WHOLE))[0]
    if ("tp_src" in found or "tp_dst" in found) and protocol not in L4_PROTOS:
        raise Unrealisable("an L4 port without hdr.ipv4.protocol 6 or 17 (OpenFlow needs it)")


def _prefix(name: str, mask: int) -> int:
    """``mask`` if it is an IPv4 prefix's (Unrealisable if not)."""
    plen = mask.bit_count()
    if mask != (0xFFFF_FFFF << (32 - plen)) & 0xFFFF_FFFF:
        raise Unrealisable(f"{name}: mask {mask:#x} is not a prefix")
    return mask
