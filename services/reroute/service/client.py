"""``RerouteClient``: the reroute service's API for monitors and experiment scripts.

    client = RerouteClient("http://127.0.0.1:8080", token)
    view = client.create(["10.0.0.2>10.0.0.3"], "temporary", wait_s=5)
    assert view.state == "done", view.error

Every ``create`` carries an ``Idempotency-Key`` (one is generated per call when not
given). Connection errors, 5xx and 503 answers are retried ``retries`` times with
exponential backoff *with the same key*, so one degradation makes exactly one reroute
whatever the network does. Errors are ``ApiError`` (``status``, the server's ``message``;
status 0 when no answer came at all).
"""

from __future__ import annotations

import builtins
import json
import socket
import ssl
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

import httpx

from services.reroute.errors import ApiError
from services.reroute.planning.order import PhaseName, Stage
from services.reroute.store.records import RerouteState


@dataclass(frozen=True, slots=True, kw_only=True)
class StepView:
    index: int
    description: str
    state: str  # planned | started | done | failed | undone
    ms: float | None
    error: str | None
    phase: PhaseName | None = None  # the plan phase (``planning.order``)
    stage: Stage | None = None  # how an operator reads it (park, staged, swap, ...)
    started: float | None = None  # Unix time (None: not started)
    finished: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RerouteView:
    id: str
    state: RerouteState
    summary: str
    flows: tuple[str, ...]
    to_path: str
    plan: str | None
    steps: tuple[StepView, ...]
    error: str | None
    created: float
    started: float | None
    finished: float | None
    queue_position: int | None
    status: int = 200  # the HTTP status it came with (201/202: created by this call)
    cleanup_pending: tuple[str, ...] = ()  # devices its old paths' rules wait on (down)

    @property
    def final(self) -> bool:
        """The reroute has ended."""
        return self.state.final


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanView:
    """A dry run: the plan, nothing changed."""

    summary: str
    from_paths: tuple[str, ...]
    to_path: str
    disruption: str
    flow_count: int
    steps: tuple[str, ...]
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One server-sent event: ``kind`` "step", "reroute", "device" (a device's state
    changed) or "resync" (a device resynced), ``data`` its JSON."""

    id: int | None
    kind: str
    data: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Health:
    status: str  # ok, degraded (``devices`` names those not up), starting, draining
    fabric: str
    queue: int
    running: str | None
    devices: Mapping[str, str] = field(default_factory=dict)  # not up: name -> state


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceState:
    name: str
    kind: str
    up: bool
    detail: str
    down_since: float | None
    state: str = "unknown"  # up, down, hung, no_pipeline, out_of_sync (devicestate.State)
    since: float | None = None  # unix time it entered ``state``
    error: str = ""  # why it is not up
    owner: str = ""  # the replica that masters it (etcd device ownership; "": none)


@dataclass(frozen=True, slots=True, kw_only=True)
class Devices:
    status: str  # ok, degraded (a device is not up), starting, draining
    devices: tuple[DeviceState, ...]

    @property
    def down(self) -> list[str]:
        """The names of the devices that are not up."""
        return [d.name for d in self.devices if not d.up]


class RerouteClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = 5.0,
        retries: int = 3,
        backoff_s: float = 0.05,
        transport: httpx.BaseTransport | None = None,
        ca: Path | None = None,
        cert: tuple[Path, Path] | None = None,
    ) -> None:
        """``transport``: for tests (e.g. ``httpx.MockTransport``); default: the network.
        HTTPS: ``ca`` the CA file that signed the service's certificate (default: the
        system's); ``cert`` (certificate, key) where the service asks for a client's."""
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s,
            transport=transport or nodelay_transport(ca=ca, cert=cert),
        )

    def close(self) -> None:
        """Close the HTTP connection."""
        self._http.close()

    def __enter__(self) -> RerouteClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @overload
    def create(
        self,
        flows: Sequence[str],
        to_path: str,
        *,
        strategy: str = ...,
        via: str | None = ...,
        drain_ms: float | None = ...,
        dry_run: Literal[False] = ...,
        idempotency_key: str | None = ...,
        wait_s: float = ...,
    ) -> RerouteView: ...

    @overload
    def create(
        self,
        flows: Sequence[str],
        to_path: str,
        *,
        strategy: str = ...,
        via: str | None = ...,
        drain_ms: float | None = ...,
        dry_run: Literal[True],
        idempotency_key: str | None = ...,
        wait_s: float = ...,
    ) -> PlanView: ...

    def create(
        self,
        flows: Sequence[str],
        to_path: str,
        *,
        strategy: str = "mbb",
        via: str | None = None,
        drain_ms: float | None = None,
        dry_run: bool = False,
        idempotency_key: str | None = None,
        wait_s: float = 0.0,
    ) -> RerouteView | PlanView:
        """Ask for a reroute; with ``wait_s``, block up to that long until it is final.
        ``dry_run=True``: the plan on the devices' current state (a ``PlanView``)."""
        body: dict[str, Any] = {"flows": list(flows), "to_path": to_path, "strategy": strategy}
        body |= {"via": via} if via is not None else {}
        body |= {"drain_ms": drain_ms} if drain_ms is not None else {}
        body |= {"dry_run": True} if dry_run else {}
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        params = {"wait": wait_s} if wait_s > 0 else {}
        answer = self._request(
            "POST", "/v1/reroutes", json=body, headers=headers, params=params, wait_s=wait_s
        )
        return _plan(answer.json()) if dry_run else _reroute(answer.json(), answer.status_code)

    def get(self, reroute_id: str, *, wait_s: float = 0.0) -> RerouteView:
        """The reroute ``reroute_id``, waiting up to ``wait_s`` for it to end."""
        params = {"wait": wait_s} if wait_s > 0 else {}
        answer = self._request("GET", f"/v1/reroutes/{reroute_id}", params=params, wait_s=wait_s)
        return _reroute(answer.json(), answer.status_code)

    def list(
        self, state: str | None = None, flow: str | None = None, limit: int = 50
    ) -> builtins.list[RerouteView]:
        """Past and queued reroutes, newest first, filtered by state and flow."""
        params: dict[str, Any] = {"limit": limit}
        params |= {"state": state} if state else {}
        params |= {"flow": flow} if flow else {}
        answer = self._request("GET", "/v1/reroutes", params=params)
        return [_reroute(r) for r in answer.json()["reroutes"]]

    def cancel(self, reroute_id: str) -> RerouteView:
        """Cancel a pending reroute (ApiError 409 if it is running or finished)."""
        answer = self._request("DELETE", f"/v1/reroutes/{reroute_id}")
        return _reroute(answer.json(), answer.status_code)

    def topology(self) -> dict[str, Any]:
        """The service's topology (GET /v1/topology)."""
        data: dict[str, Any] = self._request("GET", "/v1/topology").json()
        return data

    def flows(self) -> dict[str, tuple[str, ...]]:
        """Per path, the flows installed on the devices (forward direction)."""
        paths = self._request("GET", "/v1/flows").json()["paths"]
        return {p["path"]: tuple(p["flows"]) for p in paths}

    def health(self) -> Health:
        """The service's health (GET /healthz)."""
        data = self._request("GET", "/healthz").json()
        keys = ("status", "fabric", "queue", "running", "devices")
        return Health(**{k: data[k] for k in keys if k in data})

    def devices(self) -> Devices:
        """The service and every device, asked now (GET /v1/health)."""
        data = self._request("GET", "/v1/health").json()
        keys = ("name", "kind", "up", "detail", "down_since", "state", "since", "error", "owner")
        found = tuple(DeviceState(**{k: d[k] for k in keys if k in d}) for d in data["devices"])
        return Devices(status=data["status"], devices=found)

    def metrics(self) -> str:
        """The Prometheus metrics text."""
        return self._request("GET", "/metrics").text

    def events(self) -> EventStream:
        """Subscribe to the server-sent events: the subscription is live when this returns
        (nothing after it is missed). Iterate for events; ``close()`` (or ``with``) to stop."""
        timeout = httpx.Timeout(self.timeout_s, read=None)
        for attempt in range(self.retries + 1):
            try:
                return EventStream(self._http, timeout)
            except httpx.TransportError as exc:
                if attempt == self.retries:
                    raise ApiError(0, f"no answer from {self._http.base_url}: {exc}") from exc
                time.sleep(self.backoff_s * 2**attempt)
        raise AssertionError("unreachable")

    def _request(self, method: str, url: str, *, wait_s: float = 0.0, **kw: Any) -> httpx.Response:
        timeout = self.timeout_s + wait_s
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                answer = self._http.request(method, url, timeout=timeout, **kw)
            except httpx.TransportError as exc:
                if last:
                    raise ApiError(0, f"no answer from {self._http.base_url}: {exc}") from exc
            else:
                if answer.status_code < 500 or last:
                    _check(answer)
                    return answer
            time.sleep(self.backoff_s * 2**attempt)
        raise AssertionError("unreachable")


class EventStream:
    """An open ``/v1/events`` stream: an iterator of ``Event`` until the server ends it."""

    def __init__(self, http: httpx.Client, timeout: httpx.Timeout) -> None:
        self._stream = http.stream("GET", "/v1/events", timeout=timeout)
        answer = self._stream.__enter__()
        try:
            _check(answer, read=True)
            lines = answer.iter_lines()
            while next(lines, ""):  # ": subscribed" and the blank line closing it
                pass
        except BaseException:
            self.close()
            raise
        self._events = parse_sse(lines)

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        return next(self._events)

    def close(self) -> None:
        """Close the event stream."""
        self._stream.__exit__(None, None, None)

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def nodelay_transport(
    *, ca: Path | None = None, cert: tuple[Path, Path] | None = None
) -> httpx.HTTPTransport:
    """TCP_NODELAY: httpx writes a request's headers and body separately, and Nagle's
    algorithm would hold the body for the server's delayed ACK (40 ms on Linux). ``ca``,
    ``cert``: HTTPS with this CA file, and this client certificate and key."""
    verify: ssl.SSLContext | bool = True
    if ca is not None or cert is not None:
        verify = ssl.create_default_context(cafile=None if ca is None else str(ca))
        if cert is not None:
            verify.load_cert_chain(str(cert[0]), str(cert[1]))
    return httpx.HTTPTransport(
        socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)], verify=verify
    )


def _check(answer: httpx.Response, *, read: bool = False) -> None:
    if answer.status_code < 400:
        return
    if read:
        answer.read()
    raise ApiError(answer.status_code, _message(answer))


def _message(answer: httpx.Response) -> str:
    """The server's message: ``detail`` as text, validation errors as ``loc: msg``."""
    try:
        detail = answer.json()["detail"]
    except (ValueError, KeyError, TypeError):
        return answer.text[:500] or answer.reason_phrase
    if isinstance(detail, list):
        return "; ".join(
            f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg', d)}" for d in detail
        )
    return str(detail)


def parse_sse(lines: Iterator[str]) -> Iterator[Event]:
    """Events of a ``text/event-stream`` (comments skipped, multi-line data joined)."""
    kind, seq = "message", None
    data: builtins.list[str] = []
    for line in lines:
        if not line:
            if data:
                yield Event(id=seq, kind=kind, data=json.loads("\n".join(data)))
            kind, data, seq = "message", [], None
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            kind = value
        elif field == "data":
            data.append(value)
        elif field == "id" and value.isdigit():
            seq = int(value)


def _reroute(data: Mapping[str, Any], status: int = 200) -> RerouteView:
    intent = data.get("intent") or {}
    return RerouteView(
        id=data["id"],
        state=RerouteState(data["state"]),
        summary=data["summary"],
        flows=tuple(intent.get("flows", ())),
        to_path=intent.get("to_path", ""),
        plan=data["plan"],
        steps=tuple(
            StepView(
                index=s["index"],
                description=s["description"],
                state=s["state"],
                ms=s["ms"],
                error=s["error"],
                phase=PhaseName(s["phase"]) if s.get("phase") else None,
                stage=Stage(s["stage"]) if s.get("stage") else None,
                started=s.get("started"),
                finished=s.get("finished"),
            )
            for s in data["steps"]
        ),
        error=data["error"],
        created=data["created"],
        started=data["started"],
        finished=data["finished"],
        queue_position=data["queue_position"],
        status=status,
        cleanup_pending=tuple(data.get("cleanup_pending", ())),
    )


def _plan(data: Mapping[str, Any]) -> PlanView:
    return PlanView(
        summary=data["summary"],
        from_paths=tuple(data["from_paths"]),
        to_path=data["to_path"],
        disruption=data["disruption"],
        flow_count=data["flow_count"],
        steps=tuple(s["description"] for s in data["steps"]),
        text=data["text"],
    )
