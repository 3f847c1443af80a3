"""Reroutes on a degraded fabric (issue 29, part 1): a reroute reads and writes only the
devices its paths cross, each within the inventory's ``device_timeout_s``.

A diamond of four real OVS bridges, two paths between h1 and h2:

    h1 - s1 - s2 - s3 - h2      upper (initial)
          \\        /
           `- s4 -'            lower

s2 and s4 are reached through fault relays (``faultrelay.py``) that hang (a black hole:
connections held open, nothing answered) or refuse. Asserted from the devices themselves
(flows read back through the bridges' own sockets, not the relays) and from the probe's
counted packets: a device the new path needs that does not answer refuses the reroute
within 2 x device_timeout_s, naming it, nothing changed; a device only on the old path
that does not answer is routed around (the probe loses nothing the fabric did not drop
itself), its leftovers recorded as debt and removed once it answers again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from experiments.measuring import fabric_drops
from fabric.fabric import Fabric
from services.reroute.engine.engine import Engine
from services.reroute.errors import PlanError
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.inventory import Inventory, load_inventory, open_drivers
from services.reroute.model.topology import Topology, load_topology
from services.reroute.store.records import RerouteState
from services.reroute.store.sqlite import Journal
from tests.e2e.conftest import Probe, running, wait_arriving
from tests.e2e.conftest import reroute as reroute_cli
from tests.e2e.faultrelay import FaultRelay
from tests.unit.services.service.conftest import OPERATOR, ServeProcess

pytestmark = pytest.mark.fabric
TIMEOUT_S = 1.0  # the inventory's device_timeout_s here
DIAMOND = Path(__file__).resolve().parents[2] / "topologies" / "diamond.yaml"
FLOW = FlowSpec.parse("10.0.0.1>10.0.0.2")


class Diamond:
    def __init__(self, fab: Fabric, topo: Topology, file: Path, relays: dict[str, FaultRelay]):
        self.fab, self.topo, self.file, self.relays = fab, topo, file, relays

    @property
    def inventory(self) -> Inventory:
        return load_inventory(self.file)

    def ours(self, bridge: str) -> list[str]:
        """Our rules on ``bridge``, read through its own socket (not the relay)."""
        mgmt = self.fab.ovs.mgmt(bridge)
        text = self.fab.ovs.ofctl("-O", "OpenFlow13", "--no-stats", "dump-flows", mgmt)
        return sorted(line.split("actions=")[0] for line in text.splitlines() if "0x5252" in line)

    def tags(self) -> set[str]:
        """The VLAN tags the flow's ingress rules push at s1 and s3."""
        found = set()
        for bridge in ("s1", "s3"):
            text = self.fab.ovs.ofctl("-O", "OpenFlow13", "dump-flows", self.fab.ovs.mgmt(bridge))
            found |= {
                line.split("set_field:")[1].split("->")[0]
                for line in text.splitlines()
                if "priority=200" in line and "set_field:" in line
            }
        return found


@pytest.fixture(scope="module")
def diamond(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Diamond]:
    here = tmp_path_factory.mktemp("diamond")
    topo = load_topology(DIAMOND)
    with running(topo) as fab:
        doc = yaml.safe_load(fab.state.inventory.read_text())
        relays = {n: FaultRelay(doc["devices"][n]["target"]) for n in ("s2", "s4")}
        try:
            for name, relay in relays.items():
                doc["devices"][name]["target"] = relay.endpoint
            doc["device_timeout_s"] = TIMEOUT_S
            doc["state_dir"] = str(here / "state")
            (here / "inventory.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
            yield Diamond(fab, topo, here / "inventory.yaml", relays)
        finally:
            for relay in relays.values():
                relay.close()


async def _move(d: Diamond, to: str) -> tuple[float, object]:
    """Move the flow to ``to`` on an engine of the inventory (devices opened in the
    background); the seconds it took and the outcome (or the PlanError)."""
    journal = Journal(d.inventory.journal)
    try:
        async with open_drivers(d.inventory, d.topo, background=True) as drivers:
            engine = Engine.of(d.topo, d.inventory, drivers, journal)
            started = time.monotonic()
            try:
                _, outcome = await engine.apply(Intent(flows=(FLOW,), to_path=to))
                result: object = outcome
            except PlanError as exc:
                result = exc
            finally:
                await engine.close()
            return time.monotonic() - started, result
    finally:
        journal.close()


def test_a_hung_device_on_the_new_path_refuses_within_the_deadline(diamond: Diamond) -> None:
    before = {b: diamond.ours(b) for b in ("s1", "s2", "s3", "s4")}
    diamond.relays["s4"].hang()
    try:
        took, result = asyncio.run(_move(diamond, "lower"))
    finally:
        diamond.relays["s4"].heal()
    assert isinstance(result, PlanError), result
    said = str(result)
    assert "s4" in said and "lower" in said and "timed out" in said and "nothing changed" in said
    assert took < 2 * TIMEOUT_S, took  # the bound: refused within 2 x device_timeout_s
    assert {b: diamond.ours(b) for b in before} == before


def test_a_refusing_device_is_named_by_the_cli_without_a_traceback(diamond: Diamond) -> None:
    diamond.relays["s4"].refuse()
    try:
        proc = reroute_cli(
            "plan", "--topology", str(diamond.topo.file), "--inventory", str(diamond.file),
            "--flow", str(FLOW), "--to", "lower", check=False,
        )  # fmt: skip
    finally:
        diamond.relays["s4"].heal()
    said = proc.stdout + proc.stderr
    assert proc.returncode == 1, said
    assert "s4" in said and "unreachable" in said and "Traceback" not in said, said


def test_a_dead_device_on_the_old_path_is_routed_around_and_cleaned_when_back(
    diamond: Diamond,
) -> None:
    upper_on_s2 = diamond.ours("s2")
    assert upper_on_s2 and diamond.tags() == {"4097"}  # upper: tag 1 (+ OFPVID_PRESENT)
    drops = fabric_drops(diamond.fab)
    probe = Probe(diamond.fab, 3.0, src="h1", dst="h2", to="10.0.0.2")
    wait_arriving(diamond.fab, "h2")
    diamond.relays["s2"].hang()  # the failure a monitor calls us for
    try:
        _, outcome = asyncio.run(_move(diamond, "lower"))
    finally:
        report = probe.report()
    assert getattr(outcome, "state", None) is RerouteState.DONE, outcome
    assert outcome.debt == ("s2",)  # type: ignore[attr-defined]
    assert diamond.tags() == {"4098"}  # lower: tag 2, both directions
    lost = report["lost"]
    assert lost <= fabric_drops(diamond.fab) - drops, report
    assert diamond.ours("s2") == upper_on_s2  # left there: s2 did not answer
    journal = Journal(diamond.inventory.journal)
    try:
        assert set(journal.debts()) == {"s2"}
    finally:
        journal.close()

    diamond.relays["s2"].heal()
    done = asyncio.run(_settle(diamond))
    assert "s2" in done and "removed" in done["s2"], done
    assert diamond.ours("s2") == []
    journal = Journal(diamond.inventory.journal)
    try:
        assert journal.debts() == {}
    finally:
        journal.close()


async def _settle(d: Diamond) -> dict[str, str]:
    journal = Journal(d.inventory.journal)
    try:
        async with open_drivers(d.inventory, d.topo, background=True) as drivers:
            engine = Engine.of(d.topo, d.inventory, drivers, journal)
            try:
                return await engine.settle()
            finally:
                await engine.close()
    finally:
        journal.close()


def test_the_service_starts_with_a_device_down_and_routes_around_it(
    diamond: Diamond, tmp_path: Path
) -> None:
    """``reroute serve`` with the other path's switch refusing at start: it serves; a
    reroute that needs that switch is rejected naming it; once it listens the next one runs
    without a restart. Then that switch hangs while the flows leave it: done, its cleanup
    pending, and done by the service's reconciler once it answers again."""
    config = tmp_path / "serve.yaml"
    config.write_text(
        f"topology: {diamond.topo.file}\ninventory: {diamond.file}\n"  # and its journal
        f"tokens: [{{token: {OPERATOR}, role: operator}}]\nstep_timeout_s: 5\n"
    )
    flow, tags = str(FLOW), {"upper": {"4097"}, "lower": {"4098"}}
    here = next(p for p, t in tags.items() if diamond.tags() == t)
    there = "lower" if here == "upper" else "upper"
    switch = {"upper": "s2", "lower": "s4"}[there]  # only on path there
    diamond.relays[switch].refuse()
    serve = ServeProcess(config)  # healthy: it answers /healthz with the switch down
    try:
        client = serve.client()
        refused = client.create([flow], there, wait_s=30)
        assert refused.state is RerouteState.REJECTED, refused
        assert switch in (refused.error or "") and "unreachable" in (refused.error or "")
        assert diamond.tags() == tags[here]
        diamond.relays[switch].heal()
        deadline = time.monotonic() + 20
        while (moved := client.create([flow], there, wait_s=30)).state is not RerouteState.DONE:
            assert time.monotonic() < deadline, moved.error
            time.sleep(0.5)
        assert diamond.tags() == tags[there]

        diamond.relays[switch].hang()
        try:
            back = client.create([flow], here, wait_s=30)
            assert back.state is RerouteState.DONE, back.error
            assert back.cleanup_pending == (switch,), back
            assert diamond.tags() == tags[here] and diamond.ours(switch)
        finally:
            diamond.relays[switch].heal()
        deadline = time.monotonic() + 30
        while client.get(back.id).cleanup_pending:
            assert time.monotonic() < deadline, "the reconciler never cleaned up"
            time.sleep(0.5)
        assert diamond.ours(switch) == []
    finally:
        assert serve.stop() == 0
