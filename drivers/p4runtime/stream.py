"""The session's ``StreamChannel``: arbitration as the primary client, then watching it.

P4Runtime elects the primary client of a device by election id (the highest wins); the
server answers a ``MasterArbitrationUpdate`` with status OK to the primary and
ALREADY_EXISTS to a backup, and tells every client when the primary changes. Only the
primary may write. The stream must stay open for the whole session: closing it gives up
primacy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import grpc

from drivers.errors import DeviceRejected, DeviceTimeout, ProtocolError
from drivers.p4runtime.proto import code_pb2, election, election_value, p4runtime_pb2
from drivers.p4runtime.rpc import Client, oneline

log = logging.getLogger("reroute.drivers.p4runtime")


class Arbitration:
    def __init__(self, client: Client, device_id: int, election_id: int) -> None:
        self.client = client
        self.device_id = device_id
        self.election_id = election_id
        self.primary = False
        self.primary_id = 0  # the primary's election id, as the server last told it
        self.backup_ok = False  # a replica's session: a backup until it claims (``share``)
        self._call: Any = None
        self._watch: asyncio.Task[None] | None = None
        self._answer: asyncio.Future[p4runtime_pb2.MasterArbitrationUpdate] | None = None

    async def start(self) -> None:
        """Open the stream and become primary; DeviceRejected ``not-primary`` otherwise
        (unless ``backup_ok``: a replica's session waits as a backup until it claims)."""
        name = self.client.name
        self._call = self.client.connected_stub().StreamChannel()
        update = p4runtime_pb2.MasterArbitrationUpdate(
            device_id=self.device_id, election_id=election(self.election_id)
        )
        self.client.wire.debug("> StreamChannel %s", oneline(update))
        try:
            await self._call.write(p4runtime_pb2.StreamMessageRequest(arbitration=update))
            reply = await asyncio.wait_for(self._call.read(), self.client.timeout)
        except TimeoutError as exc:
            raise DeviceTimeout(name, "no arbitration answer in time") from exc
        except grpc.aio.AioRpcError as exc:
            raise self.client.error("StreamChannel", exc) from exc
        if reply is grpc.aio.EOF or not reply.HasField("arbitration"):
            raise ProtocolError(name, f"StreamChannel answered arbitration with {reply}")
        self._note(reply.arbitration)
        if not self.primary and not self.backup_ok:
            primary = election_value(reply.arbitration.election_id)
            raise DeviceRejected(
                name, f"election id {self.election_id} is not the primary "
                f"(the primary's is {primary})", "not-primary",
            )  # fmt: skip
        self._watch = asyncio.create_task(self._watching(self._call))

    async def claim(self, election_id: int) -> None:
        """Arbitrate again on the open stream as ``election_id`` (P4Runtime lets a client
        change its id so): the server makes it the primary when it is the highest, and the
        client that was primary a backup, whose writes it then refuses; DeviceRejected
        ``not-primary`` when a higher id holds the device (this client is stale)."""
        name = self.client.name
        if self._call is None or not self.alive:
            raise DeviceRejected(name, "no arbitration stream open", "not-primary")
        self.election_id = election_id
        self._answer = asyncio.get_running_loop().create_future()
        update = p4runtime_pb2.MasterArbitrationUpdate(
            device_id=self.device_id, election_id=election(election_id)
        )
        self.client.wire.debug("> StreamChannel %s", oneline(update))
        try:
            await self._call.write(p4runtime_pb2.StreamMessageRequest(arbitration=update))
            reply = await asyncio.wait_for(self._answer, self.client.timeout)
        except TimeoutError as exc:
            raise DeviceTimeout(name, "no answer to the arbitration in time") from exc
        except grpc.aio.AioRpcError as exc:
            raise self.client.error("StreamChannel", exc) from exc
        finally:
            self._answer = None
        if reply.status.code != code_pb2.OK:
            primary = election_value(reply.election_id)
            raise DeviceRejected(
                name, f"election id {election_id} is not the primary "
                f"(the primary's is {primary}): another writer took the device",
                "not-primary",
            )  # fmt: skip

    def _note(self, update: p4runtime_pb2.MasterArbitrationUpdate) -> None:
        self.client.wire.debug("< StreamChannel %s", oneline(update))
        was, self.primary = self.primary, update.status.code == code_pb2.OK
        self.primary_id = election_value(update.election_id)
        if was and not self.primary:
            log.warning("%s: no longer the primary client", self.client.name)
        if self._answer is not None and not self._answer.done() and self._answers(update):
            self._answer.set_result(update)

    def _answers(self, update: p4runtime_pb2.MasterArbitrationUpdate) -> bool:
        """Whether ``update`` answers our claim: we are the primary, or a higher id is (an
        update naming a lower primary was sent before the server saw the claim)."""
        primary = election_value(update.election_id)
        if update.status.code == code_pb2.OK:
            return primary == self.election_id
        return primary > self.election_id

    async def _watching(self, call: Any) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.CancelledError):
            while (reply := await call.read()) is not grpc.aio.EOF:
                if reply.HasField("arbitration"):
                    self._note(reply.arbitration)
        self.primary = False
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(
                DeviceRejected(self.client.name, "the arbitration stream ended", "not-primary")
            )

    @property
    def alive(self) -> bool:
        """The stream is open (a server that restarted ended it). Whether we are still the
        primary is the server's to say: a Write of a backup is refused ``not-primary``."""
        return self._watch is not None and not self._watch.done()

    async def stop(self) -> None:
        """End the stream channel and its watcher."""
        call, self._call = self._call, None
        watch, self._watch = self._watch, None
        if call is not None:
            call.cancel()
        if watch is not None:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
