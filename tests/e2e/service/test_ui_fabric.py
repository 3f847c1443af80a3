"""The operator's web page on the emulated ngncs-ost fabric, in Debian's chromium (headless,
selenium): an optical MBB long -> short via temporary is asked for from the page, its
timeline shows the lock wait, the drawing shows the flow on the short path and ost1's new
cross-connect; a screenshot is saved (``UPDATE_UI_SCREENSHOT=1`` also writes docs/ui.png).
The same page on fake switches: tests/unit/services/service/test_ui.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabric.fabric import Fabric
from services.reroute.model.topology import Topology
from tests.e2e.conftest import scpi
from tests.e2e.service.conftest import serve_yaml
from tests.unit.services.service.browser import Browser
from tests.unit.services.service.conftest import (
    OPERATOR,
    READER,
    ROOT,
    ServeProcess,
)
from tests.unit.services.service.fabric_state import path_of_flow
from tests.unit.services.service.test_ui import (
    BRIDGES,
    FLOW,
    ask,
    confirm,
    drawn,
    flows_on,
    free_port,
    history_state,
    reconnected,
    watch,
    xcs,
)


@pytest.fixture
def serve_config(svc_fabric: tuple[Topology, Fabric], tmp_path: Path) -> Iterator[Path]:
    _, fab = svc_fabric
    tokens = f"{{token: {OPERATOR}, role: operator}}, {{token: {READER}, role: read}}"
    path = serve_yaml(fab, tmp_path, tokens)
    yield path
    topo, fab = svc_fabric
    assert path_of_flow(topo, fab) == "long"


@pytest.mark.fabric
def test_in_a_browser_on_the_fabric(
    svc_fabric: tuple[Topology, Fabric], serve_config: Path, tmp_path: Path
) -> None:
    topo, fab = svc_fabric
    listen = f"127.0.0.1:{free_port()}"
    serve = ServeProcess(serve_config, listen)
    try:
        with Browser(height=1250) as b:
            b.open(f"{serve.url}/ui")
            b.login(OPERATOR)
            b.wait(lambda: drawn(b, *BRIDGES, "ost1"), "the four bridges and ost1")
            initial = {"1-18", "2-17", "3-20", "4-19"}  # read from the Polatis emulator
            b.wait(lambda: xcs(b) == initial, "ost1's cross-connects")
            b.wait(lambda: b.attr("#conn", "data-state") == "live", "the live event stream")
            assert FLOW in flows_on(b, "long")

            ask(b, FLOW, "short", via="temporary")
            b.wait(lambda: b.visible("#plan"), "the dry-run plan")
            assert "long -> short (hitless)" in b.text("#plan-summary")
            phases = set(b.attrs("#plan-steps li", "data-phase"))
            assert {"circuits", "await-lock", "park-shift", "swap-shift"} <= phases
            assert path_of_flow(topo, fab) == "long"  # the dry run changed nothing

            watch(b)
            # a lock of 1.5 s (under the plan's 3 s timeout), not a drawn one: time enough
            # for the page to read the devices and draw the parked flow on a loaded machine
            scpi(fab, ":EMUL:LOCK 1500")
            try:
                reroute_id = confirm(b)
                b.wait(lambda: history_state(b, reroute_id) == "done", "the MBB done", 30)
            finally:
                scpi(fab, ":EMUL:LOCK DEFault")
            b.wait(lambda: FLOW in flows_on(b, "short"), "the flow drawn on short")
            b.wait(lambda: "2-19" in xcs(b), "ost1's new cross-connect")
            on_devices = serve.client(READER).flows()  # read from the switches
            assert on_devices["short"] == (FLOW,) and on_devices["long"] == ()
            assert not flows_on(b, "long")
            timeline = f'#timeline ol[data-reroute="{reroute_id}"] > li.phase'
            shown = b.attrs(timeline, "data-phase")
            assert shown == ["park", "circuits", "staged", "await-lock", "swap", "clean"], shown
            lock = b.text(f'{timeline}[data-phase="await-lock"] .time')
            assert "timeout 3.00 s" in lock, lock
            # while it ran: the lock wait counted up, the flow was drawn parked on temporary
            seen = b.driver.execute_script("return window.seen;")
            waits = [x for x in seen["phases"] if x.startswith("await-lock:started:")]
            assert any("elapsed / timeout 3.00 s" in x for x in waits), seen["phases"]
            assert "temporary" in seen["paths"], seen["paths"]
            shot = b.screenshot(tmp_path / "ui.png")
            if os.environ.get("UPDATE_UI_SCREENSHOT"):
                b.screenshot(shot, copy_to=ROOT / "docs" / "ui.png")
            print(f"screenshot: {shot}")

            assert serve.stop() == 0  # restart: the page reconnects
            b.wait(lambda: b.attr("#conn", "data-state") == "reconnecting", "the stream lost")
            serve = ServeProcess(serve_config, listen)
            b.wait(lambda: reconnected(b), "the stream reconnected")
            back = serve.client().create([FLOW], "long", via="temporary", wait_s=20)
            assert back.state == "done", back.error
            b.wait(lambda: FLOW in flows_on(b, "long"), "the flow drawn back on long")
            b.wait(lambda: xcs(b) == initial, "ost1 as it was")
            assert not b.text("#error")
    finally:
        if serve.proc.poll() is None and FLOW not in serve.client().flows()["long"]:
            serve.client().create([FLOW], "long", via="temporary", wait_s=20)  # for the next
        serve.stop()
