"""``reroute inventory check`` with a file the inventory names missing: that device's row
names the file; the other devices are still checked (it used to stop at the first)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from services.reroute.model.inventory import load_inventory
from services.reroute.model.topology import load_topology
from services.reroute.preflight import check_devices

ROOT = Path(__file__).resolve().parents[3]
NGNCS = ROOT / "topologies" / "ngncs-ost.yaml"


def test_a_missing_tls_file_is_named_and_the_other_devices_are_still_checked(
    tmp_path: Path,
) -> None:
    (tmp_path / "ca.pem").write_text("not used: the other two are missing\n")
    file = tmp_path / "lab.yaml"
    file.write_text(
        "topology: ngncs-ost\n"
        "devices:\n"
        '  br1: {driver: ovs, target: "tcp:127.0.0.1:1", timeout_s: 2}\n'
        '  br2: {driver: ovs, target: "tcp:127.0.0.1:1", timeout_s: 2}\n'
        "  br3:\n"
        "    driver: ovs\n"
        '    target: "ssl:127.0.0.1:1"\n'
        "    tls: {private_key: key.pem, certificate: cert.pem, ca_certificate: ca.pem}\n"
        '  br4: {driver: ovs, target: "tcp:127.0.0.1:1", timeout_s: 2}\n'
        '  ost1: {driver: polatis_scpi, target: "TCPIP0::127.0.0.1::1::SOCKET", timeout_s: 2}\n'
    )
    reports = {
        r.name: r for r in asyncio.run(check_devices(load_inventory(file), load_topology(NGNCS)))
    }
    assert sorted(reports) == ["br1", "br2", "br3", "br4", "ost1"]
    assert reports["br3"].problems == (
        f"tls.private_key: {tmp_path / 'key.pem'} does not exist",
        f"tls.certificate: {tmp_path / 'cert.pem'} does not exist",
    )
    assert not any(r.ok for r in reports.values())
    assert all(r.problems for r in reports.values())
