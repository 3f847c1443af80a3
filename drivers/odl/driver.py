"""``OdlDriver``: flows through an OpenDaylight controller's northbound REST, the seeds'
"ODL method" (a host script sends flows to the controller; the controller programs the
switch over OpenFlow).

``apply`` (one REST request per change; no atomic batches):

1. changes the style cannot express are refused before anything is sent
   (``DeviceRejected`` code ``UNSUPPORTED``);
2. the operational datastore is read (the undo point); each change is one PUT (add or
   replace) or DELETE of the flow whose id is derived from the rule's key, in order;
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

AD-SAL (``api: adsal``) reads flows back through its own statistics northbound (the
switch's flows at the last poll, ``styles.flows_path``), not through RESTCONF.

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
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from drivers import batch
from drivers.base import (
    Capabilities,
    FlowChange,
    FlowOp,
    FlowRule,
    Identity,
    PortState,
    Session,
    register,
)
from drivers.batch import Expected, Key
from drivers.errors import (
    ConfigError,
    DeviceRejected,
    DeviceTimeout,
    DeviceUnreachable,
    DriverError,
    ProtocolError,
)
from drivers.odl import mapping, styles
from drivers.odl.mapping import MappingError
from drivers.odl.spec import OdlSpec
from drivers.odl.styles import Style
from drivers.spec import Expect, read_secret

log = logging.getLogger("reroute.drivers.odl")
ALL_COOKIE_BITS = 0xFFFF_FFFF_FFFF_FFFF
POLL_S = 0.1  # operational datastore poll while a batch settles
SERVER_RETRIES = 3  # a request answered 5xx is sent again this many times
RETRY_S = 0.2  # the first pause before sending it again (doubles)


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    method: str
    path: str
    body: object = None
    change: int = -1  # the index of the change it carries (-1: none)


@register("odl", spec=OdlSpec)
class OdlDriver(Session):
    """One switch (``node``, e.g. ``openflow:1``) of an ODL controller at ``base_url``."""

    capabilities = Capabilities(
        atomic_batch=False,
        read_back=True,
        max_batch=0,
        port_state=True,
        typical_latency_ms=3000.0,  # up to one statistics poll (ODL: 3 s) per batch
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
    ) -> None:
        self.name = name
        self.verify_tls = verify_tls  # https: check the certificate (a str: the CA file)
        self.base_url = base_url.rstrip("/")
        self.node = node
        self.style = Style(style)
        self.timeout = timeout
        self.operational_wait_s = operational_wait_s
        try:
            mapping.dpid_of(node)
        except ValueError as exc:
            raise DeviceUnreachable(name, str(exc)) from exc
        self._auth = httpx.BasicAuth(user, password)
        self._http: httpx.AsyncClient | None = None
        self._wire = logging.getLogger(f"reroute.wire.odl.{name}")
        self._lock = asyncio.Lock()

    # ----------------------------------------------------------------------------------
    # session

    async def open(self) -> None:
        """Open the HTTP client and check that the controller has the node."""
        if self._http is None:
            self._http = httpx.AsyncClient(
                base_url=self.base_url,
                auth=self._auth,
                timeout=self.timeout,
                verify=self.verify_tls,
            )
        try:
            await self._node()
        except BaseException:
            await self.close()
            raise

    async def identify(self) -> Identity:
        """The node as the controller's operational datastore shows it."""
        node = await self._node()
        ports = len(node.get("node-connector", []))
        return Identity(
            summary=f"OpenDaylight ({self.style}) node {self.node}, {ports} node connectors"
        )

    async def close(self) -> None:
        """Close the HTTP client."""
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()

    # ----------------------------------------------------------------------------------
    # FlowProgrammer

    async def apply(self, changes: Sequence[FlowChange]) -> None:
        """Apply the batch in order, verified in operational; undone on failure."""
        if not changes:
            return
        requests = [self._request(i, c) for i, c in enumerate(changes)]
        async with self._lock:
            before = batch.index(await self.read())
            try:
                for request in requests:
                    await self._write(request, changes)
                await self._settle(changes, batch.expected(before, changes))
            except DriverError as exc:
                await self._undo(before, changes, exc)
                raise

    async def read(self, cookie: int | None = None, cookie_mask: int = 0) -> list[FlowRule]:
        """The node's flows in the operational datastore (those whose cookie matches under
        ``cookie_mask``, when given; a ``cookie`` without a mask matches exactly)."""
        rules = await self._flows()
        if cookie is not None and not cookie_mask:
            cookie_mask = ALL_COOKIE_BITS
        want = (cookie or 0) & cookie_mask
        return [r for r in rules if r.cookie & cookie_mask == want]

    # ----------------------------------------------------------------------------------
    # PortMonitor

    async def port_states(self) -> dict[int, PortState]:
        """Link state of the node's ports, from the operational inventory."""
        return styles.node_ports(await self._node())

    # ----------------------------------------------------------------------------------
    # apply, step by step

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
        response = await self._http_call(request)
        if response.is_success or (request.method == "DELETE" and _gone(response)):
            return
        what = ""
        if request.change >= 0:
            change = changes[request.change]
            what = f"change #{request.change} ({change.op} {change.rule}): "
        raise self._status_error(response, what)

    async def _settle(self, changes: Sequence[FlowChange], want: Expected) -> None:
        """Poll the operational datastore until the touched entries are as ``want``."""
        deadline = time.monotonic() + self.operational_wait_s
        while wrong := batch.mismatches(want, batch.index(await self.read())):
            if time.monotonic() >= deadline:
                raise self._not_in_operational(changes, wrong)
            await asyncio.sleep(POLL_S)

    def _not_in_operational(
        self, changes: Sequence[FlowChange], wrong: list[Key]
    ) -> DeviceRejected:
        i = next(i for i, c in enumerate(changes) if c.rule.key in wrong)
        return DeviceRejected(
            self.name,
            f"change #{i} ({changes[i].op} {changes[i].rule}) is not in the operational "
            f"datastore after {self.operational_wait_s:g} s ({len(wrong)} entries differ; "
            "the switch refused it or the controller lost it: see the controller's log); "
            f"the batch of {len(changes)} was undone",
            "not-in-operational",
        )

    async def _undo(
        self, before: batch.Table, changes: Sequence[FlowChange], error: DriverError
    ) -> None:
        """Put every touched flow back as in ``before``; DriverError when that fails."""
        keys = batch.touched(changes)
        rules = {c.rule.key: c.rule for c in changes}
        fix = [
            FlowChange(op=FlowOp.ADD, rule=before[k])
            if k in before
            else FlowChange(op=FlowOp.DELETE, rule=rules[k])
            for k in reversed(keys)
        ]
        log.warning("%s: undoing %d change(s) after: %s", self.name, len(fix), error)
        try:
            for i, change in enumerate(fix):
                await self._write(self._request(i, change), fix)
            await self._settle(fix, {k: before.get(k) for k in keys})
        except DriverError as undo_error:
            raise DriverError(
                self.name,
                f"{error}; undoing the batch failed too ({undo_error}): the controller's "
                "config and the switch are in an unknown state, read them back",
            ) from undo_error

    # ----------------------------------------------------------------------------------
    # HTTP

    async def _node(self) -> dict[str, Any]:
        path = styles.operational_path(self.style, self.node)
        response = await self._http_call(Request(method="GET", path=path))
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

    async def _flows(self) -> list[FlowRule]:
        """Every flow of the node: AD-SAL's listing, or the operational node's tables."""
        listing = styles.flows_path(self.style, self.node)
        try:
            if listing is None:
                return styles.node_flows(await self._node())
            response = await self._http_call(Request(method="GET", path=listing))
            if not response.is_success:
                raise self._status_error(response, "reading the flow statistics: ")
            return styles.statistics_flows(response.json())
        except (ValueError, MappingError) as exc:
            raise ProtocolError(self.name, f"flow read back: {exc}") from exc

    async def _http_call(self, request: Request) -> httpx.Response:
        """The controller's answer; a 5xx is asked again (``SERVER_RETRIES``, backing off)."""
        pause = RETRY_S
        for attempt in range(SERVER_RETRIES):
            response = await self._exchange(request)
            if response.status_code < 500:
                return response
            log.warning("%s: %s %s answered %d (%s); again in %g s (%d of %d)", self.name,
                        request.method, request.path, response.status_code, _message(response),
                        pause, attempt + 1, SERVER_RETRIES)  # fmt: skip
            await asyncio.sleep(pause)
            pause *= 2
        return await self._exchange(request)

    async def _exchange(self, request: Request) -> httpx.Response:
        http = self._http
        if http is None:
            raise DeviceUnreachable(self.name, "not connected (call connect() first)")
        self._wire.debug("> %s %s %s", request.method, request.path, _text(request.body))
        try:
            response = await http.request(request.method, request.path, json=request.body)
        except httpx.TimeoutException as exc:
            if isinstance(exc, httpx.ConnectTimeout):
                raise DeviceUnreachable(self.name, f"cannot connect: {exc!r}") from exc
            raise DeviceTimeout(
                self.name, f"no answer to {request.method} {request.path} in {self.timeout:g} s"
            ) from exc
        except httpx.RemoteProtocolError as exc:
            raise ProtocolError(self.name, f"bad HTTP from the controller: {exc}") from exc
        except httpx.TransportError as exc:
            raise DeviceUnreachable(self.name, f"{self.base_url}: {exc!r}") from exc
        self._wire.debug("< %d %s", response.status_code, response.text)
        return response

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


def _text(body: object) -> str:
    return "" if body is None else str(body)


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
