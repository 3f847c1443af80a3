"""The long-haul delay line: host A -- veth -- [p1 delay line p2] -- veth -- host B.

Each of the three is a namespace of its own (``rr-tdl-<pid>-a|m|b``, never a project fabric's).
The delay line runs as its real process (``python -m emulators.delayline``), started in the root
namespace with ``--netns``; the tests drive it over HTTP and measure what the hosts see.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from emulators.delayline import DelayState, LineStats
from fabric import netns
from fabric.delaycontrol import DelayControl
from fabric.run import run
from fabric.traffic.iperf import run_iperf
from services.reroute.errors import DeviceRejected
from tests.e2e.conftest import ROOT

pytestmark = pytest.mark.fabric

PREFIX = f"rr-tdl-{os.getpid()}"
NS_A, NS_M, NS_B = f"{PREFIX}-a", f"{PREFIX}-m", f"{PREFIX}-b"
IP_A, IP_B = "10.250.0.1", "10.250.0.2"


@dataclass(frozen=True, slots=True, kw_only=True)
class Line:
    proc: subprocess.Popen[bytes]
    control: DelayControl
    ready_file: Path


def _mac(ns: str, ifname: str) -> str:
    return str(json.loads(run(["ip", "-j", "link", "show", ifname], ns=ns))[0]["address"])


def _build() -> None:
    for ns in (NS_A, NS_M, NS_B):
        netns.add(ns)
    for host, port in ((NS_A, "p1"), (NS_B, "p2")):
        run(["ip", "link", "add", "h0", "netns", host, "type", "veth", "peer", port, "netns", NS_M])
        run(["ethtool", "-K", "h0", "tx", "off"], ns=host)
        run(["ip", "link", "set", "h0", "up"], ns=host)
        run(["ip", "link", "set", port, "up"], ns=NS_M)
    for host, ip, peer, peer_ip in ((NS_A, IP_A, NS_B, IP_B), (NS_B, IP_B, NS_A, IP_A)):
        run(["ip", "addr", "add", f"{ip}/24", "dev", "h0"], ns=host)
        mac = _mac(peer, "h0")
        run(["ip", "neigh", "replace", peer_ip, "lladdr", mac, "dev", "h0"], ns=host)


def _start(ready_file: Path, log: Path) -> subprocess.Popen[bytes]:
    argv = [
        *(sys.executable, "-m", "emulators.delayline", "--netns", NS_M, "--a", "p1", "--b", "p2"),
        *("--delay-ms", "15", "--control", "127.0.0.1:0", "--ready-file", str(ready_file)),
    ]
    with log.open("wb") as out:
        return subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)


def _await_ready(proc: subprocess.Popen[bytes], ready_file: Path, log: Path) -> int:
    deadline = time.monotonic() + 10.0
    while not ready_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"delay line not ready ({proc.poll()}): {log.read_text()}")
        time.sleep(0.01)
    return int(ready_file.read_text())


def _stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return -9


@pytest.fixture(scope="module")
def line(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Line]:
    tmp = tmp_path_factory.mktemp("delayline")
    ready_file, log = tmp / "port", tmp / "delayline.log"
    proc: subprocess.Popen[bytes] | None = None
    try:
        _build()
        proc = _start(ready_file, log)
        port = _await_ready(proc, ready_file, log)
        yield Line(
            proc=proc, control=DelayControl(f"http://127.0.0.1:{port}"), ready_file=ready_file
        )
    finally:
        rc = None if proc is None else _stop(proc)
        for ns in (NS_A, NS_M, NS_B):
            netns.delete(ns)
    assert rc == 0, log.read_text()
    assert not ready_file.exists(), "the ready file outlived the delay line"
    assert not [ns for ns in netns.listing(PREFIX)], "namespaces left behind"


def ping_rtts(count: int = 20) -> list[float]:
    out = run(["ping", "-c", str(count), "-i", "0.01", "-W", "2", IP_B], ns=NS_A, check=False)
    return [float(ms) for ms in re.findall(r"time=([\d.]+) ms", out)]


def median_rtt() -> float:
    rtts = ping_rtts()
    assert len(rtts) == 20, f"lost pings: {rtts}"
    return statistics.median(rtts)


def put_raw(control: DelayControl, body: bytes) -> tuple[int, dict[str, object]]:
    req = urllib.request.Request(control.url + "/delay", data=body, method="PUT")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_ping_rtt_is_twice_the_one_way_delay(line: Line) -> None:
    assert line.control.set(delay_ms=15) == DelayState.both(15.0)
    assert 29.0 <= median_rtt() <= 40.0


def test_delay_changed_over_http_moves_the_rtt(line: Line) -> None:
    line.control.set(delay_ms=40)
    assert line.control.get().to_dict() == {"delay_ms": 40.0, "a_to_b_ms": 40.0, "b_to_a_ms": 40.0}
    assert 79.0 <= median_rtt() <= 90.0
    line.control.set(a_to_b_ms=5, b_to_a_ms=25)
    assert line.control.get() == DelayState(a_to_b_ms=5.0, b_to_a_ms=25.0)
    assert 29.0 <= median_rtt() <= 40.0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"{delay_ms: 40", "body"),
        (b"[40]", "body"),
        (b"{}", "body"),
        (b'{"delay_ms": -1}', "delay_ms"),
        (b'{"delay_ms": 10001}', "delay_ms"),
        (b'{"delay_ms": "40"}', "delay_ms"),
        (b'{"delay_ms": true}', "delay_ms"),
        (b'{"delay_ms": NaN}', "delay_ms"),
        (b'{"delay_ms": 40, "b_to_a_ms": -5}', "b_to_a_ms"),
        (b'{"delay_ms": 40, "jitter_ms": 1}', "jitter_ms"),
    ],
)
def test_bad_put_is_400_naming_the_field_and_changes_nothing(
    line: Line, body: bytes, field: str
) -> None:
    line.control.set(delay_ms=15)
    status, doc = put_raw(line.control, body)
    assert (status, doc["field"]) == (400, field), doc
    assert line.control.get() == DelayState.both(15.0)


def test_client_raises_device_rejected(line: Line) -> None:
    with pytest.raises(DeviceRejected) as err:
        line.control.set(delay_ms=20_000)
    assert err.value.code == "delay_ms"


def test_udp_burst_arrives_complete_in_order_and_delayed(line: Line) -> None:
    line.control.set(delay_ms=15)
    before = line.control.stats().a_to_b
    report = probe(rate_pps=5000, duration_s=2.0)
    after = line.control.stats().a_to_b
    assert (report["sent"], report["lost"], report["reordered"]) == (10_000, 0, 0)
    assert 15.0 <= report["delay"]["min_ms"] <= report["delay"]["avg_ms"] < 16.0
    assert after.forwarded - before.forwarded >= 10_000
    assert after.dropped == before.dropped == 0
    assert after.late_mean_us < 1000.0


def probe(*, rate_pps: int, duration_s: float) -> dict[str, Any]:
    """``reroute probe recv`` in B (awaited until bound), ``reroute probe send`` from A."""
    cli = [sys.executable, "-m", "services.reroute.cli", "probe"]
    recv = ["ip", "netns", "exec", NS_B, *cli, "recv", "--bind", f"{IP_B}:9000", "--json"]
    with subprocess.Popen(
        [*recv, "--idle", "2"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as receiver:
        assert receiver.stderr is not None
        assert b"listening on" in receiver.stderr.readline()
        send = [*cli, "send", "--to", f"{IP_B}:9000", "--rate", str(rate_pps)]
        run([*send, "--duration", str(duration_s)], ns=NS_A)
        out, _ = receiver.communicate(timeout=10)
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_tcp_flows_through_the_delay_line(line: Line) -> None:
    line.control.set(delay_ms=15)
    result = run_iperf(IP_B, duration_s=2, server_netns=NS_B, client_netns=NS_A)
    assert result.received_bps > 20e6


def quiet_stats(control: DelayControl, timeout_s: float = 5.0) -> LineStats:
    """The counters once nothing is queued and nothing moved for 100 ms (earlier tests' tails)."""
    deadline = time.monotonic() + timeout_s
    last = control.stats()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = control.stats()
        if now == last and now.a_to_b.queued == now.b_to_a.queued == 0:
            return now
        last = now
    raise AssertionError(f"the delay line never went quiet: {last}")


def test_frames_the_middle_namespace_sends_are_not_forwarded(line: Line) -> None:
    line.control.set(delay_ms=1)
    before = quiet_stats(line.control)
    frame = "b'\\xff' * 6 + b'\\x02' * 6 + b'\\x88\\xb5' + bytes(50)"
    script = (
        "import socket; s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0);"
        f" s.bind(('p1', 0)); [s.send({frame}) for _ in range(10)]"
    )
    run([sys.executable, "-c", script], ns=NS_M)
    assert median_rtt() < 10.0  # the line still forwards, and had time to forward those frames
    after = line.control.stats()
    assert after.a_to_b.forwarded - before.a_to_b.forwarded == 20  # the pings only
    assert after.b_to_a.forwarded - before.b_to_a.forwarded == 20


def test_health_and_stats(line: Line) -> None:
    assert line.control.healthy()
    assert int(line.ready_file.read_text()) == int(line.control.url.rsplit(":", 1)[1])
    stats = line.control.stats()
    assert stats.a_to_b.delay_ms == line.control.get().a_to_b_ms
    assert stats.a_to_b.forwarded > 0 and stats.b_to_a.forwarded > 0
    assert stats.b_to_a.dropped == 0
