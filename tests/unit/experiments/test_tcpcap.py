"""Seed 003's metrics from packet captures: a pcap written here, byte by byte, read back and
measured (no tcpdump, no fabric)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from experiments import capture, tcpcap

SRC, DST = (10, 0, 0, 2), (10, 0, 0, 3)


def _frame(src: tuple[int, ...], dst: tuple[int, ...], sport: int, dport: int, seq: int,
           ack: int, payload: int, flags: int = 0x18) -> bytes:  # fmt: skip
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, 8 << 4, flags, 65535, 0, 0)
    tcp += b"\x01\x01\x08\x0a" + b"\0" * 8  # timestamps option: a 32-byte header
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + payload, 0, 0, 64, 6, 0,
                     bytes(src), bytes(dst))  # fmt: skip
    eth = b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00"
    return eth + ip + tcp  # the payload itself is not captured (-s 96)


def _pcap(path: Path, packets: list[tuple[float, bytes]], *, nano: bool = True) -> Path:
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = struct.pack("<IHHiIII", magic, 2, 4, 0, 0, 96, 1)
    for t, frame in packets:
        frac = round((t % 1) * (1e9 if nano else 1e6))
        out += struct.pack("<IIII", int(t), frac, len(frame), len(frame) + 1000) + frame
    path.write_bytes(out)
    return path


MSS = 1000


def _stream(tmp: Path) -> tuple[Path, Path]:
    """10 segments every 10 ms from t=100; segment 5 (sent at 100.05) is lost and resent at
    100.45 after a 400 ms outage; the receiver ACKs each arrival 1 ms later."""
    tx, rx = [], []
    acked = 1
    for i in range(10):
        t = 100.0 + i * 0.01
        seq = 1 + i * MSS
        tx.append((t, _frame(SRC, DST, 40000, 5201, seq, 1, MSS)))
        if i != 5:
            rx.append((t + 0.0005, _frame(SRC, DST, 40000, 5201, seq, 1, MSS)))
        if i < 5:
            acked = seq + MSS
            tx.append((t + 0.001, _frame(DST, SRC, 5201, 40000, 1, acked, 0, 0x10)))
    resend = 100.45
    tx.append((resend, _frame(SRC, DST, 40000, 5201, 1 + 5 * MSS, 1, MSS)))
    rx.append((resend + 0.0005, _frame(SRC, DST, 40000, 5201, 1 + 5 * MSS, 1, MSS)))
    tx.append((resend + 0.001, _frame(DST, SRC, 5201, 40000, 1, 1 + 10 * MSS, 0, 0x10)))
    control = [(99.0, _frame(SRC, DST, 40001, 5201, 7, 1, 100))]  # iperf3's control talk
    return _pcap(tmp / "tx.pcap", control + tx), _pcap(tmp / "rx.pcap", rx, nano=False)


def test_the_seeds_metrics_of_a_stream_that_lost_one_segment_in_an_outage(tmp_path: Path) -> None:
    tx, rx = _stream(tmp_path)
    doc = capture.analyse(tx, rx, port=5201, request_t=100.04, rtt_window_s=1.0,
                          dropped=(0, 0))  # fmt: skip
    assert doc["flow"] == ["10.0.0.2", 40000, "10.0.0.3", 5201]  # the data, not the control
    assert (doc["segments_sent"], doc["retransmitted"], doc["segments_received"]) == (11, 1, 10)
    assert doc["retransmitted_pct"] == pytest.approx(100 / 11)
    assert doc["lost"] == 1 and doc["duplicates"] == 0  # the one resent was needed
    # after segment 9 (100.0905) the receiver saw nothing until the resent 5 (100.4505)
    assert doc["longest_gap_ms"] == pytest.approx(360.0, abs=0.01)
    assert doc["gap_at_ms"] == pytest.approx(50.5, abs=0.01)
    # the ACK of everything (100.451) came 361 ms after segment 9 was sent: the wait counts
    assert doc["rtt_during_max_ms"] == pytest.approx(361.0, abs=0.01)
    assert doc["rtt_before_median_ms"] == pytest.approx(1.0, abs=0.01)
    trace = doc["trace"]
    assert trace["bin_ms"] == 10.0 and trace["request_ms"] == pytest.approx(39.5, abs=0.01)
    delivered = sum(trace["rx_mbps"]) * 1e6 * 0.01 / 8  # Mbit/s per 10 ms bin, back to bytes
    assert delivered == pytest.approx(10 * MSS)


def test_a_frame_of_several_segments_counts_as_that_many() -> None:
    assert tcpcap.mss([1448, 1448, 2896, 1448, 700]) == 1448
    assert tcpcap.segments(2896, 1448) == 2 and tcpcap.segments(700, 1448) == 1


def test_a_resent_segment_that_had_arrived_is_a_duplicate_and_a_reordered_one_is_not(
    tmp_path: Path,
) -> None:
    def seg(t: float, i: int, n: int = 1) -> tcpcap.Packet:
        frame = _frame(SRC, DST, 40000, 5201, 1 + i * MSS, 1, n * MSS)
        (packet,) = tcpcap.read_pcap(_pcap(tmp_path / "one.pcap", [(t, frame)]))
        return packet

    flow = ("10.0.0.2", 40000, "10.0.0.3", 5201)
    # 0, 2 (ahead of 1: reordered), 1, then 1 and 2 again (a timeout: both had arrived),
    # 3-4 as one frame, 4 again, 5
    rx = [seg(0, 0), seg(1, 2), seg(2, 1), seg(3, 1), seg(4, 2), seg(5, 3, 2), seg(6, 4), seg(7, 5)]
    assert tcpcap.duplicates(rx, flow, MSS) == 3
    # 2 arrived twice before 1 ever did: the second is a duplicate, 1 is not
    assert tcpcap.duplicates([seg(0, 0), seg(1, 2), seg(2, 2), seg(3, 1)], flow, MSS) == 1
    # a resent frame carrying one old and one new segment brings something new
    assert tcpcap.duplicates([seg(0, 0), seg(1, 0, 2)], flow, MSS) == 0
    assert tcpcap.duplicates([], flow, MSS) == 0


def test_not_a_pcap_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "x.pcap"
    bad.write_bytes(b"\x0a\x0d\x0d\x0a" + b"\0" * 40)  # pcapng
    with pytest.raises(tcpcap.PcapError, match="not a classic pcap"):
        list(tcpcap.read_pcap(bad))


def _outage(tmp: Path) -> tuple[Path, Path]:
    """Seed 003's BBM at the sender: segments every 10 ms from t=100 (ACKed 1 ms later),
    the circuit dark from 100.045 to 100.6; segment 5 (100.05) is lost, resent at the RTO
    (100.25, lost too) and again after the doubled one (100.65, arrives), then 6-9 follow."""
    tx, rx = [], []
    for i in range(5):
        t, seq = 100.0 + i * 0.01, 1 + i * MSS
        tx.append((t, _frame(SRC, DST, 40000, 5201, seq, 1, MSS)))
        rx.append((t + 0.0005, _frame(SRC, DST, 40000, 5201, seq, 1, MSS)))
        tx.append((t + 0.001, _frame(DST, SRC, 5201, 40000, 1, seq + MSS, 0, 0x10)))
    five = 1 + 5 * MSS
    for t in (100.05, 100.25):  # into the dark: neither arrives nor is ACKed
        tx.append((t, _frame(SRC, DST, 40000, 5201, five, 1, MSS)))
    for i in range(5, 10):
        t, seq = 100.65 + (i - 5) * 0.01, 1 + i * MSS
        tx.append((t, _frame(SRC, DST, 40000, 5201, seq, 1, MSS)))
        rx.append((t + 0.0005, _frame(SRC, DST, 40000, 5201, seq, 1, MSS)))
        tx.append((t + 0.001, _frame(DST, SRC, 5201, 40000, 1, seq + MSS, 0, 0x10)))
    return _pcap(tmp / "tx.pcap", tx), _pcap(tmp / "rx.pcap", rx)


def test_the_unavailability_is_the_senders_gap_as_the_seeds_the_receivers_beside_it(
    tmp_path: Path,
) -> None:
    tx, rx = _outage(tmp_path)
    doc = capture.analyse(tx, rx, port=5201, request_t=100.045, rtt_window_s=1.0)
    # the sender's sniffer saw the resends at 100.25 and 100.65: its longest silence is the
    # doubled RTO between them (seed 003: "between two and three times RTO_min")
    assert doc["sender_gap_ms"] == pytest.approx(400.0, abs=0.01)
    assert doc["sender_gap_at_ms"] == pytest.approx(205.0, abs=0.01)
    # the receiver saw nothing from segment 4 (100.0405) to the resent 5 (100.6505)
    assert doc["longest_gap_ms"] == pytest.approx(610.0, abs=0.01)
    # before the outage: 1 ms between a segment and its ACK, 9 ms to the next segment
    assert doc["sender_gap_before_ms"] is None  # nothing 0.5 s into the stream before it
    assert (doc["segments_sent"], doc["retransmitted"]) == (12, 2)
    assert doc["retransmitted_pct"] == pytest.approx(200 / 12)
    assert doc["stream_s"] == pytest.approx(0.69, abs=1e-6)  # loss over the whole stream
