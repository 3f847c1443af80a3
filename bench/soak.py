"""Soak: optical MBB reroutes back and forth through the service for M minutes, under the
UDP probe; what grows?

Run as root: ``.venv/bin/python bench/soak.py --minutes 10 [--keep 200] [--rate 5000]``.
It builds its own fabric (``bench-soak``: seed 003's testbed, ``ngncs-ost``) and starts
``reroute serve`` on it (a real process, SQLite journal, ``retention: {reroutes: KEEP}``).
vm2<->vm3 moves long -> short -> long ... by optical MBB via ``temporary``, one reroute at
a time through the API, while the probe sends vm2 -> vm3 at ``--rate``. At the start
(the service warm, before the first reroute), every minute and at the end it reads the
service's resident memory (``VmRSS``) and the journal's size on disk (database + WAL);
then it prints the reroutes done (and not), the probe's loss and longest gap, the
fabric's own drops (OVS receive sockets), and both samples. Numbers, not pass/fail: with
retention the journal stops growing once it holds KEEP reroutes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments import demo_report
from fabric import fabric, signals
from fabric.fabric import Fabric
from fabric.run import run
from services.reroute.model.topology import load_topology
from services.reroute.service.client import RerouteClient
from services.reroute.store.records import RerouteState

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "services.reroute.cli"]
NAME = "bench-soak"
TOKEN = "bench-operator-token-0123456789"
FLOW = "10.0.0.2>10.0.0.3"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    rss_kib: int
    journal_bytes: int
    rows: int  # reroutes the journal holds


def sample(pid: int, journal: Path, client: RerouteClient) -> Sample:
    status = Path(f"/proc/{pid}/status").read_text()
    rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS"))
    files = (journal, journal.with_name(journal.name + "-wal"))
    size = sum(f.stat().st_size for f in files if f.exists())
    return Sample(rss_kib=rss, journal_bytes=size, rows=len(client.list(limit=1000)))


def socket_drops(fab: Fabric) -> int:
    """Packets OVS dropped in its receive sockets so far (the fabric's own drops)."""
    return demo_report.socket_drops(run(["ss", "-0", "-a", "-m"], ns=fab.state.fabric_ns))


def probe(fab: Fabric, seconds: float, rate: int) -> tuple[subprocess.Popen[str], ...]:
    run_id = str(random.getrandbits(32))
    recv = subprocess.Popen(
        ["ip", "netns", "exec", fab.host_ns("vm3"), *CLI, "probe", "recv", "--bind",
         "10.0.0.3:9000", "--json", "--idle", "3", "--timeout", str(seconds + 60),
         "--run-id", run_id],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    assert recv.stderr is not None and "listening" in recv.stderr.readline()
    send = subprocess.Popen(
        ["ip", "netns", "exec", fab.host_ns("vm2"), *CLI, "probe", "send", "--to",
         "10.0.0.3:9000", "--rate", str(rate), "--duration", str(seconds), "--run-id", run_id],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    return recv, send


def main() -> int:
    signal.signal(signal.SIGTERM, signals.interrupt)  # unwinds: services and fabric stopped
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--keep", type=int, default=200, help="retention: reroutes kept")
    parser.add_argument("--rate", type=int, default=5000, help="probe datagrams/s")
    args = parser.parse_args()
    topo = dataclasses.replace(load_topology(ROOT / "topologies" / "ngncs-ost.yaml"), name=NAME)
    fabric.down(NAME)
    fab = fabric.up(topo)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            return soak(fab, Path(tmp), args)
    finally:
        fabric.down(NAME)


def soak(fab: Fabric, tmp: Path, args: argparse.Namespace) -> int:
    journal = tmp / "journal.sqlite"
    config = tmp / "serve.yaml"
    inventory = tmp / "inventory.yaml"  # the fabric's, for the topology file's name
    text = fab.state.inventory.read_text()
    inventory.write_text(text.replace(f"topology: {NAME}", "topology: ngncs-ost"))
    config.write_text(
        f"topology: {ROOT / 'topologies' / 'ngncs-ost.yaml'}\ninventory: {inventory}\n"
        f"journal: {journal}\ntokens: [{{token: {TOKEN}, role: operator}}]\n"
        f"retention: {{reroutes: {args.keep}}}\n"
    )
    with (tmp / "serve.log").open("w") as log:
        serve = subprocess.Popen(
            [*CLI, "serve", "--config", str(config), "--listen", "127.0.0.1:0"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True,
        )  # fmt: skip
    try:
        assert serve.stdout is not None
        line = serve.stdout.readline()
        if "http://" not in line:
            raise SystemExit(f"reroute serve did not start: {(tmp / 'serve.log').read_text()}")
        client = RerouteClient(line.split()[2], TOKEN)
        return _loop(fab, serve.pid, journal, client, args)
    finally:
        serve.terminate()
        serve.wait(timeout=30)


def _loop(
    fab: Fabric, pid: int, journal: Path, client: RerouteClient, args: argparse.Namespace
) -> int:
    seconds = args.minutes * 60
    first = sample(pid, journal, client)
    drops = socket_drops(fab)
    recv, send = probe(fab, seconds, args.rate)
    time.sleep(1.0)
    done = not_done = 0
    to = "short"
    start = time.monotonic()
    end = start + seconds - 2
    samples = [("0 min", first)]
    while time.monotonic() < end:
        minute = int((time.monotonic() - start) // 60)
        if minute >= len(samples):  # one sample a minute: does it level off?
            samples.append((f"{minute} min", sample(pid, journal, client)))
            print(f"  {minute} min: {done} done", flush=True)
        view = client.create([FLOW], to, via="temporary", wait_s=30)
        if view.state is RerouteState.DONE:
            done += 1
            to = "long" if to == "short" else "short"
        else:
            not_done += 1
            print(f"reroute {view.id}: {view.state} {view.error}", flush=True)
    samples.append(("end", sample(pid, journal, client)))
    send.wait(timeout=60)
    out, _ = recv.communicate(timeout=90)
    report = json.loads(out)
    gap = report.get("longest_gap") or {}
    print(f"soak {args.minutes:g} min: {done} optical MBB reroutes done, {not_done} not done")
    print(
        f"probe: sent {report['sent']}, lost {report['lost']}, longest gap "
        f"{gap.get('ms', 0):.1f} ms; fabric's own drops {socket_drops(fab) - drops}"
    )
    print(f"{'':>10} {'RSS MiB':>9} {'journal KiB':>12} {'reroutes kept':>14}")
    for name, s in samples:
        print(f"{name:>10} {s.rss_kib / 1024:>9.1f} {s.journal_bytes / 1024:>12.0f} {s.rows:>14}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
