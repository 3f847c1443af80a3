"""/metrics as an operator scrapes it, and the alerts and dashboard shipped for it, checked
with Debian's promtool: the exposition passes its lint, the alert rules load and their unit
tests pass, every dashboard query parses, and both name only metrics the service exports."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from services.reroute.service.metrics import Metrics
from tests.unit.services.service.conftest import READER, ROOT, ServerThread
from tests.unit.services.service.fakes import FakeFabric

PROMTOOL = "/usr/bin/promtool"
ALERTS = ROOT / "docs" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "docs" / "grafana" / "reroute.json"
NAME = re.compile(r"\breroute_[a-z_]+\b")
SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    if not Path(PROMTOOL).exists():
        pytest.fail(f"{PROMTOOL} missing: run `make setup` (Debian's prometheus)")
    return subprocess.run(
        [PROMTOOL, *args], input=stdin, capture_output=True, text=True, timeout=60
    )


def _scrape(srv: ServerThread) -> str:
    answer = srv.http(READER).get("/metrics")  # a read token is enough
    assert answer.status_code == 200, answer.text
    return answer.text


def _exported(text: str) -> set[str]:
    """Every metric family name in an exposition, with and without its sample suffixes."""
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    return names | {n + s for n in names for s in SUFFIXES}


def test_metrics_say_devices_outcomes_steps_and_the_replica(
    fake_server: ServerThread, fake: FakeFabric
) -> None:
    client = fake_server.client()
    client.create(["vm2>vm3"], "temporary", wait_s=10)
    assert fake_server.http(None).get("/metrics").status_code == 401  # needs a token
    text = _scrape(fake_server)
    lint = promtool("check", "metrics", stdin=text)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert 'reroute_reroutes_total{state="done",strategy="mbb"} 1.0' in text
    assert re.search(r'reroute_step_duration_seconds_count\{kind="shift"\} [1-9]', text)
    assert 'reroute_replica_info{owner="' in text
    for device in ("br1", "br2", "br3", "br4"):  # every one (the fakes: packet switches)
        states = re.findall(rf'reroute_device_state\{{device="{device}",state="(\w+)"\}} 1.0', text)
        assert len(states) == 1, (device, states)
        assert f'reroute_device_up{{device="{device}"}}' in text
        assert f'reroute_device_actionable{{device="{device}"}} 1.0' in text  # SQLite: no lease


def test_a_device_is_actionable_while_up_and_the_replica_may_start_reroutes() -> None:
    """``reroute_device_actionable``: 1 only for a device that is up on a replica that may
    start a reroute (a live lease or none needed, not draining); 0 for the others, and for
    every device on a replica that may not."""
    states = {"br1": "up", "br2": "down", "ost1": "out_of_sync"}
    able = [True]
    metrics = Metrics(lambda: 0, lambda: 0)
    metrics.watch_devices(lambda: states.items(), ["up", "down", "out_of_sync"], lambda: able[0])

    def actionable() -> dict[str, float]:
        text = metrics.render()[0].decode()
        found = re.findall(r'reroute_device_actionable\{device="(\w+)"\} (\S+)', text)
        return {d: float(v) for d, v in found}

    assert actionable() == {"br1": 1.0, "br2": 0.0, "ost1": 0.0}
    able[0] = False  # its lease lost, or draining
    assert actionable() == {"br1": 0.0, "br2": 0.0, "ost1": 0.0}
    able[0], states["br2"] = True, "up"
    assert actionable() == {"br1": 1.0, "br2": 1.0, "ost1": 0.0}


def test_the_alert_rules_load_and_fire_as_their_unit_tests_say() -> None:
    checked = promtool("check", "rules", str(ALERTS))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", str(ALERTS.with_name("alerts_test.yml")))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    """Each panel's PromQL as a recording rule: ``promtool check rules`` parses it."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    assert exprs
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query{i}", "expr": e} for i, e in enumerate(exprs)
    ]}]}  # fmt: skip
    (tmp_path / "dashboard.yml").write_text(json.dumps(rules))  # JSON is YAML
    checked = promtool("check", "rules", str(tmp_path / "dashboard.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_alerts_and_dashboard_name_only_exported_metrics(fake_server: ServerThread) -> None:
    exported = _exported(_scrape(fake_server))
    for doc in (ALERTS, DASHBOARD):
        named = set(NAME.findall(doc.read_text()))
        assert named, doc
        missing = sorted(n for n in named if n not in exported)
        assert not missing, f"{doc.name} names metrics /metrics does not export: {missing}"
