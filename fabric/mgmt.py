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
    """The root-namespace interface name of the management link (at most 15 characters)."""
    return f"rm-{zlib.crc32(name.encode()):08x}"[:15]


def make(name: str, fabric_ns: str) -> IPv4Address:
    """Create the fabric's link; returns the fabric side's address (where listeners bind)."""
    root, inside = addresses(name)
    link(fabric_ns, (root_ifname(name), str(root)), ("mgmt0", str(inside)))
    return inside


def link(ns: str, root_end: tuple[str, str], ns_end: tuple[str, str]) -> None:
    """A /30 veth between the root namespace and ``ns``: (interface, address) per end."""
    (root_if, root_ip), (ns_if, ns_ip) = root_end, ns_end
    run(["ip", "link", "add", root_if, "type", "veth", "peer", "name", ns_if, "netns", ns])
    run(["ip", "addr", "add", f"{root_ip}/30", "dev", root_if])
    run(["ip", "link", "set", root_if, "up"])
    run(["ip", "addr", "add", f"{ns_ip}/30", "dev", ns_if], ns=ns)
    run(["ip", "link", "set", ns_if, "up"], ns=ns)
