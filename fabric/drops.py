"""Every drop counter of a fabric, by name: read one before a run and one after, and the
counters that moved say where the packets the traffic lost went.

The fabric's own drops (OVS's receive sockets, capped links' queues, OVS's failed sends) are
what :mod:`experiments.measuring` has always counted. This reads, beside them, every other
place on this machine a packet of the fabric can be dropped and counted, so a loss none of
them explains is not left to a guess:

- ``link/<ns>/<dev>/rx|tx``: a device's dropped packets (``ip -s link``; a veth counts a
  packet its peer would not take, and OVS is then told "no buffer space", which it does not
  log: netdev-linux turns ENOBUFS into EAGAIN);
- ``ovs/<counter>``: OVS's coverage counters of drops (``datapath_drop_*``, ``drop_action_*``:
  a packet the datapath or the OpenFlow pipeline dropped, a table miss among them);
- ``ovs/failed-upcall``: packets whose datapath miss found no flow to install;
- ``ovs/unsent/<port>/<error>``: the sends OVS logged as failed (rate-limited, so a lower
  bound; "Network is down" is a send into a port whose link is down: a dark circuit's);
- ``<host>/<Proto>/<counter>``: a host's UDP and TCP drops (``/proc/net/snmp``,
  ``/proc/net/netstat``: a receive or send buffer full, a backlog dropped);
- ``softnet/dropped``: the machine's per-CPU backlogs (``/proc/net/softnet_stat``).

Beside them, not a drop: the TCP segments a host resent that had arrived all the same
(``needless_resends``), so that a sender's retransmissions beyond every drop are told apart.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from pathlib import Path

from fabric.errors import FabricError
from fabric.run import run
from fabric.state import FabricState

HOST_COUNTERS = {
    "Udp": ("InErrors", "RcvbufErrors", "SndbufErrors", "MemErrors"),
    "Ip": ("InDiscards", "OutDiscards"),
    "TcpExt": ("TCPRcvQDrop", "TCPBacklogDrop", "TCPOFODrop", "TCPZeroWindowDrop",
               "PFMemallocDrop", "TCPMinTTLDrop"),
}  # fmt: skip
OVS_DROP = re.compile(r"^((?:datapath_)?drop\w*)\s.*total: (\d+)$", re.MULTILINE)
FAILED_UPCALL = re.compile(r"miss with failed upcall: (\d+)")
UNSENT = re.compile(r"error sending Ethernet packet on (\S+): (.+)$", re.MULTILINE)
BUFFER_ERRORS = ("/resource-temporarily-unavailable", "/no-buffer-space-available")
SOFTNET = Path("/proc/net/softnet_stat")

Counters = dict[str, int]


def read(state: FabricState) -> Counters:
    """Every counter this module knows of ``state``'s fabric, now."""
    counters: Counters = {}
    for ns in state.namespaces:
        counters |= links(ns, run(["ip", "-s", "-j", "link", "show"], ns=ns))
    for host, ns in state.host_ns.items():
        text = run(["cat", "/proc/net/snmp", "/proc/net/netstat"], ns=ns)
        counters |= {f"{host}/{k}": v for k, v in host_drops(text).items()}
    ctl = ["ovs-appctl", "-t", str(state.ovs_dir / "ovs-vswitchd.ctl")]
    counters |= ovs_drops(run([*ctl, "coverage/show"], ns=state.fabric_ns))
    counters |= failed_upcalls(run([*ctl, "dpif-netdev/pmd-stats-show"], ns=state.fabric_ns))
    with contextlib.suppress(FileNotFoundError):  # no log yet: nothing failed
        counters |= unsent((state.ovs_dir / "ovs-vswitchd.log").read_text(errors="replace"))
    counters["softnet/dropped"] = softnet_dropped(SOFTNET.read_text())
    return counters


def moved(before: Mapping[str, int], after: Mapping[str, int]) -> Counters:
    """The counters that grew from ``before`` to ``after``, by how much (a counter that
    went away or back, a device removed or reset, is not a drop and is left out)."""
    grown = {k: v - before.get(k, 0) for k, v in after.items()}
    return {k: d for k, d in sorted(grown.items()) if d > 0}


def links(ns: str, ip_json: str) -> Counters:
    """``ip -s -j link show``'s dropped packets per device and direction (non-zero ones)."""
    try:
        devices = json.loads(ip_json)
        pairs = [
            (f"link/{ns}/{d['ifname']}/{way}", int(d["stats64"][way]["dropped"]))
            for d in devices
            for way in ("rx", "tx")
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise FabricError(f"unexpected `ip -s -j link` output in {ns}: {exc}") from exc
    return {name: n for name, n in pairs if n}


def host_drops(proc_net: str, counters: Mapping[str, tuple[str, ...]] = HOST_COUNTERS) -> Counters:
    """The drop counters of :data:`HOST_COUNTERS` (or others: ``counters``) from
    ``/proc/net/snmp`` and ``/proc/net/netstat`` (a header line and a value line per
    protocol)."""
    lines = [line.split() for line in proc_net.splitlines() if line.strip()]
    found: Counters = {}
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        proto = names[0].rstrip(":")
        wanted = counters.get(proto, ())
        for name, value in zip(names[1:], values[1:], strict=False):
            if name in wanted:
                found[f"{proto}/{name}"] = int(value)
    return found


def needless_resends(ns: str) -> int:
    """Segments the TCP senders in netns ``ns`` resent so far that had arrived all the same:
    their receivers reported them received twice (D-SACK, RFC 2883; Linux's TcpExt
    ``TCPDSACKRecvSegs``). Not a drop: a resend that reordering or a late ACK caused."""
    text = run(["cat", "/proc/net/netstat"], ns=ns)
    return host_drops(text, {"TcpExt": ("TCPDSACKRecvSegs",)}).get("TcpExt/TCPDSACKRecvSegs", 0)


def ovs_drops(coverage: str) -> Counters:
    """OVS's drop coverage counters with their totals (``ovs-appctl coverage/show`` lists
    only the counters ever hit)."""
    return {f"ovs/{name}": int(total) for name, total in OVS_DROP.findall(coverage)}


def failed_upcalls(pmd_stats: str) -> Counters:
    """Datapath misses that installed no flow, every thread summed."""
    return {"ovs/failed-upcall": sum(int(n) for n in FAILED_UPCALL.findall(pmd_stats))}


def unsent(ovs_log: str) -> Counters:
    """The failed sends OVS's log reports, by port and error."""
    counters: Counters = {}
    for port, error in UNSENT.findall(ovs_log):
        key = f"ovs/unsent/{port}/{error.strip().lower().replace(' ', '-')}"
        counters[key] = counters.get(key, 0) + 1
    return counters


def send_failures(counters: Mapping[str, int]) -> int:
    """Of ``unsent``'s counters, the sends that failed for want of send buffer (a lower
    bound: the log is rate-limited, and one failure drops a batch); a send into a port
    that is down ("Network is down": a dark circuit) is not the buffer's doing."""
    return sum(
        n
        for key, n in counters.items()
        if key.startswith("ovs/unsent/") and key.endswith(BUFFER_ERRORS)
    )


def softnet_dropped(softnet_stat: str) -> int:
    """Packets the per-CPU backlogs dropped since boot (column 2, hexadecimal)."""
    return sum(int(line.split()[1], 16) for line in softnet_stat.splitlines() if line.strip())
