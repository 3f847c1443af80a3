"""The numbers of ``reroute demo`` and the table that shows them. Pure: no I/O.

One :class:`RunNumbers` per strategy (BBM, MBB), built from the UDP probe's report, the
iperf3 result and the reconfiguration's timings; :func:`table` puts them next to seed 003's
figures (Tables 4.2 and 4.7), "-" where the seed did not measure a thing.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from fabric.traffic.iperf import Interval, IperfResult

# seed 003, single stream: (BBM, MBB)
SEED_003_LOSS_PCT = (2.8, 0.93)
SEED_003_GAP_MS = (598.0, 121.0)  # link unavailability
SEED_003_DIP = ("60 % (6/10 Gb/s)", "6 % (0.6/10 Gb/s)")
NONE = "-"


@dataclass(frozen=True, slots=True, kw_only=True)
class UdpNumbers:
    """What the sequence-numbered probe saw at the receiver."""

    sent: int
    lost: int
    reordered: int
    longest_gap_ms: float | None
    gap_at_ms: float | None  # when the longest gap began, ms after the reroute request

    @property
    def loss_pct(self) -> float:
        """The share of probe packets lost, in percent."""
        return 100.0 * self.lost / self.sent if self.sent else 0.0

    @classmethod
    def from_probe(cls, report: Mapping[str, Any], *, request_ns: int) -> UdpNumbers:
        """From the JSON of ``reroute probe recv --json``; ``request_ns`` is when the reroute
        was asked for, on the probe's clock (CLOCK_MONOTONIC)."""
        gap = report["longest_gap"]
        return cls(
            sent=int(report["sent"]),
            lost=int(report["lost"]),
            reordered=int(report["reordered"]),
            longest_gap_ms=None if gap is None else float(gap["ms"]),
            gap_at_ms=None if gap is None else (int(gap["start_ns"]) - request_ns) / 1e6,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TcpNumbers:
    """The iperf3 stream: sender retransmissions and the rate of each reporting interval.

    Rates are judged over windows of two intervals: iperf3 paces whole 128 KiB writes, so at
    100 Mbit/s single 100 ms intervals alternate between 94 and 105 Mbit/s on a quiet path.
    """

    retransmits: int
    interval_s: float
    series_mbps: tuple[float, ...]
    # of the retransmissions, segments the receiver had already (it said so: D-SACK), so
    # not lost: resent on reordering or a late ACK (fabric.drops.needless_resends); None:
    # not measured
    needless: int | None = None

    @property
    def windows_mbps(self) -> list[float]:
        """The rate of each sliding window of two reports, in Mb/s."""
        pairs = zip(self.series_mbps, self.series_mbps[1:], strict=False)
        return [(a + b) / 2 for a, b in pairs] or list(self.series_mbps)

    @property
    def median_mbps(self) -> float:
        """The median windowed rate."""
        return statistics.median(self.windows_mbps) if self.series_mbps else 0.0

    @property
    def min_mbps(self) -> float:
        """The lowest windowed rate."""
        return min(self.windows_mbps, default=0.0)

    @property
    def dip_pct(self) -> float:
        """The dip: how far the lowest rate falls below the median, in percent."""
        if self.median_mbps <= 0:
            return 0.0
        return 100.0 * (self.median_mbps - self.min_mbps) / self.median_mbps

    @property
    def stalled_ms(self) -> float:
        """Time in intervals below half the median rate."""
        slow = [r for r in self.series_mbps if r < self.median_mbps / 2]
        return len(slow) * self.interval_s * 1000

    @classmethod
    def from_iperf(
        cls, result: IperfResult, interval_s: float, *, needless: int | None = None
    ) -> TcpNumbers:
        """The numbers of an iperf3 run with reports every ``interval_s`` (``needless``:
        its sender's D-SACKed resends over the run)."""
        whole = whole_intervals(result.intervals, interval_s)
        return cls(
            retransmits=result.retransmits or 0,
            interval_s=interval_s,
            series_mbps=tuple(i.bits_per_second / 1e6 for i in whole),
            needless=needless,
        )

    def to_dict(self) -> dict[str, Any]:
        """The numbers as a JSON-ready dict, derived ones included."""
        derived = ("median_mbps", "min_mbps", "dip_pct", "stalled_ms")
        return {**asdict(self), **{name: getattr(self, name) for name in derived}}


def whole_intervals(intervals: Sequence[Interval], interval_s: float) -> list[Interval]:
    """Intervals at least half as long as asked (iperf3 may end on a sliver of one)."""
    return [i for i in intervals if i.end_s - i.start_s >= interval_s / 2]


@dataclass(frozen=True, slots=True, kw_only=True)
class Timing:
    """Milliseconds from the reroute request: until the moved traffic runs on the new path
    (its last shift done and the new circuit locked), until the reroute ended (cleanup
    included); and the emulator's switching + drawn lock time of the new circuit."""

    new_path_ms: float
    total_ms: float
    switch_ms: float
    lock_ms: float

    @property
    def dark_ms(self) -> float:
        """How long the new circuit was dark: switching plus lock."""
        return self.switch_ms + self.lock_ms

    @property
    def overhead_ms(self) -> float:
        """Time to the new path beyond the dark time."""
        return self.new_path_ms - self.dark_ms


@dataclass(frozen=True, slots=True, kw_only=True)
class RunNumbers:
    """One measured run; ``timing`` is None for the control run (nothing reconfigured)."""

    strategy: str
    udp: UdpNumbers
    tcp: TcpNumbers
    timing: Timing | None
    fabric_drops: int  # packets (UDP and TCP) the fabric's OVS dropped in its receive buffers
    line_drops: int = 0  # packets a line-rate cap's queue (tbf) dropped: the line was full
    # OVS's sends that failed (its log's lines, rate-limited): packets lost uncounted when
    # its one send socket's buffer was full (fabric.lines); 0 where the fabric is sound
    send_failures: int = 0
    # every other drop counter that moved during the run (fabric.drops), by name
    other_drops: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The run's numbers as a JSON-ready dict, derived ones included."""
        doc = asdict(self)
        doc["udp"]["loss_pct"] = self.udp.loss_pct
        doc["tcp"] = self.tcp.to_dict()
        if self.timing is not None:
            t = self.timing
            doc["timing"] |= {"dark_ms": t.dark_ms, "overhead_ms": t.overhead_ms}
        return doc


Cell = Callable[[RunNumbers], str]


def _timed(cell: Callable[[Timing], str]) -> Cell:
    return lambda r: NONE if r.timing is None else cell(r.timing)


def _lost(r: RunNumbers) -> str:
    return f"{r.udp.lost} ({r.udp.loss_pct:.2f} %)"


def _gap(r: RunNumbers) -> str:
    return NONE if r.udp.longest_gap_ms is None else f"{r.udp.longest_gap_ms:.1f}"


def _gap_at(r: RunNumbers) -> str:
    """When the longest gap began, after the request; none where nothing was requested
    (the run with nothing moved has a gap, but no request to time it from)."""
    if r.timing is None or r.udp.gap_at_ms is None:
        return NONE
    return f"{r.udp.gap_at_ms:+.0f}"


def _or_none(n: int | None) -> str:
    return NONE if n is None else f"{n}"


def _dip(r: RunNumbers) -> str:
    return f"{r.tcp.dip_pct:.0f} % ({r.tcp.min_mbps:.0f}/{r.tcp.median_mbps:.0f} Mb/s)"


(SEED_BBM_LOSS, SEED_MBB_LOSS), (SEED_BBM_GAP, SEED_MBB_GAP) = SEED_003_LOSS_PCT, SEED_003_GAP_MS
UNMEASURED = (NONE, NONE)
# label, the cell of a measured run, seed 003's (BBM, MBB)
ROWS: tuple[tuple[str, Cell, tuple[str, str]], ...] = (
    ("UDP probe packets sent", lambda r: f"{r.udp.sent}", UNMEASURED),
    ("UDP packets lost", _lost, (f"{SEED_BBM_LOSS:.2f} %", f"{SEED_MBB_LOSS:.2f} %")),
    ("UDP packets reordered", lambda r: f"{r.udp.reordered}", UNMEASURED),
    ("dropped by the fabric itself (OVS rx)", lambda r: f"{r.fabric_drops}", UNMEASURED),
    ("longest gap = unavailability (ms)", _gap, (f"{SEED_BBM_GAP:.0f}", f"{SEED_MBB_GAP:.0f}")),
    ("  it began (ms after the request)", _gap_at, UNMEASURED),
    ("TCP retransmissions", lambda r: f"{r.tcp.retransmits}", UNMEASURED),
    ("  of them not needed (D-SACK)", lambda r: _or_none(r.tcp.needless), UNMEASURED),
    ("TCP dip: min/median of 200 ms", _dip, SEED_003_DIP),
    ("TCP time below half rate (ms)", lambda r: f"{r.tcp.stalled_ms:.0f}", UNMEASURED),
    ("request -> traffic on new path (ms)", _timed(lambda t: f"{t.new_path_ms:.0f}"), UNMEASURED),
    ("request -> done, cleanup incl. (ms)", _timed(lambda t: f"{t.total_ms:.0f}"), UNMEASURED),
    (
        "emulator switching + drawn lock (ms)",
        _timed(lambda t: f"{t.switch_ms:.0f} + {t.lock_ms:.0f} = {t.dark_ms:.0f}"),
        UNMEASURED,
    ),
    ("overhead over switching + lock (ms)", _timed(lambda t: f"{t.overhead_ms:.0f}"), UNMEASURED),
)
# seed 003 calls BBM "OST" (plain optical switching); every table says "seed 003 OST"
HEADER = ("", "BBM", "MBB", "nothing moved", "seed 003 OST", "seed 003 MBB")


def rows(runs: Sequence[RunNumbers]) -> list[tuple[str, ...]]:
    """The table: a label, one cell per run (BBM, MBB, control), seed 003's BBM and MBB."""
    return [(label, *(cell(r) for r in runs), *seed) for label, cell, seed in ROWS]


def table(runs: Sequence[RunNumbers]) -> str:
    """The rows as aligned text under ``HEADER``: labels left, values right."""
    body = [HEADER, *rows(runs)]
    widths = [max(len(r[c]) for r in body) for c in range(len(HEADER))]
    lines = [_line(r, widths) for r in body]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _line(row: tuple[str, ...], widths: list[int]) -> str:
    label, *values = row
    cells = [label.ljust(widths[0])] + [v.rjust(w) for v, w in zip(values, widths[1:], strict=True)]
    return "  ".join(cells).rstrip()


@dataclass(frozen=True, slots=True, kw_only=True)
class Results:
    """The demo's three runs: BBM, MBB, and the same traffic with nothing reconfigured."""

    bbm: RunNumbers
    mbb: RunNumbers
    control: RunNumbers

    @property
    def runs(self) -> tuple[RunNumbers, RunNumbers, RunNumbers]:
        """The three runs: BBM, MBB, nothing moved."""
        return self.bbm, self.mbb, self.control


def document(results: Results, *, between_runs: str, wall_s: float) -> dict[str, Any]:
    """The table's numbers as JSON-ready data (``reroute demo --json``)."""
    seed = {
        s: {"loss_pct": loss, "longest_gap_ms": gap}
        for s, loss, gap in zip(("bbm", "mbb"), SEED_003_LOSS_PCT, SEED_003_GAP_MS, strict=True)
    }
    return {
        **{r.strategy: r.to_dict() for r in results.runs},
        "seed_003": seed,
        "between_runs": between_runs,
        "wall_s": wall_s,
        "table": [list(r) for r in (HEADER, *rows(results.runs))],
    }


def socket_drops(ss_output: str) -> int:
    """The packets dropped by every socket ``ss -a -m`` lists (the ``d`` of ``skmem``)."""
    return sum(int(d) for d in re.findall(r"skmem:\([^)]*\bd(\d+)\)", ss_output))


def qdisc_drops(tc_output: str) -> int:
    """The packets dropped by every device's root queue ``tc -s qdisc show`` lists
    (``dropped N``): a line-rate cap's tbf when what is sent exceeds the line. A root counts
    its children's drops too (a tbf's fifo), so children are not added again."""
    blocks = re.split(r"^(?=qdisc )", tc_output, flags=re.MULTILINE)
    roots = (b for b in blocks if re.match(r"qdisc \S+ \S+ dev \S+ root\b", b))
    return sum(int(d) for b in roots for d in re.findall(r"\(dropped (\d+),", b))


def explain(results: Results, temporary: str) -> list[str]:
    """Why the columns differ, in the numbers of this run."""
    bbm, mbb, control = results.runs
    lines = [
        "seed 003 OST is the seed's plain optical switching, our BBM (README: References).",
        "BBM breaks the old circuit first: the traffic is dark until the new one locks"
        f" ({_gap(bbm)} ms gap; switching + lock {_dark(bbm)} ms).",
        f"MBB parks the traffic on the electrical temporary path ({temporary}) while ost1"
        f" switches and the transceivers lock ({_dark(mbb)} ms), and moves it onto the new"
        " circuit only once its ports are up: no packet meets a dark fibre.",
    ]
    if mbb.udp.lost or control.udp.lost:
        lines.append(
            f"MBB lost {mbb.udp.lost} probe packet(s) (longest gap {_gap(mbb)} ms at"
            f" {_gap_at(mbb)} ms) while the fabric's OVS dropped {mbb.fabric_drops} packets in"
            f" its receive buffers; with nothing moved the probe lost {control.udp.lost}. The"
            " emulated fabric (one userspace OVS thread forwards everything) drops packets by"
            " itself when the CPU is busy."
        )
    if mbb.tcp.retransmits and mbb.tcp.needless is not None:
        counted = mbb.fabric_drops + mbb.line_drops - mbb.udp.lost
        lines.append(
            f"MBB's TCP resent {mbb.tcp.retransmits} segment(s): {mbb.tcp.needless} its"
            " receiver already had (D-SACK: reordered or late at the shift, not lost), and"
            f" {mbb.tcp.retransmits - mbb.tcp.needless} against {counted} TCP packet(s) the"
            " fabric dropped by itself."
        )
    if bbm.timing is not None and mbb.timing is not None:
        b, m = bbm.timing, mbb.timing
        lines.append(
            f"request -> traffic on new path: BBM {b.new_path_ms:.0f} ms, MBB"
            f" {m.new_path_ms:.0f} ms. Each run met its own lock draw ({b.lock_ms:.0f} and"
            f" {m.lock_ms:.0f} ms), and MBB also parks and swaps the traffic ({m.overhead_ms:.0f}"
            f" ms beyond the dark time, BBM {b.overhead_ms:.0f}): MBB is not quicker to the new"
            " path, its traffic just never goes without one."
        )
    return lines


def _dark(r: RunNumbers) -> str:
    return NONE if r.timing is None else f"{r.timing.dark_ms:.0f}"
