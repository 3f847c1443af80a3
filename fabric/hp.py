"""Make an Open vSwitch bridge play an HP/Aruba OpenFlow switch for the "dpctl method".

What the seeds' HP switches offered, and the bridge then offers: OpenFlow 1.0 only, a
passive listener (HP: ``openflow`` -> ``instance`` -> ``listen-port``) that a host tool
(``dpctl`` / ``ovs-ofctl``) connects to, no controller, and fail-secure (an empty table
drops). ``drivers.hp_dpctl.HpDpctlDriver`` drives it at the returned target.

The listener belongs to the network namespace ovs-vswitchd runs in: with the fabric's OVS
in a namespace, ``address`` must be an address of that namespace the driver can reach
(127.0.0.1 only serves tools run inside it).
"""

from __future__ import annotations

from fabric.vswitch import OvsInstance

HP_LISTEN_PORT = 6633


def play_hp(
    ovs: OvsInstance, bridge: str, port: int = HP_LISTEN_PORT, *, address: str = "127.0.0.1"
) -> str:
    """Make ``bridge`` an OpenFlow-1.0-only switch listening on ``address:port``; the
    driver target (``tcp:ADDRESS:PORT``). ovs-vsctl returns once the listener is open."""
    ovs.vsctl(
        "--", "set", "bridge", bridge, "protocols=OpenFlow10", "fail_mode=secure",
        "--", "set-controller", bridge, f"ptcp:{port}:{address}",
    )  # fmt: skip
    return f"tcp:{address}:{port}"
