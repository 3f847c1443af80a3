"""A paced bulk stream over MPTCP (IPPROTO_MPTCP) or plain TCP, run inside a host namespace.

``python -m experiments.mptcp_flow recv PORT SECONDS PROTO`` listens, accepts one connection
and prints one JSON line: the bytes received in each 100 ms window (kernel receive time,
from the accept), and how many TCP subflows the connection had (``ss``).
``python -m experiments.mptcp_flow send HOST PORT SECONDS MBPS PROTO [CC]`` connects (from the
namespace's default address; the kernel's path manager adds the other subflows) and sends
at MBPS (0: unpaced) until SECONDS have passed, with congestion control CC (default: the
namespace's). PROTO is ``mptcp`` or ``tcp``.
``python -m experiments.mptcp_flow check`` exits 0 when an MPTCP socket can be created.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

IPPROTO_MPTCP = 262
WINDOW_S = 0.1
CHUNK = 16 * 1024


def _proto(name: str) -> int:
    return {"mptcp": IPPROTO_MPTCP, "tcp": socket.IPPROTO_TCP}[name]


def check() -> int:
    """Exit 0 if this kernel has MPTCP sockets."""
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP).close()
    except OSError as e:
        print(f"no MPTCP socket: {e}", file=sys.stderr)
        return 1
    return 0


def _subflows(port: int) -> int:
    out = subprocess.run(
        ["ss", "-tnH", "state", "established", f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return sum(1 for line in out.splitlines() if line.strip())


def recv(port: int, seconds: float, proto: str) -> int:
    """Receive one stream on ``port`` for ``seconds``; print its bytes per window as JSON."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM, _proto(proto))
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(1)
    print("listening", file=sys.stderr, flush=True)
    conn, _ = srv.accept()
    t0 = time.monotonic()
    conn.settimeout(0.2)
    windows = [0] * round(seconds / WINDOW_S)
    subflows = 0
    while True:
        now = time.monotonic() - t0
        if now >= seconds:
            break
        if subflows == 0 and now > 1.0:
            subflows = _subflows(port)
        try:
            data = conn.recv(1 << 16)
        except TimeoutError:
            continue
        if not data:
            break
        i = int((time.monotonic() - t0) / WINDOW_S)
        if i < len(windows):
            windows[i] += len(data)
    conn.close()
    srv.close()
    print(json.dumps({"window_s": WINDOW_S, "bytes": windows, "subflows": subflows}))
    return 0


def send(
    host: str, port: int, seconds: float, mbps: float, proto: str, congestion: str = ""
) -> int:
    """Send a stream paced at ``mbps`` (0: as fast as the connection takes it) to
    ``host:port`` for ``seconds``."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, _proto(proto))
    if congestion:  # root may set any the kernel has (MPTCP passes it to its subflows)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, congestion.encode())
    s.connect((host, port))
    s.settimeout(0.2)  # a blocked send (path down) must not outlive SECONDS
    payload = b"\0" * CHUNK
    t0 = time.monotonic()
    sent = 0
    per_s = mbps * 1e6 / 8
    while True:
        now = time.monotonic() - t0
        if now >= seconds:
            break
        ahead = sent / per_s - now if per_s > 0 else 0.0
        if ahead > 0:
            time.sleep(min(ahead, 0.01))
            continue
        try:
            sent += s.send(payload)
        except TimeoutError:
            continue
    s.close()
    return 0


def main(argv: list[str]) -> int:
    """Run ``check``, ``recv`` or ``send``; return the exit code."""
    cmd, args = argv[0], argv[1:]
    if cmd == "check":
        return check()
    if cmd == "recv":
        return recv(int(args[0]), float(args[1]), args[2])
    if cmd == "send":
        return send(args[0], int(args[1]), float(args[2]), float(args[3]), *args[4:6])
    raise SystemExit(f"unknown command {cmd!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
