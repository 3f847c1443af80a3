"""impulse-response's dpctl+10 / dpctl+100 plumbing (seed 000 Figure 11) and the injector's
own P4Runtime client; no fabric."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from drivers.base import FlowMatch, FlowRule, Output
from drivers.hp_dpctl import flowtext
from drivers.hp_dpctl.spec import HpDpctlSpec
from drivers.odl.spec import OdlSpec
from drivers.p4runtime.spec import P4RuntimeSpec
from experiments.impulse_response import ImpulseResponse, by_config
from experiments.impulse_train import (
    INJECTOR_ELECTION,
    Train,
    extra_rules,
    flow,
    injector_inventory,
    missing_rules,
)
from services.reroute.model.intent import FlowSpec
from services.reroute.model.inventory import Inventory
from services.reroute.model.topology import load_topology
from tests.unit.experiments.helpers import opts, report_text

ROOT = Path(__file__).resolve().parents[3]


def _train(dips: int, zero_s: float, *, extra: int) -> dict[str, Any]:
    """100 Mbit/s sampled every 100 ms, a degradation every 4 s from 3 s; after each,
    nothing gets through for ``zero_s``, then B again (both sites failed over at 0.1 s)."""
    series = [100.0] * int(10 * (3 + 4 * dips + 1))
    impulses, events = [], []
    for i in range(dips):
        at = 3.0 + 4 * i
        impulses.append({"at_s": at, "inject_ms": 2.0})
        events += [{"kind": "trigger", "t_s": at + 0.05}, {"kind": "failover", "t_s": at + 0.1}]
        for k in range(int(10 * at), int(10 * (at + zero_s))):
            series[k] = 0.0
    return {
        "topology": "two-site-dpctl", "degradation": "path", "extra_flows": extra, "n": dips,
        "period_s": 4.0, "interval_s": 0.1, "series_mbps": series, "impulses": impulses,
        "monitors": {"h1": events, "h2": events},
    }  # fmt: skip


def test_extra_flows_are_distinct_off_the_measured_one_and_fit_openflow10() -> None:
    topo = load_topology(ROOT / "topologies" / "two-site-dpctl.yaml")
    flows = Train(degradation="path", n=1, period_s=1, extra_flows=100).flows(topo)
    FLOW = flow(topo)
    assert FLOW == "10.10.0.1>10.10.0.2"
    assert flows[0] == FLOW and len(set(flows)) == 101
    rules = extra_rules(topo, flows[1:])
    assert sorted(rules) == ["sw1", "sw2"]
    measured = {FlowSpec.parse(FLOW).src, FlowSpec.parse(FLOW).dst}
    for bridge, rs in rules.items():
        ingress = [r for r in rs if r.match.ipv4_src is not None]
        assert len(ingress) == 100, bridge  # one per extra flow, its direction's ingress
        assert len({r.key for r in ingress}) == 100
        assert not {r.match.ipv4_src for r in ingress} & measured
        # the hp_dpctl driver refuses what OpenFlow 1.0 cannot say: none of these
        assert [flowtext.unsupported(r) for r in rs] == [None] * len(rs)


def _rule(dst: str, port: int) -> FlowRule:
    match = FlowMatch(eth_type=0x800, ipv4_dst=FlowSpec.parse(f"10.0.0.1>{dst}").dst)
    return FlowRule(match=match, priority=100, actions=(Output(port),))


def test_read_back_finds_missing_rules_by_key_not_by_spelling() -> None:
    want = [_rule("10.20.1.1", 1), _rule("10.20.1.2", 1)]
    have = [_rule("10.20.1.1", 7), _rule("10.9.9.9", 1)]  # same key, other actions: there
    assert missing_rules(want, have) == [want[1]]
    assert missing_rules(want, [*have, want[1]]) == []


def test_the_injector_has_its_own_higher_p4runtime_election_id_and_trusts_odl(
    tmp_path: Path,
) -> None:
    p4 = P4RuntimeSpec(driver="p4runtime", target="127.0.0.1:9559", device_id=1, election_id=10)
    hp = HpDpctlSpec(driver="hp_dpctl", target="tcp:127.0.0.1:6634")
    odl = OdlSpec(driver="odl", target="http://127.0.0.1:8181", password={"env": "X"})
    inv = Inventory(file=tmp_path / "i.yaml", topology="t", state_dir=tmp_path,
                    devices={"sw1": p4, "sw2": hp, "sw3": odl})  # fmt: skip
    mine = injector_inventory(inv)
    assert mine.devices["sw1"] == p4.model_copy(update={"election_id": 10 + INJECTOR_ELECTION})
    assert mine.devices["sw2"] == hp
    assert mine.devices["sw3"] == odl.model_copy(update={"read_back": "config"})
    assert inv.devices["sw3"].read_back == "operational"  # type: ignore[union-attr]
    assert dataclasses.replace(mine, devices=inv.devices) == inv  # the locks are shared
    assert inv.devices["sw1"] == p4  # the sites' inventory unchanged


def test_plan_and_report_of_the_extra_flows_variant(tmp_path: Path) -> None:
    exp = ImpulseResponse()
    plan = exp.plan(opts("impulse-response", backend="dpctl+100"))
    assert [r.key for r in plan] == ["dpctl+100-path-01"]
    assert plan[0].params == {"degradation": "path", "extra_flows": 100, "n": 10, "period_s": 10.0}
    (tmp_path / "raw").mkdir()
    for key, extra, zero in (("dpctl-path-01", 0, 0.3), ("dpctl+10-path-01", 10, 0.8)):
        doc = _train(3, zero, extra=extra)
        (tmp_path / "raw" / f"{key}.json").write_text(json.dumps(doc))
    trains = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "raw").glob("*.json")}
    assert list(by_config(trains)) == ["dpctl-path", "dpctl+10-path"]
    text = report_text(exp, tmp_path)
    assert "| dpctl+10-path | A+10 | 1 | 3 |" in text
    assert text.split("| dpctl+10-path |")[1].split("\n")[0].endswith("| 0 | 0 | 0 (0) |")
    assert "impulse_extra_flows.png" in text
    assert (tmp_path / "impulse_extra_flows.png").stat().st_size > 5_000


def test_figure_11_needs_two_configurations_and_failed_injections_count(tmp_path: Path) -> None:
    (tmp_path / "raw").mkdir()
    doc = _train(2, 0.3, extra=100)
    doc["impulses"][1]["inject_error"] = "sw1: election id 10 is in use"
    (tmp_path / "raw" / "dpctl+100-path-01.json").write_text(json.dumps(doc))
    text = report_text(ImpulseResponse(), tmp_path)
    assert "Needs trains of dpctl and dpctl+10 or dpctl+100" in text
    assert text.split("| dpctl+100-path |")[1].split("\n")[0].endswith("| 0 | 1 | 0 (0) |")
    assert not (tmp_path / "impulse_extra_flows.png").exists()
