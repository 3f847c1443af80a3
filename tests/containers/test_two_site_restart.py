"""A site killed in the middle of its failover (``docker kill site1``) recovers when it
restarts: its journal, on a volume, still holds the cut reroute; the restarted service rolls
it back, its monitor fails over again, and both sites end on standby with traffic flowing.

To land the kill inside the failover, site1's switch hangs first (SIGSTOP of its
ovs-vswitchd): its data plane stops, both monitors fire, and site1's reroute waits on the
switch (up to the driver's 5 s timeout) when the site is killed."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.containers.deployment import (
    NAME,
    Deployment,
    docker,
    leftovers,
    ping_rtt_ms,
    wait_reroute,
)

pytestmark = pytest.mark.containers
VSWITCHD_PID = f"/run/reroute/{NAME}/ovs/ovs-vswitchd.pid"


@pytest.fixture
def dep() -> Iterator[Deployment]:
    deployment = Deployment.up()
    try:
        yield deployment
    finally:
        deployment.down()
        assert leftovers() == []


def test_docker_kill_mid_failover_recovers_on_restart(dep: Deployment) -> None:
    docker("exec", "site1", "sh", "-c", f"kill -STOP $(cat {VSWITCHD_PID})")
    running = wait_reroute(dep, "site1", "standby", ["running"], timeout=10)
    docker("kill", "site1")
    killed_at = time.monotonic()
    assert docker("inspect", "-f", "{{.State.Running}}", "site1").strip() == "false"
    docker("start", "site1")
    dep.wait_ready("site1")
    ready_s = time.monotonic() - killed_at
    assert "(restarted)" in dep.logs("site1")
    with dep.client("site1") as client:
        cut = client.get(running.id)  # the journal survived on its volume
    assert cut.state == "rolled_back", cut
    assert "interrupted" in (cut.error or ""), cut
    # site1 restarted on the long-haul path; site2 has failed over meanwhile. A long-haul
    # delay that the restarted monitor sees as a degradation makes site1 follow.
    dep.set_delay(80)
    again = wait_reroute(dep, "site1", "standby", ["done"], timeout=30, exclude=[running.id])
    wait_reroute(dep, "site2", "standby", ["done"])
    for site in ("site1", "site2"):
        with dep.client(site) as client:
            assert client.flows()["standby"] == ("10.10.0.1/32>10.10.0.2/32",), site
    assert ping_rtt_ms(dep, "site1") < 5
    print(
        f"cut reroute {running.id}: {cut.state} ({cut.error}); site1 ready {ready_s:.1f} s "
        f"after the kill; its failover after the restart {again.id}: {again.state}"
    )
