"""A site killed in the middle of its failover (``docker kill site1``) recovers when it
restarts: its journal, on a volume, still holds the cut reroute; the restarted service rolls
it back, its monitor fails over again, and both sites end on standby with traffic flowing.

The failover is the call a monitor makes, here break-before-make with a 10 s gap so the
kill lands inside it: site1's old rules are gone, its new ones not yet made.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.containers.deployment import (
    FLOW,
    Deployment,
    docker,
    leftovers,
    ping_rtt_ms,
    wait_reroute,
)

pytestmark = pytest.mark.containers
GAP_MS = 10_000


@pytest.fixture
def dep() -> Iterator[Deployment]:
    deployment = Deployment.up()
    try:
        yield deployment
    finally:
        deployment.down()
        assert leftovers() == []


def test_docker_kill_mid_failover_recovers_on_restart(dep: Deployment) -> None:
    body = {"flows": [FLOW], "to_path": "standby", "strategy": "bbm", "bbm_gap_ms": GAP_MS}
    answer = httpx.post(
        f"http://127.0.0.1:{dep.ports['site1']}/v1/reroutes",
        json=body,
        headers={"Authorization": f"Bearer {dep.token}", "Idempotency-Key": "kill-test"},
    )
    assert answer.status_code in (201, 202), answer.text
    with dep.client("site1") as client:
        cut = client.get(answer.json()["id"])
        deadline = time.monotonic() + 10
        while not any(s.state == "done" for s in cut.steps) and time.monotonic() < deadline:
            time.sleep(0.1)
            cut = client.get(cut.id)
    assert cut.state == "running", cut  # in its gap: the old rules removed, no new ones
    docker("kill", "site1")
    killed_at = time.monotonic()
    assert docker("inspect", "-f", "{{.State.Running}}", "site1").strip() == "false"
    docker("start", "site1")
    dep.wait_ready("site1", starts=2)
    ready_s = time.monotonic() - killed_at
    assert "(restarted)" in dep.logs("site1")
    with dep.client("site1") as client:
        cut = client.get(cut.id)  # the journal survived on its volume
    assert cut.state == "rolled_back", cut
    assert "interrupted" in (cut.error or ""), cut
    # site2's monitor saw site1 go dark and failed over; site1 follows: the failover its
    # monitor queued before the kill (pending reroutes survive a restart), or, once the
    # long-haul delay is a degradation, its restarted monitor
    dep.set_delay(80)
    again = wait_reroute(dep, "site1", "standby", ["done"], timeout=30, exclude=[cut.id])
    wait_reroute(dep, "site2", "standby", ["done"])
    for site in ("site1", "site2"):
        with dep.client(site) as client:
            assert client.flows()["standby"] == ("10.10.0.1/32>10.10.0.2/32",), site
    assert ping_rtt_ms(dep, "site1") < 5
    print(
        f"cut reroute {cut.id}: {cut.state} ({cut.error}); site1 ready {ready_s:.1f} s "
        f"after the kill; then {again.id}: {again.state}"
    )
