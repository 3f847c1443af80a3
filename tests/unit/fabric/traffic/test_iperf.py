"""The iperf3 wrapper against the real iperf3, on 127.0.0.1 only, without namespaces."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabric.traffic.iperf import (
    IperfError,
    IperfServer,
    Protocol,
    parse_client_json,
    run_client,
    run_iperf,
)

LOOPBACK = "127.0.0.1"


def _our_iperf3() -> list[str]:
    """iperf3 processes started by this test process (others' runs on the machine don't count)."""
    found = subprocess.run(
        ["pgrep", "-x", "-P", str(os.getpid()), "iperf3"], capture_output=True, text=True
    )
    return found.stdout.split()


@pytest.fixture(autouse=True)
def no_iperf3_left() -> Iterator[None]:
    assert _our_iperf3() == []
    yield
    assert _our_iperf3() == []


def _free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


def test_tcp_over_loopback_for_one_second() -> None:
    result = run_iperf(LOOPBACK, port=_free_tcp_port(), duration_s=1, interval_s=0.5)
    assert result.protocol is Protocol.TCP
    assert result.sent_bps > 0 and result.received_bps > 0
    assert result.duration_s == pytest.approx(1.0, abs=0.3)
    assert result.retransmits is not None and result.retransmits >= 0
    assert (result.packets, result.lost_packets, result.jitter_ms) == (None, None, None)
    assert len(result.intervals) >= 2
    assert all(i.bits_per_second > 0 and i.retransmits is not None for i in result.intervals)
    assert result.intervals[0].start_s == 0 and result.intervals[-1].end_s > 0.9


def test_udp_at_a_given_bitrate() -> None:
    result = run_iperf(
        LOOPBACK, port=_free_tcp_port(), protocol=Protocol.UDP, duration_s=1, bitrate_bps=10**7
    )
    assert result.protocol is Protocol.UDP and result.retransmits is None
    assert result.sent_bps == pytest.approx(10**7, rel=0.3)
    assert result.packets is not None and result.packets > 0
    assert result.lost_packets is not None and result.jitter_ms is not None


def test_a_client_without_server_raises_the_typed_error() -> None:
    with pytest.raises(IperfError, match="unable to connect"):
        run_client(LOOPBACK, port=_free_tcp_port(), duration_s=1)


def test_the_server_is_stopped_when_the_client_fails_inside_the_block() -> None:
    with pytest.raises(IperfError), IperfServer(bind=LOOPBACK, port=_free_tcp_port()) as server:
        pid = server.pid
        assert pid is not None and _our_iperf3() == [str(pid)]
        run_client(LOOPBACK, port=_free_tcp_port(), duration_s=1)
    assert server.pid is None and not Path(f"/proc/{pid}").exists()


def test_a_server_that_cannot_listen_raises_and_leaves_nothing() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind((LOOPBACK, 0))
        taken.listen()
        server = IperfServer(bind=LOOPBACK, port=taken.getsockname()[1])
        with pytest.raises(IperfError, match="exited"):
            server.start()
    assert server.pid is None and "Address already in use" in server.output


def test_a_fractional_duration_is_refused_before_running() -> None:
    with pytest.raises(IperfError, match="whole seconds"):
        run_client(LOOPBACK, duration_s=0.5)  # type: ignore[arg-type]


def test_parse_rejects_an_error_report_and_non_json() -> None:
    with pytest.raises(IperfError, match="iperf3: boom"):
        parse_client_json(json.dumps({"start": {}, "end": {}, "error": "boom"}))
    with pytest.raises(IperfError, match="no JSON"):
        parse_client_json("iperf3: error - something")
    with pytest.raises(IperfError, match="unexpected"):
        parse_client_json(json.dumps({"start": {}, "intervals": [], "end": {}}))
