"""Three ``reroute serve`` replicas on a 3-member etcd, on the emulated fabric, under the
5 kpps probe: the replica executing an optical MBB is killed (SIGKILL) during its lock
wait; another recovers the reroute (rolled back to its checkpoint: the flow on
``temporary``, every direction on exactly one path) and the probe loses nothing."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from experiments.demo import fabric_drops
from fabric.etcdcluster import EtcdCluster
from fabric.fabric import Fabric
from services.reroute.journal import RerouteState
from services.reroute.topology import Topology
from tests.e2e.conftest import Probe, scpi, wait_arriving
from tests.e2e.service.conftest import serve_yaml
from tests.unit.services.service.conftest import OPERATOR, ServeProcess
from tests.unit.services.service.fabric_state import path_of_flow

pytestmark = [
    pytest.mark.fabric,
    pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd is missing (make setup)"),
]
FLOW = "10.0.0.2>10.0.0.3"
TTL_S = 2


@pytest.fixture
def replicas(
    svc_fabric: tuple[Topology, Fabric], tmp_path: Path
) -> Iterator[tuple[list[ServeProcess], EtcdCluster]]:
    topo, fab = svc_fabric
    with EtcdCluster(tmp_path / "etcd", size=3) as etcd:
        base = serve_yaml(fab, tmp_path, f"{{token: {OPERATOR}, role: operator}}")
        store = (
            f"store: {{kind: etcd, endpoints: [{', '.join(etcd.endpoints)}], "
            f"prefix: /test/replicas, lease_ttl_s: {TTL_S}}}\n"
        )
        configs = []
        for i in range(3):
            path = tmp_path / f"replica{i}.yaml"
            path.write_text(base.read_text() + store)
            configs.append(path)
        started = [ServeProcess(c) for c in configs]
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
