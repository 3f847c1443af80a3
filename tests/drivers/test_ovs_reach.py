"""OvsDriver reaching a switch as real equipment is reached: ``ssl:`` with certificates made
here (tests/pki.py) against an OVS ``pssl:`` listener, the datapath id compared with the
topology's, and a switch without the ONF bundle extension (an OpenFlow relay in front of
OVS answers bundle messages with the error such a switch sends, emulators/ofrelay.py).

Uses the conformance suite's OVS (tests/drivers/conftest.py, bridge ``br13``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from drivers.base import (
    DeviceRejected,
    DeviceUnreachable,
    Expect,
    FlowChange,
    FlowMatch,
    FlowOp,
    FlowRule,
    Output,
    Prefix,
    build,
)
from drivers.ovs import OvsDriver
from drivers.ovs.spec import OvsSpec
from drivers.spec import TlsFiles
from emulators.ofrelay import Relay, ignore_bundles, refuse_bundles
from tests.drivers.conftest import SWITCH_IP, OvsSite
from tests.drivers.test_conformance import OF13_LAB
from tests.pki import Pki

pytestmark = pytest.mark.fabric
BRIDGE = "br13"
SSL_PORT = 6654
T = TypeVar("T")


def rule(host: int, port: int = 2, prio: int = 100, cookie: int = 0x42) -> FlowRule:
    match = FlowMatch(eth_type=0x0800, ipv4_dst=Prefix.parse(f"10.9.0.{host}"))
    return FlowRule(match=match, priority=prio, actions=(Output(port),), cookie=cookie)


def adds(rules: Sequence[FlowRule]) -> list[FlowChange]:
    return [FlowChange(op=FlowOp.ADD, rule=r) for r in rules]


def dump(site: OvsSite) -> list[str]:
    lines = site.ofctl(BRIDGE, "--no-stats", "dump-flows").splitlines()
    return sorted(line.strip() for line in lines if "priority" in line)


@dataclass(frozen=True, slots=True)
class Tls:
    pki: Pki
    files: TlsFiles  # the driver's (controller side)
    target: str


@pytest.fixture(scope="module")
def tls(ovs_site: OvsSite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tls]:
    """br13 also listens on pssl:SWITCH_IP:6654, with a switch certificate of a fresh CA."""
    pki = Pki.make(tmp_path_factory.mktemp("pki"))
    switch = pki.issue("switch", ips=[SWITCH_IP])
    client = pki.issue("controller")
    ovs = ovs_site.ovs
    ovs.vsctl("set-ssl", str(switch.key), str(switch.cert), str(pki.ca))
    ovs.vsctl("set-controller", BRIDGE, f"pssl:{SSL_PORT}:{SWITCH_IP}")
    files = TlsFiles(private_key=client.key, certificate=client.cert, ca_certificate=pki.ca)
    try:
        yield Tls(pki=pki, files=files, target=f"ssl:{SWITCH_IP}:{SSL_PORT}")
    finally:
        ovs.vsctl("del-controller", BRIDGE)
        ovs.vsctl("del-ssl")


@pytest.fixture
def site(ovs_site: OvsSite) -> OvsSite:
    ovs_site.reset(BRIDGE)
    return ovs_site


def run(body: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(body())


def dpid_of(site: OvsSite) -> int:
    async def main() -> int:
        async with OvsDriver(BRIDGE, site.ovs.mgmt(BRIDGE)) as d:
            assert d.datapath_id is not None
            return d.datapath_id

    return run(main)


# --------------------------------------------------------------------------------------
# ssl:


def test_ssl_target_from_an_inventory_entry_programs_the_switch(site: OvsSite, tls: Tls) -> None:
    spec = OvsSpec(driver="ovs", target=tls.target, tls=tls.files, timeout_s=5)
    dpid = dpid_of(site)

    async def main() -> list[FlowRule]:
        driver = build(BRIDGE, spec, Expect(dpid=dpid))
        assert isinstance(driver, OvsDriver)
        async with driver:
            assert driver.capabilities.atomic_batch
            await driver.apply(adds([rule(1), rule(2)]))
            return await driver.read(cookie=0x42)

    assert sorted(run(main)) == sorted([rule(1), rule(2)])
    assert len(dump(site)) == 2


def test_ssl_refuses_a_switch_whose_certificate_another_ca_signed(
    site: OvsSite, tls: Tls, tmp_path: Path
) -> None:
    other = Pki.make(tmp_path / "other", name="other-ca")
    files = tls.files.model_copy(update={"ca_certificate": other.ca})

    async def main() -> DeviceUnreachable:
        with pytest.raises(DeviceUnreachable) as info:
            await OvsDriver(BRIDGE, tls.target, tls=files, timeout=5).open()
        return info.value

    error = run(main)
    assert error.device == BRIDGE and "TLS" in str(error) and "certificate" in str(error).lower()


def test_ssl_checks_the_switch_name_when_one_is_given(site: OvsSite, tls: Tls) -> None:
    wrong = tls.files.model_copy(update={"server_name": "not-this-switch.example"})
    right = tls.files.model_copy(update={"server_name": SWITCH_IP})

    async def main() -> int | None:
        with pytest.raises(DeviceUnreachable):
            await OvsDriver(BRIDGE, tls.target, tls=wrong, timeout=5).open()
        async with OvsDriver(BRIDGE, tls.target, tls=right, timeout=5) as d:
            return d.datapath_id

    assert run(main) == dpid_of(site)


# --------------------------------------------------------------------------------------
# datapath id


def test_a_switch_with_another_dpid_is_refused_before_any_change(site: OvsSite) -> None:
    dpid = dpid_of(site)
    spec = OvsSpec(driver="ovs", target=site.ovs.mgmt(BRIDGE))

    async def main() -> DeviceRejected:
        driver = build(BRIDGE, spec, Expect(dpid=dpid + 1))
        with pytest.raises(DeviceRejected) as info:
            await driver.open()
        return info.value

    error = run(main)
    assert error.code == "DPID_MISMATCH" and error.device == BRIDGE
    assert f"{dpid:016x}" in str(error) and f"{dpid + 1:016x}" in str(error)
    assert dump(site) == []


# --------------------------------------------------------------------------------------
# no bundles


def with_relay(
    site: OvsSite,
    body: Callable[[OvsDriver, Relay], Awaitable[T]],
    refuse: Callable[[bytes], int | None] = refuse_bundles,
) -> T:
    async def main() -> T:
        relay = Relay(upstream=site.ovs.mgmt(BRIDGE), refuse=refuse)
        target = await relay.start()
        try:
            async with OvsDriver(BRIDGE, target, timeout=5) as driver:
                return await body(driver, relay)
        finally:
            await relay.stop()

    return run(main)


def test_without_bundles_the_session_is_declared_non_atomic_and_batches_apply(
    site: OvsSite,
) -> None:
    first = [rule(1, prio=100), rule(2, prio=100)]
    moved = rule(1, port=1, prio=100)

    async def body(d: OvsDriver, relay: Relay) -> list[FlowRule]:
        assert d.bundles is False and not d.capabilities.atomic_batch
        assert OvsDriver.capabilities.atomic_batch  # the class keeps its declaration
        assert "no bundles" in (await d.identify()).summary
        await d.apply(adds(first))
        await d.apply([FlowChange(op=FlowOp.ADD, rule=moved)])
        await d.apply([FlowChange(op=FlowOp.DELETE, rule=first[1])])
        assert relay.refused == 1  # the probe was refused; nothing else tried bundles
        return await d.read(cookie=0x42)

    assert with_relay(site, body) == [moved]


def test_without_bundles_a_batch_is_applied_in_order(site: OvsSite) -> None:
    old, new = rule(5, port=1, prio=100), rule(5, port=2, prio=100)
    batch = [
        FlowChange(op=FlowOp.ADD, rule=old),
        FlowChange(op=FlowOp.DELETE, rule=old),
        FlowChange(op=FlowOp.ADD, rule=new),
    ]

    async def body(d: OvsDriver, relay: Relay) -> list[FlowRule]:
        await d.apply(batch)
        return await d.read(cookie=0x42)

    assert with_relay(site, body) == [new]


def test_without_bundles_a_rejected_change_mid_batch_leaves_the_table_unchanged(
    site: OvsSite,
) -> None:
    keep = [rule(1), rule(2)]
    site.cap_table(BRIDGE, 3)
    # replaces rule 1's actions, deletes rule 2, adds two: the second add is one too many
    batch = [
        FlowChange(op=FlowOp.ADD, rule=rule(1, port=1)),
        FlowChange(op=FlowOp.DELETE, rule=rule(2)),
        FlowChange(op=FlowOp.ADD, rule=rule(3)),
        FlowChange(op=FlowOp.ADD, rule=rule(4)),
        FlowChange(op=FlowOp.ADD, rule=rule(5)),
    ]

    async def body(d: OvsDriver, relay: Relay) -> tuple[DeviceRejected, list[FlowRule]]:
        await d.apply(adds(keep))
        with pytest.raises(DeviceRejected) as info:
            await d.apply(batch)
        return info.value, await d.read(cookie=0x42)

    error, after = with_relay(site, body)
    assert error.code == "OFPFMFC_TABLE_FULL" and "change #4" in str(error), error
    assert sorted(after) == sorted(keep)


def test_without_bundles_other_writers_entries_are_neither_read_nor_undone(
    site: OvsSite,
) -> None:
    """The ordered path reads only the batch's cookies: a lab's entries (traps, a
    table-miss, goto_table, write-actions) beside ours neither break it nor move."""
    for line in OF13_LAB:
        site.ovs.ofctl("-O", "OpenFlow13", "add-flow", site.ovs.mgmt(BRIDGE), line)
    theirs = dump(site)
    site.cap_table(BRIDGE, sum("table=1" not in line for line in OF13_LAB) + 2)
    batch = [FlowChange(op=FlowOp.ADD, rule=rule(n)) for n in (1, 2, 3)]  # the third: full

    async def body(d: OvsDriver, relay: Relay) -> tuple[DeviceRejected, list[FlowRule]]:
        await d.apply(adds([rule(1)]))
        with pytest.raises(DeviceRejected) as info:
            await d.apply(batch)
        return info.value, await d.read(cookie=0x42)

    error, ours = with_relay(site, body)
    assert error.code == "OFPFMFC_TABLE_FULL", error
    assert ours == [rule(1)]
    assert [line for line in dump(site) if "cookie=0x42" not in line] == theirs


def test_a_switch_that_silently_ignores_bundles_is_probed_without_waiting_out_a_timeout(
    site: OvsSite,
) -> None:
    """The bundle OPEN goes unanswered (no reply, no error): the barrier after it is
    answered, so the probe knows at once, and the session works without bundles."""

    async def body(d: OvsDriver, relay: Relay) -> tuple[bool | None, list[FlowRule]]:
        await d.apply(adds([rule(1)]))
        return d.bundles, await d.read(cookie=0x42)

    started = time.monotonic()
    bundles, ours = with_relay(site, body, refuse=ignore_bundles)
    assert bundles is False and ours == [rule(1)]
    assert time.monotonic() - started < 2.0  # the driver's timeout is 5 s


def test_port_events_keep_the_bridges_fragment_handling(site: OvsSite) -> None:
    """SET_CONFIG carries the switch's own flags: another controller's ``set-frags`` stays."""
    mgmt = site.ovs.mgmt(BRIDGE)
    site.ovs.ofctl("-O", "OpenFlow13", "set-frags", mgmt, "drop")

    async def main() -> None:
        async with OvsDriver(BRIDGE, mgmt) as d, d.port_events(lambda port, state: None):
            pass

    try:
        run(main)
        assert site.ovs.ofctl("-O", "OpenFlow13", "get-frags", mgmt).strip() == "drop"
    finally:
        site.ovs.ofctl("-O", "OpenFlow13", "set-frags", mgmt, "normal")


def test_the_driver_reconnects_when_the_switch_comes_back(site: OvsSite) -> None:
    """The switch goes (its end of the connection closes) and comes back on the same
    target: a request meanwhile fails within the driver's timeout, saying it tried; the
    next one after it is back reconnects (handshake, dpid, bundle probe) and succeeds."""

    async def main() -> tuple[str, float | None, float, list[FlowRule], float | None]:
        relay = Relay(upstream=site.ovs.mgmt(BRIDGE), refuse=lambda msg: None)
        target = await relay.start()
        port = int(target.rsplit(":", 1)[1])
        try:
            async with OvsDriver(BRIDGE, target, timeout=1.0) as d:
                await d.apply(adds([rule(1)]))
                await relay.stop()
                await asyncio.sleep(0.1)  # gone a moment: the channel has seen the end
                started = time.monotonic()
                with pytest.raises(DeviceUnreachable) as down:
                    await d.read(cookie=0x42)
                took, since = time.monotonic() - started, d.down_since
                await relay.start(port)
                ours = await d.read(cookie=0x42)
                return str(down.value), since, took, ours, d.down_since
        finally:
            await relay.stop()

    error, since, took, ours, after = run(main)
    assert "reconnecting" in error and since is not None, error
    assert took < 1.0 + 1.5
    assert ours == [rule(1)] and after is None
