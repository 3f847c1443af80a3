"""Fuzzed requests (hypothesis: random methods, paths, queries, headers, JSON and bytes)
never make a 5xx and never change anything: the journal stays empty, the tables equal.

No request generated here is a valid change: a well-formed body always names a path the
topology lacks, unless it is a dry run -- so any state change would be a bug."""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.reroute.model.topology import load_topology
from services.reroute.service.auth import PUBLIC
from services.reroute.store.sqlite import Journal
from tests.unit.services.service.conftest import NGNCS, OPERATOR, READER, ServerThread
from tests.unit.services.service.conftest import settings as service_settings
from tests.unit.services.service.fakes import FakeFabric

TOPO = load_topology(NGNCS)
FLOWS = ["10.0.0.2>10.0.0.3", "10.0.0.2>10.0.0.3,udp,dport=5", "10.0.0.9>10.0.0.3", ">", ""]
PATHS = ["/v1/reroutes", "/v1/reroutes/x", "/v1/topology", "/v1/flows", "/metrics", "/healthz"]
printable = st.text(alphabet=string.printable.strip(), max_size=30)
segment = st.text(
    alphabet=string.ascii_letters + string.digits + "-._~%:@!$&'()*+,;=", min_size=1, max_size=12
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
bad_path = st.text(max_size=12).filter(lambda p: p not in TOPO.paths)


@st.composite
def reroute_bodies(draw: st.DrawFn) -> dict[str, object]:
    """Nearly valid bodies: real-looking fields, each possibly wrong; never a valid change."""
    body: dict[str, object] = {
        "flows": draw(st.lists(st.sampled_from(FLOWS) | st.text(max_size=20), max_size=3)),
        "to_path": draw(bad_path),
    }
    extra = {
        "strategy": st.sampled_from(["mbb", "bbm", "MBB", ""]) | json_values,
        "drain_ms": st.floats() | st.integers() | json_values,
        "via": st.sampled_from([*TOPO.paths, None]) | json_values,
        "lock_timeout_ms": st.floats(),
        "dry_run": st.booleans() | json_values,
        "unexpected": json_values,
    }
    for key, values in extra.items():
        if draw(st.booleans()):
            body[key] = draw(values)
    if body.get("dry_run") is True and draw(st.booleans()):
        body["to_path"] = draw(st.sampled_from(list(TOPO.paths)))
    return body


requests = st.fixed_dictionaries(
    {
        "method": st.sampled_from(["GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"]),
        "path": st.sampled_from(PATHS)
        | st.lists(segment, min_size=1, max_size=4).map(lambda s: "/" + "/".join(s)),
        "params": st.dictionaries(
            st.sampled_from(["wait", "state", "flow", "limit"]) | segment,
            st.sampled_from(["0", "-1", "1e9", "nan", "done", FLOWS[0]]) | printable,
            max_size=3,
        ),
        "token": st.sampled_from([None, OPERATOR, READER, "", "x" * 30]),
        "key": st.none() | printable,
        "body": st.none() | reroute_bodies() | json_values | st.binary(max_size=40),
    }
).filter(lambda r: r["path"].rstrip("/") != "/v1/events")  # a stream: it does not end


@pytest.fixture(scope="module")
def fuzz_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Path]]:
    journal = tmp_path_factory.mktemp("fuzz") / "journal.sqlite"
    fake = FakeFabric(TOPO)
    before = fake.snapshot()
    with ServerThread(service_settings(TOPO, journal), fake.drivers) as srv, srv.http(None) as http:
        yield http, journal
    assert fake.snapshot() == before


def send(http: httpx.Client, r: dict[str, object]) -> httpx.Response:
    headers = {}
    if r["token"] is not None:
        headers["Authorization"] = f"Bearer {r['token']}".strip()
    if r["key"] is not None:
        headers["Idempotency-Key"] = str(r["key"]).strip() or "-"
    body = r["body"]
    if not isinstance(body, bytes):  # NaN and Infinity too, as Python's json writes them
        body = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    return http.request(
        str(r["method"]), str(r["path"]), params=r["params"], headers=headers, content=body
    )


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(r=requests)
def test_fuzzed_requests_never_5xx_never_change_state(
    fuzz_target: tuple[httpx.Client, Path], r: dict[str, object]
) -> None:
    answer = send(fuzz_target[0], r)
    assert answer.status_code < 500, (r, answer.status_code, answer.text)
    if r["token"] not in (OPERATOR, READER) and r["path"] not in PUBLIC:
        assert answer.status_code == 401, (r, answer.status_code)


def test_after_fuzzing_the_journal_is_empty(fuzz_target: tuple[httpx.Client, Path]) -> None:
    reader = Journal(fuzz_target[1])
    try:
        assert reader.history(10) == []
    finally:
        reader.close()
