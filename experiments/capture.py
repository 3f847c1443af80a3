"""tcpdump at the sender and the receiver of a TCP stream, and seed 003's metrics from it.

:class:`Tcpdump` runs ``tcpdump`` in a host's network namespace for the length of a
repetition, headers only (``-s 96``), nanosecond timestamps, into a temporary pcap file.
:func:`analyse` reads both files (:mod:`experiments.tcpcap`) and returns the repetition's
``capture`` document: the seed's unavailability (the gap at the sender, the receiver's beside
it), retransmitted / sent over the whole stream (and how many of those
arrived as duplicates: spurious), packets lost, RTT
before and during the switch, and the traces the plots use (10 ms bins around the request).
The pcap files are removed, but for the audit sample (the first repetitions of each arm),
which :mod:`experiments.audit` keeps, headers only and compressed.
"""

from __future__ import annotations

import re
import shutil
import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from experiments import tcpcap
from fabric.errors import FabricError
from fabric.run import in_netns

SNAPLEN = 96  # Ethernet + IPv4 + TCP with options
BIN_S = 0.01  # the traces' resolution
GAP_BEFORE_S = 0.1  # the unavailability is looked for from just before the request ...


class Tcpdump:
    """``tcpdump -i IFACE -w FILE FILTER`` in namespace ``ns``; leaving stops it (SIGINT)
    and reads what it says it dropped."""

    def __init__(self, ns: str, iface: str, file: Path, bpf: str) -> None:
        self.cmd = in_netns(
            ns,
            [
                "tcpdump",
                "-n",
                "-i",
                iface,
                "-s",
                str(SNAPLEN),
                "-B",
                "16384",
                "--time-stamp-precision=nano",
                "-w",
                str(file),
                bpf,
            ],
        )
        self.file = file
        self.proc: subprocess.Popen[str] | None = None
        self.dropped: int | None = None
        self.captured: int | None = None

    def __enter__(self) -> Tcpdump:
        self.proc = subprocess.Popen(
            self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()  # "listening on eth0, link-type EN10MB ..."
        if "listening" not in line:
            self._end()
            raise FabricError(f"tcpdump did not start: {line.strip()}")
        return self

    def __exit__(self, *exc: object) -> None:
        self._end()

    def _end(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            time.sleep(0.05)  # the last packets reach the file
            self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        self.captured = _count(err, "captured")
        self.dropped = _count(err, "dropped by kernel")
        self.proc = None


def _count(text: str, what: str) -> int | None:
    m = re.search(rf"(\d+) packets? {what}", text)
    return int(m[1]) if m else None


def available() -> bool:
    """Whether tcpdump is installed (``make setup`` installs it)."""
    return shutil.which("tcpdump") is not None


def analyse(
    sender: Path,
    receiver: Path,
    *,
    port: int,
    request_t: float,
    rtt_window_s: float,
    gap_window_s: float = 3.0,
    dropped: tuple[int | None, int | None] = (None, None),
) -> dict[str, Any]:
    """The ``capture`` document of one repetition (times in ms from ``request_t``, wall).
    The unavailability is the longest gap from 0.1 s before the request to ``gap_window_s``
    after it ("during the path reconfiguration"): ``sender_gap_ms`` the seed's (no packet of
    the stream, either direction, at the sender's sniffer), ``longest_gap_ms`` the
    receiver's (no data segment arriving); the ``*_before_ms`` are the stream's own longest
    pauses before (the sender's pacing, the busy fabric), for comparison. Retransmitted /
    sent is over the whole stream (``stream_s``: its first to its last data segment at the
    sender; seed 003: the 20 s stream with the switch at 10 s). The RTT
    "during" is the largest from the request to the later of the two windows' ends (the ACK
    that ends an outage arrives when the data resumes, after TCP's backoff)."""
    tx = list(tcpcap.read_pcap(sender))
    rx = list(tcpcap.read_pcap(receiver))
    flow = tcpcap.data_flow(tx, port) or tcpcap.data_flow(rx, port)
    if flow is None:
        return {"error": f"no TCP data to port {port} in the captures"}
    came = tcpcap.arrivals(rx, flow)
    size = tcpcap.mss([n for _, n in came])
    sent = tcpcap.sender_side(tx, flow, size)
    received = sum(tcpcap.segments(n, size) for _, n in came)
    times = [t for t, _ in came]
    gap = tcpcap.longest_gap(times, request_t - GAP_BEFORE_S, request_t + gap_window_s)
    calm = tcpcap.longest_gap(times, times[0] + 0.5, request_t - GAP_BEFORE_S) if times else None
    seen = tcpcap.connection_times(tx, flow)
    window = (request_t - GAP_BEFORE_S, request_t + gap_window_s)
    at_sender = tcpcap.longest_gap(seen, *window)
    sender_calm = (
        tcpcap.longest_gap(seen, seen[0] + 0.5, request_t - GAP_BEFORE_S) if seen else None
    )
    out = [t for t, _ in tcpcap.arrivals(tx, flow)]
    before = [ms for t, ms in sent.rtt if request_t - 1.0 <= t < request_t]
    # an ACK that ends an outage comes when the data resumes: as late as the unavailability
    until = request_t + max(rtt_window_s, gap_window_s)
    during = [ms for t, ms in sent.rtt if request_t <= t < until]
    lost_ok = dropped == (0, 0)
    return {
        "flow": list(flow),
        "mss": size,
        "segments_sent": sent.segments,
        "retransmitted": sent.retransmitted,
        "retransmitted_pct": _pct(sent.retransmitted, sent.segments),
        "stream_s": round(out[-1] - out[0], 3) if out else None,
        "segments_received": received,
        "duplicates": tcpcap.duplicates(rx, flow, size),
        "lost": max(0, sent.segments - received) if lost_ok else None,
        "lost_pct": _pct(max(0, sent.segments - received), sent.segments) if lost_ok else None,
        "sender_gap_ms": None if at_sender is None else at_sender[0] * 1000,
        "sender_gap_at_ms": None if at_sender is None else (at_sender[1] - request_t) * 1000,
        "sender_gap_before_ms": None if sender_calm is None else sender_calm[0] * 1000,
        "longest_gap_ms": None if gap is None else gap[0] * 1000,
        "gap_at_ms": None if gap is None else (gap[1] - request_t) * 1000,
        "gap_window_ms": [-GAP_BEFORE_S * 1000, gap_window_s * 1000],
        "longest_gap_before_ms": None if calm is None else calm[0] * 1000,
        "rtt_before_median_ms": statistics.median(before) if before else None,
        "rtt_during_max_ms": max(during, default=None),
        "rtt_samples": len(sent.rtt),
        "capture_dropped": {"sender": dropped[0], "receiver": dropped[1]},
        "analysis": {  # what this was computed from, for experiments.audit.recheck
            "port": port,
            "request_t": request_t,
            "rtt_window_s": rtt_window_s,
            "gap_window_s": gap_window_s,
            "dropped": list(dropped),
        },
        "trace": trace(came, sent.rtt, request_t),
    }


def _pct(part: int, whole: int) -> float | None:
    return 100.0 * part / whole if whole else None


def trace(
    came: list[tuple[float, int]], rtt: tuple[tuple[float, float], ...], request_t: float
) -> dict[str, Any]:
    """Received Mbit/s and the largest RTT per 10 ms bin, the whole stream, with the request
    on the time axis (``request_ms`` from the first bin)."""
    if not came:
        return {"bin_ms": BIN_S * 1000, "request_ms": 0.0, "rx_mbps": [], "rtt_max_ms": []}
    t0 = came[0][0]
    n = int((came[-1][0] - t0) // BIN_S) + 1
    rx = tcpcap.binned([(t, b * 8 / BIN_S / 1e6) for t, b in came], t0, BIN_S, n)
    top = tcpcap.binned_max(list(rtt), t0, BIN_S, n)
    return {
        "bin_ms": BIN_S * 1000,
        "request_ms": round((request_t - t0) * 1000, 3),
        "rx_mbps": [round(v, 2) for v in rx],
        "rtt_max_ms": [None if v is None else round(v, 3) for v in top],
    }
