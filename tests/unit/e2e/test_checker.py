"""The replica checker on hand-made histories: each check passes a clean history and names
the one violation planted in a bad one."""

from __future__ import annotations

from tests.e2e.checker import (
    Span,
    Write,
    after_successor,
    after_takeover,
    excerpt,
    final_states,
    one_path,
    overlapping,
    probe_loss,
    successor_started,
)
from tests.e2e.history import merged

ALL = frozenset({"br1", "ost1"})


def w(t: float, device: str, writer: str, **kw: object) -> Write:
    return Write(t=t, device=device, writer=writer, conn="c", what=f"w{t}", **kw)  # type: ignore[arg-type]


def test_final_states_one_per_request_agreed_by_every_replica() -> None:
    answers = {
        "A": {"r1": "done", "r2": "rolled_back", "r3": "running"},
        "B": {"r1": "done", "r2": "done", "r3": "running"},
    }
    assert final_states(["r1"], answers) == []
    bad = final_states(["r1", "r2", "r3", "r4"], answers)
    assert [b.split(":")[0] for b in bad] == ["r2", "r3", "r4"]
    assert "disagree" in bad[0] and "never ended" in bad[1] and "no replica" in bad[2]


def test_overlapping_two_reroutes_interleaved_on_one_device() -> None:
    spans = [
        Span(reroute="r1", start=0, end=10, devices=ALL, runners=frozenset({"A"})),
        Span(reroute="r2", start=5, end=20, devices=ALL, runners=frozenset({"B"})),
    ]
    serial = merged([w(1, "br1", "A"), w(9, "br1", "A"), w(11, "br1", "B")])
    assert overlapping(serial, spans) == []
    (bad,) = overlapping(merged([w(1, "br1", "A"), w(6, "br1", "B")]), spans)
    assert bad.startswith("br1: A@1.000") and "B@6.000" in bad and "overlap" in bad


def test_overlapping_a_write_of_no_reroute() -> None:
    """A deposed replica's write after its reroute ended (the successor finished it)."""
    spans = [Span(reroute="r1", start=0, end=10, devices=ALL, runners=frozenset({"A", "B"}))]
    (bad,) = overlapping(merged([w(1, "br1", "A"), w(5, "br1", "B"), w(12, "br1", "A")]), spans)
    assert "A@12.000" in bad and "no reroute" in bad


def test_overlapping_ignores_refused_writes() -> None:
    spans = [Span(reroute="r1", start=0, end=10, devices=ALL, runners=frozenset({"A"}))]
    assert overlapping(merged([w(12, "br1", "A", refused="1/10")]), spans) == []


def test_after_takeover_any_device_after_the_successor_started() -> None:
    history = merged(
        [
            w(1, "br1", "A"),
            w(4, "br1", "B", claim=True),  # the successor starts: a claim
            w(5, "br1", "A", refused="1/10"),  # fenced: fine
            w(6, "ost1", "A"),  # unfenced: lands
        ]
    )
    started = successor_started(history, "B", since=2)
    assert started == 4
    (bad,) = after_takeover(history, "A", started)
    assert bad.startswith("ost1: A@6.000") and "4.000" in bad
    assert after_takeover(merged([w(1, "br1", "A"), w(4, "br1", "B")]), "A", 4) == []


def test_after_successor_per_device() -> None:
    """Per device from its successor's first write there: A on ost1 before B wrote ost1 is
    not counted; after it, it is."""
    history = merged(
        [
            w(1, "br1", "A"),
            w(3, "br1", "B"),
            w(4, "ost1", "A"),
            w(5, "ost1", "B"),
            w(6, "ost1", "A"),
        ]
    )
    (bad,) = after_successor(history, "A", since=2)
    assert bad.startswith("ost1: A@6.000") and "B@5.000" in bad


def test_one_path_and_probe_loss() -> None:
    assert one_path({"f1": ["short", "short"]}) == []
    assert one_path({"f1": ["short", "long"], "f2": []}) == [
        "f1: on ['short', 'long']",
        "f2: on no path",
    ]
    assert probe_loss(3, 3) == [] and probe_loss(4, 3) != []


def test_excerpt_merges_devices_in_time_order() -> None:
    text = excerpt(merged([w(2, "ost1", "A"), w(1, "br1", "B", refused="1/10")]), around=1)
    lines = text.splitlines()
    assert lines[0].startswith("  +0.000 br1") and "REFUSED 1/10" in lines[0]
    assert lines[1].startswith("  +1.000 ost1")


def test_a_deposed_replica_in_a_term_of_its_own_writes_as_its_new_owner() -> None:
    """After its successor's write, the deposed replica's write counts against it unless
    it claimed the device again, granted (a fresh token: the device fences the old ones),
    or it took a new lease as a new owner before it (``new_term``)."""
    late = w(5, "br1", "A")
    history = {"br1": [w(1, "br1", "A"), w(3, "br1", "B"), late]}
    assert len(after_successor(history, "A", since=2)) == 1
    claimed = w(4, "br1", "A", claim=True)
    assert after_successor({"br1": [*history["br1"][:2], claimed, late]}, "A", since=2) == []
    refused = w(4, "br1", "A", claim=True, refused="OFPRRFC_STALE")
    assert len(after_successor({"br1": [*history["br1"][:2], refused, late]}, "A", 2)) == 1
    assert after_successor(history, "A", since=2, new_term=4.5) == []
    assert len(after_successor(history, "A", since=2, new_term=5.5)) == 1
