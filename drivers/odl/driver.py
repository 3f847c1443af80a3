"""``OdlDriver``: flows through an OpenDaylight controller's northbound REST, the seeds'
"ODL method" (a host script sends flows to the controller; the controller programs the
switch over OpenFlow).

``apply`` (one REST request per change; no atomic batches):

1. changes the style cannot express are refused before anything is sent
   (``DeviceRejected`` code ``UNSUPPORTED``);
2. the node's flows are read (the undo point; ``read`` shows the *config* datastore, every
   writer's flows at once, see below); each change is one PUT (add or replace) or DELETE
   of the flow whose id is derived from the rule's key, in order;
3. the controller answers once its *config* datastore has the change: the switch is
   programmed after that, and the *operational* datastore shows it only after the
   controller's next statistics poll (ODL: every 3 s). So the driver polls the
   operational datastore until every touched entry is as the batch should leave it, for
   up to ``operational_wait_s``. A flow the switch refused stays in config and never
   reaches operational (ODL only logs the switch's error): after the wait that is
   ``DeviceRejected`` code ``not-in-operational``;
4. on any failure in 2-3 every touched flow is put back as it was (PUT of the old rule,
   or DELETE, which also clears refused flows out of config) and re-verified; then the
   error is raised. When the undo fails too, a plain ``DriverError`` says so.

``read`` (what the engine plans on, and the undo point) is the config datastore: what the
controller holds for the switch, as soon as any client wrote it. Operational lags by up to
a statistics poll, so a plan made on it would not see a change made in the last 3 s (a
move by another client through the same controller: the engine would refuse to move
flows "already" where they no longer are). A flow the switch refused stays in config,
until this driver's undo deletes it (step 4).

Step 3 takes the operational node before the writes and accepts a read-back only once
the node has changed since (a poll after the writes: each poll moves the flows' durations),
so a change that puts back what was there a poll ago is not taken as done on the old view.

``read_back: config`` (RESTCONF styles) confirms the batch from the config datastore
instead: at once, but a flow the switch refused is not seen there (``not-in-config`` only
when the controller lost it). For a client that trusts the controller, as the seeds'
external ODL scripts did: the impulse-response experiment's injector, which must move the
flows sharply, not once the next statistics poll confirms it.

AD-SAL (``api: adsal``) reads flows (for plans and read-backs alike) through its own
statistics northbound (the switch's flows at the last poll, ``styles.flows_path``), not
through RESTCONF.

HTTP statuses: 2xx ok (on DELETE also 404, and 409 with error-tag ``data-missing``, which
RFC 8040 section 7 maps data-missing to: already gone); 401/403 -> ``DeviceRejected``
code ``auth``; other 4xx -> ``DeviceRejected`` with the body's ``error-tag`` (or
``http-<status>``); 5xx is asked again (every request is a GET, or a PUT or DELETE of one
flow, idempotent: a write the controller half-made is made whole by the same write),
``SERVER_RETRIES`` times, ``RETRY_S`` apart, doubling; a 5xx still after that ->
``DeviceRejected`` code ``http-<status>`` (and the batch is undone); anything else ->
``ProtocolError``. Connection refused or lost -> ``DeviceUnreachable``; no answer in
``timeout`` -> ``DeviceTimeout``. Every request and response is logged at DEBUG on
``reroute.wire.odl.<name>``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import httpx

from drivers import batch, foreign
from drivers.base import (
    Capabilities,
    FlowChange,
    FlowOp,
    FlowRule,
    Identity,
    PortState,
    Survey,
    register,
)
from drivers.errors import (
    ConfigError,
    DeviceRejected,
    DeviceUnreachable,
    DriverError,
    ProtocolError,
)
from drivers.odl import mapping, styles
from drivers.odl.mapping import MappingError
from drivers.odl.spec import OdlSpec
from drivers.odl.styles import Style
from drivers.rest import Json, Request, RestFlowDriver
from drivers.spec import Expect, read_secret

SERVER_RETRIES = 3  # a request answered 5xx is sent again this many times
RETRY_S = 0.2  # the first pause before sending it again (doubles)
READER = foreign.Reader(
    cookie=mapping.flow_cookie,
    rule=mapping.parse_flow,
    foreign=mapping.foreign_flow,
    text=mapping.entry_text,
)
ADSAL_READER = foreign.Reader(
    cookie=mapping.statistic_cookie,
    rule=mapping.parse_flow_statistic,
    foreign=mapping.foreign_statistic,
)


@register("odl", spec=OdlSpec)
class OdlDriver(RestFlowDriver):
    """One switch (``node``, e.g. ``openflow:1``) of an ODL controller at ``base_url``."""

    kind = "odl"
    poll_s = 0.1  # operational datastore poll while a batch settles
    absent_code = "not-in-operational"
    read_back_from = "the operational datastore"
    capabilities = Capabilities(
        atomic_batch=False,
        read_back=True,
        max_batch=0,
        port_state=True,
        notes="OpenDaylight northbound REST (RFC 8040, draft RESTCONF or Hydrogen AD-SAL), "
        "one request per flow; verified in the operational datastore (AD-SAL: its statistics "
        "northbound), which lags by the controller's statistics poll; a flow the switch "
        "refuses is detected by its absence there after operational_wait_s; a failed batch "
        "is undone",
    )

    @classmethod
    def from_spec(cls, name: str, spec: OdlSpec, expect: Expect) -> OdlDriver:
        """The driver of an inventory entry (``drivers.odl.spec``); reads the password now."""
        if spec.node is None and expect.dpid is None:
            raise ConfigError(f"{name}: say its node (openflow:N): the topology gives no dpid")
        node = spec.node or f"openflow:{expect.dpid}"
        verify: bool | str = spec.verify_tls
        if spec.verify_tls and spec.ca_certificate is not None:
            verify = str(spec.ca_certificate)
        return cls(
            name,
            spec.url,
            node,
            style=spec.api,
            user=spec.user,
            password=read_secret(name, spec.password),
            timeout=spec.timeout_s,
            operational_wait_s=spec.operational_wait_s,
            read_back=spec.read_back,
            verify_tls=verify,
        )

    def __init__(
        self,
        name: str,
        base_url: str,
        node: str = "openflow:1",
        *,
        style: Style | str = Style.RFC8040,
        user: str = "admin",
        password: str = "admin",
        timeout: float = 5.0,
        operational_wait_s: float = 10.0,
        verify_tls: bool | str = True,
        read_back: str = "operational",
    ) -> None:
        super().__init__(
            name,
            base_url,
            timeout=timeout,
            settle_s=operational_wait_s,
            verify_tls=verify_tls,
            auth=httpx.BasicAuth(user, password),
        )
        self.node = node
        self.style = Style(style)
        try:
            mapping.dpid_of(node)
        except ValueError as exc:
            raise DeviceUnreachable(name, str(exc)) from exc
        if read_back not in ("operational", "config"):
            raise ValueError(f"read_back {read_back!r}: operational or config")
        self.from_config = read_back == "config"
        if self.from_config:  # instance attributes: the class says operational
            self.read_back_from = "the config datastore"
            self.absent_code = "not-in-config"
            styles.config_path(self.style, node)  # AD-SAL: ValueError

    async def identify(self) -> Identity:
        """The node as the controller's operational datastore shows it."""
        node = await self._node()
        ports = len(node.get("node-connector", []))
        return Identity(
            summary=f"OpenDaylight ({self.style}) node {self.node}, {ports} node connectors"
        )

    # ----------------------------------------------------------------------------------
    # PortMonitor

    async def port_states(self) -> dict[int, PortState]:
        """Link state of the node's ports, from the operational inventory."""
        return styles.node_ports(await self._node())

    # ----------------------------------------------------------------------------------
    # the northbound

    def _request(self, index: int, change: FlowChange) -> Request:
        why = mapping.unsupported(change.rule)
        if why is None and self.style is Style.ADSAL:
            why = mapping.adsal_unsupported(change.rule)
        if why is not None:
            raise DeviceRejected(
                self.name,
                f"change #{index} ({change.op} {change.rule}) cannot be sent through the "
                f"{self.style} northbound: {why}; nothing of the batch was sent",
                "UNSUPPORTED",
            )
        path = styles.flow_path(self.style, self.node, change.rule)
        if change.op is FlowOp.DELETE:
            return Request(method="DELETE", path=path, change=index)
        body = styles.flow_body(self.style, self.node, change.rule)
        return Request(method="PUT", path=path, body=body, change=index)

    async def _write(self, request: Request, changes: Sequence[FlowChange]) -> None:
        response = await self._call(request)
        if response.is_success or (request.method == "DELETE" and _gone(response)):
            return
        raise self._status_error(response, self._what(request, changes))

    async def _undo_changes(
        self, before: batch.Table, changes: Sequence[FlowChange]
    ) -> list[FlowChange]:
        """Every touched flow written back (PUT of the old rule, or DELETE), without a read:
        operational lags, and a DELETE also clears a refused flow out of config."""
        rules = {c.rule.key: c.rule for c in changes}
        return [
            FlowChange(op=FlowOp.ADD, rule=before[k])
            if k in before
            else FlowChange(op=FlowOp.DELETE, rule=rules[k])
            for k in reversed(batch.touched(changes))
        ]

    async def _check(self) -> None:
        await self._node()

    async def _node(self) -> dict[str, Any]:
        path = styles.operational_path(self.style, self.node)
        response = await self._call(Request(method="GET", path=path))
        if response.status_code == 404:
            raise DeviceUnreachable(
                self.name, f"{self.node} is not in the controller's operational datastore "
                "(the switch is not connected to the controller)",
            )  # fmt: skip
        if not response.is_success:
            raise self._status_error(response, "reading the operational datastore: ")
        try:
            return styles.node_of(response.json())
        except (ValueError, MappingError) as exc:
            raise ProtocolError(self.name, f"operational node: {exc}") from exc

    @property
    def reader(self) -> foreign.Reader[Json]:
        """How a listed flow reads: an inventory flow, or an AD-SAL statistics entry."""
        return ADSAL_READER if self.style is Style.ADSAL else READER

    async def _entries(self, cookie: int, mask: int) -> list[Json]:
        """What ``read`` shows, unfiltered (RESTCONF cannot filter by cookie): the node's
        config (RESTCONF: the flows the controller holds for it, every writer's at once),
        or AD-SAL's statistics listing."""
        try:
            if self.style is Style.ADSAL:
                return await self._statistics_entries()
            return await self._config_entries()
        except (ValueError, MappingError) as exc:
            raise ProtocolError(self.name, f"flow read: {exc}") from exc

    async def survey(self, cookie: int, cookie_mask: int) -> Survey:
        """Ours from config (what ``read`` shows); the foreign flows of config and of the
        operational datastore both: a writer of the controller's RPCs (l2switch, LLDP
        discovery) never writes config, and its flows show only on the switch."""
        found = await super().survey(cookie, cookie_mask)
        if self.style is Style.ADSAL:
            return found
        try:
            listed = styles.node_flow_objects(await self._node())
        except (ValueError, MappingError) as exc:
            raise ProtocolError(self.name, f"operational flows: {exc}") from exc
        switch = foreign.sort(listed, READER, cookie, cookie_mask, self.skips).foreign
        seen = {(e.table, e.priority, e.match, e.more) for e in found.foreign}
        more = [e for e in switch if (e.table, e.priority, e.match, e.more) not in seen]
        return Survey(ours=found.ours, foreign=[*found.foreign, *more])

    async def _snapshot(self) -> object:
        """The operational node before a batch's writes (None when it is not confirmed on
        operational): a read-back confirms the batch only once the node has changed since,
        i.e. the controller has polled the switch after the writes."""
        if self.from_config or self.style is Style.ADSAL:
            return None
        return await self._node()

    async def _confirmed_flows(self, since: object) -> list[FlowRule] | None:
        """What a batch is confirmed against: the operational node once it is newer than
        ``since`` (a poll after the writes: before it, a change that puts back what was
        there a moment ago would look done), the config node with ``read_back: config``,
        AD-SAL's statistics listing. Flows of other writers that a rule cannot say are
        skipped (``drivers.foreign``)."""
        if self.style is Style.ADSAL or self.from_config:
            return await self._flows()
        node = await self._node()
        try:
            listed = styles.node_flow_objects(node)
        except (ValueError, MappingError) as exc:
            raise ProtocolError(self.name, f"flow read back: {exc}") from exc
        if node == since and listed:  # the same poll (flows' durations move each poll)
            return None
        return foreign.select(listed, READER, 0, 0, self.skips)

    async def _statistics_entries(self) -> list[Json]:
        listing = styles.flows_path(self.style, self.node)
        assert listing is not None  # AD-SAL
        response = await self._call(Request(method="GET", path=listing))
        if not response.is_success:
            raise self._status_error(response, "reading the flow statistics: ")
        return styles.statistics_entries(response.json())

    async def _config_entries(self) -> list[Json]:
        path = styles.config_path(self.style, self.node)
        response = await self._call(Request(method="GET", path=path))
        if response.status_code == 404:  # no flow asked for yet: no config node
            return []
        if not response.is_success:
            raise self._status_error(response, "reading the config datastore: ")
        return styles.node_flow_objects(styles.node_of(response.json()))

    async def _call(self, request: Request) -> httpx.Response:
        """The controller's answer; a 5xx is asked again (``SERVER_RETRIES``, backing off)."""
        pause = RETRY_S
        for attempt in range(SERVER_RETRIES):
            response = await self._exchange(request)
            if response.status_code < 500:
                return response
            self._log.warning("%s: %s %s answered %d (%s); again in %g s (%d of %d)",
                              self.name, request.method, request.path, response.status_code,
                              _message(response), pause, attempt + 1, SERVER_RETRIES)  # fmt: skip
            await asyncio.sleep(pause)
            pause *= 2
        return await self._exchange(request)

    def _status_error(self, response: httpx.Response, what: str) -> DriverError:
        status = response.status_code
        detail = f"{what}HTTP {status}: {_message(response)}"
        if status in (401, 403):
            return DeviceRejected(self.name, detail, "auth")
        if 400 <= status < 500:
            return DeviceRejected(self.name, detail, _error_tag(response) or f"http-{status}")
        if status >= 500:
            return DeviceRejected(self.name, detail, f"http-{status}")
        return ProtocolError(self.name, detail)


def _gone(response: httpx.Response) -> bool:
    """A DELETE's answer that the flow is not there: 404, or RFC 8040's 409 data-missing."""
    status = response.status_code
    return status == 404 or (status == 409 and _error_tag(response) == "data-missing")


def _errors(response: httpx.Response) -> list[dict[str, Any]]:
    """The RFC 8040 ``errors.error`` list of a response ([] when it has none)."""
    try:
        found = response.json()["errors"]["error"]
    except (ValueError, KeyError, TypeError):
        return []
    return [e for e in found if isinstance(e, dict)] if isinstance(found, list) else []


def _error_tag(response: httpx.Response) -> str:
    errors = _errors(response)
    return str(errors[0].get("error-tag", "")) if errors else ""


def _message(response: httpx.Response) -> str:
    errors = _errors(response)
    if errors:
        return str(errors[0].get("error-message", errors[0]))
    return response.text.strip()[:200] or response.reason_phrase
