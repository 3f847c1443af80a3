"""Where did the probe's lost datagrams go? ost-vs-mbb at quick scale with tcpdump on every
port of the fabric and on the probe's two hosts, then each lost datagram's last place.

Run as root: ``.venv/bin/python bench/probe_trace.py [--runs 20] [--backend ovs] [--keep]
[--capped]``. It runs ``reroute experiment run ost-vs-mbb --quick --runs N --set tcp_s=5
--set line_mbps=null`` (the e2e hitless checks' settings; ``--capped`` keeps the line-rate
cap) into a temporary directory; once the
fabric's namespaces exist it starts tcpdump (the probe's datagrams only, headers only) on
``any`` device of the fabric namespace and on vm2's and vm3's ``eth0``. After the run, for
every MBB repetition that lost datagrams, it prints how many the fabric counted, the drop
counters that moved (``other_drops``), and the lost ones grouped by the places they were
seen (``br2-p1/in ost1-p2/in ...``, times from the request): the last place names where
one vanished. Found with it (stop 47): packets an OVS datapath still sent the old way after
the shift (bench/README). Each repetition's probe is told apart by its run id, and matched to
its raw document by the request time. Numbers, not pass/fail; the captures (~50 MB a
repetition) are deleted unless ``--keep``.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments.measuring import PROBE_PORT
from fabric.run import run
from fabric.state import fabric_ns, host_ns

CLI = [sys.executable, "-m", "services.reroute.cli"]
LINUX_SLL2, ETHERNET = 276, 1
PACKET_OUTGOING = 4
PROBE_HEAD = struct.Struct("!4sBQQ")  # fabric.traffic.probe's header: magic, kind, run, seq


@dataclass(frozen=True, slots=True)
class Seen:
    t: float  # wall clock, s
    where: str  # "vm2", "br2-p1/in", "ost1-p4/out" ...
    run: int
    seq: int


def read_pcap(data: bytes, where: str, ifnames: Mapping[int, str]) -> Iterator[Seen]:
    """The probe datagrams (kind data) of a pcap file's bytes: Ethernet captures are at
    ``where``, "any"-device (SLL2) ones at their device and direction."""
    magic, _, _, _, _, _, link = struct.unpack_from("<IHHiIII", data)
    scale = 1e9 if magic == 0xA1B23C4D else 1e6
    pos = 24
    while pos + 16 <= len(data):
        sec, frac, caplen, _ = struct.unpack_from("<IIII", data, pos)
        frame = data[pos + 16 : pos + 16 + caplen]
        pos += 16 + caplen
        if link == LINUX_SLL2:
            ifindex, direction = struct.unpack_from("!I", frame, 4)[0], frame[10]
            way = "out" if direction == PACKET_OUTGOING else "in"
            place = f"{ifnames.get(ifindex, ifindex)}/{way}"
            ip = frame[20:]
        else:
            place, ip = where, frame[14:]
        payload = ip[(ip[0] & 15) * 4 + 8 :] if ip else b""
        if len(payload) < PROBE_HEAD.size:
            continue
        head, kind, probe, seq = PROBE_HEAD.unpack_from(payload)
        if head == b"RRPB" and kind == 0:
            yield Seen(sec + frac / scale, place, probe, seq)


def lost_by_path(seen: Sequence[Seen], arrived_at: str = "vm3") -> dict[int, dict[int, list[Seen]]]:
    """Per probe run, the sequence numbers that never reached ``arrived_at``, each with
    every place it was seen (in time order)."""
    runs: dict[int, dict[int, list[Seen]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    for s in seen:
        runs[s.run][s.seq].append(s)
    lost: dict[int, dict[int, list[Seen]]] = {}
    for probe, seqs in runs.items():
        gone = {
            q: sorted(seqs.get(q, []), key=lambda s: (s.where != "vm2", s.t))  # vm2 sent it
            for q in range(max(seqs) + 1)
            if not any(s.where == arrived_at for s in seqs.get(q, []))
        }
        lost[probe] = gone
    return lost


def describe(gone: Mapping[int, list[Seen]], request_t: float) -> list[str]:
    """The lost datagrams of one run grouped by where they were seen, first times from the
    request."""
    groups: dict[str, list[tuple[int, list[Seen]]]] = collections.defaultdict(list)
    for seq, places in sorted(gone.items()):
        groups[" ".join(s.where for s in places) or "never captured"].append((seq, places))
    lines = []
    for path, members in sorted(groups.items(), key=lambda g: -len(g[1])):
        first = members[0][1]
        at = f", the first sent at {(first[0].t - request_t) * 1000:+.1f} ms" if first else ""
        lines.append(f"    {len(members)} x {path}{at}")
    return lines


def ifnames(ip_link: str) -> dict[int, str]:
    """Device names by index, from ``ip -o link`` (a veth's ``@peer`` left out)."""
    names = {}
    for line in ip_link.splitlines():
        index, name = line.split(":", 2)[:2]
        names[int(index)] = name.strip().split("@")[0]
    return names


def tcpdump(ns: str, dev: str, file: Path) -> list[str]:
    """tcpdump in ``ns`` on ``dev``: the probe's datagrams, their headers, into ``file``."""
    capture = ["tcpdump", "-i", dev, "-s", "80", "-B", "65536", "-nn", "-w", str(file)]
    return ["ip", "netns", "exec", ns, *capture, "udp", "dst", "port", str(PROBE_PORT)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="pairs of BBM and MBB repetitions")
    parser.add_argument("--backend", default="ovs", help="as `reroute experiment run` takes it")
    parser.add_argument("--keep", action="store_true", help="keep the captures and raw data")
    parser.add_argument(
        "--capped", action="store_true", help="keep the experiment's line-rate cap (br3:p1)"
    )
    args = parser.parse_args()
    name = "ngncs-ost" if args.backend == "ovs" else f"ngncs-ost-{args.backend}"
    work = Path(tempfile.mkdtemp(prefix="probe-trace-"))
    cmd = [*CLI, "experiment", "run", "ost-vs-mbb", "--quick", "--runs", str(args.runs),
           "--set", "tcp_s=5", *(() if args.capped else ("--set", "line_mbps=null")),
           "--backend", args.backend, "--out", str(work / "out")]  # fmt: skip
    experiment = subprocess.Popen(cmd, cwd=Path(__file__).resolve().parents[1])
    spots = {"fabric": (fabric_ns(name), "any"), "vm2": (host_ns(name, "vm2"), "eth0"),
             "vm3": (host_ns(name, "vm3"), "eth0")}  # fmt: skip
    while experiment.poll() is None and not Path(f"/run/netns/{spots['vm3'][0]}").exists():
        time.sleep(0.2)
    time.sleep(1)
    names = ifnames(run(["ip", "-o", "link"], ns=spots["fabric"][0]))
    dumps = [
        subprocess.Popen(tcpdump(ns, dev, work / f"{spot}.pcap"), stderr=subprocess.DEVNULL)
        for spot, (ns, dev) in spots.items()
    ]
    code = experiment.wait()
    for dump in dumps:
        dump.terminate()
        dump.wait(timeout=10)
    seen = [
        s for spot in spots for s in read_pcap((work / f"{spot}.pcap").read_bytes(), spot, names)
    ]
    lost = lost_by_path(seen)
    starts = {probe: min(s.t for s in seen if s.run == probe) for probe in lost}
    for raw in sorted((work / "out" / "raw").glob("*mbb-*.json.gz")):
        with gzip.open(raw) as stream:
            doc = json.loads(stream.read())
        request = doc["capture"]["analysis"]["request_t"]
        before = [p for p, t in starts.items() if t <= request]  # its probe began before it
        probe = max(before, key=starts.__getitem__, default=None)
        counted = doc["fabric_drops"] + doc.get("line_drops", 0)
        print(f"{raw.name.split('.')[0]}: lost {doc['udp']['lost']}, counted {counted},"
              f" other drops {doc.get('other_drops') or '{}'}")  # fmt: skip
        if probe is not None and lost[probe]:
            print("\n".join(describe(lost[probe], request)))
    if not args.keep:
        subprocess.run(["rm", "-rf", str(work)], check=False)
    else:
        print(f"kept: {work}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
