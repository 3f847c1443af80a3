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
non-prefix address mask, untagged-only) is ``Unrealisable``: the update fails
UNIMPLEMENTED.
"""

from __future__ import annotations

from dataclasses import dataclass

from drivers.base import Action, FlowMatch, FlowRule, Output, PopVlan, Prefix, PushVlan
from fabric.p4rt.program import Examined, Pipeline, value
from fabric.p4rt.proto import p4runtime_pb2

TABLE = "MyIngress.reroute"
ETH_IPV4 = 0x0800
MAX_OPENFLOW_PRIORITY = 0xFFFF
ROLES = {  # match field name -> FlowMatch field ($: a validity bit)
    "standard_metadata.ingress_port": "in_port",
    "hdr.vlan.$valid$": "$vlan",
    "hdr.vlan.vid": "vlan_vid",
    "hdr.ipv4.$valid$": "$ipv4",
    "hdr.ipv4.srcAddr": "ipv4_src",
    "hdr.ipv4.dstAddr": "ipv4_dst",
    "hdr.ipv4.protocol": "ip_proto",
    "meta.l4_src": "l4_src",
    "meta.l4_dst": "l4_dst",
}


class Unrealisable(ValueError):
    """A valid entry the bridge cannot carry."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Dataplane:
    table_id: int
    names: dict[int, str]  # match field id -> name
    whole: dict[str, int]  # match field name -> its all-ones mask
    actions: dict[int, tuple[str, dict[int, str]]]  # id -> (name, {param id: name})

    @classmethod
    def of(cls, pipeline: Pipeline) -> Dataplane:
        """The bridge's view of a pipeline that has ``MyIngress.reroute`` (ValueError: not)."""
        try:
            table = pipeline.table_named(TABLE)
        except StopIteration:
            raise ValueError(f"the P4Info has no table {TABLE}") from None
        return cls(
            table_id=table.id,
            names={i: name for i, (name, _, _) in table.fields.items()},
            whole={name: (1 << bits) - 1 for name, bits, _ in table.fields.values()},
            actions={
                a: (
                    pipeline.actions[a].name,
                    {i: p[0] for i, p in pipeline.actions[a].params.items()},
                )
                for a in table.actions
            },
        )

    def flow(self, entry: p4runtime_pb2.TableEntry, examined: Examined) -> FlowRule:
        """The OpenFlow rule of a valid entry (``examine`` decoded its values)."""
        table_id, priority, match = examined.key
        if table_id != self.table_id:
            raise Unrealisable(f"only {TABLE} has a dataplane")
        if priority > MAX_OPENFLOW_PRIORITY:
            raise Unrealisable(f"priority {priority} (OpenFlow's end at 65535)")
        names = self.names
        found = {names[field_id]: (v, mask) for field_id, v, mask in match}
        return FlowRule(
            match=self._match(found),
            priority=priority,
            actions=self._actions(examined.action_id, examined.params),
            cookie=value(entry.metadata[-8:]),
        )

    def _match(self, found: dict[str, tuple[int, int]]) -> FlowMatch:
        whole: dict[str, int] = {}
        kwargs: dict[str, int | Prefix] = {}
        for name, (v, mask) in found.items():
            role = ROLES.get(name)
            if role is None:
                raise Unrealisable(f"no OpenFlow match for {name}")
            if role in ("ipv4_src", "ipv4_dst"):
                kwargs[role] = _prefix(name, v, mask)
            elif mask != self.whole[name]:
                raise Unrealisable(f"{name}: mask {mask:#x} (OpenFlow here takes whole values)")
            elif role.startswith("$"):
                whole[role] = v
            else:
                kwargs[role] = v
        vlan_valid = whole.get("$vlan")
        if (vlan_valid, "vlan_vid" in kwargs) not in ((None, False), (1, True)):
            raise Unrealisable("a VLAN match needs hdr.vlan.$valid$ 1 and a whole hdr.vlan.vid")
        ipv4_valid = whole.get("$ipv4")
        if ipv4_valid == 0:
            raise Unrealisable("hdr.ipv4.$valid$ 0 (non-IPv4 packets only)")
        if ipv4_valid == 1:
            kwargs["eth_type"] = ETH_IPV4
        return FlowMatch(**kwargs)  # type: ignore[arg-type]

    def _actions(self, action_id: int, params: dict[int, int]) -> tuple[Action, ...]:
        name, param_names = self.actions[action_id]
        p = {param_names[i]: v for i, v in params.items()}
        match name.rsplit(".", 1)[-1]:
            case "forward":
                return (Output(p["port"]),)
            case "push_vlan_forward":
                return (PushVlan(p["vid"]), Output(p["port"]))
            case "pop_vlan_forward":
                return (PopVlan(), Output(p["port"]))
            case "drop":
                return ()
        raise Unrealisable(f"no OpenFlow actions for {name}")


def _action(pipeline: Pipeline, action_id: int) -> tuple[str, dict[int, str]]:
    action = pipeline.actions[action_id]
    return action.name, {i: name for i, (name, _) in action.params.items()}


def _prefix(name: str, v: int, mask: int) -> Prefix:
    plen = mask.bit_count()
    if mask != (0xFFFF_FFFF << (32 - plen)) & 0xFFFF_FFFF:
        raise Unrealisable(f"{name}: mask {mask:#x} is not a prefix")
    return Prefix(v, plen)
