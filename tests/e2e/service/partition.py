"""A network partition between one process and etcd, on loopback: a TCP relay per etcd
member that the process is configured to reach the member through, which ``cut`` turns
into a black hole (nothing forwarded either way, connections held open: the client sees
no answer, as when packets are dropped, not a reset)."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Iterator

CHUNK = 65536


class Relay:
    """127.0.0.1:``port`` -> ``target`` (host:port), until ``cut``."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.cut = threading.Event()
        self.stopped = threading.Event()
        self._socks: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self._socks.append(conn)
            serve = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(serve)
            serve.start()

    def _serve(self, conn: socket.socket) -> None:
        """A connection made during a cut is held, never answered, until the cut heals (a
        client's SYNs get through then); then it is relayed."""
        while self.cut.is_set() and not self.stopped.is_set():
            self.stopped.wait(0.05)
        try:
            up = socket.create_connection(self.target, timeout=2)
        except OSError:
            conn.close()
            return
        self._socks.append(up)
        self._pump(conn, up)

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        """Relay until either end closes; then close the other (a member killed: its
        client sees the reset, as without the relay)."""
        try:
            self._relay(a, b)
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.close()

    def _relay(self, a: socket.socket, b: socket.socket) -> None:
        peer = {a: b, b: a}
        while not self.stopped.is_set():
            if self.cut.is_set():  # the black hole: what arrives stays unread
                self.stopped.wait(0.05)
                continue
            ready, _, _ = select.select([a, b], [], [], 0.05)
            for s in ready:
                try:
                    data = s.recv(CHUNK)
                    if not data:
                        return
                    peer[s].sendall(data)
                except OSError:
                    return

    def close(self) -> None:
        self.stopped.set()
        with contextlib.suppress(OSError):  # wakes the accepting thread (close alone does not)
            self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.close()
        for t in self._threads:
            t.join(timeout=2)


class Partition:
    """Relays to every member of one etcd cluster, for one process; ``cut()`` cuts them all."""

    def __init__(self, endpoints: list[str]) -> None:
        self.relays = [Relay(e) for e in endpoints]

    @property
    def endpoints(self) -> list[str]:
        return [r.endpoint for r in self.relays]

    def cut(self) -> None:
        for r in self.relays:
            r.cut.set()

    def heal(self) -> None:
        """Forward again: what was held during the cut arrives now (late, as TCP delivers
        after a partition heals), connections made during it included."""
        for r in self.relays:
            r.cut.clear()

    def close(self) -> None:
        for r in self.relays:
            r.close()


@contextlib.contextmanager
def partitionable(endpoints: list[str]) -> Iterator[Partition]:
    """A ``Partition`` to ``endpoints``, closed on leaving."""
    part = Partition(endpoints)
    try:
        yield part
    finally:
        part.close()
