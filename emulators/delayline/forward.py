"""One direction of the delay line, and the loop that drives directions.

A :class:`Forwarder` reads frames from its ``rx`` port, stamps each with a due time (the time
it read it + the delay in force at that moment) and keeps them in a FIFO;
:meth:`Forwarder.release` sends every frame whose due time has come out of its ``tx`` port.
Due times never decrease along the FIFO, so order is always preserved: after the delay is
lowered, new frames wait behind the older ones and the lower delay is fully in force within
one old delay.

:func:`run` waits on the sockets with ``select`` (microsecond timeouts; epoll would round
them up to whole milliseconds); :func:`prioritize` gives the thread a 1 ns timer slack and
SCHED_FIFO, so frames leave within tens of microseconds of their due time. One thread drives
both directions: two threads (one per direction) fought over the GIL and, measured here,
forwarded less with larger release errors. Frames wait in two parallel deques of ints and
bytes, objects the garbage collector does not track, so the hot path triggers no collections.
"""

from __future__ import annotations

import ctypes
import os
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Sequence

from emulators.delayline.model import DirectionStats
from emulators.delayline.ports import AUX_SPACE, kernel_drops, with_vlan

FRAME_MAX = 65536
RECV_BATCH = 64
IDLE_S = 0.05  # longest select() wait, so a stop request is seen promptly
_PR_SET_TIMERSLACK = 29


class Forwarder:
    """Frames from ``rx`` leave by ``tx`` ``delay_ns`` later, in order; at most ``max_queue``
    wait (more are dropped and counted). ``delay_ns`` may be changed at any time."""

    def __init__(
        self, *, rx: socket.socket, tx: socket.socket, delay_ns: int, max_queue: int
    ) -> None:
        self.rx, self.tx = rx, tx
        self.delay_ns, self.max_queue = delay_ns, max_queue
        self.dues: deque[int] = deque()
        self.frames: deque[bytes] = deque()
        self.last_due = 0
        self.forwarded = self.bytes = self.dropped_queue_full = self.dropped_send_error = 0
        self.late_total_ns = self.late_max_ns = self.late_over_1ms = 0
        self._kernel_drops = 0
        self._lock = threading.Lock()

    def fileno(self) -> int:
        """The receive socket's descriptor (for ``select``)."""
        return self.rx.fileno()

    def receive(self) -> None:
        """Queue up to RECV_BATCH frames that wait on ``rx`` (without blocking)."""
        recv, now, dues, frames = self.rx.recvmsg, time.monotonic_ns, self.dues, self.frames
        for _ in range(RECV_BATCH):
            try:
                data, ancdata, _, _ = recv(FRAME_MAX, AUX_SPACE, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            frame = with_vlan(data, ancdata) if ancdata else data
            if len(dues) >= self.max_queue:
                self.dropped_queue_full += 1
                continue
            due = now() + self.delay_ns
            if due < self.last_due:
                due = self.last_due
            self.last_due = due
            dues.append(due)
            frames.append(frame)

    def release(self) -> int | None:
        """Send every frame that is due; return the due time of the next one (if any)."""
        dues, frames, send, now = self.dues, self.frames, self.tx.send, time.monotonic_ns
        while dues:
            late = now() - dues[0]
            if late < 0:
                return dues[0]
            dues.popleft()
            frame = frames.popleft()
            try:
                send(frame)
            except OSError:  # interface down, frame too big: lost, as on the wire
                self.dropped_send_error += 1
                continue
            self._count(len(frame), late)
        return None

    def _count(self, size: int, late: int) -> None:
        self.forwarded += 1
        self.bytes += size
        self.late_total_ns += late
        if late > self.late_max_ns:
            self.late_max_ns = late
        if late > 1_000_000:
            self.late_over_1ms += 1

    def stats(self) -> DirectionStats:
        """This direction's counters, the kernel's drops included."""
        with self._lock:
            self._kernel_drops += kernel_drops(self.rx)
        sent = max(self.forwarded, 1)
        return DirectionStats(
            delay_ms=self.delay_ns / 1e6,
            forwarded=self.forwarded,
            bytes=self.bytes,
            queued=len(self.dues),
            dropped_queue_full=self.dropped_queue_full,
            dropped_send_error=self.dropped_send_error,
            dropped_kernel=self._kernel_drops,
            late_mean_us=self.late_total_ns / sent / 1e3,
            late_max_us=self.late_max_ns / 1e3,
            late_over_1ms=self.late_over_1ms,
        )


def run(forwarders: Sequence[Forwarder], stop: threading.Event) -> None:
    """Drive ``forwarders`` until ``stop`` is set: release what is due, wait, receive."""
    while not stop.is_set():
        wait = _release_all(forwarders)
        for fwd in select.select(forwarders, (), (), wait)[0]:
            fwd.receive()


def _release_all(forwarders: Sequence[Forwarder]) -> float:
    """Release what is due everywhere; return how long to wait for the next due frame."""
    wait = IDLE_S
    for fwd in forwarders:
        due = fwd.release()
        if due is not None:
            wait = min(wait, (due - time.monotonic_ns()) / 1e9)
    return max(wait, 0.0)


def prioritize(rt_priority: int) -> str | None:
    """Make the calling thread wake on time: 1 ns timer slack (default 50 us) and, if
    ``rt_priority`` > 0, SCHED_FIFO at that priority. Returns why the latter failed, if it did."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_TIMERSLACK, 1, 0, 0, 0)
    if rt_priority <= 0:
        return None
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(rt_priority))
    except OSError as exc:
        return f"cannot run at real-time priority {rt_priority}: {exc.strerror}"
    return None
