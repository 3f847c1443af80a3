"""An asyncio OpenFlow 1.3 connection: handshake, echo, replies matched by xid, wire log.

``Channel.open(device, "unix:/run/br0.mgmt" | "tcp:HOST:PORT" | "ssl:HOST:PORT", timeout=...,
tls=context)`` connects (over TLS for ``ssl:``, with the ``ssl.SSLContext`` given) and
exchanges HELLOs. One reader task then receives every message: it answers ECHO requests,
completes the future of the request with the same xid (collecting MULTIPART parts until
the one without OFPMPF_REPLY_MORE), and turns an ERROR for a pending xid into
``DeviceRejected``. Errors for xids nobody waits on (bundled flow-mods have no reply) go to
``watch()`` collectors.

Liveness: after ``timeout`` without a message from the switch the channel sends an
ECHO_REQUEST (as OVS's own inactivity probe does the other way); no reply within
``timeout`` more and the connection is lost (``DeviceUnreachable``: its TCP connection
dropped, every pending request failed). A switch that was cut off (packets dropped, no
RST) is so found out within ``2 x timeout`` of its last message, even on a quiet channel.

Failures are translated here, chained with ``from``: cannot connect or connection lost ->
``DeviceUnreachable``; no reply within ``timeout`` -> ``DeviceTimeout``; bytes that are not
OpenFlow 1.3 -> ``ProtocolError``. Every message sent or received is one DEBUG line on
logger ``reroute.wire.<device>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from drivers.errors import (
    DeviceRejected,
    DeviceTimeout,
    DeviceUnreachable,
    DriverError,
    ProtocolError,
)
from drivers.ovs import ofp13
from drivers.ovs.ofp13 import HEADER, ErrorMsg, Message, MsgType, MultipartReply
from protocols.openflow13.errors import code_name

log = logging.getLogger("reroute.drivers.ovs")
_XID_SPACE = 1 << 32
_T = TypeVar("_T")


class OpenFlowError(Exception):
    """An OFPT_ERROR reply; the ``__cause__`` of the ``DeviceRejected`` raised for it."""

    def __init__(self, error: ErrorMsg) -> None:
        self.error = error
        super().__init__(error.name)


@dataclass(slots=True)
class _Pending:
    future: asyncio.Future[list[Message]]
    parts: list[Message] = field(default_factory=list)


@dataclass(slots=True)
class Watch:
    """Errors received for ``xids`` while the watch is active, as (xid, error)."""

    xids: range
    errors: list[tuple[int, ErrorMsg]] = field(default_factory=list)


class Channel:
    """One OpenFlow 1.3 connection to a switch. Create with ``await Channel.open(...)``."""

    def __init__(
        self,
        device: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        timeout: float,
    ) -> None:
        self.device = device
        self.timeout = timeout
        self.peer_versions: frozenset[int] = frozenset()
        self._reader = reader
        self._writer = writer
        self._wire = logging.getLogger(f"reroute.wire.{device}")
        self._pending: dict[int, _Pending] = {}
        self._watches: list[Watch] = []
        self._listeners: dict[int, list[Callable[[Message], None]]] = {}
        self._next_xid = 1
        self._hello: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        self._dead: DriverError | None = None
        self._heard = asyncio.get_running_loop().time()  # when the switch last sent anything
        self._task = asyncio.create_task(self._read_loop(), name=f"ofp-reader-{device}")
        self._prober: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls,
        device: str,
        target: str,
        *,
        timeout: float,
        tls: ssl.SSLContext | None = None,
        server_name: str | None = None,
    ) -> Channel:
        """Connect to ``target`` and exchange HELLOs; the caller owns ``close()``. An
        ``ssl:`` target needs ``tls`` (``tls_context``); ``server_name`` is the name its
        certificate must carry when the context checks names."""
        reader, writer = await _connect(device, target, timeout, tls, server_name)
        chan = cls(device, reader, writer, timeout=timeout)
        try:
            await chan._handshake()
        except BaseException:
            await chan.close()
            raise
        chan._prober = asyncio.create_task(chan._keep_alive(), name=f"ofp-echo-{device}")
        return chan

    async def _handshake(self) -> None:
        self.send([ofp13.encode_hello(self.xids(1))])
        version, body = await self._wait(self._hello, "HELLO")
        try:
            self.peer_versions = ofp13.hello_versions(version, body)
        except ofp13.CodecError as exc:
            raise ProtocolError(self.device, f"bad HELLO: {exc}") from exc
        if ofp13.VERSION not in self.peer_versions:
            offered = ", ".join(f"{v:#x}" for v in sorted(self.peer_versions))
            raise ProtocolError(
                self.device, f"switch does not speak OpenFlow 1.3 (0x04); it offers {offered}"
            )

    # ----------------------------------------------------------------------------------
    # sending and waiting

    def xids(self, count: int) -> int:
        """Reserve ``count`` consecutive xids; returns the first (xid 0 is never used)."""
        if self._next_xid + count >= _XID_SPACE:
            self._next_xid = 1
        first = self._next_xid
        self._next_xid += count
        return first

    def send(self, msgs: Sequence[bytes]) -> None:
        """Queue messages for the switch in one write (no reply expected or awaited here)."""
        self._check_alive()
        if self._wire.isEnabledFor(logging.DEBUG):
            for msg in msgs:
                self._log_wire("send", msg[1], HEADER.unpack_from(msg)[3], msg)
        self._writer.write(b"".join(msgs) if len(msgs) > 1 else msgs[0])

    async def request(self, msg: bytes) -> Message:
        """Send a request and return its reply; an ERROR reply raises ``DeviceRejected``."""
        (replies,) = await self.transact([msg], [HEADER.unpack_from(msg)[3]])
        return replies[0]

    async def fenced(self, msg: bytes) -> Message | None:
        """Send a request followed by a BARRIER; its reply, or None when the BARRIER's came
        first: the switch processed the request and said nothing (OpenFlow: a switch
        finishes, replies and errors included, what came before a barrier before it
        answers the barrier). An ERROR reply raises ``DeviceRejected``. For requests a
        switch may silently ignore (an unknown experimenter message)."""
        xid = HEADER.unpack_from(msg)[3]
        barrier = self.xids(1)
        mine = _Pending(asyncio.get_running_loop().create_future())
        self._pending[xid] = mine
        try:
            await self.transact([msg, ofp13.encode_barrier_request(barrier)], [barrier])
            return mine.future.result()[0] if mine.future.done() else None
        finally:
            if self._pending.get(xid) is mine:
                del self._pending[xid]
            mine.future.cancel()

    async def multipart(self, msg: bytes) -> list[MultipartReply]:
        """Send a MULTIPART request and return every part of its reply."""
        (replies,) = await self.transact([msg], [HEADER.unpack_from(msg)[3]])
        try:
            return [ofp13.parse_multipart_reply(r.body) for r in replies]
        except ofp13.CodecError as exc:
            raise ProtocolError(self.device, str(exc)) from exc

    async def transact(self, msgs: Sequence[bytes], replies: Sequence[int]) -> list[list[Message]]:
        """Send ``msgs`` in one write, then wait for the replies to the xids in ``replies``."""
        return await self.transact_chunks([msgs], replies)

    async def transact_chunks(
        self, chunks: Iterable[Sequence[bytes]], replies: Sequence[int]
    ) -> list[list[Message]]:
        """``transact`` with the messages written a chunk at a time, each taken by the switch
        (drained) before the next is asked for: ``chunks`` may be a generator encoding them,
        and the switch works on the first while the rest are made. An exception from
        ``chunks`` leaves what was written written."""
        self._check_alive()
        loop = asyncio.get_running_loop()
        waits = {xid: _Pending(loop.create_future()) for xid in replies}
        self._pending.update(waits)
        try:
            for chunk in chunks:
                self.send(chunk)
                await self._wait(None, "taking our messages")
            return [await self._wait(p.future, f"xid {xid:#x}") for xid, p in waits.items()]
        finally:
            for xid, pending in waits.items():
                if self._pending.get(xid) is pending:
                    del self._pending[xid]
                if pending.future.done() and not pending.future.cancelled():
                    pending.future.exception()  # retrieved: no "never retrieved" warning
                pending.future.cancel()

    @overload
    async def _wait(self, future: Awaitable[_T], what: str) -> _T: ...
    @overload
    async def _wait(self, future: None, what: str) -> None: ...

    async def _wait(self, future: Awaitable[_T] | None, what: str) -> _T | None:
        """Until the switch has taken what was written, then ``future``'s result (None:
        only the first), within the timeout; errors as the driver's."""
        try:
            async with asyncio.timeout(self.timeout):
                await self._writer.drain()
                return None if future is None else await future
        except TimeoutError as exc:
            raise DeviceTimeout(self.device, f"no reply to {what} in {self.timeout:g} s") from exc
        except (ConnectionError, OSError) as exc:
            raise DeviceUnreachable(self.device, f"connection lost: {exc}") from exc

    @contextlib.contextmanager
    def watch(self, xids: range) -> Iterator[Watch]:
        """Collect errors for ``xids`` (requests that get no reply of their own)."""
        watch = Watch(xids=xids)
        self._watches.append(watch)
        try:
            yield watch
        finally:
            self._watches.remove(watch)

    @contextlib.contextmanager
    def listen(self, msg_type: int, listener: Callable[[Message], None]) -> Iterator[None]:
        """Call ``listener`` with every message of ``msg_type`` the switch sends meanwhile
        (asynchronous messages: not replies to a request)."""
        self._listeners.setdefault(msg_type, []).append(listener)
        try:
            yield
        finally:
            self._listeners[msg_type].remove(listener)
            if not self._listeners[msg_type]:
                del self._listeners[msg_type]

    @property
    def alive(self) -> bool:
        """The connection has not been lost or closed."""
        return self._dead is None

    def _check_alive(self) -> None:
        if self._dead is not None:
            raise self._dead

    async def _keep_alive(self) -> None:
        """ECHO_REQUEST once the switch has been quiet for ``timeout``; the connection is
        lost when it does not answer within ``timeout`` (module docstring)."""
        loop = asyncio.get_running_loop()
        while self._dead is None:
            quiet = loop.time() - self._heard
            if quiet < self.timeout:
                await asyncio.sleep(self.timeout - quiet)
                continue
            try:
                await self.request(ofp13.encode_echo_request(self.xids(1)))
            except DeviceTimeout as exc:
                self._lose(f"no answer to ECHO_REQUEST in {self.timeout:g} s", exc)
            except DriverError:
                return

    def _lose(self, why: str, cause: BaseException) -> None:
        """The switch stopped answering: the connection is lost, its TCP connection dropped."""
        log.warning("%s: %s; connection dropped", self.device, why)
        self._die(DeviceUnreachable(self.device, why), cause)
        self._writer.transport.abort()

    # ----------------------------------------------------------------------------------
    # receiving

    async def _read_loop(self) -> None:
        try:
            while True:
                head = await self._reader.readexactly(HEADER.size)
                version, msg_type, length, xid = HEADER.unpack(head)
                if (version != ofp13.VERSION and msg_type != MsgType.HELLO) or length < 8:
                    raise ofp13.CodecError(f"message version {version}, length {length}")
                body = await self._reader.readexactly(length - 8) if length > 8 else b""
                self._heard = asyncio.get_running_loop().time()
                if self._wire.isEnabledFor(logging.DEBUG):
                    self._log_wire("recv", msg_type, xid, head + body)
                self._dispatch(Message(type=msg_type, xid=xid, body=body), version)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            self._die(DeviceUnreachable(self.device, "connection lost"), exc)
        except ofp13.CodecError as exc:
            self._die(ProtocolError(self.device, f"bad message from switch: {exc}"), exc)

    def _dispatch(self, msg: Message, version: int) -> None:
        if msg.type == MsgType.ECHO_REQUEST:
            self.send([ofp13.encode_echo_reply(msg.xid, msg.body)])
        elif msg.type == MsgType.HELLO:
            if not self._hello.done():
                self._hello.set_result((version, msg.body))
        elif msg.type == MsgType.ERROR:
            self._on_error(msg.xid, ofp13.parse_error(msg.body))
        elif msg.type in self._listeners:  # asynchronous messages (PORT_STATUS)
            for listener in self._listeners[msg.type]:
                listener(msg)
        elif (pending := self._pending.get(msg.xid)) is not None:
            pending.parts.append(msg)
            if _more_to_come(msg) or pending.future.done():
                return
            pending.future.set_result(pending.parts)
        else:
            self._wire.debug("ignored %s xid=%#x", ofp13.type_name(msg.type, msg.body), msg.xid)

    def _on_error(self, xid: int, error: ErrorMsg) -> None:
        watched = False
        for watch in self._watches:
            if xid in watch.xids:
                watch.errors.append((xid, error))
                watched = True
        pending = self._pending.get(xid)
        if pending is not None and not pending.future.done():
            exc = DeviceRejected(
                self.device,
                f"request xid {xid:#x} rejected: {error.name}",
                code_name(error.type, error.code, error.experimenter),
            )
            exc.__cause__ = OpenFlowError(error)
            pending.future.set_exception(exc)
        elif not self._hello.done() and error.type == 0:
            self._hello.set_exception(
                ProtocolError(self.device, f"HELLO failed: {error.name} {error.data!r}")
            )
        elif not watched:
            log.warning("%s: unsolicited error for xid %#x: %s", self.device, xid, error.name)

    def _die(self, error: DriverError, cause: BaseException) -> None:
        if self._dead is not None:  # the first reason stands (a dropped echo, then EOF)
            return
        error.__cause__ = cause
        self._dead = error
        futures: list[asyncio.Future[Any]] = [self._hello]
        futures += (p.future for p in self._pending.values())
        for fut in futures:
            if not fut.done():
                fut.set_exception(error)

    def _log_wire(self, direction: str, msg_type: int, xid: int, msg: bytes) -> None:
        name = ofp13.type_name(msg_type, msg[8:16])
        self._wire.debug("%s %s xid=%#x len=%d", direction, name, xid, len(msg))

    async def close(self) -> None:
        """Close the connection; pending requests fail with ``DeviceUnreachable``."""
        for task in (self._prober, self._task):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._dead is None:
            self._die(DeviceUnreachable(self.device, "connection closed"), ConnectionError())
        self._writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()


def _more_to_come(msg: Message) -> bool:
    """A MULTIPART_REPLY part with OFPMPF_REPLY_MORE set: the reply continues."""
    if msg.type != MsgType.MULTIPART_REPLY or len(msg.body) < 4:
        return False
    return bool(int.from_bytes(msg.body[2:4], "big") & ofp13.OFPMPF_REPLY_MORE)


async def _connect(
    device: str, target: str, timeout: float, tls: ssl.SSLContext | None, server_name: str | None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    kind, _, where = target.partition(":")
    if kind == "ssl" and tls is None:
        raise DeviceUnreachable(device, f"{target}: an ssl: target needs TLS files")
    try:
        async with asyncio.timeout(timeout):
            if kind == "unix":
                return await asyncio.open_unix_connection(where)
            host, _, port = where.rpartition(":")
            context = tls if kind == "ssl" else None
            return await asyncio.open_connection(
                host.strip("[]"), int(port), ssl=context,
                server_hostname=(server_name or host.strip("[]")) if context else None,
            )  # fmt: skip
    except TimeoutError as exc:
        raise DeviceUnreachable(device, f"cannot connect to {target} in {timeout:g} s") from exc
    except ssl.SSLError as exc:
        raise DeviceUnreachable(
            device, f"TLS with {target} failed: {exc.reason or exc.strerror or exc}"
        ) from exc
    except (OSError, ValueError) as exc:
        reason = os.strerror(exc.errno) if isinstance(exc, OSError) and exc.errno else str(exc)
        raise DeviceUnreachable(device, f"cannot connect to {target}: {reason}") from exc


def parse_target(target: str) -> str:
    """Check a ``unix:PATH`` / ``tcp:HOST:PORT`` / ``ssl:HOST:PORT`` target; returns it, or
    raises ValueError."""
    kind, _, where = target.partition(":")
    host, _, port = where.rpartition(":")
    if (kind == "unix" and where) or (kind in ("tcp", "ssl") and host and port.isdigit()):
        return target
    raise ValueError(f"bad target {target!r}: expected unix:PATH, tcp:HOST:PORT or ssl:HOST:PORT")


def tls_context(
    ca: str, certificate: str, private_key: str, server_name: str | None
) -> ssl.SSLContext:
    """The client side of an OpenFlow TLS connection, as ``ovs-ofctl -p KEY -c CERT -C CA``
    makes it: we show our certificate, the switch's must be signed by the CA. Its name is
    checked only when ``server_name`` is given (ovs-ofctl checks none: OVS's ``ovs-pki``
    certificates name the switch, not its address). OSError / ssl.SSLError for bad files."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = server_name is not None
    context.load_verify_locations(cafile=ca)
    context.load_cert_chain(certfile=certificate, keyfile=private_key)
    return context
