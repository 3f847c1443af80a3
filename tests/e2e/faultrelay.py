"""A device cut off, hung or refusing, one at a time: a TCP relay on loopback in front of
one device's management endpoint (an OVS bridge's ``unix:`` socket, a ``host:port``).

The inventory names the relay instead of the device; the relay then plays the network:

- ``hang()``: a black hole. Connections stay open, nothing is forwarded either way (a
  switch cut off with its packets dropped, or its control process paused): the driver
  sees no answer, never a reset.
- ``refuse()``: the listener closed and every connection reset (the device down: a
  restarted switch's port closed).
- ``heal()``: forwarding again; connections made during ``hang`` start forwarding, and a
  refused listener listens again on the same port.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading

CHUNK = 65536


def _upstream(target: str) -> socket.socket:
    if target.startswith("unix:"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(2)
        sock.connect(target.removeprefix("unix:"))
        sock.settimeout(None)
        return sock
    host, port = target.removeprefix("tcp:").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=2)


class FaultRelay:
    """127.0.0.1:``port`` -> ``target`` (``unix:PATH`` or ``[tcp:]HOST:PORT``)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.hung = threading.Event()
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._listen()

    @property
    def endpoint(self) -> str:
        """What the inventory names instead of the device (an OpenFlow ``tcp:`` target)."""
        return f"tcp:127.0.0.1:{self.port}"

    def _listen(self) -> None:
        threading.Thread(target=self._accept, args=(self._server,), daemon=True).start()

    def _accept(self, server: socket.socket) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        self._keep(conn)
        while self.hung.is_set() and not self.stopped.is_set():  # held, never answered
            self.stopped.wait(0.05)
        try:
            up = _upstream(self.target)
        except OSError:
            conn.close()
            return
        self._keep(up)
        self._pump(conn, up)

    def _keep(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.append(sock)

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peer = {a: b, b: a}
        while not self.stopped.is_set():
            if self.hung.is_set():  # the black hole: what arrives stays unread
                self.stopped.wait(0.05)
                continue
            try:
                ready, _, _ = select.select([a, b], [], [], 0.05)
                for sock in ready:
                    data = sock.recv(CHUNK)
                    if not data:
                        raise OSError("closed")
                    peer[sock].sendall(data)
            except (OSError, ValueError):
                break
        for sock in (a, b):
            sock.close()

    def hang(self) -> None:
        """Forward nothing from now on; keep every connection open."""
        self.hung.set()

    def refuse(self) -> None:
        """Close the listener and reset every connection."""
        self._unlisten()
        self._reset()

    def _unlisten(self) -> None:
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self._server.close()

    def heal(self) -> None:
        """Forward again (listening again on the same port after ``refuse``)."""
        self.hung.clear()
        if self._server.fileno() == -1:
            self._server = socket.create_server(("127.0.0.1", self.port))
            self._listen()

    def _reset(self) -> None:
        with self._lock:
            socks, self._socks = self._socks, []
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()

    def close(self) -> None:
        """Stop: the listener and every connection closed."""
        self.stopped.set()
        self._unlisten()
        self._reset()
