"""iperf3 from Python: a server that is always stopped, a client whose JSON becomes typed values.

Either end may run inside a network namespace (``ip netns exec NS iperf3 ...``). The server is
ready when its process holds a listening TCP socket on the port (read from ``/proc/PID``, so
it works inside any namespace without connecting to it: a probe connection would use up the
one test of ``iperf3 -s -1``). iperf3 3.12 exits 0 even when its JSON says ``"error"``, so the
JSON is checked before the exit status.
"""

from __future__ import annotations

import enum
import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Self

from fabric.run import in_netns
from services.reroute.errors import RerouteError

DEFAULT_PORT = 5201


class IperfError(RerouteError):
    """iperf3 could not run, reported an error, or printed what we cannot read."""


class Protocol(enum.StrEnum):
    TCP = "tcp"
    UDP = "udp"


@dataclass(frozen=True, slots=True, kw_only=True)
class Interval:
    """Throughput of one reporting interval (seconds from the test start)."""

    start_s: float
    end_s: float
    bits_per_second: float
    retransmits: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class IperfResult:
    """One client run. ``retransmits`` is TCP only; ``packets``/``lost_packets``/``jitter_ms``
    are UDP only (as the server measured them)."""

    protocol: Protocol
    duration_s: float
    sent_bps: float
    received_bps: float
    retransmits: int | None
    packets: int | None
    lost_packets: int | None
    jitter_ms: float | None
    intervals: tuple[Interval, ...]


def parse_client_json(text: str) -> IperfResult:
    """The typed result of ``iperf3 -c ... -J`` output; IperfError if it reports an error."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise IperfError(f"iperf3 printed no JSON: {text.strip()[:200]!r}") from exc
    if not isinstance(doc, dict):
        raise IperfError("iperf3 JSON is not an object")
    if "error" in doc:
        raise IperfError(f"iperf3: {doc['error']}")
    try:
        return _result(doc)
    except (KeyError, TypeError, ValueError) as exc:
        raise IperfError(f"unexpected iperf3 JSON: missing or bad {exc}") from exc


def _result(doc: dict[str, Any]) -> IperfResult:
    protocol = Protocol(doc["start"]["test_start"]["protocol"].lower())
    end = doc["end"]
    sent, received = end["sum_sent"], end["sum_received"]
    udp = end.get("sum", received) if protocol is Protocol.UDP else None
    return IperfResult(
        protocol=protocol,
        duration_s=float(sent["seconds"]),
        sent_bps=float(sent["bits_per_second"]),
        received_bps=float(received["bits_per_second"]),
        retransmits=None if udp is not None else int(sent["retransmits"]),
        packets=None if udp is None else int(udp["packets"]),
        lost_packets=None if udp is None else int(udp["lost_packets"]),
        jitter_ms=None if udp is None else float(udp["jitter_ms"]),
        intervals=tuple(_interval(i["sum"]) for i in doc["intervals"]),
    )


def _interval(s: dict[str, Any]) -> Interval:
    retransmits = s.get("retransmits")
    return Interval(
        start_s=float(s["start"]),
        end_s=float(s["end"]),
        bits_per_second=float(s["bits_per_second"]),
        retransmits=None if retransmits is None else int(retransmits),
    )


def run_client(
    host: str,
    *,
    port: int = DEFAULT_PORT,
    protocol: Protocol = Protocol.TCP,
    duration_s: int = 10,
    bitrate_bps: int | None = None,
    interval_s: float = 1.0,
    netns: str | None = None,
    bind: str | None = None,
    connect_timeout_s: float = 3.0,
    window_bytes: int | None = None,
    congestion: str | None = None,
) -> IperfResult:
    """Run ``iperf3 -c HOST -J`` (in ``netns`` if given) to completion and parse its result.

    ``duration_s`` is whole seconds: iperf3 reads ``-t`` as an integer and 0 runs forever.
    ``congestion`` is the sender's TCP congestion control (``-C``; root may name any the
    kernel has, whatever the namespace's default).
    """
    if isinstance(duration_s, bool) or not isinstance(duration_s, int) or duration_s < 1:
        raise IperfError(f"iperf3 runs whole seconds (>= 1), not {duration_s!r}")
    argv = [
        *("iperf3", "-c", host, "-p", str(port), "-J", "-t", str(duration_s)),
        *("-i", f"{interval_s:g}", "--connect-timeout", str(round(connect_timeout_s * 1000))),
        *(["-u"] if protocol is Protocol.UDP else []),
        *(["-b", str(bitrate_bps)] if bitrate_bps is not None else []),
        *(["-B", bind] if bind else []),
        *(["-w", str(window_bytes)] if window_bytes is not None else []),
        *(["-C", congestion] if congestion else []),
    ]
    cmd = in_netns(netns, argv)
    timeout = duration_s + connect_timeout_s + 10.0
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError as exc:
        raise IperfError(f"{cmd[0]} is not installed (run `make setup`)") from exc
    except subprocess.TimeoutExpired as exc:
        raise IperfError(f"`{' '.join(cmd)}` did not finish in {timeout:.0f} s") from exc
    if done.stdout.lstrip().startswith("{"):
        result = parse_client_json(done.stdout)  # raises on iperf3's {"error": ...}
        if done.returncode == 0:
            return result
    err = (done.stderr or done.stdout).strip()
    raise IperfError(f"`{' '.join(cmd)}` failed ({done.returncode}): {err}")


class IperfServer:
    """``iperf3 -s -1`` bound to ``bind:port`` (in ``netns`` if given), for one client test.

    Use it as a context manager: entering waits until it listens, leaving always stops it.
    """

    def __init__(
        self,
        *,
        bind: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        netns: str | None = None,
        ready_timeout_s: float = 5.0,
    ) -> None:
        self.bind, self.port, self.netns = bind, port, netns
        self._ready_timeout_s = ready_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.output = ""

    @property
    def pid(self) -> int | None:
        """The server's process id, or None before start."""
        return None if self._proc is None else self._proc.pid

    def start(self) -> None:
        """Start the server and return once it listens; IperfError (and nothing left) if not."""
        if self._proc is not None:
            raise IperfError(f"iperf3 server on port {self.port} is already started")
        argv = ["iperf3", "-s", "-1", "-J", "-B", self.bind, "-p", str(self.port)]
        cmd = in_netns(self.netns, argv)
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (lives until stop())
        try:
            self._proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        except FileNotFoundError as exc:
            self.stop()
            raise IperfError(f"{cmd[0]} is not installed (run `make setup`)") from exc
        try:
            self._await_listening(self._proc)
        except BaseException:
            self.stop()
            raise

    def _await_listening(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self._ready_timeout_s
        while not _listens(proc.pid, self.port):
            if proc.poll() is not None:
                raise IperfError(f"iperf3 server exited ({proc.returncode}): {self._read_log()}")
            if time.monotonic() > deadline:
                raise IperfError(f"iperf3 server not listening on port {self.port} in time")
            time.sleep(0.005)

    def stop(self) -> None:
        """Stop the server if it still runs (it exits by itself after one test); idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=3.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            self.output = self._read_log()
            self._log.close()
            self._log = None

    def _read_log(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace").strip()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_iperf(
    server: str = "127.0.0.1",
    *,
    port: int = DEFAULT_PORT,
    protocol: Protocol = Protocol.TCP,
    duration_s: int = 10,
    bitrate_bps: int | None = None,
    interval_s: float = 1.0,
    server_netns: str | None = None,
    client_netns: str | None = None,
    congestion: str | None = None,
) -> IperfResult:
    """Start a server on ``server:port`` (in ``server_netns``), run one client test to it (from
    ``client_netns``), stop the server, return the client's result."""
    with IperfServer(bind=server, port=port, netns=server_netns):
        return run_client(
            server,
            port=port,
            protocol=protocol,
            duration_s=duration_s,
            bitrate_bps=bitrate_bps,
            interval_s=interval_s,
            netns=client_netns,
            congestion=congestion,
        )


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a TCP socket listening on ``port`` (in its namespace)."""
    owned = _socket_inodes(pid)
    tables = _read(f"/proc/{pid}/net/tcp") + _read(f"/proc/{pid}/net/tcp6")
    rows = (line.split() for line in tables.splitlines())  # sl local remote st ... inode
    return any(
        len(f) > 9 and f[3] == "0A" and f[1].endswith(f":{port:04X}") and f[9] in owned
        for f in rows
    )


def _socket_inodes(pid: int) -> set[str]:
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # the process is gone
        return set()
    links = (_readlink(fd) for fd in fds)
    return {link[8:-1] for link in links if link.startswith("socket:[")}


def _readlink(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:  # no IPv6, or the process is gone
        return ""
