"""gRPC to one P4Runtime server: every RPC with a deadline, logged on the wire log, and its
errors translated into the driver error tree.

gRPC status -> error: DEADLINE_EXCEEDED -> ``DeviceTimeout``; UNAVAILABLE ->
``DeviceUnreachable``; PERMISSION_DENIED (a write from a client that is not the primary)
-> ``DeviceRejected`` code ``not-primary``; a Write's UNKNOWN with a
``grpc-status-details-bin`` trailer -> ``WriteFailed`` carrying one ``UpdateStatus`` per
update (the driver decides what it means); any other status -> ``DeviceRejected`` with
the status name as code (e.g. ``FAILED_PRECONDITION``, ``INVALID_ARGUMENT``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import text_format
from google.protobuf.message import DecodeError

from drivers.errors import (
    ConfigError,
    DeviceRejected,
    DeviceTimeout,
    DeviceUnreachable,
    DriverError,
    ProtocolError,
)
from drivers.p4runtime.proto import (
    STATUS_DETAILS_KEY,
    code_name,
    code_pb2,
    p4runtime_pb2,
    p4runtime_pb2_grpc,
    status_pb2,
)
from drivers.spec import TlsFiles

MAX_MESSAGE = 64 << 20
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.max_send_message_length", MAX_MESSAGE),
    # a channel's own connection: gRPC otherwise shares one per address in the process,
    # and a new channel to a server that restarted would wait out the old one's backoff
    ("grpc.use_local_subchannel_pool", 1),
    # reconnect soon once a server is back; the driver bounds the whole wait by its timeout
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
KEEPALIVE_S = 10.0  # HTTP/2 PING after this long without a frame from the server


def channel_options(timeout: float) -> list[tuple[str, int]]:
    """``CHANNEL_OPTIONS`` and keepalive: a quiet channel (the arbitration stream alone) is
    pinged every ``KEEPALIVE_S`` and closed when the server does not answer the ping within
    ``timeout``, ending the stream (``drivers.reconnect`` then opens a new one). Not more
    often: a server's default ping policy (gRPC's: one per 5 min without data) answers a
    client pinging faster with GOAWAY too_many_pings, and every request resets it."""
    return [
        *CHANNEL_OPTIONS,
        ("grpc.keepalive_time_ms", int(KEEPALIVE_S * 1000)),
        ("grpc.keepalive_timeout_ms", max(1, int(timeout * 1000))),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateStatus:
    """The outcome of one update of a Write (``p4.v1.Error``)."""

    code: int  # google.rpc.Code
    message: str = ""

    @property
    def ok(self) -> bool:
        """The update succeeded."""
        return bool(self.code == code_pb2.OK)

    @property
    def name(self) -> str:
        """The gRPC code's name."""
        return code_name(self.code)


class WriteFailed(DeviceRejected):
    """A Write with per-update errors; ``updates`` has one status per update sent."""

    def __init__(self, device: str, updates: list[UpdateStatus]) -> None:
        self.updates = updates
        first = next((u for u in updates if not u.ok), UpdateStatus(code=code_pb2.UNKNOWN))
        failed = sum(not u.ok for u in updates)
        super().__init__(
            device,
            f"{failed} of {len(updates)} updates failed, first {first.name}: {first.message}",
            first.name,
        )


def oneline(message: Any) -> str:
    """A protobuf message as one line of text."""
    return str(text_format.MessageToString(message, as_one_line=True))


class Client:
    """A gRPC channel and P4Runtime stub; ``open`` in a running event loop. With ``tls``
    the channel is TLS: the server's certificate checked against the CA (and its name,
    ``server_name`` or the host), ours shown when a key and certificate are given."""

    def __init__(
        self, name: str, address: str, timeout: float, tls: TlsFiles | None = None
    ) -> None:
        self.name = name
        self.address = address
        self.timeout = timeout
        self.tls = tls
        self.wire = logging.getLogger(f"reroute.wire.p4runtime.{name}")
        self._channel: Any = None
        self.stub: Any = None

    def open(self) -> None:
        """Open the gRPC channel (TLS when configured)."""
        if self.tls is None:
            options = channel_options(self.timeout)
            self._channel = grpc.aio.insecure_channel(self.address, options=options)
        else:
            credentials, options = self._tls(self.tls)
            self._channel = grpc.aio.secure_channel(self.address, credentials, options=options)
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self._channel)

    def _tls(self, files: TlsFiles) -> tuple[Any, list[tuple[str, Any]]]:
        try:
            ca = files.ca_certificate.read_bytes()
            key = files.private_key.read_bytes() if files.private_key else None
            cert = files.certificate.read_bytes() if files.certificate else None
        except OSError as exc:
            raise ConfigError(f"{self.name}: its TLS files cannot be read: {exc}") from exc
        credentials = grpc.ssl_channel_credentials(ca, key, cert)
        options: list[tuple[str, Any]] = list(channel_options(self.timeout))
        if files.server_name:
            options.append(("grpc.ssl_target_name_override", files.server_name))
        return credentials, options

    async def close(self) -> None:
        """Close the gRPC channel."""
        channel, self._channel, self.stub = self._channel, None, None
        if channel is not None:
            await channel.close()

    def connected_stub(self) -> Any:
        """The stub, or DeviceUnreachable before ``open``."""
        if self.stub is None:
            raise DeviceUnreachable(self.name, "not connected (call open() first)")
        return self.stub

    async def unary(self, method: str, request: Any) -> Any:
        """One unary RPC (``Write``, ``Capabilities``, ...); its reply."""
        stub = self.connected_stub()
        self._log_request(method, request)
        try:
            reply = await getattr(stub, method)(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise self.error(method, exc) from exc
        self.wire.debug("< %s OK %s", method, oneline(reply))
        return reply

    async def read(self, request: p4runtime_pb2.ReadRequest) -> list[Any]:
        """The entities of a Read (all its streamed replies)."""
        stub = self.connected_stub()
        self._log_request("Read", request)
        entities: list[Any] = []
        try:
            async for reply in stub.Read(request, timeout=self.timeout):
                entities.extend(reply.entities)
        except grpc.aio.AioRpcError as exc:
            raise self.error("Read", exc) from exc
        self.wire.debug("< Read OK %d entities", len(entities))
        return entities

    def _log_request(self, method: str, request: Any) -> None:
        if not self.wire.isEnabledFor(logging.DEBUG):
            return
        updates: Sequence[Any] = getattr(request, "updates", ())
        if not updates:
            self.wire.debug("> %s %s", method, oneline(request))
            return
        self.wire.debug("> %s device %d, %d updates", method, request.device_id, len(updates))
        for i, update in enumerate(updates):
            self.wire.debug(">   #%d %s", i, oneline(update))

    def error(self, method: str, exc: grpc.aio.AioRpcError) -> DriverError:
        """The driver error of a failed RPC (logged on the wire log)."""
        code, details = exc.code(), exc.details() or ""
        self.wire.debug("< %s %s %s", method, code.name, details)
        what = f"{method}: {code.name}: {details}"
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return DeviceTimeout(self.name, f"no answer to {method} in {self.timeout:g} s")
        if code is grpc.StatusCode.UNAVAILABLE:
            return DeviceUnreachable(self.name, f"{self.address}: {what}")
        if code is grpc.StatusCode.PERMISSION_DENIED:
            return DeviceRejected(self.name, f"not the primary client: {what}", "not-primary")
        if code is grpc.StatusCode.UNKNOWN and method == "Write":
            return self._write_failed(exc)
        return DeviceRejected(self.name, what, code.name)

    def _write_failed(self, exc: grpc.aio.AioRpcError) -> DriverError:
        try:
            updates = update_statuses(exc.trailing_metadata() or ())
        except ValueError as error:
            return ProtocolError(self.name, f"Write: UNKNOWN: {error}")
        for i, update in enumerate(updates):
            if not update.ok:
                self.wire.debug("<   #%d %s %s", i, update.name, update.message)
        return WriteFailed(self.name, updates)


def update_statuses(trailers: Sequence[tuple[str, str | bytes]]) -> list[UpdateStatus]:
    """The per-update errors of a failed Write's ``grpc-status-details-bin`` trailer."""
    raw = next((v for k, v in trailers if k == STATUS_DETAILS_KEY), None)
    if not isinstance(raw, bytes):
        raise ValueError(f"no {STATUS_DETAILS_KEY} trailer with per-update errors")
    status = status_pb2.Status()
    error = p4runtime_pb2.Error()
    found = []
    try:
        status.ParseFromString(raw)
        for detail in status.details:
            if not detail.Unpack(error):
                raise ValueError(f"a detail of type {detail.type_url}, not p4.v1.Error")
            found.append(UpdateStatus(code=error.canonical_code, message=error.message))
    except DecodeError as exc:
        raise ValueError(f"unreadable {STATUS_DETAILS_KEY}: {exc}") from exc
    return found
