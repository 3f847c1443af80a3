"""Sequence-numbered UDP probe: exact loss, reordering, longest gap and delay across a reroute.

A sender emits datagrams at a fixed rate; each carries its run id, sequence number and send time
(``time.monotonic_ns()``: CLOCK_MONOTONIC is shared by every network namespace of one machine,
so one-way delay is meaningful). After the last one it sends a few END datagrams carrying the
count of sequence numbers issued. A receiver records ``(seq, recv_ns, send_ns)`` per datagram
of its run, and ``fabric.traffic.analysis.analyze`` turns them into a ``ProbeReport`` (pure).
``recv_ns`` is the kernel's receive timestamp (SO_TIMESTAMPNS, moved onto the monotonic clock),
so a receiver that is descheduled for a while does not report a gap the network never had.

Wire format, network byte order: magic ``b"RRPB"``, kind (u8: 0 data, 1 end), run id (u64),
sequence number or END count (u64), send time in ns (u64), zero padding to the payload size.
"""

from __future__ import annotations

import dataclasses
import random
import select
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any, Self

from fabric.traffic.analysis import Arrival, ProbeError, ProbeReport, analyze

_HEADER = struct.Struct("!4sBQQQ")
_MAGIC = b"RRPB"
_DATA, _END = 0, 1
HEADER_SIZE = _HEADER.size
MAX_PAYLOAD = 65507
_SO_RCVBUFFORCE, _SO_TIMESTAMPNS = 33, 35  # Linux; Python's socket module lacks them
_TIMESPEC = struct.Struct("@qq")


@dataclass(frozen=True, slots=True, kw_only=True)
class SendResult:
    """What a sender did; ``count`` is what its END datagrams announce (skipped seqs included)."""

    run_id: int
    count: int
    skipped: int
    send_errors: int
    end_sent: int
    elapsed_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeResult:
    """What a receiver saw of one run. Without END, ``sent`` is a lower bound (highest seq + 1)."""

    run_id: int | None
    sent: int
    end_seen: bool
    arrivals: tuple[Arrival, ...]
    ignored: int

    def analyze(self, *, bin_ms: float = 10.0) -> ProbeReport:
        """The analysis of the arrivals in ``bin_ms`` bins."""
        return analyze(
            self.arrivals, self.sent, bin_ms=bin_ms, run_id=self.run_id, end_seen=self.end_seen
        )


def parse_hostport(text: str) -> tuple[str, int]:
    """``"10.0.0.2:9000"`` or ``"[::1]:9000"`` -> ``(host, port)``."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ProbeError(f"expected HOST:PORT, got {text!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


def _udp_socket(host: str, port: int) -> tuple[socket.socket, tuple[Any, ...]]:
    try:
        family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    except OSError as exc:
        raise ProbeError(f"cannot resolve {host}:{port}: {exc}") from exc
    return socket.socket(family, socket.SOCK_DGRAM), tuple(addr)


def send_probes(
    host: str,
    port: int,
    *,
    duration_s: float,
    rate_pps: float = 5000.0,
    size: int = 64,
    run_id: int | None = None,
    skip: range | None = None,
    end_repeats: int = 3,
    max_burst: int = 16,
) -> SendResult:
    """Send ``round(rate_pps * duration_s)`` paced probes then END; ``skip`` seqs are not sent."""
    if rate_pps <= 0 or duration_s <= 0 or end_repeats < 1 or max_burst < 1:
        raise ProbeError("rate, duration, end_repeats and max_burst must be positive")
    if not HEADER_SIZE <= size <= MAX_PAYLOAD:
        raise ProbeError(f"size must be within {HEADER_SIZE}..{MAX_PAYLOAD} bytes, got {size}")
    run = random.getrandbits(64) if run_id is None else run_id
    if not 0 <= run < 2**64:
        raise ProbeError(f"run id must fit in 64 bits, got {run}")
    count, skip = max(1, round(rate_pps * duration_s)), skip or range(0)
    sock, addr = _udp_socket(host, port)
    with sock:
        start = time.perf_counter()
        errors = _paced_send(sock, addr, bytearray(size), run, count, rate_pps, skip, max_burst)
        elapsed = time.perf_counter() - start
        end_sent = _send_end(sock, addr, bytearray(size), run, count, end_repeats)
    return SendResult(
        run_id=run,
        count=count,
        skipped=sum(1 for s in skip if 0 <= s < count),
        send_errors=errors,
        end_sent=end_sent,
        elapsed_s=elapsed,
    )


def _paced_send(
    sock: socket.socket,
    addr: tuple[Any, ...],
    buf: bytearray,
    run_id: int,
    count: int,
    rate: float,
    skip: range,
    max_burst: int,
) -> int:
    """Send seqs ``0..count-1``, seq ``k`` due at ``k / rate``; late ones go in small bursts."""
    pack, now_ns, sendto, clock = _HEADER.pack_into, time.monotonic_ns, sock.sendto, time.monotonic
    errors = seq = 0
    start = clock()
    while seq < count:
        now = clock()
        due = min(count, int((now - start) * rate) + 1, seq + max_burst)
        if due <= seq:
            time.sleep(start + seq / rate - now)
            continue
        for s in range(seq, due):
            if s in skip:
                continue
            pack(buf, 0, _MAGIC, _DATA, run_id, s, now_ns())
            try:
                sendto(buf, addr)
            except OSError:  # no route, no buffer: the datagram is lost, as on the wire
                errors += 1
        seq = due
    return errors


def _send_end(
    sock: socket.socket, addr: tuple[Any, ...], buf: bytearray, run_id: int, count: int, n: int
) -> int:
    """Send ``n`` END copies; return how many left the socket (a receiver copes with none)."""
    sent = 0
    for i in range(n):
        if i:
            time.sleep(0.005)  # spread the copies so one short outage cannot eat them all
        _HEADER.pack_into(buf, 0, _MAGIC, _END, run_id, count, time.monotonic_ns())
        try:
            sock.sendto(buf, addr)
            sent += 1
        except OSError:
            pass
    return sent


@dataclass(slots=True)
class _Collector:
    """Mutable state of one ``receive`` call."""

    run_id: int | None
    arrivals: list[Arrival] = dataclasses.field(default_factory=list)
    ignored: int = 0
    end_count: int | None = None
    end_ns: int | None = None
    last_ns: int | None = None

    def feed(self, data: bytearray, size: int, now: int) -> None:
        """Record one received datagram (too short ones are counted as ignored)."""
        if size < HEADER_SIZE:
            self.ignored += 1
            return
        magic, kind, run_id, value, send_ns = _HEADER.unpack_from(data)
        if magic != _MAGIC or kind not in (_DATA, _END) or self.run_id not in (None, run_id):
            self.ignored += 1
            return
        self.run_id, self.last_ns = run_id, now
        if kind == _DATA:
            self.arrivals.append(Arrival(value, now, send_ns))
        elif self.end_count is None:
            self.end_count, self.end_ns = value, now

    def stop_ns(self, deadline: int, idle_ns: int, linger_ns: int) -> int:
        """When to stop receiving: idle after the last packet, or the deadline."""
        idle = deadline if self.last_ns is None else self.last_ns + idle_ns
        linger = deadline if self.end_ns is None else self.end_ns + linger_ns
        return min(deadline, idle, linger)

    def result(self) -> ProbeResult:
        """The arrivals as a probe result."""
        highest = max((a.seq for a in self.arrivals), default=-1)
        return ProbeResult(
            run_id=self.run_id,
            sent=highest + 1 if self.end_count is None else self.end_count,
            end_seen=self.end_count is not None,
            arrivals=tuple(self.arrivals),
            ignored=self.ignored,
        )


class ProbeReceiver:
    """A UDP socket bound at construction (so a sender may start at once) that receives runs.

    With ``run_id=None`` it follows the first run it hears and ignores every other datagram.
    """

    def __init__(self, host: str, port: int, *, run_id: int | None = None) -> None:
        self._sock, addr = _udp_socket(host, port)
        self._run_id = run_id
        try:
            self._grow_rcvbuf(8 << 20)
            self._sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            self._sock.bind(addr)
        except OSError as exc:
            self._sock.close()
            raise ProbeError(f"cannot bind {host}:{port}: {exc}") from exc
        self._sock.setblocking(False)

    def _grow_rcvbuf(self, size: int) -> None:
        try:  # root may exceed net.core.rmem_max; others get what the kernel allows
            self._sock.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, size)
        except OSError:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)

    @property
    def address(self) -> tuple[str, int]:
        """The bound address."""
        host, port = self._sock.getsockname()[:2]
        return str(host), int(port)

    def receive(
        self, *, timeout_s: float = 60.0, idle_s: float = 5.0, linger_s: float = 0.2
    ) -> ProbeResult:
        """Receive until END (+ ``linger_s`` for stragglers), ``idle_s`` of silence after the
        first datagram of the run, or ``timeout_s`` in all."""
        col = _Collector(run_id=self._run_id)
        deadline = time.monotonic_ns() + int(timeout_s * 1e9)
        idle_ns, linger_ns = int(idle_s * 1e9), int(linger_s * 1e9)
        buf = bytearray(MAX_PAYLOAD + 1)
        bufs, recvmsg_into = [buf], self._sock.recvmsg_into
        while True:
            try:
                size, ancdata, _, _ = recvmsg_into(bufs, 64)
            except BlockingIOError:
                wait = col.stop_ns(deadline, idle_ns, linger_ns) - time.monotonic_ns()
                if wait <= 0 or not select.select([self._sock], [], [], wait / 1e9)[0]:
                    break
                continue
            except OSError as exc:
                raise ProbeError(f"receiving on {self.address}: {exc}") from exc
            now = _arrival_ns(ancdata)
            col.feed(buf, size, now)
            if now >= col.stop_ns(deadline, idle_ns, linger_ns):
                break
        return col.result()

    def close(self) -> None:
        """Close the socket."""
        self._sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _arrival_ns(ancdata: list[tuple[int, int, bytes]]) -> int:
    """When the kernel received a datagram, on the monotonic clock (its realtime stamp shifted
    by the current offset), so a busy receiver does not invent gaps; now if it gave none."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return int(sec * 1_000_000_000 + nsec) - (time.time_ns() - time.monotonic_ns())
    return time.monotonic_ns()
