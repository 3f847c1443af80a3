"""A site killed in the middle of its failover (``docker kill site1``) recovers when it
restarts: its journal, on a volume, shows the cut reroute; the restarted service rolls it
back, its monitor fails over again, and both sites end on standby with traffic flowing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.containers.deployment import (
    Deployment,
    docker,
    leftovers,
    ping_rtt_ms,
    wait_reroute,
)

pytestmark = pytest.mark.containers
DRAIN_MS = 8000  # site1's failover drains this long: the kill lands inside it


@pytest.fixture
def dep() -> Iterator[Deployment]:
    deployment = Deployment.up(SITE1_MONITOR_ARGS=f"--drain-ms {DRAIN_MS}")
    try:
        yield deployment
    finally:
        deployment.down()
        assert leftovers() == []


def test_docker_kill_mid_failover_recovers_on_restart(dep: Deployment) -> None:
    dep.set_delay(40)
    running = wait_reroute(dep, "site1", "standby", ["running"], timeout=20)
    docker("kill", "site1")
    assert docker("inspect", "-f", "{{.State.Running}}", "site1").strip() == "false"
    docker("start", "site1")
    dep.wait_ready("site1")
    assert "(restarted)" in dep.logs("site1")
    with dep.client("site1") as client:
        cut = client.get(running.id)  # the journal survived on its volume
    assert cut.state == "rolled_back", cut
    assert "interrupted" in (cut.error or ""), cut
    again = wait_reroute(dep, "site1", "standby", ["done"], timeout=30, exclude=[running.id])
    wait_reroute(dep, "site2", "standby", ["done"])
    for site in ("site1", "site2"):
        with dep.client(site) as client:
            assert client.flows()["standby"] == ("10.10.0.1/32>10.10.0.2/32",), site
    assert ping_rtt_ms(dep, "site1") < 5
    print(f"cut reroute {running.id}: {cut.state}; after the restart {again.id}: {again.state}")
