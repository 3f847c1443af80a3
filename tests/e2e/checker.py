"""A checker of replicated reroutes, as Jepsen checks a history: pure functions over the
devices' own write history (``tests/e2e/history.py`` reads it) and the service's final
answers. Each returns the violations it found, as sentences (empty: none), so a test
asserts ``== []`` and a failure prints the evidence.

- ``final_states``: every accepted request ends in exactly one final state, the same on
  every replica asked;
- ``overlapping``: no two reroutes wrote to one device at overlapping times (and no write
  that belongs to no reroute at all: a deposed replica's late write lands after its
  reroute ended);
- ``after_takeover`` / ``after_successor``: no write from a deposed replica after its
  successor started, on any device (Deliver 1), or after the successor's first write on
  that device (Deliver 4);
- ``one_path``: every flow on exactly one path at the end, read back from the devices;
- ``probe_loss``: the probe lost nothing beyond the fabric's own drops.

A write refused by the device (``refused``: an OpenFlow error such as ``IS_SLAVE``, the
fencing working) changed nothing and is not a write here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from services.reroute.store.records import RerouteState


@dataclass(frozen=True, slots=True, kw_only=True)
class Write:
    """One message a device was handed that changes it (or claims it: ``claim``)."""

    t: float  # wall clock, as the device (or its relay) saw it
    device: str  # the topology's name for it
    writer: str  # the replica (named by the test from the connection's process)
    conn: str  # the device's name for the connection (relay number, peer address)
    what: str
    refused: str | None = None  # the device's error: it changed nothing
    claim: bool = False  # a mastership claim (ROLE_REQUEST), not a change

    @property
    def applied(self) -> bool:
        return self.refused is None and not self.claim


History = Mapping[str, Sequence[Write]]  # device -> its writes in time order


@dataclass(frozen=True, slots=True, kw_only=True)
class Span:
    """A reroute as the service answered it: when it ran, on which devices, and the
    replicas that ran it (the first and any that took it over)."""

    reroute: str
    start: float
    end: float
    devices: frozenset[str]
    runners: frozenset[str]


def final_states(accepted: Iterable[str], answers: Mapping[str, Mapping[str, str]]) -> list[str]:
    """``answers``: replica -> reroute id -> the state it answered. Every accepted id is
    answered, final, and the same by every replica that answers it."""
    bad = []
    for rid in accepted:
        said = {replica: got[rid] for replica, got in answers.items() if rid in got}
        states = set(said.values())
        if not said:
            bad.append(f"{rid}: no replica knows it")
        elif len(states) > 1:
            bad.append(f"{rid}: replicas disagree: {said}")
        elif not RerouteState(next(iter(states))).final:
            bad.append(f"{rid}: never ended: {said}")
    return bad


def _owners(write: Write, spans: Sequence[Span]) -> list[Span]:
    return [
        s
        for s in spans
        if write.device in s.devices and s.start <= write.t <= s.end and write.writer in s.runners
    ]


def overlapping(history: History, spans: Sequence[Span]) -> list[str]:
    """Each applied write belongs to the one reroute its writer ran on that device at that
    time; two reroutes whose writes on one device interleave, or a write of none, fail."""
    bad = []
    for device, writes in history.items():
        last: dict[str, Write] = {}  # reroute -> its last write on the device so far
        for w in (w for w in writes if w.applied):
            owners = _owners(w, spans)
            if not owners:
                bad.append(f"{device}: {_show(w)} belongs to no reroute {w.writer} ran then")
                continue
            if len(owners) > 1:
                both = sorted(s.reroute for s in owners)
                bad.append(f"{device}: {_show(w)}: reroutes {both} were open on it at once")
            for other, prev in last.items():
                if other not in (s.reroute for s in owners) and _open(other, spans, w.t):
                    bad.append(f"{device}: {_show(prev)} ({other}) and {_show(w)} overlap")
            for s in owners:
                last[s.reroute] = w
    return bad


def _open(reroute: str, spans: Sequence[Span], t: float) -> bool:
    return any(s.reroute == reroute and s.start <= t <= s.end for s in spans)


def after_takeover(history: History, deposed: str, started: float) -> list[str]:
    """No applied write by ``deposed`` on any device after ``started`` (when its successor
    started: its first claim or write anywhere, see ``successor_started``)."""
    return [
        f"{device}: {_show(w)} after the successor started at {started:.3f}"
        for device, writes in history.items()
        for w in writes
        if w.writer == deposed and w.applied and w.t > started
    ]


def successor_started(history: History, successor: str, since: float) -> float | None:
    """When ``successor`` first claimed or wrote any device after ``since``."""
    times = [w.t for ws in history.values() for w in ws if w.writer == successor and w.t >= since]
    return min(times, default=None)


def after_successor(
    history: History, deposed: str, since: float, new_term: float | None = None
) -> list[str]:
    """Per device: the first applied write after ``since`` by another replica is the
    successor's; ``deposed`` writes nothing there after it, but in a term of its own: on
    the connection of a claim it made since, which the device granted (fenced: the device
    refuses a write under an older claim), or after ``new_term``, when the replica took a
    new lease as a new owner (its log says when; nothing of the old owner runs on then)."""
    bad = []
    for device, writes in history.items():
        applied = [w for w in writes if w.applied and w.t >= since]
        first = next((w for w in applied if w.writer != deposed), None)
        if first is None:
            continue
        bad += [
            f"{device}: {_show(w)} after its successor's {_show(first)}"
            for w in applied
            if w.writer == deposed
            and w.t > first.t
            and not (new_term is not None and w.t > new_term)
            and not _reclaimed(writes, w, first.t)
        ]
    return bad


def _reclaimed(writes: Sequence[Write], write: Write, since: float) -> bool:
    """``write``'s connection made a claim the device granted after ``since``, before it."""
    return any(
        c.claim and c.refused is None and c.conn == write.conn and c.writer == write.writer
        and since < c.t <= write.t
        for c in writes
    )  # fmt: skip


def one_path(paths: Mapping[str, Sequence[str]]) -> list[str]:
    """``paths``: flow -> every path it was read back on (per direction, from the devices)."""
    return [
        f"{flow}: on {list(found) or 'no path'}"
        for flow, found in paths.items()
        if len(set(found)) != 1
    ]


def probe_loss(lost: int, dropped: int) -> list[str]:
    """The probe lost no more than the fabric dropped itself."""
    return [] if lost <= dropped else [f"the probe lost {lost}, the fabric dropped {dropped}"]


def _show(w: Write) -> str:
    return f"{w.writer}@{w.t:.3f} [{w.conn}] {w.what}"


def excerpt(history: History, around: float, before: float = 2.0, after: float = 10.0) -> str:
    """The history from ``around - before`` to ``around + after``, one line per message,
    every device merged in time order (for a failure's report)."""
    rows = sorted(
        (w for ws in history.values() for w in ws if around - before <= w.t <= around + after),
        key=lambda w: w.t,
    )
    return "\n".join(
        f"{w.t - around:+8.3f} {w.device:6} {w.writer:10} [{w.conn}] {w.what}"
        + (f" REFUSED {w.refused}" if w.refused else "")
        for w in rows
    )
