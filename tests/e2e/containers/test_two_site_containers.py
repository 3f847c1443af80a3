"""The two sites as containers: each site alone in its container, the sites joined only by
data-plane links; raising the long-haul delay (its delay line's HTTP control) makes both
sites' monitors fail over to standby, and an iperf3 stream between the hosts recovers."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests.e2e.containers.deployment import (
    Deployment,
    docker,
    leftovers,
    ping_rtt_ms,
    wait_reroute,
)

pytestmark = pytest.mark.containers


@pytest.fixture(scope="module")
def dep() -> Iterator[Deployment]:
    deployment = Deployment.up()
    try:
        yield deployment
    finally:
        deployment.down()
        assert leftovers() == []


def _addresses(container: str) -> list[str]:
    nets = json.loads(docker("inspect", "-f", "{{json .NetworkSettings.Networks}}", container))
    return [n["IPAddress"] for n in nets.values() if n["IPAddress"]]


CONNECT = """
import socket, sys
for host in sys.argv[1:]:
    try:
        socket.create_connection((host, 8080), timeout=2).close()
        print("reached", host)
    except OSError as exc:
        print("refused", host, exc)
"""


def test_site1_cannot_reach_site2_api(dep: Deployment) -> None:
    targets = [*_addresses("site2"), "site2"]
    assert len(targets) >= 4  # site2 is on its management network and two data-plane links
    out = docker("exec", "site1", "/src/.venv/bin/python", "-c", CONNECT, *targets)
    assert "reached" not in out, out
    # nor from site1's host, which does reach site2's host through the data plane
    out = docker("exec", "site1", "ip", "netns", "exec", "rr-two-site-docker.h1",
                 "/src/.venv/bin/python", "-c", CONNECT, *targets, "10.10.0.2")  # fmt: skip
    assert "reached" not in out, out
    assert ping_rtt_ms(dep, "site1") < 100
    # the API is there: from inside site2, and from the Docker host (published on loopback)
    assert "reached" in docker("exec", "site2", "/src/.venv/bin/python", "-c", CONNECT, "127.0.0.1")
    with dep.client("site2") as client:
        assert client.health().status == "ok"


def test_longhaul_delay_fails_both_sites_over_and_iperf3_recovers(dep: Deployment) -> None:
    for site in ("site1", "site2"):
        with dep.client(site) as client:
            assert client.flows()["longhaul"] == ("10.10.0.1/32>10.10.0.2/32",)
    normal = ping_rtt_ms(dep, "site1")
    assert 25 < normal < 55  # 15 ms each way on the long-haul path
    iperf = dep.iperf(10)
    try:
        time.sleep(3)
        raised_at = time.time()
        assert dep.set_delay(40)["a_to_b_ms"] == 40
        done = {s: wait_reroute(dep, s, "standby", ["done"]) for s in ("site1", "site2")}
        out, err = iperf.communicate(timeout=30)
    finally:
        if iperf.poll() is None:
            iperf.kill()
    for site, view in done.items():
        with dep.client(site) as client:
            assert client.flows()["standby"] == ("10.10.0.1/32>10.10.0.2/32",), site
            assert client.flows()["longhaul"] == (), site
        trigger = next(e for e in dep.events(site) if e["kind"] == "trigger")
        print(f"{site}: trigger {float(str(trigger['t'])) - raised_at:.3f} s after the delay "
              f"was raised, reroute {view.id} {view.state}")  # fmt: skip
    assert ping_rtt_ms(dep, "site1") < 5  # both directions on standby
    assert iperf.returncode == 0, err
    rates = [i["sum"]["bits_per_second"] / 1e6 for i in json.loads(out)["intervals"]]
    print("iperf3 Mb/s per 0.5 s:", " ".join(f"{r:.1f}" for r in rates))
    before, after = max(rates[:5]), rates[-4:]
    assert before > 10  # the stream ran at its cap (20 Mb/s) before
    assert min(after) > 0.5 * before, rates  # and does again at the end, over standby
