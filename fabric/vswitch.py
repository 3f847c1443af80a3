"""A private Open vSwitch instance: its own database, daemons and run directory.

The fabric runs OVS itself (no systemd), with the userspace datapath (this kernel has no
openvswitch module) and inside the fabric's network namespace, so two fabrics never share
the ``ovs-netdev`` device. Control tools reach it over unix sockets in ``rundir``:
``ovs-vsctl --db=unix:RUNDIR/db.sock`` and ``ovs-ofctl ... unix:RUNDIR/BRIDGE.mgmt``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from fabric.errors import FabricError
from fabric.run import run

DAEMONS = ("ovs-vswitchd", "ovsdb-server")
SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")


@dataclass(frozen=True, slots=True, kw_only=True)
class OvsInstance:
    rundir: Path
    netns: str | None

    @property
    def db(self) -> str:
        """The OVSDB socket."""
        return f"unix:{self.rundir}/db.sock"

    @property
    def env(self) -> dict[str, str]:
        """The environment pointing OVS's tools at this instance."""
        d = str(self.rundir)
        return {"OVS_RUNDIR": d, "OVS_DBDIR": d, "OVS_LOGDIR": d, "OVS_SYSCONFDIR": d}

    def mgmt(self, bridge: str) -> str:
        """The OpenFlow management socket of a bridge, for ovs-ofctl or a driver."""
        return f"unix:{self.rundir}/{bridge}.mgmt"

    def start(self) -> None:
        """Create the database and start ovsdb-server and ovs-vswitchd in the namespace."""
        self.rundir.mkdir(parents=True, exist_ok=True)
        dbfile = self.rundir / "conf.db"
        if not dbfile.exists():
            run(["ovsdb-tool", "create", str(dbfile), str(SCHEMA)])
        self._daemon(
            "ovsdb-server",
            [str(dbfile), f"--remote=punix:{self.rundir}/db.sock"],
        )
        self.vsctl("--no-wait", "init")
        self.start_vswitchd()

    def start_vswitchd(self) -> None:
        """Start ``ovs-vswitchd`` (again, after it died: what its supervisor does). Its
        bridges and ports come back from the database; its flow tables come back empty."""
        (self.rundir / "ovs-vswitchd.ctl").unlink(missing_ok=True)  # stale after a kill
        self._daemon("ovs-vswitchd", [self.db])
        self._wait_for(self.rundir / "ovs-vswitchd.ctl")

    def _daemon(self, name: str, args: list[str]) -> None:
        base = self.rundir / name
        run(
            [
                name,
                *args,
                f"--pidfile={base}.pid",
                f"--unixctl={base}.ctl",
                f"--log-file={base}.log",
                "--detach",
                "--no-chdir",
            ],
            ns=self.netns,
            env=self.env,
        )

    def _wait_for(self, path: Path, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not path.exists():
            if time.monotonic() > deadline:
                raise FabricError(f"{path} did not appear; see the logs in {self.rundir}")
            time.sleep(0.02)

    def cap_table(self, bridge: str, limit: int | None) -> None:
        """Make table 0 of ``bridge`` refuse adds beyond ``limit`` entries (a real
        OFPFMFC_TABLE_FULL, for tests of device rejections); None lifts the limit."""
        if limit is None:
            self.vsctl("clear", "Bridge", bridge, "flow_tables")
            return
        self.vsctl(
            "--", "--id=@ft", "create", "Flow_Table", f"flow_limit={limit}",
            "overflow_policy=refuse", "--", "set", "Bridge", bridge, "flow_tables:0=@ft",
        )  # fmt: skip

    def vsctl(self, *args: str) -> str:
        """Run ``ovs-vsctl`` on this instance."""
        return run(["ovs-vsctl", f"--db={self.db}", "--timeout=20", *args], env=self.env)

    def ofctl(self, *args: str, stdin: str | None = None) -> str:
        """Run ``ovs-ofctl`` on this instance."""
        return run(["ovs-ofctl", *args], env=self.env, stdin=stdin)

    def stop(self) -> None:
        """Stop both daemons (by pid file); harmless when they are not running."""
        for name in DAEMONS:
            pidfile = self.rundir / f"{name}.pid"
            try:
                pid = int(pidfile.read_text().strip())
            except (OSError, ValueError):
                continue
            _terminate(pid)


def _terminate(pid: int, grace: float = 3.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not alive(pid):
            return
        time.sleep(0.01)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (exited, not yet reaped) counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
