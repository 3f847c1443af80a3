"""The emulated fabric reached as real equipment is: through an inventory.

- ``fabric up`` writes one, ``reroute inventory check`` passes on it;
- ``reroute apply --inventory`` and ``reroute serve`` (config ``inventory:``) move live
  traffic with the fabric's own state file gone: nothing but the inventory is used;
- switches reached at ``tcp:`` (an OVS passive listener) and the Polatis at a
  ``TCPIP0::...::SOCKET`` resource carry the optical MBB demo without loss;
- a dpid mismatch and an unreachable device are refused before anything changes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from fabric import mgmt
from fabric.fabric import Fabric
from services.reroute.model.topology import load_topology
from tests.e2e.conftest import CLI, NGNCS, RATE, ROOT, Probe, reroute, running
from tests.pki import Pki

pytestmark = pytest.mark.fabric
FLOW = "10.0.0.2>10.0.0.3"
TOKEN = "inventory-test-operator-token"


def copy_inventory(fab: Fabric, tmp_path: Path, **devices: dict[str, object]) -> Path:
    """The fabric's inventory, its state_dir moved to ``tmp_path``, ``devices`` replaced."""
    doc = yaml.safe_load(fab.state.inventory.read_text())
    doc["state_dir"] = str(tmp_path / "state")
    doc["devices"].update(devices)
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def no_state_file(ngncs: Fabric) -> Iterator[Fabric]:
    """The fabric with its run-directory state file gone (put back for ``fabric down``)."""
    state = ngncs.state.dir / "state.json"
    hidden = state.with_suffix(".hidden")
    state.rename(hidden)
    try:
        yield ngncs
    finally:
        hidden.rename(state)


def flows_on(fab: Fabric, bridge: str) -> str:
    return subprocess.run(
        ["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", fab.ovs.mgmt(bridge)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


class TestOneNgncsFabric:
    """The inventory ``fabric up`` wrote, checked and refused on one ngncs fabric brought up
    once for the class: these tests only read it (the refused apply proves it changed
    nothing)."""

    @pytest.fixture(scope="class")
    @classmethod
    def ngncs(cls) -> Iterator[Fabric]:
        with running(load_topology(NGNCS)) as fab:
            yield fab

    def test_fabric_up_writes_an_inventory_that_passes_the_check(self, ngncs: Fabric) -> None:
        doc = yaml.safe_load(ngncs.state.inventory.read_text())
        assert doc["topology"] == "ngncs-ost"
        assert {n: d["driver"] for n, d in doc["devices"].items()} == {
            "br1": "ovs", "br2": "ovs", "br3": "ovs", "br4": "ovs", "ost1": "polatis_scpi",
        }  # fmt: skip
        proc = reroute("inventory", "check", "--topology", str(NGNCS))
        lines = proc.stdout.splitlines()
        assert "all 5 devices reachable and ready" in lines[-1]
        assert any(
            "br2" in ln and "dpid 0000000000000002" in ln and ln.endswith("ok") for ln in lines
        )
        assert any("ost1" in ln and "Polatis" in ln and "16x16" in ln for ln in lines), proc.stdout

    def test_check_names_an_unreachable_device_and_exits_1(
        self, ngncs: Fabric, tmp_path: Path
    ) -> None:
        inv = copy_inventory(ngncs, tmp_path, br3={"driver": "ovs", "target": "tcp:127.0.0.1:1"})
        proc = reroute("inventory", "check", "--topology", str(NGNCS), "--inventory", str(inv),
                       check=False)  # fmt: skip
        assert proc.returncode == 1, proc.stdout
        assert "not ready: br3" in proc.stderr
        row = next(ln for ln in proc.stdout.splitlines() if ln.startswith("br3"))
        assert " NO " in row and "Connection refused" in row

    def test_a_dpid_mismatch_is_refused_before_any_change(
        self, ngncs: Fabric, tmp_path: Path
    ) -> None:
        swapped = {
            "br1": {"driver": "ovs", "target": ngncs.ovs.mgmt("br2")},
            "br2": {"driver": "ovs", "target": ngncs.ovs.mgmt("br1")},
        }
        inv = copy_inventory(ngncs, tmp_path, **swapped)
        before = {b: flows_on(ngncs, b) for b in ("br1", "br2", "br3", "br4")}
        proc = reroute("apply", "--topology", str(NGNCS), "--inventory", str(inv),
                       "--flow", FLOW, "--to", "temporary", check=False)  # fmt: skip
        assert proc.returncode == 1
        assert f"{inv}: device br" in proc.stderr and "dpid" in proc.stderr, proc.stderr
        after = {b: flows_on(ngncs, b) for b in before}
        assert _tables(after) == _tables(before)


def test_apply_and_serve_use_only_the_inventory(no_state_file: Fabric, tmp_path: Path) -> None:
    fab = no_state_file
    inv = copy_inventory(fab, tmp_path)
    probe = Probe(fab, duration=4)
    time.sleep(1.5)
    moved = reroute("apply", "--topology", str(NGNCS), "--inventory", str(inv),
                    "--flow", FLOW, "--to", "temporary")  # fmt: skip
    report = probe.report()
    assert "done" in moved.stdout, moved.stdout
    assert report["lost"] == 0 and report["received"] >= RATE * 3, report
    assert (tmp_path / "state" / "journal.sqlite").exists()  # journal from the inventory
    assert "dl_vlan" in flows_on(fab, "br2") or "vlan_vid" in flows_on(fab, "br2")

    config = tmp_path / "serve.yaml"
    config.write_text(
        f"topology: {NGNCS}\ninventory: {inv}\nlisten: 127.0.0.1:0\n"
        f"tokens: [{{token: {TOKEN}, role: operator}}]\n"
    )
    serve = subprocess.Popen([*CLI, "serve", "--config", str(config)], cwd=ROOT, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        assert serve.stdout is not None
        line = serve.stdout.readline()
        assert "http://" in line and str(inv) in line, line
        url = "http://" + line.split("http://")[1].split()[0]
        headers = {"Authorization": f"Bearer {TOKEN}"}
        if serve.poll() is not None:
            raise AssertionError(f"serve exited {serve.returncode}: {serve.stdout.read()}")
        answer = httpx.post(f"{url}/v1/reroutes?wait=20", headers=headers, timeout=30,
                            json={"flows": [FLOW], "to_path": "long"})  # fmt: skip
        assert answer.status_code == 201 and answer.json()["state"] == "done", answer.text
        flows = httpx.get(f"{url}/v1/flows", headers=headers, timeout=10).json()
        on = {p["path"]: p["flows"] for p in flows["paths"]}
        assert on["long"] == ["10.0.0.2/32>10.0.0.3/32"], flows
    finally:
        serve.terminate()
        serve.wait(timeout=20)


@pytest.mark.parametrize("scheme", ["tcp", "ssl"])
def test_optical_mbb_demo_through_tcp_listeners_and_a_visa_socket(
    ngncs: Fabric, tmp_path: Path, scheme: str
) -> None:
    """Every packet switch at ``tcp:`` or ``ssl:`` (an OVS passive listener on the
    management link instead of its unix socket; for ``ssl:`` certificates of a CA made
    here), the Polatis at ``TCPIP0::127.0.0.1::PORT::SOCKET``."""
    inside = mgmt.make(ngncs.state.name, ngncs.state.fabric_ns)
    devices: dict[str, dict[str, object]] = {}
    tls: dict[str, str] = {}
    if scheme == "ssl":
        pki = Pki.make(tmp_path / "pki")
        switch, client = pki.issue("switch", ips=[str(inside)]), pki.issue("controller")
        ngncs.ovs.vsctl("set-ssl", str(switch.key), str(switch.cert), str(pki.ca))
        tls = {"private_key": str(client.key), "certificate": str(client.cert),
               "ca_certificate": str(pki.ca)}  # fmt: skip
    for n, bridge in enumerate(("br1", "br2", "br3", "br4")):
        port = 6653 + n
        ngncs.ovs.vsctl("set-controller", bridge, f"p{scheme}:{port}:{inside}")
        devices[bridge] = {"driver": "ovs", "target": f"{scheme}:{inside}:{port}"}
        if tls:
            devices[bridge]["tls"] = tls
    inv = copy_inventory(ngncs, tmp_path, **devices)
    assert "TCPIP0::127.0.0.1::" in inv.read_text()  # the Polatis entry, kept
    numbers = tmp_path / "demo.json"
    proc = reroute("demo", "--topology", str(NGNCS), "--inventory", str(inv),
                   "--json", str(numbers), timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    mbb = json.loads(numbers.read_text())["mbb"]
    assert mbb["udp"]["sent"] > 0
    assert mbb["udp"]["lost"] <= mbb["fabric_drops"], mbb


def _tables(dumps: dict[str, str]) -> dict[str, list[str]]:
    """The flow entries without their counters."""
    keep = ("cookie", "priority", "actions", "table")
    return {
        b: sorted(
            ",".join(f for f in line.split(",") if f.strip().split("=")[0] in keep or "=" not in f)
            for line in text.splitlines()[1:]
        )
        for b, text in dumps.items()
    }


def test_the_inventory_cli_prints_kinds_and_schema() -> None:
    kinds = reroute("inventory", "kinds").stdout
    assert all(k in kinds for k in ("ovs", "hp_dpctl", "odl", "polatis_scpi", "p4runtime"))
    schema = json.loads(reroute("inventory", "schema").stdout)
    assert schema["title"] == "reroute inventory"
    assert shutil.which(sys.executable)
