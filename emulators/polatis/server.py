"""The Polatis EMULATOR running: lock timers, the Layer-1 hook, and a TCP front.

``PolatisEmulator`` runs a ``SwitchState`` (see ``emulators.polatis.emulator``), one command
at a time: the command changes the state at once (a query right after it sees the new
connections) and arms each lock timer when it arrives, with an injected scheduler
(``loop.call_later`` unless a test passes its own); its Layer-1 effects (the fabric's
patches, the light) are queued and applied in order by a worker, as overlapped commands:
the next command is not held up by the emulator's own Layer-1 work, which is no part of
a real unit's timing (its switching and lock times are modelled by the timers). ``*OPC?``
answers once the queued work is done, as SCPI's operation-complete query does for
overlapped commands. A Layer-1 failure is logged and queued as ``-300`` (the server keeps
going).

``EmulatorServer`` serves one emulator to every client over TCP, as a real unit serves
SCPI on port 5025: lines end in ``\\n`` or ``\\r\\n``; each query's reply is one line ending
in ``\\r\\n``; commands get no reply; a bad command queues an error and the connection
stays open. ``:EMULator:DROP`` (fault injection) makes it close a client's connection
when that client sends its next change command. With ``record=True`` every line
received (bytes as sent) is kept in ``received``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Protocol

from emulators.polatis.emulator import (
    ArmLock,
    Effect,
    EmulatorConfig,
    Layer1,
    NullLayer1,
    Patch,
    Signal,
    SwitchState,
    Unpatch,
    split_commands,
)
from emulators.writelog import WriteLog

log = logging.getLogger("reroute.emulators.polatis")


class HungUp(ConnectionError):
    """``:EMULator:DROP`` fired: the server closes the client's connection."""


class Timer(Protocol):
    def cancel(self) -> None:
        """Cancel the timer."""


Schedule = Callable[[float, Callable[[], None]], Timer]  # (delay in s, callback) -> timer


class PolatisEmulator:
    """A ``SwitchState`` driving a ``Layer1``; one command and its effects at a time."""

    def __init__(
        self,
        config: EmulatorConfig | None = None,
        layer1: Layer1 | None = None,
        *,
        schedule: Schedule | None = None,
    ) -> None:
        self.state = SwitchState(config or EmulatorConfig())
        self.layer1: Layer1 = layer1 or NullLayer1()
        self._schedule = schedule
        self._timers: dict[int, Timer] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self._queue: asyncio.Queue[Effect] = asyncio.Queue()  # Layer-1 work, in order
        self._worker: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Patch and light the initial connections (done before it returns)."""
        async with self._lock:
            self._apply(self.state.initial_effects())
        await self._queue.join()

    async def execute(self, line: str, wrote: Callable[[str], None] | None = None) -> list[str]:
        """A line of ``;``-joined commands; the replies of its queries, in order.
        ``HungUp`` when ``:EMULator:DROP`` fired on one of them (the rest are not run).
        ``wrote`` is told each accepted connection change (the write log)."""
        replies: list[str] = []
        for command in split_commands(line):
            if _is_opc_query(command):
                await self._queue.join()  # every operation queued before it is complete
            async with self._lock:
                result = self.state.execute(command)
                self._apply(result.effects)
                if result.changed and wrote is not None:
                    wrote(command)
            if result.hangup:
                raise HungUp(f"emulated connection drop at {command!r}")
            replies += result.replies
        return replies

    async def settle(self) -> None:
        """Wait until the queued Layer-1 work, and the lock timers that already fired, are
        applied."""
        while True:
            await self._queue.join()
            if not self._tasks:
                return
            await asyncio.gather(*self._tasks)

    async def close(self) -> None:
        """Cancel pending lock timers, unfinished timer work and the Layer-1 worker."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        tasks, self._tasks = list(self._tasks), set()
        if self._worker is not None:
            tasks.append(self._worker)
            self._worker = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def pending_locks(self) -> list[int]:
        """Egress ports whose lock timer is armed."""
        return sorted(self._timers)

    def _apply(self, effects: Sequence[Effect]) -> None:
        """The timers now (a connection's switching time runs from the command, not from
        the end of the emulator's own Layer-1 work for it), the Layer-1 calls queued."""
        for effect in effects:
            if isinstance(effect, ArmLock):
                self._arm(effect)
                continue
            if isinstance(effect, Unpatch):
                self._disarm(effect.egress)
            self._queue.put_nowait(effect)  # Patch, Unpatch, Signal: Layer-1 work
        if self._worker is None and not self._queue.empty():
            self._worker = asyncio.get_running_loop().create_task(self._layer1_worker())

    async def _layer1_worker(self) -> None:
        """Apply the queued Layer-1 effects, one at a time, in order. A light whose
        connection is gone by the time its turn comes is not turned on: the work lags the
        switch, the physics do not (a receiver is never lit by a connection removed)."""
        while True:
            effect = await self._queue.get()
            try:
                match effect:
                    case Patch(ingress=i, egress=e):
                        await self._layer1(self.layer1.patch(i, e), effect)
                    case Unpatch(ingress=i, egress=e):
                        await self._layer1(self.layer1.unpatch(i, e), effect)
                    case Signal(egress=e, lit=True) if not self.state.lit(e):
                        log.warning(
                            "egress %d: its connection went before Layer 1 lit it (the work "
                            "lags the switch by a lock time): left dark",
                            e,
                        )
                    case Signal(egress=e, lit=lit):
                        await self._layer1(self.layer1.signal(e, lit), effect)
            finally:
                self._queue.task_done()

    async def _layer1(self, call: Awaitable[None], effect: Effect) -> None:
        try:
            await call
        except Exception as exc:
            log.exception("layer 1 failed on %s", effect)
            self.state.fault(-300, f"Device-specific error;layer 1: {exc}")

    def _arm(self, arm: ArmLock) -> None:
        self._disarm(arm.egress)
        schedule = self._schedule or asyncio.get_running_loop().call_later
        fired = partial(self._fired, arm.egress, arm.token)
        self._timers[arm.egress] = schedule(arm.delay_ms / 1000.0, fired)

    def _disarm(self, egress: int) -> None:
        timer = self._timers.pop(egress, None)
        if timer is not None:
            timer.cancel()

    def _fired(self, egress: int, token: int) -> None:
        self._timers.pop(egress, None)
        task = asyncio.get_running_loop().create_task(self._locked(egress, token))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _locked(self, egress: int, token: int) -> None:
        async with self._lock:
            self._apply(self.state.lock_done(egress, token))


def _is_opc_query(command: str) -> bool:
    return command.strip().upper() == "*OPC?"


class EmulatorServer:
    """One ``PolatisEmulator`` on a TCP port, shared by all clients."""

    def __init__(self, emulator: PolatisEmulator, *, record: bool = False) -> None:
        self.emulator = emulator
        self.received: list[bytes] | None = [] if record else None
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.Task[None]] = set()
        self.port = 0
        self.write_log: WriteLog | None = None  # REROUTE_WRITE_LOG: every change, per client

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen (port 0 = any free port); the bound port."""
        self._server = await asyncio.start_server(self._client, host, port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        self.write_log = WriteLog.from_env(f"polatis@{host}:{self.port}")
        log.info("polatis emulator listening on %s:%d", host, self.port)
        return self.port

    async def close(self) -> None:
        """Stop listening, drop the clients, cancel the emulator's timers."""
        if self._server is not None:
            self._server.close()
        for task in list(self._clients):
            task.cancel()
        await asyncio.gather(*self._clients, return_exceptions=True)
        self._clients.clear()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self.write_log is not None:
            self.write_log.close()
            self.write_log = None
        await self.emulator.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._clients.add(task)
        peer = writer.get_extra_info("peername")
        log.debug("client %s connected", peer)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, ValueError) as exc:  # ValueError: a line over the limit
            log.info("client %s: %s", peer, exc)
        except asyncio.CancelledError:
            # close() cancelled us. End normally: on 3.11 start_server's done-callback calls
            # task.exception() on a cancelled handler and logs a spurious error.
            log.debug("client %s: server closing", peer)
        finally:
            writer.close()
            log.debug("client %s gone", peer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        wrote = None
        if self.write_log is not None:
            host, port = writer.get_extra_info("peername")[:2]
            wrote = partial(self.write_log.write, f"{host}:{port}")
        while line := await reader.readline():
            if self.received is not None:
                self.received.append(line)
            text = line.decode("latin-1").rstrip("\r\n")
            replies = await self.emulator.execute(text, wrote)
            if replies:
                writer.write("".join(f"{r}\r\n" for r in replies).encode("latin-1"))
                await writer.drain()


async def serve(
    config: EmulatorConfig | None = None,
    layer1: Layer1 | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    record: bool = False,
) -> EmulatorServer:
    """Start an emulator (initial connections lit) and its server; ``close()`` it after."""
    emulator = PolatisEmulator(config, layer1)
    await emulator.start()
    server = EmulatorServer(emulator, record=record)
    await server.start(host, port)
    return server
