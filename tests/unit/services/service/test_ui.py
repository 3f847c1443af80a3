"""The operator's web page (``GET /ui``).

Over HTTP on fake switches: its files need no token and give no powers, ``/v1/whoami``
and ``/v1/optics`` answer, every step of a reroute names its phase. In a real browser
(Debian's chromium, headless, driven by selenium): on fake switches, a wrong token shows
an error, a read token sees no buttons, a dry run shows the plan, a confirmed MBB moves the
drawing, a restarted service is reconnected to. On the emulated fabric:
tests/e2e/service/test_ui_fabric.py.
"""

from __future__ import annotations

import re
import socket
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from drivers.base import Capabilities
from drivers.errors import DeviceUnreachable
from services.reroute.engine.executor import Driver
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import Topology
from services.reroute.planning import plan
from services.reroute.planning.order import STAGE, PhaseName, Stage
from services.reroute.rules import initial_rules
from services.reroute.service.config import Settings
from services.reroute.service.views import step_phases
from services.reroute.tables import tables_from
from tests.unit.services.service.browser import Browser
from tests.unit.services.service.conftest import (
    OPERATOR,
    READER,
    ServerThread,
    settings,
)
from tests.unit.services.service.fakes import FakeFabric

ROOT = Path(__file__).resolve().parents[4]

FLOW = "10.0.0.2/32>10.0.0.3/32"  # as GET /v1/flows and the page write it
BRIDGES = ("br1", "br2", "br3", "br4")


class FakeOptical:
    """An optical switch's connection table (only read here)."""

    capabilities = Capabilities(atomic_batch=False, read_back=True, max_batch=0, port_state=False)

    def __init__(self, name: str, connections: Mapping[int, int]) -> None:
        self.name = name
        self.table = dict(connections)

    async def connect(self, pairs: Sequence[tuple[int, int]]) -> None:
        self.table.update(pairs)

    async def disconnect(self, ingresses: Sequence[int]) -> None:
        for i in ingresses:
            self.table.pop(i, None)

    async def connections(self) -> dict[int, int]:
        return dict(self.table)

    async def close(self) -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# ---------------------------------------------------------------- over HTTP


def test_the_page_needs_no_token_and_gives_no_powers(fake_server: ServerThread) -> None:
    anonymous = fake_server.http(None)
    root = anonymous.get("/ui", follow_redirects=False)
    assert root.status_code == 307 and root.headers["location"] == "/ui/"
    page = anonymous.get("/ui/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'src="app.js"' in page.text and 'href="app.css"' in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for name, kind in (("app.js", "javascript"), ("app.css", "text/css")):
        answer = anonymous.get(f"/ui/{name}")
        assert answer.status_code == 200 and kind in answer.headers["content-type"], name
    assert anonymous.post("/ui/", json={}).status_code == 405
    assert anonymous.get("/ui/missing.js").status_code == 404
    # the API behind the page still wants a token
    for path in ("/v1/whoami", "/v1/optics", "/v1/reroutes", "/v1/events", "/uix"):
        assert anonymous.get(path).status_code in (401, 404), path
    assert anonymous.get("/v1/reroutes").status_code == 401
    raw = httpx.get(f"{fake_server.url}/ui/%2e%2e/v1/reroutes", timeout=10)
    assert raw.status_code == 404 and "reroutes" not in raw.text


BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


def test_a_browser_at_the_front_door_is_sent_to_the_page_api_clients_get_json(
    fake_server: ServerThread,
) -> None:
    anonymous, operator = fake_server.http(None), fake_server.http(OPERATOR)
    for method in ("GET", "HEAD"):
        door = anonymous.request(method, "/", headers={"Accept": BROWSER_ACCEPT})
        assert door.status_code == 307 and door.headers["location"] == "/ui/", method
    for accept in ("*/*", "application/json", "text/html;q=0", ""):
        answer = anonymous.get("/", headers={"Accept": accept})
        assert answer.status_code == 401, accept
        assert answer.json() == {"detail": "missing or unknown bearer token"}
        assert operator.get("/", headers={"Accept": accept}).json() == {"detail": "Not Found"}
    assert anonymous.post("/", headers={"Accept": BROWSER_ACCEPT}).status_code == 401
    assert anonymous.get("/v1/reroutes", headers={"Accept": BROWSER_ACCEPT}).status_code == 401


def test_whoami_names_the_role_of_the_token(fake_server: ServerThread) -> None:
    assert fake_server.http(OPERATOR).get("/v1/whoami").json() == {
        "role": "operator",
        "fabric": "ngncs-ost",
    }
    assert fake_server.http(READER).get("/v1/whoami").json()["role"] == "read"
    assert fake_server.http("not-a-known-token-at-all").get("/v1/whoami").status_code == 401


def test_optics_are_read_from_the_devices(topo: Topology, tmp_path: Path) -> None:
    fake = FakeFabric(topo)
    ost1 = FakeOptical("ost1", {2: 19, 3: 18})  # as after a reroute to the short path

    @asynccontextmanager
    async def drivers(config: Settings) -> AsyncIterator[Mapping[str, Driver]]:
        async with fake.drivers(config) as switches:
            yield {**switches, "ost1": ost1}

    with ServerThread(settings(topo, tmp_path / "j.sqlite"), drivers) as srv:
        answer = srv.http(READER).get("/v1/optics").json()
    assert answer == {
        "switches": [
            {
                "name": "ost1",
                "ingress_count": 16,
                "egress_count": 16,
                "managed": True,
                "cross_connects": [[2, 19], [3, 18]],
            }
        ]
    }


def test_optics_of_a_switch_not_managed_here_are_not_guessed(fake_server: ServerThread) -> None:
    (ost1,) = fake_server.http(READER).get("/v1/optics").json()["switches"]
    assert ost1["managed"] is False and ost1["cross_connects"] is None


def test_every_step_names_its_phase(fake_server: ServerThread, topo: Topology) -> None:
    http = fake_server.http()
    done = http.post(
        "/v1/reroutes?wait=10", json={"flows": ["10.0.0.2>10.0.0.3"], "to_path": "temporary"}
    ).json()
    assert done["state"] == "done"
    dry = http.post(
        "/v1/reroutes", json={"flows": ["10.0.0.2>10.0.0.3"], "to_path": "long", "dry_run": True}
    ).json()
    assert [s["phase"] for s in done["steps"]] == [s["phase"] for s in dry["steps"]]
    assert {"make", "shift", "clean"} <= {s["phase"] for s in done["steps"]}
    again = fake_server.client().get(done["id"])  # the Python client reads them too
    assert [s.phase for s in again.steps] == [s["phase"] for s in done["steps"]]
    # an optical MBB's text, read back: park-*, circuits, await-lock, swap-*
    rules = tables_from(initial_rules(topo))
    intent = Intent(flows=(FlowSpec.parse("10.0.0.2>10.0.0.3"),), to_path="short", via="temporary")
    optical = plan(topo, rules, intent, now=0.0)
    expected = [phase.name for phase in optical.phases for _ in phase.steps]
    assert step_phases(optical.describe()) == expected
    assert {"circuits", "await-lock"} <= set(expected)
    # each step's stage is its phase's (planning.order.STAGE), read and dry run alike
    for steps in (done["steps"], dry["steps"]):
        assert [s["stage"] for s in steps] == [STAGE[PhaseName(s["phase"])] for s in steps]
    assert [s.stage for s in again.steps] == [s["stage"] for s in done["steps"]]


def test_the_pages_stage_names_are_the_schemas(fake_server: ServerThread) -> None:
    """The page groups steps by the API's ``stage`` and names one stage itself (the lock
    wait), and draws nodes by their ``kind``: those names are the schema's, so a renamed
    stage or kind fails here, not on the page."""
    schema = fake_server.http().get("/openapi.json").json()["components"]["schemas"]
    stages = set(schema["Stage"]["enum"])
    assert stages == set(Stage)
    script = (ROOT / "services" / "reroute" / "service" / "static" / "timeline.js").read_text()
    named = re.findall(r'const LOCK_STAGE = "([^"]+)"', script)
    assert named and set(named) <= stages
    assert "phaseGroup" not in script  # no grouping by matching phase names
    # and the node kinds the drawing tells apart are the schema's (NodeView.kind)
    kinds = set(schema["NodeKind"]["enum"])
    drawing = (ROOT / "services" / "reroute" / "service" / "static" / "drawing.js").read_text()
    compared = set(re.findall(r'\.kind === "([^"]+)"', drawing))
    assert compared and compared <= kinds, compared - kinds


# ---------------------------------------------------------------- in a browser


def drawn(b: Browser, *nodes: str) -> bool:
    return all(b.all(f'#topo [data-node="{n}"]') for n in nodes)


def flows_on(b: Browser, path: str) -> str:
    return b.attr(f'#topo .flowpath[data-path="{path}"]', "data-flows") or ""


def reconnected(b: Browser) -> bool:
    """The event stream is up again after it was lost (it may have been taken up by the
    draining service too, which ends it at once)."""
    connects = int(b.attr("#conn", "data-connects") or 0)
    return connects >= 2 and b.attr("#conn", "data-state") == "live"


def history_state(b: Browser, reroute_id: str) -> str | None:
    return b.attr(f'#history tr[data-id="{reroute_id}"]', "data-state")


def ask(b: Browser, flow: str, to_path: str, via: str = "") -> None:
    """Fill the form and press the dry-run button."""
    b.wait(lambda: b.all(f'#flow-choices input[value="{flow}"]'), f"the flow {flow} to choose")
    b.wait(lambda: _chosen(b, flow), f"the flow {flow} chosen")
    b.driver.execute_script(
        "document.getElementById('to-path').value = arguments[0];"
        "document.getElementById('via').value = arguments[1];",
        to_path,
        via,
    )
    b.one("#dry-run").click()


def _chosen(b: Browser, flow: str) -> bool:
    """Tick the flow's box, as a person does (again if the page redrew the list under the
    click: a live page refreshes its flows as reroutes end); whether it is ticked."""
    box = b.one(f'#flow-choices input[value="{flow}"]')  # stale: ``wait`` tries again
    if not box.is_selected():
        box.click()
    return bool(b.one(f'#flow-choices input[value="{flow}"]').is_selected())


def confirm(b: Browser) -> str:
    """Press confirm; the id of the reroute the page started."""
    b.one("#confirm").click()
    note = b.wait(lambda: b.text("#form-note"), "the started reroute")
    return note.split()[1]  # "Reroute ID asked for ..."


def test_in_a_browser_on_fake_switches(topo: Topology, tmp_path: Path) -> None:
    fake = FakeFabric(topo)
    port = free_port()
    journal = tmp_path / "journal.sqlite"
    with Browser() as b:
        with ServerThread(settings(topo, journal), fake.drivers, port=port) as srv:
            b.open(f"{srv.url}/")  # the service's address: the front door leads to the page
            assert b.driver.current_url == f"{srv.url}/ui/"
            b.login("not-a-known-token-at-all")
            b.wait(lambda: "refused" in b.text("#error"), "an error for the wrong token")
            assert b.visible("#login") and not b.visible("#main")

            b.login(READER)
            b.wait(lambda: drawn(b, *BRIDGES, "ost1", "vm2", "vm3"), "the topology")
            assert b.attr("#role", "data-role") == "read" and not b.text("#error")
            assert not b.visible("#reroute-form") and b.visible("#read-only")
            assert FLOW in flows_on(b, "long")

            b.one("#change-token").click()
            b.login(OPERATOR)
            b.wait(lambda: b.visible("#reroute-form"), "the reroute form for an operator")
            b.wait(lambda: b.attr("#conn", "data-state") == "live", "the live event stream")
            ask(b, FLOW, "temporary")
            b.wait(lambda: b.visible("#plan"), "the dry-run plan")
            assert "long -> temporary (hitless)" in b.text("#plan-summary")
            assert fake.snapshot() == FakeFabric(topo).snapshot()  # a dry run changes nothing
            reroute_id = confirm(b)
            b.wait(lambda: history_state(b, reroute_id) == "done", "the reroute done")
            b.wait(lambda: FLOW in flows_on(b, "temporary"), "the flow drawn on temporary")
            assert not flows_on(b, "long")
            timeline = f'#timeline ol[data-reroute="{reroute_id}"] > li.phase'
            assert b.attrs(timeline, "data-phase") == ["make", "shift", "clean"]
            assert set(b.attrs(timeline, "data-state")) == {"done"}

            srv.drain()  # the service restarts: the page reconnects and reads it all again
            b.wait(lambda: b.attr("#conn", "data-state") == "reconnecting", "the stream lost")
        with ServerThread(settings(topo, journal), fake.drivers, port=port) as again:
            with again.http() as http:
                back = http.post("/v1/reroutes?wait=10", json={"flows": [FLOW], "to_path": "long"})
            assert back.json()["state"] == "done"
            b.wait(lambda: reconnected(b), "the stream reconnected")
            b.wait(lambda: FLOW in flows_on(b, "long"), "the flow drawn back on long")
            b.wait(lambda: history_state(b, back.json()["id"]) == "done", "the restart's reroute")
            assert not b.text("#error")
            b.screenshot(tmp_path / "ui-fake.png")


# the page's reads of one reroute answered 0.5 s late (its events keep coming meanwhile)
SLOW_VIEWS = """
const fetchNow = window.fetch;
window.fetch = async (path, init) => {
  if (/^\\/v1\\/reroutes\\/[^/?]+$/.test(path)) await new Promise((ok) => setTimeout(ok, 500));
  return fetchNow(path, init);
};
"""


def test_steps_done_while_the_page_reads_the_reroute_still_move_the_drawing(
    topo: Topology, tmp_path: Path
) -> None:
    """The shift ends while the page is still reading the reroute its first event named
    (on a loaded machine the service answers late): the flow is drawn on its new path while
    the reroute drains, not only once it is done (the CI failure of the fabric's UI test)."""
    fake = FakeFabric(topo)
    with ServerThread(settings(topo, tmp_path / "j.sqlite"), fake.drivers) as srv, Browser() as b:
        b.open(f"{srv.url}/ui")
        b.login(OPERATOR)
        b.wait(lambda: drawn(b, *BRIDGES, "ost1"), "the topology")
        b.wait(lambda: b.attr("#conn", "data-state") == "live", "the live event stream")
        b.driver.execute_script(SLOW_VIEWS)
        with srv.http() as http:
            asked = {"flows": [FLOW], "to_path": "temporary", "drain_ms": 4000}
            reroute_id = http.post("/v1/reroutes", json=asked).json()["id"]
            b.wait(lambda: FLOW in flows_on(b, "temporary"), "the flow drawn on temporary", 3)
            assert http.get(f"/v1/reroutes/{reroute_id}").json()["state"] == "running"
            assert not flows_on(b, "long")
            b.wait(lambda: history_state(b, reroute_id) == "done", "the reroute done")


def test_a_device_that_cannot_be_read_leaves_the_page_and_says_so(
    topo: Topology, tmp_path: Path
) -> None:
    fake = FakeFabric(topo)
    ost1 = FakeOptical("ost1", {})

    async def unreachable() -> dict[int, int]:
        raise DeviceUnreachable("ost1", "TCPIP0::192.0.2.30::5025::SOCKET: no route")

    ost1.connections = unreachable  # type: ignore[method-assign]
    fake.switches["br3"].down = "cannot connect to unix:/run/x/br3.mgmt: No such file"

    @asynccontextmanager
    async def drivers(config: Settings) -> AsyncIterator[Mapping[str, Driver]]:
        async with fake.drivers(config) as switches:
            yield {**switches, "ost1": ost1}

    with ServerThread(settings(topo, tmp_path / "j.sqlite"), drivers) as srv, Browser() as b:
        assert srv.http(READER).get("/v1/optics").status_code == 503
        b.open(f"{srv.url}/ui/")
        b.login(READER)
        b.wait(lambda: drawn(b, *BRIDGES, "ost1"), "the topology")
        b.wait(lambda: "no route" in b.text("#error"), "the device's error")
        assert "optical cross-connects" in b.text("#error")
        assert FLOW in flows_on(b, "long")  # what could be read is drawn
        b.wait(lambda: b.text("#devices-state") == "2 not up", "the devices panel")
        assert b.attr('#devices li[data-device="br3"]', "data-up") == "false"
        assert b.attr('#devices li[data-device="br3"]', "data-state") == "down"
        assert "DOWN since" in b.text('#devices li[data-device="br3"]')
        assert "No such file" in b.text('#devices li[data-device="br3"]')
        assert "no route" in b.text('#devices li[data-device="ost1"]')
        assert b.attr('#devices li[data-device="br2"]', "data-up") == "true"


WATCH = """
window.seen = {phases: [], paths: []};
new MutationObserver((records) => {
  for (const r of records) for (const node of r.addedNodes) {
    if (!node.querySelectorAll) continue;
    for (const li of node.querySelectorAll("li.phase")) {
      const time = li.querySelector(".time");
      window.seen.phases.push(`${li.dataset.phase}:${li.dataset.state}:${time.textContent}`);
    }
    for (const line of node.querySelectorAll(".flowpath")) {
      window.seen.paths.push(line.getAttribute("data-path"));
    }
  }
}).observe(document.getElementById("main"), {childList: true, subtree: true});
"""


def watch(b: Browser) -> None:
    """Record every timeline phase and every drawn path the page shows from now on (the
    records keep what a later redraw replaces): ``window.seen``."""
    b.driver.execute_script(WATCH)


def xcs(b: Browser) -> set[str]:
    return {x or "" for x in b.attrs("#topo .xc", "data-xc")}


def _resources(browser: Browser) -> list[str]:
    """Every URL the page loaded or tried to (the document's own included)."""
    urls: list[str] = browser.driver.execute_script(
        "return [location.href, ...performance.getEntriesByType('resource').map(e => e.name)];"
    )
    return urls


def test_the_api_docs_work_offline_from_files_the_service_ships(
    fake_server: ServerThread,
) -> None:
    """/docs (Swagger UI) and /redoc in chromium with no name resolvable but the service's
    address: every script and style comes from the service, and both render the API."""
    anonymous = fake_server.http(None)
    for path in ("/docs", "/redoc", "/docs/static/swagger-ui-bundle.js"):
        assert anonymous.get(path).status_code == 200, path  # no token needed
    assert "cdn" not in anonymous.get("/docs").text.lower()
    with Browser(offline=True) as browser:
        browser.open(f"{fake_server.url}/docs")
        browser.wait(lambda: "/v1/reroutes" in browser.text(".swagger-ui"), "Swagger UI's API")
        swagger = _resources(browser)
        browser.open(f"{fake_server.url}/redoc")
        browser.wait(lambda: "Reroute flows" in browser.text("redoc"), "ReDoc's API")
        redoc = _resources(browser)
        said = " ".join(browser.console())
    assert any(u.endswith("/docs/static/redoc.standalone.js") for u in redoc), redoc
    for url in (*swagger, *redoc):  # ReDoc's footer logo is on its CDN: the page's policy
        blocked = f"'{url}' violates the following Content Security Policy" in said
        assert url.startswith(fake_server.url) or blocked, f"loaded from elsewhere: {url}"
