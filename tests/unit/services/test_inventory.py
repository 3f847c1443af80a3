"""Inventory files: strict, checked against the topology, every error names the file and
the device; unreachable devices fail within their own timeout; nothing is opened twice."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from drivers.errors import ConfigError, DeviceTimeout, DeviceUnreachable
from services.reroute.model import inventory
from services.reroute.model.inventory import load_inventory, open_drivers
from services.reroute.model.topology import load_topology

ROOT = Path(__file__).resolve().parents[3]
NGNCS = load_topology(ROOT / "topologies" / "ngncs-ost.yaml")
TWO_SITE = load_topology(ROOT / "topologies" / "two-site-longhaul.yaml")
GOOD = """\
topology: ngncs-ost
state_dir: state
devices:
  br1: {driver: ovs, target: "tcp:127.0.0.1:6001"}
  br2: {driver: ovs, target: "unix:/run/x/br2.mgmt"}
  br3: {driver: hp_dpctl, target: "tcp:127.0.0.1:6633", timeout_s: 2}
  br4:
    driver: odl
    target: http://127.0.0.1:8181/
    password: {file: secret.txt}
  ost1: {driver: polatis_scpi, target: "TCPIP0::127.0.0.1::5025::SOCKET"}
"""


def load(tmp_path: Path, text: str) -> inventory.Inventory:
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    return load_inventory(path)


def test_a_good_inventory_loads_with_paths_from_its_directory(tmp_path: Path) -> None:
    inv = load(tmp_path, GOOD)
    assert inv.topology == "ngncs-ost" and inv.state_dir == tmp_path / "state"
    assert inv.journal == tmp_path / "state" / "journal.sqlite"
    assert inv.lock_dir == tmp_path / "state" / "locks"
    assert {n: s.driver for n, s in inv.devices.items()} == {
        "br1": "ovs",
        "br2": "ovs",
        "br3": "hp_dpctl",
        "br4": "odl",
        "ost1": "polatis_scpi",
    }
    odl = inv.devices["br4"]
    assert odl.target == "http://127.0.0.1:8181"  # type: ignore[attr-defined]
    assert odl.password.file == tmp_path / "secret.txt"  # type: ignore[attr-defined]
    assert inv.devices["br3"].timeout_s == 2.0
    inventory.check(inv, NGNCS)


def test_state_dir_defaults_to_var_lib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REROUTE_STATE_DIR", str(tmp_path / "lib"))
    inv = load(tmp_path, GOOD.replace("state_dir: state\n", ""))
    assert inv.state_dir == tmp_path / "lib" / "ngncs-ost"


BAD = [
    # (what to change in GOOD, the words the error must have)
    (("  br1: {driver: ovs,", "  br1: {driver: ovs, colour: red,"), "device br1: colour"),
    (("driver: hp_dpctl", "driver: dpctlx"),
     "device br3: no driver for kind 'dpctlx'; did you mean `hp_dpctl`?"),
    (("  br2: {driver: ovs", "  brx: {driver: ovs"), "device brx: not a switching node"),
    (("  br2: {driver: ovs, target: \"unix:/run/x/br2.mgmt\"}\n", ""), "switch br2"),
    (("TCPIP0::127.0.0.1::5025::SOCKET", "TCPIP0::127.0.0.1::SOCKET"), "device ost1: target"),
    (("tcp:127.0.0.1:6001", "tcp:127.0.0.1"), "device br1: target"),
    (("tcp:127.0.0.1:6001", "ssl:127.0.0.1:6001"), "device br1: an ssl: target needs tls"),
    (("password: {file: secret.txt}", "password: admin"), "device br4: password"),
    (("topology: ngncs-ost", "topology: other"), "inventory of topology 'other'"),
    (("driver: polatis_scpi, target: \"TCPIP0::127.0.0.1::5025::SOCKET\"",
      "driver: ovs, target: \"tcp:127.0.0.1:1\""), "device ost1 (ovs tcp:127.0.0.1:1): an optical"),
    (("  br1: {driver: ovs", "  br1: {driver: ovs, target: x}\n  br1: {driver: ovs"),
     "duplicate key 'br1'"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "words"), BAD, ids=[w for _, w in BAD])
def test_bad_inventories_name_the_file_and_the_device(
    tmp_path: Path, change: tuple[str, str], words: str
) -> None:
    text = GOOD.replace(*change)
    assert text != GOOD
    with pytest.raises(ConfigError) as err:
        inventory.check(load(tmp_path, text), NGNCS)
    assert str(tmp_path / "inv.yaml") in str(err.value)
    assert words in str(err.value)


def test_a_scope_needs_only_its_devices(tmp_path: Path) -> None:
    inv = load(tmp_path, GOOD.replace('  br2: {driver: ovs, target: "unix:/run/x/br2.mgmt"}\n', ""))
    inventory.check(inv, NGNCS, scope=["br1", "ost1"])
    with pytest.raises(ConfigError, match="switch br2"):
        inventory.check(inv, NGNCS, scope=["br2"])


def test_every_device_missing_from_an_inventory_is_named(tmp_path: Path) -> None:
    gone = ("  br1:", "  br2:", "  ost1:")
    inv = load(tmp_path, "".join(x for x in GOOD.splitlines(True) if not x.startswith(gone)))
    with pytest.raises(ConfigError) as err:
        inventory.check(inv, NGNCS)
    assert "3 switches br1, br2, ost1 of topology ngncs-ost have no device" in str(err.value)


def test_a_missing_password_source_is_named_without_a_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RR_NO_SUCH_PASSWORD", raising=False)
    inv = load(tmp_path, GOOD.replace("{file: secret.txt}", "{env: RR_NO_SUCH_PASSWORD}"))
    with pytest.raises(ConfigError, match="br4: environment variable RR_NO_SUCH_PASSWORD"):
        inventory.build_drivers(inv, NGNCS)


def test_the_schema_file_is_current_and_validates_the_shipped_inventories() -> None:
    schema = json.loads((ROOT / "topologies" / "inventory.schema.json").read_text())
    assert schema == inventory.schema(), "run `reroute inventory schema --write`"
    shipped = sorted((ROOT / "topologies" / "inventories").glob("*.yaml"))
    assert len(shipped) >= 3
    for path in shipped:
        inv = load_inventory(path)
        import yaml

        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
        topo = NGNCS if inv.topology == "ngncs-ost" else TWO_SITE
        inventory.check(inv, topo)


def test_no_inventory_and_no_fabric_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REROUTE_RUN_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="say --inventory FILE"):
        inventory.resolve(None, NGNCS)


# --------------------------------------------------------------------------------------
# unreachable devices fail within their timeout, naming the file and the device


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A TCP port that accepts connections and never answers a byte."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    return port


def one_device(tmp_path: Path, node: str, entry: str) -> inventory.Inventory:
    return load(tmp_path, f"topology: ngncs-ost\ndevices:\n  {node}: {entry}\n")


def opened(inv: inventory.Inventory) -> None:
    async def main() -> None:
        async with open_drivers(inv, NGNCS, scope=list(inv.devices)):
            pass

    asyncio.run(main())


@pytest.mark.parametrize(
    "entry",
    [
        '{driver: ovs, target: "tcp:127.0.0.1:PORT", timeout_s: 0.5}',
        '{driver: polatis_scpi, target: "TCPIP0::127.0.0.1::PORT::SOCKET", timeout_s: 0.5}',
        '{driver: odl, target: "http://127.0.0.1:PORT", password: {env: HOME}, timeout_s: 0.5}',
    ],
    ids=["ovs", "polatis_scpi", "odl"],
)
def test_a_silent_device_times_out_within_its_timeout(
    tmp_path: Path, silent_port: int, entry: str
) -> None:
    node = "ost1" if "polatis" in entry else "br1"
    inv = one_device(tmp_path, node, entry.replace("PORT", str(silent_port)))
    started = time.monotonic()
    with pytest.raises((DeviceTimeout, DeviceUnreachable)) as err:
        opened(inv)
    assert time.monotonic() - started < 0.5 + 2.0  # its timeout, not a hang (a loose bound)
    assert f"{tmp_path / 'inv.yaml'}: device {node}" in str(err.value)


def test_a_closed_port_is_unreachable_at_once(tmp_path: Path) -> None:
    inv = one_device(tmp_path, "br1", f'{{driver: ovs, target: "tcp:127.0.0.1:{closed_port()}"}}')
    with pytest.raises(DeviceUnreachable) as err:
        opened(inv)
    assert "device br1 (ovs tcp:127.0.0.1:" in str(err.value)


def test_cookie_tag_names_the_deployments_cookies_default_as_before(tmp_path: Path) -> None:
    assert load(tmp_path, GOOD).cookies.base == 0x5252 << 48  # the cookies before the setting
    tagged = load(tmp_path, GOOD.replace("state_dir: state\n", "state_dir: s\ncookie_tag: 7\n"))
    assert tagged.cookies.tag == 7 and tagged.cookies.base == 0x5255 << 48
    with pytest.raises(ConfigError, match="cookie_tag"):
        load(tmp_path, GOOD.replace("state_dir: state\n", "state_dir: s\ncookie_tag: 256\n"))
