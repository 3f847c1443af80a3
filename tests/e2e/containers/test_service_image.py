"""The service's own image (docker/service/, ``reroute-service:latest``): started with a
config volume as an operator would, it answers ``/healthz`` (its devices are not reachable
from it: it serves all the same, degraded), Docker's health check turns healthy, the API
wants the volume's token, and ``docker stop`` drains it to a clean exit."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

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
