"""``make install`` as a lab server gets it (into a temporary PREFIX, ETC and UNIT_DIR):
the unit passes ``systemd-analyze verify``, and its ExecStart line, run as systemd runs a
``Type=notify`` service, says READY=1 once it serves and STOPPING=1 when SIGTERM drains it."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "operator-token-0123456789"
# as systemd starts it: nothing of this checkout on the path
CLEAN = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("install")
    env = {**CLEAN, "PREFIX": str(base / "opt"), "ETC": str(base / "etc"),
           "UNIT_DIR": str(base / "units")}  # fmt: skip
    done = subprocess.run(
        [str(ROOT / "scripts" / "install.sh")], env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "install: reroute " in done.stdout and " installed" in done.stdout, done.stdout
    return base


def test_the_install_has_its_venv_topologies_config_and_unit(installed: Path) -> None:
    opt = installed / "opt"
    assert (opt / "venv" / "bin" / "reroute").is_file()
    assert (opt / "topologies" / "ngncs-ost.yaml").is_file()
    assert (opt / "topologies" / "inventory.schema.json").is_file()
    assert (opt / "docs" / "openapi.json").is_file()
    config = (installed / "etc" / "reroute.yaml").read_text()
    assert f"topology: {opt}/topologies/ngncs-ost.yaml" in config
    # the installed package is not this checkout (not editable): its own copy of the code
    where = subprocess.run(
        [str(opt / "venv" / "bin" / "python"), "-c", "import services; print(services.__file__)"],
        capture_output=True, text=True, cwd="/", check=True, env=CLEAN,
    ).stdout  # fmt: skip
    assert where.startswith(str(opt / "venv")), where


def test_the_unit_passes_systemd_analyze_verify(installed: Path) -> None:
    unit = installed / "units" / "reroute.service"
    text = unit.read_text()
    assert f"ExecStart={installed}/opt/venv/bin/reroute serve --config {installed}/etc/" in text
    checked = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0 and not checked.stderr.strip(), checked.stderr
    broken = unit.with_name("broken.service")
    broken.write_text(text.replace("/venv/bin/reroute", "/venv/bin/nothing"))
    refused = subprocess.run(
        ["systemd-analyze", "verify", str(broken)], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode != 0 and "nothing" in refused.stderr  # the check can fail


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(60)
    try:
        yield sock, path
    finally:
        sock.close()


def test_execstart_tells_systemd_ready_then_drains_on_sigterm(
    installed: Path, tmp_path: Path, notify_socket: tuple[socket.socket, str]
) -> None:
    """The devices of the inventory do not answer (closed loopback ports): it serves all the
    same, devices down, and says READY=1 (systemd would start what depends on it)."""
    sock, path = notify_socket
    inventory = tmp_path / "inventory.yaml"
    devices = "".join(
        f"  br{i}: {{driver: ovs, target: 'tcp:127.0.0.1:{i}'}}\n" for i in range(1, 5)
    )
    inventory.write_text(
        f"topology: ngncs-ost\nstate_dir: {tmp_path / 'state'}\ndevices:\n{devices}"
        "  ost1: {driver: polatis_scpi, target: 'TCPIP0::127.0.0.1::5::SOCKET'}\n"
    )
    (tmp_path / "tokens").write_text(f"operator {TOKEN}\n")
    config = installed / "etc" / "reroute.yaml"
    config.write_text(
        config.read_text()
        .replace("inventory: inventory.yaml", f"inventory: {inventory}")
        .replace("listen: 127.0.0.1:8080", "listen: 127.0.0.1:0")
        .replace("/run/credentials/reroute.service/tokens", str(tmp_path / "tokens"))
        .replace("/var/lib/reroute/journal.sqlite", str(tmp_path / "journal.sqlite"))
    )
    line = next(
        ln for ln in (installed / "units" / "reroute.service").read_text().splitlines()
        if ln.startswith("ExecStart=")
    )  # fmt: skip
    proc = subprocess.Popen(
        shlex.split(line.removeprefix("ExecStart=")),
        env={**CLEAN, "NOTIFY_SOCKET": path},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/",
    )  # fmt: skip
    try:
        url = proc.stdout.readline().split()[2] if proc.stdout else ""
        assert url.startswith("http://127.0.0.1:"), url
        assert sock.recv(4096).decode().startswith("READY=1")
        health = httpx.get(f"{url}/healthz", timeout=10)
        assert health.status_code == 200 and health.json()["status"] in ("ok", "degraded")
        proc.send_signal(signal.SIGTERM)
        assert sock.recv(4096).decode().startswith("STOPPING=1")
        assert proc.wait(timeout=60) == 0
        said = proc.stderr.read() if proc.stderr else ""
        assert "reroute.lifecycle: shutting down: refusing changes" in said, said
        assert "reroute.lifecycle: shut down: no reroute runs here any more" in said
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
