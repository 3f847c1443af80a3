"""The P4Runtime service of the EMULATOR (grpc.aio): one device, one program.

The emulator owns its program: the P4Info file it was started with (``p4/reroute.p4``'s
by default), installed from the start as a switch booted with its program would be, or
not (``installed=False``) until a client sets it. RPC checks, as P4Runtime v1 asks: an
unknown ``device_id`` is NOT_FOUND; Write and SetForwardingPipelineConfig need the
primary's election id (else PERMISSION_DENIED); Write and Read need a pipeline (else
FAILED_PRECONDITION); a P4Info other than its own is INVALID_ARGUMENT (it cannot run
another program); VERIFY_AND_COMMIT empties the tables, RECONCILE_AND_COMMIT of the same
program keeps them; a Write whose updates partly fail is UNKNOWN with one ``p4.v1.Error``
per update (OK for the ones applied) in the ``grpc-status-details-bin`` trailer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, NoReturn

import grpc
from google.protobuf import any_pb2, text_format

from emulators.p4rt.arbitration import Arbiter, ArbitrationError, Stream
from emulators.p4rt.gnmi import GnmiEmulator, add_to_server
from emulators.p4rt.program import Failure
from emulators.p4rt.proto import (
    STATUS_DETAILS_KEY,
    code_pb2,
    election_value,
    p4runtime_pb2,
    p4runtime_pb2_grpc,
    status_pb2,
)
from emulators.p4rt.table import Table
from emulators.writelog import WriteLog

log = logging.getLogger("reroute.emulators.p4rt")
API_VERSION = "1.3.0"
READ_CHUNK = 1000  # entities per ReadResponse
P4R = p4runtime_pb2
Pipeline = P4R.GetForwardingPipelineConfigRequest


class P4RuntimeEmulator(p4runtime_pb2_grpc.P4RuntimeServicer):  # type: ignore[misc]
    """The servicer; ``Table`` holds the entries and programs the bridge."""

    def __init__(self, device_id: int, table: Table, *, installed: bool = True) -> None:
        self.device_id = device_id
        self.table = table
        self.arbiter = Arbiter(device_id)
        self.config: Any = None  # the committed ForwardingPipelineConfig
        self.pipelines_set = 0  # SetForwardingPipelineConfig commits so far
        if installed:
            self.config = P4R.ForwardingPipelineConfig(p4info=table.pipeline.info)
        self._lock = asyncio.Lock()
        self.write_log: WriteLog | None = None  # REROUTE_WRITE_LOG, set by ``serve``

    # ----------------------------------------------------------------------------------
    # checks

    async def _device(self, device_id: int, context: Any) -> None:
        if device_id != self.device_id:
            await _abort(context, grpc.StatusCode.NOT_FOUND, f"no device {device_id}")

    async def _primary(self, election_id: Any, context: Any) -> None:
        if not self.arbiter.is_primary(election_value(election_id)):
            await _abort(
                context, grpc.StatusCode.PERMISSION_DENIED,
                f"election id {election_value(election_id)} is not the primary's "
                f"({self.arbiter.primary()})",
            )  # fmt: skip

    async def _pipeline(self, context: Any) -> None:
        if self.config is None:
            await _abort(context, grpc.StatusCode.FAILED_PRECONDITION, "no pipeline config")

    # ----------------------------------------------------------------------------------
    # RPCs

    async def Capabilities(self, request: Any, context: Any) -> Any:
        """The P4Runtime API version served."""
        return P4R.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    async def StreamChannel(self, requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        """The stream channel: arbitration updates in, mastership answers out."""
        stream = Stream()
        reader = asyncio.create_task(self._stream_requests(requests, stream))
        try:
            while (message := await stream.outbox.get()) is not None:
                yield message
            failure = await reader  # done: it closed the outbox
            if failure is not None:
                await _abort(context, _grpc_code(failure.code), failure.message)
        finally:
            reader.cancel()
            self.arbiter.leave(stream)

    async def _stream_requests(
        self, requests: AsyncIterator[Any], stream: Stream
    ) -> Failure | None:
        try:
            async for request in requests:
                if request.WhichOneof("update") != "arbitration":
                    log.debug("stream message %s ignored", request.WhichOneof("update"))
                    continue
                update = request.arbitration
                self.arbiter.join(stream, update.device_id, election_value(update.election_id))
                log.info("client with election id %d joined", stream.election_id)
        except ArbitrationError as exc:
            return Failure(code=exc.code, message=str(exc))
        finally:
            stream.outbox.put_nowait(None)
        return None

    async def SetForwardingPipelineConfig(self, request: Any, context: Any) -> Any:
        """Install (or verify) the forwarding pipeline; the primary only."""
        await self._device(request.device_id, context)
        await self._primary(request.election_id, context)
        actions = P4R.SetForwardingPipelineConfigRequest
        known = (actions.VERIFY, actions.VERIFY_AND_COMMIT, actions.RECONCILE_AND_COMMIT)
        if request.action not in known:
            await _abort(context, grpc.StatusCode.UNIMPLEMENTED, "only VERIFY, *_AND_COMMIT")
        if request.config.p4info != self.table.pipeline.info:
            await _abort(
                context, grpc.StatusCode.INVALID_ARGUMENT,
                "this EMULATOR runs only its own program "
                f"({self.table.pipeline.info.pkg_info.name or 'its P4Info file'})",
            )  # fmt: skip
        if request.action == actions.VERIFY:
            return P4R.SetForwardingPipelineConfigResponse()
        async with self._lock:
            if request.action == actions.VERIFY_AND_COMMIT or self.config is None:
                await self.table.clear()
            self.config = P4R.ForwardingPipelineConfig()
            self.config.CopyFrom(request.config)
            self.pipelines_set += 1
        log.info("pipeline committed: %s", request.config.p4info.pkg_info.name)
        return P4R.SetForwardingPipelineConfigResponse()

    async def GetForwardingPipelineConfig(self, request: Any, context: Any) -> Any:
        """The installed pipeline's P4Info."""
        await self._device(request.device_id, context)
        config = P4R.ForwardingPipelineConfig()
        if self.config is not None:
            config.CopyFrom(self.config)
        if request.response_type in (Pipeline.COOKIE_ONLY, Pipeline.DEVICE_CONFIG_AND_COOKIE):
            config.ClearField("p4info")
        if request.response_type in (Pipeline.COOKIE_ONLY, Pipeline.P4INFO_AND_COOKIE):
            config.ClearField("p4_device_config")
        return P4R.GetForwardingPipelineConfigResponse(config=config)

    async def Write(self, request: Any, context: Any) -> Any:
        """Apply a batch of table updates atomically; the primary only."""
        await self._device(request.device_id, context)
        await self._primary(request.election_id, context)
        await self._pipeline(context)
        if request.atomicity != P4R.WriteRequest.CONTINUE_ON_ERROR:
            await _abort(context, grpc.StatusCode.UNIMPLEMENTED, "only CONTINUE_ON_ERROR")
        async with self._lock:
            results = await self.table.write(request.updates)
        failed = [r for r in results if r is not None]
        if failed:
            log.info("Write: %d of %d updates failed", len(failed), len(results))
            await _abort(
                context, grpc.StatusCode.UNKNOWN,
                f"{len(failed)} of {len(results)} updates failed",
                ((STATUS_DETAILS_KEY, _details(results)),),
            )  # fmt: skip
        if self.write_log is not None:
            self._log_write(request, context.peer())
        return P4R.WriteResponse()

    def _log_write(self, request: Any, peer: str) -> None:
        """One line per applied batch: its updates, and the election id that wrote it."""
        what = "; ".join(text_format.MessageToString(u, as_one_line=True) for u in request.updates)
        election = (request.election_id.high << 64) | request.election_id.low
        assert self.write_log is not None
        self.write_log.write(peer.removeprefix("ipv4:"), what, election_id=election)

    async def Read(self, request: Any, context: Any) -> AsyncIterator[Any]:
        """The table entries matching the request's entities."""
        await self._device(request.device_id, context)
        await self._pipeline(context)
        entries = []
        for entity in request.entities:
            entries.extend(await self._read_entity(entity, context))
        for start in range(0, max(len(entries), 1), READ_CHUNK):
            reply = P4R.ReadResponse()
            reply.entities.extend(
                P4R.Entity(table_entry=e) for e in entries[start : start + READ_CHUNK]
            )
            yield reply

    async def _read_entity(self, entity: Any, context: Any) -> list[Any]:
        if entity.WhichOneof("entity") != "table_entry":
            await _abort(context, grpc.StatusCode.UNIMPLEMENTED, "only table entries")
        entry = entity.table_entry
        if entry.table_id != 0 and entry.table_id not in self.table.pipeline.tables:
            await _abort(context, grpc.StatusCode.NOT_FOUND, f"no table {entry.table_id:#x}")
        return self.table.read(entry)


async def _abort(context: Any, code: grpc.StatusCode, message: str, trailers: Any = ()) -> NoReturn:
    await context.abort(code, message, trailing_metadata=trailers)
    raise AssertionError("context.abort returned")  # it raises


def _grpc_code(code: int) -> grpc.StatusCode:
    return next((c for c in grpc.StatusCode if c.value[0] == code), grpc.StatusCode.UNKNOWN)


def _details(results: list[Failure | None]) -> bytes:
    status = status_pb2.Status(code=code_pb2.UNKNOWN, message="some updates failed")
    for result in results:
        error = P4R.Error(canonical_code=code_pb2.OK)
        if result is not None:
            error = P4R.Error(canonical_code=result.code, message=result.message)
        detail = any_pb2.Any()
        detail.Pack(error)
        status.details.append(detail)
    return bytes(status.SerializeToString())


# HTTP/2 keepalive both ways: the server pings a quiet client every 2 s and drops the
# connection when the ping is not answered within 1 s, so the stream of a client that was
# cut off (its packets dropped: no FIN ever arrives) ends and does not keep holding its
# election id ("in use") from the same client reconnecting; clients may ping every 5 s
# (gRPC's default policy answers a client pinging more often than every 5 min with GOAWAY).
SERVER_OPTIONS = [
    ("grpc.keepalive_time_ms", 2000),
    ("grpc.keepalive_timeout_ms", 1000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5000),
    ("grpc.http2.max_pings_without_data", 0),
]


async def serve(
    servicer: P4RuntimeEmulator,
    listen: str,
    tls: tuple[bytes, bytes, bytes | None] | None = None,
    gnmi: GnmiEmulator | None = None,
) -> tuple[Any, int]:
    """A started grpc.aio server for ``servicer`` on ``listen`` (``HOST:PORT``); its port.
    ``tls``: (private key, certificate, CA or None) in PEM; with a CA, clients must show a
    certificate it signed. ``gnmi``: the gNMI service of its ports, on the same port."""
    server = grpc.aio.server(options=SERVER_OPTIONS)
    p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(servicer, server)
    if gnmi is not None:
        add_to_server(gnmi, server)
    if tls is None:
        port = server.add_insecure_port(listen)
    else:
        key, cert, ca = tls
        credentials = grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
        )
        port = server.add_secure_port(listen, credentials)
    if port == 0:
        raise OSError(f"cannot listen on {listen}")
    await server.start()
    servicer.write_log = WriteLog.from_env(f"p4rt@{listen.rpartition(':')[0]}:{port}")
    return server, port
