"""The P4Runtime switch EMULATOR (``python -m emulators.p4rt``) as a test peer, on a private OVS.

One OVS in network namespace ``NS`` with bridge ``brp4`` (OpenFlow 1.3, fail_mode secure,
veth ports 1 and 2, whose far ends ``p4-1p`` / ``p4-2p`` stay in the namespace for
traffic). The emulator runs in the root namespace and reaches the bridge at its unix
management socket, a file: unlike the ODL site, no management veth is needed. Its gRPC
server listens on the root namespace's 127.0.0.1, where the tests' drivers run.
"""

from __future__ import annotations

import asyncio
import subprocess
from dataclasses import dataclass
from pathlib import Path

from drivers.base import FlowChange, FlowOp
from drivers.p4runtime import P4RuntimeDriver
from fabric import daemons, netns
from fabric.run import run
from fabric.vswitch import OvsInstance

NS = "rr-test-p4rt"
BRIDGE = "brp4"
WAIT_S = 15.0


@dataclass(frozen=True, slots=True, kw_only=True)
class P4rtEmulator:
    process: subprocess.Popen[bytes]
    address: str
    log: Path

    @classmethod
    def start(cls, workdir: Path, bridge_mgmt: str) -> P4rtEmulator:
        args = ["--listen", "127.0.0.1:0", "--device-id", "1", "--bridge-mgmt", bridge_mgmt]
        args.append("--installed")  # deployed with the reroute program
        spawned = daemons.spawn(workdir, "p4rt", "emulators.p4rt", args, timeout=WAIT_S)
        return cls(process=spawned.process, address=f"127.0.0.1:{spawned.ready}", log=spawned.log)

    def stop(self) -> int:
        """SIGTERM; the exit status."""
        return daemons.sigterm(self.process)


@dataclass(frozen=True, slots=True, kw_only=True)
class P4rtSite:
    ovs: OvsInstance
    emulator: P4rtEmulator

    def ofctl(self, *args: str) -> str:
        return self.ovs.ofctl("-O", "OpenFlow13", *args, self.ovs.mgmt(BRIDGE))

    def cap_table(self, limit: int | None) -> None:
        """Refuse adds to table 0 beyond ``limit`` entries (None: no limit)."""
        self.ovs.cap_table(BRIDGE, limit)

    def reset(self) -> None:
        """No table entries (so no flows), no table limit."""
        self.cap_table(None)
        asyncio.run(self._delete_all())

    async def _delete_all(self) -> None:
        async with P4RuntimeDriver("p4rt-site", self.emulator.address, device_id=1) as driver:
            rules = await driver.read()
            await driver.apply([FlowChange(op=FlowOp.DELETE, rule=r) for r in rules])

    def tx_packets(self, port: int) -> int:
        """Packets the bridge sent out of ``port`` (``ovs-ofctl dump-ports``)."""
        mgmt = self.ovs.mgmt(BRIDGE)
        text = self.ovs.ofctl("-O", "OpenFlow13", "dump-ports", mgmt, str(port))
        tx = text.split("tx pkts=", 1)[1]
        return int(tx.split(",", 1)[0])


def start_site(workdir: Path) -> P4rtSite:
    """OVS in ``NS`` with ``brp4``, and an emulator on it (stop with stop_site)."""
    netns.delete(NS)  # a leftover of a crashed run (its veths go with it)
    ovs = OvsInstance(rundir=workdir / "ovs", netns=NS)
    netns.add(NS)
    ovs.start()
    _bridge(ovs)
    emulator = P4rtEmulator.start(workdir / "emulator", ovs.mgmt(BRIDGE))
    return P4rtSite(ovs=ovs, emulator=emulator)


def stop_site(workdir: Path, site: P4rtSite | None) -> None:
    if site is not None:
        site.emulator.stop()
    OvsInstance(rundir=workdir / "ovs", netns=NS).stop()
    netns.delete(NS)


def _bridge(ovs: OvsInstance) -> None:
    veths = [f"p4-{port}" for port in (1, 2)]
    batch = [f"link add {v} type veth peer name {v}p" for v in veths]
    batch += [f"link set {v}{end} up" for v in veths for end in ("", "p")]
    run(["ip", "-batch", "-"], ns=NS, stdin="\n".join(batch) + "\n")
    args = ["--", "add-br", BRIDGE, "--", "set", "bridge", BRIDGE, "datapath_type=netdev"]
    args += ["fail_mode=secure", "protocols=OpenFlow13"]
    for number, veth in enumerate(veths, start=1):
        args += ["--", "add-port", BRIDGE, veth]
        args += ["--", "set", "interface", veth, f"ofport_request={number}"]
    ovs.vsctl(*args)
