"""``reroute serve`` replicas on a 3-member etcd, on the emulated fabric, under the 5 kpps
probe. The replica executing an optical MBB is killed (SIGKILL) during its lock wait, or
cut off from etcd then (every member black-holed, ``partition.py``): another recovers the
reroute (rolled back to its checkpoint: the flow on ``temporary``, every direction on
exactly one path), the cut-off one writes nothing after that, and the probe loses nothing."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from experiments.measuring import fabric_drops
from fabric.etcdcluster import EtcdCluster
from fabric.fabric import Fabric
from services.reroute.model.topology import Topology
from services.reroute.store.records import RerouteState
from tests.e2e.conftest import Probe, scpi, wait_arriving
from tests.e2e.service.conftest import serve_yaml
from tests.e2e.service.partition import Partition, partitionable
from tests.unit.services.service.conftest import OPERATOR, ServeProcess
from tests.unit.services.service.fabric_state import path_of_flow

pytestmark = [
    pytest.mark.fabric,
    pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd is missing (make setup)"),
]
FLOW = "10.0.0.2>10.0.0.3"
TTL_S = 2


def _configs(fab: Fabric, tmp_path: Path, endpoints: list[list[str]]) -> list[Path]:
    """One replica's config per list of etcd endpoints (the same cluster, maybe relayed)."""
    base = serve_yaml(fab, tmp_path, f"{{token: {OPERATOR}, role: operator}}")
    configs = []
    for i, reach in enumerate(endpoints):
        store = (
            f"store: {{kind: etcd, endpoints: [{', '.join(reach)}], "
            f"prefix: /test/replicas, lease_ttl_s: {TTL_S}}}\n"
        )
        path = tmp_path / f"replica{i}.yaml"
        path.write_text(base.read_text() + store)
        configs.append(path)
    return configs


@pytest.fixture
def replicas(
    svc_fabric: tuple[Topology, Fabric], tmp_path: Path
) -> Iterator[tuple[list[ServeProcess], EtcdCluster]]:
    topo, fab = svc_fabric
    with EtcdCluster(tmp_path / "etcd", size=3) as etcd:
        started = [ServeProcess(c) for c in _configs(fab, tmp_path, [etcd.endpoints] * 3)]
        try:
            yield started, etcd
        finally:
            for serve in started:
                if serve.proc.poll() is None:
                    serve.stop()
    scpi(fab, ":EMUL:LOCK DEFault")
    assert path_of_flow(topo, fab) == "long"


def _runner(replicas: list[ServeProcess], reroute_id: str) -> ServeProcess:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for serve in replicas:
            if serve.client().health().running == reroute_id:
                return serve
        time.sleep(0.01)
    raise AssertionError(f"no replica runs {reroute_id}")


def test_a_replica_killed_in_the_lock_wait_is_taken_over(
    svc_fabric: tuple[Topology, Fabric], replicas: tuple[list[ServeProcess], EtcdCluster]
) -> None:
    topo, fab = svc_fabric
    serves, _ = replicas
    scpi(fab, ":EMUL:LOCK 2500")  # the new circuit locks after 2.5 s: time to kill
    drops = fabric_drops(fab)
    probe = Probe(fab, 6.0)
    wait_arriving(fab, "vm3")
    view = serves[0].client().create([FLOW], "short", via="temporary")
    runner = _runner(serves, view.id)
    time.sleep(0.8)  # parked on temporary, in the lock wait
    killed = time.monotonic()
    runner.kill()
    survivor = next(s for s in serves if s is not runner)
    while not survivor.client().get(view.id).final:
        assert time.monotonic() - killed < 30, "nobody recovered the reroute"
        time.sleep(0.01)
    took = time.monotonic() - killed
    end = survivor.client().get(view.id)
    where = path_of_flow(topo, fab)  # exactly one path, both directions delivered
    report = probe.report()
    dropped = fabric_drops(fab) - drops
    scpi(fab, ":EMUL:LOCK DEFault")
    # ost1 stays set for short (recovery restores flows, not circuits): short, then long
    survivor.client().create([FLOW], "short", wait_s=30)
    back = survivor.client().create([FLOW], "long", via="temporary", wait_s=30)
    print(f"takeover {took * 1000:.0f} ms (lease TTL {TTL_S} s): {end.state}; probe lost "
          f"{report['lost']} of {report['sent']}, the fabric's OVS dropped {dropped}")  # fmt: skip
    assert end.state is RerouteState.ROLLED_BACK, end.error
    assert where == "temporary"  # the checkpoint
    assert report["lost"] <= dropped, report  # nothing beyond the fabric's own drops
    assert back.state is RerouteState.DONE, back.error


@pytest.fixture
def cut_off(
    svc_fabric: tuple[Topology, Fabric], tmp_path: Path
) -> Iterator[list[tuple[ServeProcess, Partition]]]:
    """Two replicas, each reaching etcd through relays of its own (to be cut)."""
    _, fab = svc_fabric
    with (
        EtcdCluster(tmp_path / "etcd", size=3) as etcd,
        partitionable(etcd.endpoints) as one,
        partitionable(etcd.endpoints) as two,
    ):
        configs = _configs(fab, tmp_path, [one.endpoints, two.endpoints])
        started = [(ServeProcess(c), p) for c, p in zip(configs, (one, two), strict=True)]
        try:
            yield started
        finally:
            for serve, _ in started:
                if serve.proc.poll() is None:
                    serve.kill()  # a cut-off replica cannot drain: its lease is gone
    scpi(fab, ":EMUL:LOCK DEFault")


def test_a_replica_cut_off_from_etcd_in_the_lock_wait_writes_nothing_after_the_takeover(
    svc_fabric: tuple[Topology, Fabric], cut_off: list[tuple[ServeProcess, Partition]]
) -> None:
    topo, fab = svc_fabric
    serves = [s for s, _ in cut_off]
    scpi(fab, ":EMUL:LOCK 2500")
    drops = fabric_drops(fab)
    probe = Probe(fab, 9.0)
    wait_arriving(fab, "vm3")
    view = serves[0].client().create([FLOW], "short", via="temporary")
    runner = _runner(serves, view.id)
    survivor = next(s for s in serves if s is not runner)
    part = next(p for s, p in cut_off if s is runner)
    time.sleep(0.8)  # parked on temporary, in the lock wait
    cut = time.monotonic()
    part.cut()
    while not survivor.client().get(view.id).final:
        assert time.monotonic() - cut < 30, "nobody recovered the reroute"
        time.sleep(0.01)
    took = time.monotonic() - cut
    end = survivor.client().get(view.id)
    at_takeover = path_of_flow(topo, fab)
    time.sleep(3.0)  # the cut-off replica's lock wait ended long ago: it has done its worst
    after = path_of_flow(topo, fab)
    report = probe.report()
    dropped = fabric_drops(fab) - drops
    said = runner.log.read_text()
    print(f"takeover after the cut {took * 1000:.0f} ms (lease TTL {TTL_S} s): {end.state}; "
          f"probe lost {report['lost']} of {report['sent']}, OVS dropped {dropped}")  # fmt: skip
    assert end.state is RerouteState.ROLLED_BACK, end.error
    assert at_takeover == after == "temporary"  # the survivor's outcome holds
    assert report["lost"] <= dropped, report
    # it stopped by itself (its lease) or a switch refused it (fenced): never wrote after
    assert "lease" in said or "slave" in said.lower(), said[-3000:]
    scpi(fab, ":EMUL:LOCK DEFault")
    survivor.client().create([FLOW], "short", wait_s=30)
    back = survivor.client().create([FLOW], "long", via="temporary", wait_s=30)
    assert back.state is RerouteState.DONE, back.error
