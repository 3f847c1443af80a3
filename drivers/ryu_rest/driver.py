"""``RyuRestDriver``: flows through a Ryu (or os-ken) controller's ``ofctl_rest`` REST
application, as seed 003's testbed programmed its switches.

``ofctl_rest`` answers 200 as soon as it has *sent* a flow-mod: a switch's refusal
(OFPT_ERROR) never reaches the REST client, and one request carries one flow (no atomic
batches). So ``apply``:

1. refuses changes ofctl_rest cannot express before anything is sent
   (``DeviceRejected`` code ``UNSUPPORTED``);
2. reads the entries under the batch's cookies (``POST /stats/flow/<dpid>`` with
   ``cookie`` and ``cookie_mask``: the switch filters; the undo point), then posts each
   change in order: ``/stats/flowentry/add`` (add, or replace the actions of the
   entry with the same table, priority and match) or ``/stats/flowentry/delete_strict``;
3. reads the table back until every entry the batch touches is as it should be, for up
   to ``verify_wait_s`` (OpenFlow does not promise that a switch applies messages in
   order without a barrier, which ofctl_rest cannot send); an entry still wrong is
   ``DeviceRejected`` code ``not-in-table`` (the switch refused it; Ryu logs the switch's
   OFPT_ERROR only with ``ryu-manager --verbose``);
4. on any failure in 2-3, puts every touched entry back as it was before the batch,
   walking back through the batch (``drivers.batch.restore``), and verifies that; then
   raises. When the undo fails too, a plain ``DriverError`` says so.

A stats request (``/stats/flow``, ``/stats/portdesc``) the switch does not answer within
Ryu's 1 s comes back 200 with an empty list (``ryu.lib.ofctl_utils.send_stats_request``,
seen against Ryu 4.34 with the switch stopped): an empty answer that took that long is
asked again, until ``timeout``, then ``DeviceTimeout``, never taken for an empty table.

HTTP statuses, as ofctl_rest sends them (every error body is empty): 400 bad body or dpid
-> ``DeviceRejected`` ``http-400``; 404 no such switch (or command) -> ``DeviceUnreachable``
(the switch is not connected to the controller); 501 unsupported in the switch's
OpenFlow version and any 5xx -> ``DeviceRejected`` ``http-<status>``. Connection refused
or lost -> ``DeviceUnreachable``; no answer in ``timeout`` -> ``DeviceTimeout``. Every
request and response is logged at DEBUG on ``reroute.wire.ryu_rest.<name>``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence

import httpx

from drivers import foreign
from drivers.base import (
    Capabilities,
    FlowChange,
    FlowOp,
    Identity,
    PortState,
    register,
)
from drivers.errors import (
    ConfigError,
    DeviceRejected,
    DeviceTimeout,
    DeviceUnreachable,
    DriverError,
    ProtocolError,
)
from drivers.rest import Request, RestFlowDriver
from drivers.ryu_rest import mapping
from drivers.ryu_rest.mapping import Json, MappingError
from drivers.ryu_rest.spec import RyuRestSpec
from drivers.spec import Expect, read_secret

STATS_WAIT_S = 0.98  # Ryu's ofctl_utils.DEFAULT_TIMEOUT (1.0 s, eventlet's timer) for a
# stats reply, less a margin: an empty answer that took this long is a switch that did not
# answer in time
OFPPS_LINK_DOWN = 1
OFPPC_PORT_DOWN = 1
COMMAND = {FlowOp.ADD: "add", FlowOp.DELETE: "delete_strict"}
READER = foreign.Reader(
    cookie=mapping.flow_cookie,
    rule=mapping.parse_flow,
    foreign=mapping.foreign_flow,
    text=mapping.entry_text,
)


@register("ryu_rest", spec=RyuRestSpec)
class RyuRestDriver(RestFlowDriver):
    """One switch (datapath ``dpid``) of a Ryu / os-ken ``ofctl_rest`` controller."""

    kind = "ryu_rest"
    poll_s = 0.02
    # Ryu 4.34 logs a switch's OFPT_ERROR at debug level only (ofp_handler.error_msg_handler)
    refusal_hint = "Ryu logs the switch's OFPT_ERROR only when run with --verbose"
    capabilities = Capabilities(
        atomic_batch=False,
        read_back=True,
        max_batch=0,
        port_state=True,
        notes="Ryu / os-ken ofctl_rest (OpenFlow 1.3), one REST request per flow; ofctl_rest "
        "answers before the switch applies a change and never reports a refusal, so every "
        "batch is verified by reading /stats/flow back (up to verify_wait_s) and a failed "
        "batch is undone; port state from /stats/portdesc",
    )

    @classmethod
    def from_spec(cls, name: str, spec: RyuRestSpec, expect: Expect) -> RyuRestDriver:
        """The driver of an inventory entry (``drivers.ryu_rest.spec``)."""
        dpid = spec.dpid if spec.dpid is not None else expect.dpid
        if dpid is None:
            raise ConfigError(f"{name}: say its dpid: the topology gives none")
        if spec.dpid is not None and expect.dpid is not None and spec.dpid != expect.dpid:
            raise ConfigError(
                f"{name}: inventory dpid {spec.dpid} is not the topology's {expect.dpid}"
            )
        verify: bool | str = spec.verify_tls
        if spec.verify_tls and spec.ca_certificate is not None:
            verify = str(spec.ca_certificate)
        auth = None
        if spec.user is not None and spec.password is not None:
            auth = httpx.BasicAuth(spec.user, read_secret(name, spec.password))
        return cls(
            name,
            spec.target,
            dpid,
            timeout=spec.timeout_s,
            verify_wait_s=spec.verify_wait_s,
            verify_tls=verify,
            auth=auth,
        )

    def __init__(
        self,
        name: str,
        base_url: str,
        dpid: int,
        *,
        timeout: float = 5.0,
        verify_wait_s: float = 2.0,
        verify_tls: bool | str = True,
        auth: httpx.Auth | None = None,
    ) -> None:
        super().__init__(
            name, base_url, timeout=timeout, settle_s=verify_wait_s, verify_tls=verify_tls,
            auth=auth,
        )  # fmt: skip
        self.dpid = dpid

    async def identify(self) -> Identity:
        """The switch as the controller sees it: its datapath id and ports."""
        ports = await self._port_descs()
        numbered = list(_numbered(ports))
        return Identity(summary=f"Ryu ofctl_rest, datapath {self.dpid:016x}, {len(numbered)} ports")

    # ----------------------------------------------------------------------------------
    # PortMonitor, FlowCounters, PortCounters

    async def port_states(self) -> dict[int, PortState]:
        """Link state of the switch's numbered ports (DOWN: link down or port down)."""
        states: dict[int, PortState] = {}
        for number, desc in _numbered(await self._port_descs()):
            try:
                down = int(desc["state"]) & OFPPS_LINK_DOWN or int(desc["config"]) & OFPPC_PORT_DOWN
            except (KeyError, TypeError, ValueError) as exc:
                raise ProtocolError(self.name, f"/stats/portdesc entry {desc}: {exc!r}") from exc
            states[number] = PortState.DOWN if down else PortState.UP
        return states

    async def flow_packets(self, cookie: int) -> int:
        """Packets the entries of exactly ``cookie`` matched (``FlowCounters``): their
        ``packet_count`` in ``/stats/flow``, asked of the switch at each request."""
        try:
            return sum(
                int(e["packet_count"]) for e in await self._entries(cookie, foreign.ALL_COOKIE_BITS)
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(self.name, f"/stats/flow entry without a count: {exc!r}") from exc

    async def tx_packets(self, ports: Sequence[int] = ()) -> dict[int, int]:
        """Packets each port has sent (``PortCounters``): ofctl_rest's /stats/port (of
        the one port asked for, else of all), which asks the switch at each request."""
        path = f"/stats/port/{self.dpid}" + (f"/{ports[0]}" if len(ports) == 1 else "")
        sent: dict[int, int] = {}
        entries = await self._stats(Request(method="GET", path=path), "reading port stats")
        for number, entry in _numbered(entries):
            try:
                sent[number] = int(entry["tx_packets"])
            except (KeyError, TypeError, ValueError) as exc:
                raise ProtocolError(self.name, f"/stats/port entry {entry}: {exc!r}") from exc
        return sent

    # ----------------------------------------------------------------------------------
    # ofctl_rest

    def _request(self, index: int, change: FlowChange) -> Request:
        why = mapping.unsupported(change.rule)
        if why is not None:
            raise DeviceRejected(
                self.name,
                f"change #{index} ({change.op} {change.rule}) cannot be sent through "
                f"ofctl_rest: {why}; nothing of the batch was sent",
                "UNSUPPORTED",
            )
        if change.op is FlowOp.ADD:
            body = mapping.add_body(change.rule, self.dpid)
        else:
            body = mapping.delete_body(change.rule, self.dpid)
        path = f"/stats/flowentry/{COMMAND[change.op]}"
        return Request(method="POST", path=path, body=body, change=index)

    async def _write(self, request: Request, changes: Sequence[FlowChange]) -> None:
        response = await self._exchange(request)
        if response.status_code != 200:
            raise self._status_error(response, self._what(request, changes))

    @property
    def reader(self) -> foreign.Reader[Json]:
        """How a ``/stats/flow`` entry reads (``mapping``)."""
        return READER

    async def _entries(self, cookie: int, mask: int) -> list[Json]:
        """``/stats/flow/<dpid>``: with a cookie filter, ``POST`` with the filter as its
        body (``ofctl_v1_3.get_flow_stats`` takes ``cookie`` and ``cookie_mask`` into the
        flow stats request: the switch filters), else ``GET`` (``foreign.select`` filters
        what the switch did not)."""
        path = f"/stats/flow/{self.dpid}"
        cookie, mask = foreign.wire_filter(cookie, mask)  # not asked: OVS's hidden entries
        if mask:
            body = {"cookie": cookie, "cookie_mask": mask}
            return await self._stats(Request(method="POST", path=path, body=body), "reading")
        return await self._stats(Request(method="GET", path=path), "reading the flow table")

    async def _check(self) -> None:
        body = await self._get("/stats/switches", "listing the controller's switches")
        if not isinstance(body, list):
            raise ProtocolError(self.name, f"/stats/switches: expected a list, got {body!r}")
        if self.dpid not in body:
            raise DeviceUnreachable(
                self.name,
                f"datapath {self.dpid} is not connected to the controller at {self.base_url} "
                f"(it has {sorted(d for d in body if isinstance(d, int))})",
            )

    async def _port_descs(self) -> list[Json]:
        path = f"/stats/portdesc/{self.dpid}"
        return await self._stats(Request(method="GET", path=path), "reading the port descriptions")

    async def _stats(self, request: Request, what: str) -> list[Json]:
        """The entries of ``{"<dpid>": [...]}`` from a stats request. ofctl_rest waits
        ``STATS_WAIT_S`` for the switch's reply, then answers 200 with what it got: an
        empty list that took that long is a switch that did not answer, not an empty
        table. It is asked again until ``timeout``; then DeviceTimeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            start = time.monotonic()
            body = await self._call(request, what)
            try:
                entries = mapping.entries_of(body, self.dpid)
            except MappingError as exc:
                raise ProtocolError(self.name, f"{request.path}: {exc}") from exc
            took = time.monotonic() - start
            if entries or took < STATS_WAIT_S:
                return entries
            if time.monotonic() >= deadline:
                raise DeviceTimeout(
                    self.name,
                    f"{what}: the switch did not answer the controller within "
                    f"{STATS_WAIT_S:g} s (ofctl_rest's wait) for {self.timeout:g} s; its "
                    "empty answers are not an empty table",
                )

    async def _get(self, path: str, what: str) -> object:
        return await self._call(Request(method="GET", path=path), what)

    async def _call(self, request: Request, what: str) -> object:
        """The JSON answer of a stats request (its status as the driver's error)."""
        response = await self._exchange(request)
        if response.status_code != 200:
            raise self._status_error(response, f"{what}: ")
        try:
            return response.json()
        except ValueError as exc:
            path = request.path
            raise ProtocolError(self.name, f"{path}: not JSON: {response.text[:200]!r}") from exc

    def _status_error(self, response: httpx.Response, what: str) -> DriverError:
        status = response.status_code
        detail = f"{what}HTTP {status} {response.reason_phrase}"
        if text := response.text.strip():
            detail += f": {text[:200]}"
        if status == 404:
            return DeviceUnreachable(
                self.name,
                f"{detail} (ofctl_rest: no such datapath {self.dpid}, the switch is not "
                "connected to the controller)",
            )
        if 400 <= status < 600:
            return DeviceRejected(self.name, detail, f"http-{status}")
        return ProtocolError(self.name, detail)


def _numbered(entries: Iterable[Json]) -> Iterator[tuple[int, Json]]:
    """The entries of numbered ports, with their number: ofctl_rest gives LOCAL and the
    other reserved ports as names."""
    for entry in entries:
        number = entry.get("port_no")
        if isinstance(number, int) and not isinstance(number, bool):
            yield number, entry
