"""The few OpenFlow 1.3 messages the EMULATOR writes to its bridge, encoded here (its own
small encoder, not the OVS driver's codec): HELLO, a flow mod of a ``Flow`` (add, or
strict delete by priority and match), and the ONF bundle messages that make a Write one
atomic bundle (OpenFlow 1.3's extension, as Open vSwitch takes it). ``tests/unit``
checks the bytes against os-ken's encoder.
"""

from __future__ import annotations

import struct

from emulators.p4rt.flow import VID_PRESENT, Flow

VERSION = 4
OFPT_HELLO, OFPT_EXPERIMENTER, OFPT_FLOW_MOD = 0, 4, 14
OFPFC_ADD, OFPFC_DELETE_STRICT = 0, 4
ANY = 0xFFFFFFFF  # OFPP_ANY, OFPG_ANY, OFP_NO_BUFFER
ONF = 0x4F4E4600
ONFT_BUNDLE_CONTROL, ONFT_BUNDLE_ADD = 2300, 2301
OPEN_REQUEST, COMMIT_REQUEST, ATOMIC = 0, 4, 1
HEADER = struct.Struct("!BBHI")
FLOW_MOD = struct.Struct("!QQBBHHHIIIH2x")
OXM = struct.Struct("!HBB")  # class, field << 1 | has mask, length
# the bridge's field -> (OXM field, bytes); tp_* by protocol (TCP 13/14, UDP 15/16)
OXMS = {"in_port": (0, 4), "dl_type": (5, 2), "dl_vlan": (6, 2), "nw_proto": (10, 1)}
OXMS |= {"nw_src": (11, 4), "nw_dst": (12, 4)}
L4 = {6: (13, 14), 17: (15, 16)}
OUTPUT_MAX_LEN = 0xFFE5  # OFPCML_MAX


def message(kind: int, xid: int, body: bytes) -> bytes:
    """One message: the header, then ``body``."""
    return HEADER.pack(VERSION, kind, HEADER.size + len(body), xid) + body


def hello(xid: int) -> bytes:
    return message(OFPT_HELLO, xid, b"")


def flow_mod(flow: Flow, xid: int, *, delete: bool) -> bytes:
    """Add (or replace) ``flow``, or delete the flow with its key."""
    command = OFPFC_DELETE_STRICT if delete else OFPFC_ADD
    fixed = FLOW_MOD.pack(flow.cookie, 0, 0, command, 0, 0, flow.priority, ANY, ANY, ANY, 0)
    return message(OFPT_FLOW_MOD, xid, fixed + _match(flow) + _instructions(flow))


def bundle_control(bundle: int, kind: int, xid: int) -> bytes:
    """Open (``OPEN_REQUEST``) or commit (``COMMIT_REQUEST``) an atomic bundle."""
    body = struct.pack("!IIIHH", ONF, ONFT_BUNDLE_CONTROL, bundle, kind, ATOMIC)
    return message(OFPT_EXPERIMENTER, xid, body)


def bundle_add(bundle: int, inner: bytes, xid: int) -> bytes:
    """``inner`` (a whole message with the same xid) into the bundle."""
    body = struct.pack("!III2xH", ONF, ONFT_BUNDLE_ADD, bundle, ATOMIC) + inner
    return message(OFPT_EXPERIMENTER, xid, body)


def _oxm(field: int, value: bytes, mask: bytes = b"") -> bytes:
    return OXM.pack(0x8000, field << 1 | bool(mask), len(value) + len(mask)) + value + mask


def _match(flow: Flow) -> bytes:
    fields = {name: (v, mask) for name, v, mask in flow.match}
    l4 = L4.get(fields.get("nw_proto", (0, 0))[0], (0, 0))
    oxms = []
    for name, (v, mask) in fields.items():
        if name in ("tp_src", "tp_dst"):
            oxms.append((l4[name == "tp_dst"], v.to_bytes(2, "big"), b""))
            continue
        field, size = OXMS[name]
        value = (v | VID_PRESENT if name == "dl_vlan" else v).to_bytes(size, "big")
        oxms.append(
            (field, value, mask.to_bytes(4, "big") if name in ("nw_src", "nw_dst") else b"")
        )
    body = b"".join(_oxm(*oxm) for oxm in sorted(oxms))
    return _padded(struct.pack("!HH", 1, 4 + len(body)) + body)


def _instructions(flow: Flow) -> bytes:
    actions = b"".join(_action(name, arg) for name, arg in flow.actions)
    return struct.pack("!HH4x", 4, 8 + len(actions)) + actions if actions else b""


def _action(name: str, arg: int) -> bytes:
    if name == "push_vlan":
        vid = _oxm(6, (arg | VID_PRESENT).to_bytes(2, "big"))
        size = 4 + len(vid) + (-(4 + len(vid)) % 8)  # an action's length counts its padding
        set_field = struct.pack("!HH", 25, size) + vid + bytes(size - 4 - len(vid))
        return struct.pack("!HHH2x", 17, 8, 0x8100) + set_field
    if name == "pop_vlan":
        return struct.pack("!HH4x", 18, 8)
    return struct.pack("!HHIH6x", 0, 16, arg, OUTPUT_MAX_LEN)


def _padded(data: bytes) -> bytes:
    """``data`` padded to a multiple of 8 bytes (a match's length leaves the padding out)."""
    return data + bytes(-len(data) % 8)
