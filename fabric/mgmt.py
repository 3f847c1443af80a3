"""The fabric's management link: a veth from the root namespace into the fabric namespace.

Passive OpenFlow listeners of bridges that play other devices (an HP switch's listen-port,
a controller connection) live in the fabric namespace; tools and drivers in the root
namespace reach them over this /30 (root side .1, fabric side .2). Deleting the fabric
namespace removes both ends.
"""

from __future__ import annotations

import zlib
from ipaddress import IPv4Address

from fabric.run import run


def addresses(name: str) -> tuple[IPv4Address, IPv4Address]:
    """(root side, fabric side) of the fabric's link-local /30, stable for its name."""
    h = zlib.crc32(name.encode())
    base = int(IPv4Address("169.254.0.0")) | (h % 250 + 1) << 8 | (h >> 8) % 63 * 4
    return IPv4Address(base + 1), IPv4Address(base + 2)


def root_ifname(name: str) -> str:
    return f"rm-{zlib.crc32(name.encode()):08x}"[:15]


def make(name: str, fabric_ns: str) -> IPv4Address:
    """Create the link; returns the fabric side's address (where listeners bind)."""
    root, inside = addresses(name)
    ifname = root_ifname(name)
    run(["ip", "link", "add", ifname, "type", "veth", "peer", "name", "mgmt0", "netns", fabric_ns])
    run(["ip", "addr", "add", f"{root}/30", "dev", ifname])
    run(["ip", "link", "set", ifname, "up"])
    run(["ip", "addr", "add", f"{inside}/30", "dev", "mgmt0"], ns=fabric_ns)
    run(["ip", "link", "set", "mgmt0", "up"], ns=fabric_ns)
    return inside
