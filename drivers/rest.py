"""What the drivers that program a switch through a controller's REST northbound share
(``odl``, ``ryu_rest``): one HTTP client, the wire log, transport errors translated, and
the non-atomic batch.

A REST northbound takes one flow per request and answers before the switch has it (ODL
once its config datastore has it, ofctl_rest once the flow-mod is sent), and neither
reports the switch's refusal. So ``apply``:

1. builds every request first: a change the northbound cannot express is refused before
   anything is sent (``_request`` raises ``DeviceRejected``);
2. reads the flows under the batch's cookies (the undo point; other writers' flows are
   not ours to read or undo) and sends each request, in order;
3. reads back (``_confirmed_flows``: what ``read`` shows, unless the northbound confirms
   elsewhere) until every touched entry is as the batch should leave it, for up to
   ``settle_s`` (``DeviceRejected`` with ``absent_code`` after that);
4. on any failure in 2-3 puts every touched entry back (``_undo_changes``) and reads back
   again; then raises the error. When the undo fails too, a plain ``DriverError`` says so.

Reads: ``_entries(cookie, mask)`` lists the flows in the northbound's own JSON (filtered
by cookie where the northbound can), and the driver's ``reader`` (``drivers.foreign``) makes
rules of ours and ``ForeignEntry``s of the others; a flow of another writer that a rule
cannot say is skipped and counted (``skips``), never fatal.

Transport: connection refused or lost -> ``DeviceUnreachable``; no answer within
``timeout`` -> ``DeviceTimeout``; bad HTTP -> ``ProtocolError``. Every request and answer
is logged at DEBUG on ``reroute.wire.<kind>.<name>``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from drivers import batch, foreign
from drivers.base import FlowChange, FlowRule, Session, Survey
from drivers.batch import Expected, Key
from drivers.errors import (
    DeviceRejected,
    DeviceTimeout,
    DeviceUnreachable,
    DriverError,
    ProtocolError,
)

ALL_COOKIE_BITS = 0xFFFF_FFFF_FFFF_FFFF
Json = dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    method: str
    path: str
    body: object = None
    change: int = -1  # the index of the change it carries (-1: none)


class RestFlowDriver(Session):
    """A switch behind a controller's REST northbound (see the module docstring)."""

    kind = "rest"  # the wire log's name: reroute.wire.<kind>.<name>
    poll_s = 0.05  # read-back interval while a batch settles
    absent_code = "not-in-table"  # DeviceRejected code of a change the read-back lacks
    read_back_from = "the switch's table"  # where the read-back looks, for messages
    refusal_hint = "see its log"  # where a switch's refusal may be seen, for messages

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        timeout: float,
        settle_s: float,
        verify_tls: bool | str,
        auth: httpx.Auth | None = None,
    ) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.settle_s = settle_s
        self.verify_tls = verify_tls  # https: check the certificate (a str: the CA file)
        self._auth = auth
        self._http: httpx.AsyncClient | None = None
        self._wire = logging.getLogger(f"reroute.wire.{self.kind}.{name}")
        self._log = logging.getLogger(f"reroute.drivers.{self.kind}")
        self._lock = asyncio.Lock()
        self.skips = foreign.Skips(name)  # other writers' flows our reads left out

    # ----------------------------------------------------------------------------------
    # what each northbound says its own way

    @property
    @abstractmethod
    def reader(self) -> foreign.Reader[Json]:
        """How one listed flow reads: cookie, rule, foreign entry."""

    @abstractmethod
    async def _check(self) -> None:
        """Ask the controller for the switch; DeviceUnreachable when it does not have it."""

    @abstractmethod
    def _request(self, index: int, change: FlowChange) -> Request:
        """The request of one change; DeviceRejected ``UNSUPPORTED`` if it cannot be said."""

    @abstractmethod
    async def _write(self, request: Request, changes: Sequence[FlowChange]) -> None:
        """Send one change's request; the northbound's refusal as a DriverError."""

    @abstractmethod
    async def _entries(self, cookie: int, mask: int) -> list[Json]:
        """The switch's flows as the northbound lists them: those whose cookie matches
        under ``mask`` where it can filter (``mask`` 0: all), else all of them."""

    async def _flows(self) -> list[FlowRule]:
        """Every flow of the switch that reads as a rule (others skipped, counted)."""
        return foreign.select(await self._entries(0, 0), self.reader, 0, 0, self.skips)

    async def _ours(self, cookie: int, mask: int) -> list[FlowRule]:
        """The flows under (cookie, mask) that read as rules (others skipped, counted)."""
        entries = await self._entries(cookie, mask)
        return foreign.select(entries, self.reader, cookie, mask, self.skips, strict=False)

    async def _snapshot(self) -> object:
        """Taken before a batch's writes: what a read-back confirming it must be newer than
        (a northbound whose read-back lags, by a poll, compares; by default nothing)."""
        return None

    async def _confirmed_flows(self, since: object) -> list[FlowRule] | None:
        """The flows a batch is confirmed against (by default what ``read`` shows), or None
        while the read-back is not yet newer than the snapshot ``since``."""
        return await self._flows()

    async def _undo_changes(
        self, before: batch.Table, changes: Sequence[FlowChange]
    ) -> list[FlowChange]:
        """The changes that put the touched entries back as in ``before`` (by default read
        from the switch now: only those that differ)."""
        now = batch.index(await self._ours(*batch.cookies(changes)))
        return batch.restore(before, now, batch.touched(changes))

    # ----------------------------------------------------------------------------------
    # session

    async def open(self) -> None:
        """Open the HTTP client and check that the controller has the switch."""
        if self._http is None:
            self._http = httpx.AsyncClient(
                base_url=self.base_url,
                auth=self._auth,
                timeout=self.timeout,
                verify=self.verify_tls,
            )
        try:
            await self._check()
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Close the HTTP client."""
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()

    # ----------------------------------------------------------------------------------
    # FlowProgrammer

    async def apply(self, changes: Sequence[FlowChange]) -> None:
        """Apply the batch in order, verified by reading back; undone on failure."""
        if not changes:
            return
        requests = [self._request(i, c) for i, c in enumerate(changes)]
        async with self._lock:
            before = batch.index(await self._ours(*batch.cookies(changes)))
            try:
                since = await self._snapshot()
                for request in requests:
                    await self._write(request, changes)
                await self._settle(changes, batch.expected(before, changes), since)
            except DriverError as exc:
                await self._undo(before, changes, exc)
                raise

    async def read(self, cookie: int | None = None, cookie_mask: int = 0) -> list[FlowRule]:
        """The switch's flows (those whose cookie matches under ``cookie_mask``, when
        given; a ``cookie`` without a mask matches exactly); see ``drivers.foreign``."""
        cookie, mask = foreign.cookie_filter(cookie, cookie_mask)
        return foreign.select(await self._entries(cookie, mask), self.reader, cookie, mask,
                              self.skips)  # fmt: skip

    async def survey(self, cookie: int, cookie_mask: int) -> Survey:
        """Every flow: ours (cookie under the filter) as rules, the others as foreign."""
        entries = await self._entries(0, 0)
        return foreign.sort(entries, self.reader, cookie, cookie_mask, self.skips)

    # ----------------------------------------------------------------------------------
    # the batch, step by step

    def _what(self, request: Request, changes: Sequence[FlowChange]) -> str:
        """``change #i (op rule): `` for a request that carries one, else nothing."""
        if request.change < 0:
            return ""
        change = changes[request.change]
        return f"change #{request.change} ({change.op} {change.rule}): "

    async def _settle(self, changes: Sequence[FlowChange], want: Expected, since: object) -> None:
        """Read back until the touched entries are as ``want``, in a read-back newer than
        ``since`` (or ``settle_s``)."""
        deadline = time.monotonic() + self.settle_s
        while True:
            flows = await self._confirmed_flows(since)
            wrong = list(want) if flows is None else batch.mismatches(want, batch.index(flows))
            if not wrong:
                return
            if time.monotonic() >= deadline:
                raise self._absent(changes, wrong)
            await asyncio.sleep(self.poll_s)

    def _absent(self, changes: Sequence[FlowChange], wrong: list[Key]) -> DeviceRejected:
        i = next(i for i, c in enumerate(changes) if c.rule.key in wrong)
        return DeviceRejected(
            self.name,
            f"change #{i} ({changes[i].op} {changes[i].rule}) is not in {self.read_back_from} "
            f"after {self.settle_s:g} s ({len(wrong)} entries differ; the switch refused it "
            f"and the controller does not say why: {self.refusal_hint}); the batch of "
            f"{len(changes)} was undone",
            self.absent_code,
        )

    async def _undo(
        self, before: batch.Table, changes: Sequence[FlowChange], error: DriverError
    ) -> None:
        """Put every touched entry back as in ``before``; DriverError when that fails."""
        keys = batch.touched(changes)
        try:
            fix = await self._undo_changes(before, changes)
            self._log.warning("%s: undoing %d change(s) after: %s", self.name, len(fix), error)
            since = await self._snapshot()
            for i, change in enumerate(fix):
                await self._write(self._request(i, change), fix)
            await self._settle(fix, {k: before.get(k) for k in keys}, since)
        except DriverError as undo_error:
            raise DriverError(
                self.name,
                f"{error}; undoing the batch failed too ({undo_error}): the controller and "
                "the switch are in an unknown state, read them back",
            ) from undo_error

    # ----------------------------------------------------------------------------------
    # HTTP

    async def _exchange(self, request: Request) -> httpx.Response:
        """One request and its answer, whatever its status; transport errors translated."""
        http = self._http
        if http is None:
            raise DeviceUnreachable(self.name, "not connected (call open() first)")
        body = "" if request.body is None else str(request.body)
        self._wire.debug("> %s %s %s", request.method, request.path, body)
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
