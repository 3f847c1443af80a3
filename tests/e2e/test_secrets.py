"""The ODL password stays secret: the two-site ODL fabric's emulator draws a random one and
writes it to a file (mode 0600) that the inventory names; it must appear in no log line
(wire logs included, ``-vv``), no journal row, no API response, no error message and no
``reroute inventory check`` output. A wrong password is refused and not echoed either.
"""

from __future__ import annotations

import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from fabric import fabric
from fabric.fabric import Fabric
from services.reroute.model.topology import load_topology
from tests.e2e.conftest import CLI, ROOT, leftovers, reroute

pytestmark = pytest.mark.fabric
TOPOLOGY = ROOT / "topologies" / "two-site-odl.yaml"
FLOW = "10.10.0.1>10.10.0.2"
TOKEN = "secrets-test-operator-token"


@dataclass(frozen=True, slots=True)
class Site:
    fab: Fabric
    password: str


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    topo = load_topology(TOPOLOGY)
    odl = {"odl_stats_s": 0.5}  # what ODL's poll costs is not what is tested here
    fab = fabric.up(topo, options=odl)
    try:
        secret = fab.state.dir / "odl-password"
        password = secret.read_text().splitlines()[0]
        assert len(password) >= 12 and secret.stat().st_mode & 0o077 == 0
        yield Site(fab=fab, password=password)
    finally:
        fabric.down(topo.name)
    assert leftovers(topo.name) == []


def inventory(site: Site, tmp_path: Path, password: dict[str, str] | None = None) -> Path:
    """The fabric's inventory with its state (journal) in ``tmp_path``; the password file
    named absolutely, or ``password`` instead."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    doc = yaml.safe_load(site.fab.state.inventory.read_text())
    doc["state_dir"] = str(tmp_path / "state")
    for device in doc["devices"].values():
        if device["driver"] == "odl":
            device["password"] = password or {"file": str(site.fab.state.dir / "odl-password")}
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def journal_text(path: Path) -> str:
    """Every row of every table of the journal, as SQL."""
    with sqlite3.connect(path) as db:
        return "\n".join(db.iterdump())


def test_apply_and_check_never_show_the_password(site: Site, tmp_path: Path) -> None:
    inv = inventory(site, tmp_path)
    common = ("--topology", str(TOPOLOGY), "--inventory", str(inv))
    check = reroute("-vv", "inventory", "check", *common)
    moved = reroute("-vv", "apply", *common, "--flow", FLOW, "--to", "standby")
    back = reroute("-vv", "apply", *common, "--flow", FLOW, "--to", "primary")
    assert "ready" in check.stdout and "done" in moved.stdout and "done" in back.stdout
    wire = moved.stderr + back.stderr
    assert "reroute.wire.odl.sw1" in wire and "> PUT " in wire  # the wire log was on
    for output in (check, moved, back):
        assert site.password not in output.stdout + output.stderr
    journal = journal_text(tmp_path / "state" / "journal.sqlite")
    assert "standby" in journal and site.password not in journal


def test_a_wrong_password_is_refused_and_not_echoed(
    site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "not-the-password-" + site.password[::-1]
    monkeypatch.setenv("REROUTE_TEST_WRONG_ODL", wrong)
    inv = inventory(site, tmp_path, password={"env": "REROUTE_TEST_WRONG_ODL"})
    common = ("--topology", str(TOPOLOGY), "--inventory", str(inv))
    check = reroute("-vv", "inventory", "check", *common, check=False)
    moved = reroute("-vv", "apply", *common, "--flow", FLOW, "--to", "standby", check=False)
    assert check.returncode != 0 and moved.returncode != 0
    assert "401" in check.stdout + check.stderr or "auth" in check.stdout + check.stderr
    for output in (check, moved):
        text = output.stdout + output.stderr
        assert wrong not in text and site.password not in text
    unset = inventory(site, tmp_path / "unset", password={"env": "REROUTE_TEST_NO_SUCH_VAR"})
    missing = reroute("inventory", "check", "--topology", str(TOPOLOGY), "--inventory",
                      str(unset), check=False)  # fmt: skip
    assert missing.returncode != 0 and "REROUTE_TEST_NO_SUCH_VAR" in missing.stderr


def test_the_service_never_answers_or_logs_the_password(site: Site, tmp_path: Path) -> None:
    inv = inventory(site, tmp_path)
    config = tmp_path / "serve.yaml"
    config.write_text(
        f"topology: {TOPOLOGY}\ninventory: {inv}\nlisten: 127.0.0.1:0\n"
        f"tokens: [{{token: {TOKEN}, role: operator}}]\n"
    )
    out = tmp_path / "serve.log"  # a file: -vv logs would fill a pipe nobody reads
    with out.open("w") as sink:
        serve = subprocess.Popen(
            [*CLI, "-vv", "serve", "--config", str(config)],
            cwd=ROOT, text=True, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    answers: list[str] = []
    try:
        url = _address(out, serve)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            moved = http.post("/v1/reroutes?wait=20", json={"flows": [FLOW], "to_path": "standby"})
            assert moved.status_code == 201 and moved.json()["state"] == "done", moved.text
            back = http.post("/v1/reroutes?wait=20", json={"flows": [FLOW], "to_path": "primary"})
            assert back.status_code == 201, back.text
            bad = http.post("/v1/reroutes", json={"flows": [FLOW], "to_path": "nowhere"})
            assert bad.status_code >= 400
            answers += [moved.text, back.text, bad.text]
            answers += [http.get(p).text for p in ("/v1/reroutes", "/v1/flows", "/v1/health")]
            answers.append(http.get(f"/v1/reroutes/{moved.json()['id']}").text)
    finally:
        serve.terminate()
        serve.wait(timeout=20)
    log = out.read_text()
    assert all(site.password not in a for a in answers)
    assert "reroute.wire.odl" in log and site.password not in log
    assert site.password not in journal_text(tmp_path / "state" / "journal.sqlite")


def _address(log: Path, serve: subprocess.Popen[str], wait_s: float = 20.0) -> str:
    """The service's URL, from the line of its output that announces it."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if "http://" in line:
                return "http://" + line.split("http://")[1].split()[0]
        if serve.poll() is not None:
            raise AssertionError(f"serve exited {serve.returncode}: {log.read_text()}")
        time.sleep(0.05)
    raise AssertionError(f"serve announced no address in {wait_s} s: {log.read_text()}")
