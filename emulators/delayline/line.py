"""The delay line: two ports, a forwarder each way, one forwarding thread.

Open it in the network namespace of its interfaces (the sockets stay there whatever the
process does next), ``start()`` it, change its delay with ``apply()`` from any thread, and
``close()`` it (stops the thread, closes the sockets; idempotent).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from typing import Self

from emulators.delayline import forward
from emulators.delayline.forward import Forwarder
from emulators.delayline.model import DelayState, LineStats
from emulators.delayline.ports import open_port

log = logging.getLogger("reroute.emulators.delayline")
DEFAULT_MAX_QUEUE = 200_000
DEFAULT_RT_PRIORITY = 10


class DelayLine:
    """Bridges interfaces ``a`` and ``b``: every frame received on one leaves the other after
    the one-way delay of its direction."""

    def __init__(
        self, sock_a: socket.socket, sock_b: socket.socket, *, max_queue: int, rt_priority: int
    ) -> None:
        self._socks = (sock_a, sock_b)
        self.a_to_b = Forwarder(rx=sock_a, tx=sock_b, delay_ns=0, max_queue=max_queue)
        self.b_to_a = Forwarder(rx=sock_b, tx=sock_a, delay_ns=0, max_queue=max_queue)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rt_priority = rt_priority
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls,
        a: str,
        b: str,
        *,
        delay: DelayState,
        max_queue: int = DEFAULT_MAX_QUEUE,
        rt_priority: int = DEFAULT_RT_PRIORITY,
    ) -> Self:
        """Open the ports on ``a`` and ``b`` (DelayLineError if one cannot be opened).

        ``rt_priority`` > 0 runs the forwarding thread SCHED_FIFO (when allowed), so frames
        leave on time even while the endpoints keep every core busy; 0 leaves it normal."""
        sock_a = open_port(a)
        try:
            sock_b = open_port(b)
        except BaseException:
            sock_a.close()
            raise
        line = cls(sock_a, sock_b, max_queue=max_queue, rt_priority=rt_priority)
        line.apply(delay)
        return line

    def start(self) -> None:
        """Forward in one thread for both directions (two would fight over the GIL)."""
        self._thread = threading.Thread(target=self._forward, name="delayline-forward")
        self._thread.start()

    def _forward(self) -> None:
        problem = forward.prioritize(self._rt_priority)
        if problem:
            log.warning("%s; frames may leave late under load", problem)
        forward.run([self.a_to_b, self.b_to_a], self._stop)

    def state(self) -> DelayState:
        """The current delays."""
        with self._lock:
            return DelayState(
                a_to_b_ms=self.a_to_b.delay_ns / 1e6, b_to_a_ms=self.b_to_a.delay_ns / 1e6
            )

    def apply(self, state: DelayState) -> None:
        """Frames received from now on get the new delay; queued frames keep their due time."""
        with self._lock:
            self.a_to_b.delay_ns = round(state.a_to_b_ms * 1e6)
            self.b_to_a.delay_ns = round(state.b_to_a_ms * 1e6)

    def stats(self) -> LineStats:
        """Both directions' counters."""
        return LineStats(a_to_b=self.a_to_b.stats(), b_to_a=self.b_to_a.stats())

    def close(self) -> None:
        """Stop forwarding and close the sockets."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        for sock in self._socks:
            with contextlib.suppress(OSError):
                sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
