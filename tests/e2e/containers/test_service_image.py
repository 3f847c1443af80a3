"""The service's own image (docker/service/, ``reroute-service:latest``): started with a
config volume as an operator would, it answers ``/healthz`` (its devices are not reachable
from it: it serves all the same, degraded), Docker's health check turns healthy, the API
wants the volume's token, and ``docker stop`` drains it to a clean exit.

Then against the two-site fabric (docker/two-site/, the sites running their switches alone,
each on its management network): the image manages both sites' switches from its own
container, answers ``/healthz`` ok with both up, and moves a running iperf3 stream from the
long-haul path to standby through its API: the flows read back on the switches, the rtt
drops and the stream keeps its rate."""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

from services.reroute.service.client import RerouteClient
from services.reroute.store.records import RerouteState
from tests.e2e.containers.deployment import (
    FLOW,
    PROJECT,
    Deployment,
    docker,
    leftovers,
    ping_rtt_ms,
)

IMAGE = "reroute-service:latest"
TOKEN = "operator-token-0123456789"
CONFIG = """\
topology: /opt/reroute/topologies/ngncs-ost.yaml
inventory: inventory.yaml
listen: 0.0.0.0:8080
token_file: /etc/reroute/tokens
journal: /var/lib/reroute/journal.sqlite
"""
# the devices: closed ports on the container's own loopback (nothing leaves it)
INVENTORY = """\
topology: ngncs-ost
state_dir: /var/lib/reroute/state
devices:
  br1: {driver: ovs, target: "tcp:127.0.0.1:1"}
  br2: {driver: ovs, target: "tcp:127.0.0.1:2"}
  br3: {driver: ovs, target: "tcp:127.0.0.1:3"}
  br4: {driver: ovs, target: "tcp:127.0.0.1:4"}
  ost1: {driver: polatis_scpi, target: "TCPIP0::127.0.0.1::5::SOCKET"}
"""


def _docker(*args: str, timeout: float = 120) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"docker {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


@pytest.mark.containers
def test_the_service_image_serves_from_a_config_volume_and_drains_on_stop(
    tmp_path: Path,
) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "reroute.yaml").write_text(CONFIG)
    (etc / "inventory.yaml").write_text(INVENTORY)
    (etc / "tokens").write_text(f"operator {TOKEN}\n")
    name = f"reroute-service-test-{uuid.uuid4().hex[:6]}"
    _docker("run", "-d", "--name", name, "-v", f"{etc}:/etc/reroute:ro",
            "-p", "127.0.0.1::8080", IMAGE)  # fmt: skip
    try:
        port = _docker("port", name, "8080/tcp").splitlines()[0].rsplit(":", 1)[1]
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        status = ""
        while time.monotonic() < deadline and status != "healthy":
            status = _docker("inspect", "-f", "{{.State.Health.Status}}", name)
            time.sleep(1)
        assert status == "healthy", _docker("logs", name)
        health = httpx.get(f"{url}/healthz", timeout=10).json()
        assert health["status"] == "degraded", health  # no device answers from in there
        assert httpx.get(f"{url}/v1/reroutes", timeout=10).status_code == 401
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.get(f"{url}/v1/reroutes", headers=auth, timeout=10).status_code == 200
        _docker("stop", "-t", "60", name, timeout=90)
        assert _docker("inspect", "-f", "{{.State.ExitCode}}", name) == "0"
        logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True).stderr
        assert "shut down: no reroute runs here any more" in logs
    finally:
        subprocess.run(["docker", "rm", "-f", "-v", name], capture_output=True, timeout=60)


# the service managing the two-site fabric: both sites' switches over their management
# networks (each site relays its bridge's OpenFlow socket, docker/two-site/openflow-relay.py)
TWO_SITE_CONFIG = """\
topology: /opt/reroute/topologies/two-site-containers.yaml
inventory: inventory.yaml
listen: 0.0.0.0:8080
token_file: /etc/reroute/tokens
journal: /var/lib/reroute/journal.sqlite
"""
OPENFLOW_PORT = 6653


def _mgmt_address(site: str) -> str:
    nets = json.loads(docker("inspect", "-f", "{{json .NetworkSettings.Networks}}", site))
    return str(nets[f"{PROJECT}_{site}-mgmt"]["IPAddress"])


def _gauges(text: str, name: str) -> dict[str, float]:
    found = re.findall(rf'^{name}\{{device="(\w+)"\}} (\S+)$', text, re.M)
    return {device: float(value) for device, value in found}


@pytest.mark.containers
def test_the_service_image_manages_the_two_site_fabric_and_reroutes_its_traffic(
    tmp_path: Path,
) -> None:
    dep = Deployment.up(SITE_SERVE="0", OPENFLOW_LISTEN=f"0.0.0.0:{OPENFLOW_PORT}")
    name = f"reroute-service-two-site-{uuid.uuid4().hex[:6]}"
    try:
        for site in ("site1", "site2"):  # no service of their own: the image's is the only one
            assert "up: switch only" in dep.logs(site), dep.logs(site)
        etc = tmp_path / "etc"
        etc.mkdir()
        (etc / "reroute.yaml").write_text(TWO_SITE_CONFIG)
        targets = {sw: f"tcp:{_mgmt_address(site)}:{OPENFLOW_PORT}"
                   for sw, site in (("sw1", "site1"), ("sw2", "site2"))}  # fmt: skip
        (etc / "inventory.yaml").write_text(
            "topology: two-site-docker\nstate_dir: /var/lib/reroute/state\ndevices:\n"
            + "".join(f'  {sw}: {{driver: ovs, target: "{t}"}}\n' for sw, t in targets.items())
        )
        (etc / "tokens").write_text(f"operator {dep.token}\n")
        # on both sites' management networks (and nothing else of theirs)
        _docker("create", "--name", name, "--network", f"{PROJECT}_site1-mgmt",
                "-v", f"{etc}:/etc/reroute:ro", "-p", "127.0.0.1::8080", IMAGE)  # fmt: skip
        _docker("network", "connect", f"{PROJECT}_site2-mgmt", name)
        _docker("start", name)
        port = _docker("port", name, "8080/tcp").splitlines()[0].rsplit(":", 1)[1]
        url = f"http://127.0.0.1:{port}"
        with RerouteClient(url, dep.token) as client:
            _two_site_reroute(dep, client, url, name)
        _docker("stop", "-t", "60", name, timeout=90)
        assert _docker("inspect", "-f", "{{.State.ExitCode}}", name) == "0"
    finally:
        subprocess.run(["docker", "rm", "-f", "-v", name], capture_output=True, timeout=60)
        dep.down()
        assert leftovers() == []


def _two_site_reroute(dep: Deployment, client: RerouteClient, url: str, name: str) -> None:
    deadline, health = time.monotonic() + 60, {"status": ""}
    while time.monotonic() < deadline and health.get("status") != "ok":
        time.sleep(0.5)
        try:
            health = httpx.get(f"{url}/healthz", timeout=5).json()
        except httpx.HTTPError:  # not listening yet
            continue
    assert health.get("status") == "ok", (health, _docker("logs", name))
    both = "10.10.0.1/32>10.10.0.2/32"
    assert client.flows() == {"longhaul": (both,), "standby": ()}  # read from both switches
    metrics = client.metrics()
    assert _gauges(metrics, "reroute_device_up") == {"sw1": 1.0, "sw2": 1.0}
    assert _gauges(metrics, "reroute_device_actionable") == {"sw1": 1.0, "sw2": 1.0}
    assert 25 < ping_rtt_ms(dep, "site1") < 55  # 15 ms each way on the long-haul path
    iperf = dep.iperf(7)
    try:
        time.sleep(3)
        view = client.create([FLOW], "standby", wait_s=20)
        out, err = iperf.communicate(timeout=30)
    finally:
        if iperf.poll() is None:
            iperf.kill()
    assert view.state is RerouteState.DONE, (view.error, _docker("logs", name))
    described = " ".join(s.description for s in view.steps)
    assert "sw1" in described and "sw2" in described, view.plan  # both sites' switches
    assert client.flows() == {"longhaul": (), "standby": (both,)}  # read back on the switches
    # both directions on standby: one still on the long haul adds its 15 ms (a loaded
    # machine's userspace datapath alone measured 5.9 ms here)
    assert ping_rtt_ms(dep, "site1") < 12
    assert iperf.returncode == 0, err
    report = json.loads(out)
    rates = [i["sum"]["bits_per_second"] / 1e6 for i in report["intervals"]]
    took = (view.finished or 0) - (view.started or 0)
    print(f"reroute {view.id} {view.state.value} in {took:.3f} s;"
          f" iperf3 retransmits {report['end']['sum_sent'].get('retransmits')}, Mb/s per 0.5 s:",
          " ".join(f"{r:.1f}" for r in rates))  # fmt: skip
    before, after = max(rates[:5]), rates[-4:]
    assert before > 10  # the stream ran at its cap (20 Mb/s) before
    assert min(after) > 0.5 * before, rates  # and does again at the end, over standby
    metrics = client.metrics()
    assert 'reroute_reroutes_total{state="done",strategy="mbb"} 1.0' in metrics
