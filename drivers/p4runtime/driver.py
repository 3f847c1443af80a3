"""``P4RuntimeDriver``: flows as entries of ``MyIngress.reroute`` (``program``) on a
P4Runtime v1 server (a switch's gRPC agent, or the EMULATOR in ``emulators.p4rt``).

``open``: a gRPC channel; ``Capabilities`` (the server answers); arbitration on the
``StreamChannel`` as the primary client (``stream``); then the program: the device's
P4Info (``GetForwardingPipelineConfig``), or the ``p4info`` file when one is named. A
device that runs another program than the file's (or none) gets it with
``SetForwardingPipelineConfig`` (VERIFY_AND_COMMIT, with the ``pipeline`` file as device
config) only when ``install_pipeline`` is set, since that resets its tables; otherwise
``open`` fails. Every id is then looked up by name in that P4Info (``program.Program``).

``apply`` (one ``Write`` per batch; P4Runtime applies the updates of a Write in any
order and a failure leaves the others applied, so ``atomic_batch`` is False):

1. changes the program cannot express, and batches touching a key twice, are refused
   before anything is sent (``DeviceRejected`` code ``UNSUPPORTED``);
2. the table is read (the undo point) and the batch planned against it (``updates``);
3. one Write; when some updates fail (gRPC UNKNOWN with one ``p4.v1.Error`` per update in
   the ``grpc-status-details-bin`` trailer; a DELETE answered NOT_FOUND counts as done)
   the table is read again, whatever the batch changed is put back (``drivers.batch``),
   one Write per run of same-op changes so the undo keeps its order, and re-verified;
   then ``DeviceRejected`` is raised with the first failed update's code (e.g.
   ``RESOURCE_EXHAUSTED``). When the undo fails too, a plain ``DriverError`` says so.

A timeout during a Write leaves its outcome unknown: read the table back.

A server that restarts ends the arbitration stream; the next request opens a fresh gRPC
channel and arbitrates again with the same election id (``drivers.reconnect``: backoff
bounded by ``timeout``), then loads the program the device runs, as ``open`` does. One
that came back without its program (a cold restart) is refused ``PIPELINE_MISMATCH`` and
asked again by every request after (never the program it ran before);
``install_program`` puts the inventory's program back on it (a resync does: a device
without a program has no tables to reset). The gRPC channel pings the server when quiet
(``rpc``: HTTP/2 keepalive), so a stream to a server that was cut off ends.
Every RPC, each update and each status is logged at DEBUG on ``reroute.wire.p4runtime.<name>``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

from drivers import batch, foreign, gcpause
from drivers.base import (
    Capabilities,
    FlowChange,
    FlowRule,
    Identity,
    PortListener,
    PortState,
    Session,
    Survey,
    register,
)
from drivers.errors import ConfigError, DeviceRejected, DriverError, ProtocolError
from drivers.ovs import OvsDriver
from drivers.p4runtime import mapping, program, rpc, updates
from drivers.p4runtime.gnmi import GnmiPorts
from drivers.p4runtime.proto import code_pb2, election, p4info_pb2
from drivers.p4runtime.proto import p4runtime_pb2 as P4R
from drivers.p4runtime.rpc import Client, UpdateStatus, WriteFailed
from drivers.p4runtime.spec import P4RuntimeSpec
from drivers.p4runtime.stream import Arbitration
from drivers.reconnect import Reconnecting
from drivers.spec import Expect, TlsFiles

log = logging.getLogger("reroute.drivers.p4runtime")
ALL_COOKIE_BITS = 0xFFFF_FFFF_FFFF_FFFF


@register("p4runtime", spec=P4RuntimeSpec)
class P4RuntimeDriver(Session):
    """Device ``device_id`` of the P4Runtime server at ``address`` (``HOST:PORT``)."""

    capabilities = Capabilities(
        atomic_batch=False,
        read_back=True,
        max_batch=0,
        port_state=False,
        notes="P4Runtime v1 (gRPC), one Write per batch into the ternary table "
        "MyIngress.reroute; updates of a Write may be applied in any order and partially, "
        "so a failed batch is undone from a read-back; primary by election id; no port "
        "state (P4Runtime has none) unless the switch's gNMI target is given as gnmi (or "
        "an OpenFlow target of it as ports)",
    )

    @classmethod
    def from_spec(cls, name: str, spec: P4RuntimeSpec, expect: Expect) -> P4RuntimeDriver:
        """The driver of an inventory entry (``drivers.p4runtime.spec``)."""
        if spec.gnmi is not None:  # port state over gNMI (drivers.p4runtime.gnmi)
            return P4RuntimeWithGnmi(
                name, spec.target, gnmi=spec.gnmi, device_id=spec.device_id,
                election_id=spec.election_id, timeout=spec.timeout_s, p4info=spec.p4info,
                pipeline=spec.pipeline, install_pipeline=spec.install_pipeline, tls=spec.tls,
                names=spec.names, max_batch=spec.max_batch,
            )  # fmt: skip
        kind = cls if spec.ports is None else P4RuntimeWithPorts
        return kind(
            name,
            spec.target,
            device_id=spec.device_id,
            election_id=spec.election_id,
            timeout=spec.timeout_s,
            p4info=spec.p4info,
            pipeline=spec.pipeline,
            install_pipeline=spec.install_pipeline,
            ports=spec.ports,
            tls=spec.tls,
            names=spec.names,
            max_batch=spec.max_batch,
        )

    def __init__(
        self,
        name: str,
        address: str,
        *,
        device_id: int,
        election_id: int = 1,
        timeout: float = 5.0,
        p4info: Path | None = None,
        pipeline: Path | None = None,
        install_pipeline: bool = False,
        ports: str | None = None,
        tls: TlsFiles | None = None,
        names: Mapping[str, str] | None = None,
        max_batch: int = 0,
    ) -> None:
        self.name = name
        self.names = dict(names or {})  # our P4 names -> the device's (``program``)
        if max_batch:  # the executor splits larger batches (services.reroute.engine.guard)
            self.capabilities = replace(type(self).capabilities, max_batch=max_batch)
        self.address = address
        self.device_id = device_id
        self.election_id = election_id
        self.timeout = timeout
        self.p4info = p4info
        self.pipeline = pipeline
        self.install_pipeline = install_pipeline
        self._program: program.Program | None = None
        self._ports = None if ports is None else OvsDriver(name, ports, timeout=timeout)
        self._client = Client(name, address, timeout, tls)
        self._arbitration = Arbitration(self._client, device_id, election_id)
        self._session: Reconnecting[Arbitration] = Reconnecting(
            name, self._rearbitrate, lambda arb: arb.alive, timeout
        )
        self._lock = asyncio.Lock()
        self._restoring = False  # install_program: push the file's program onto an empty device
        self.skips = foreign.Skips(name)  # other writers' entries our reads left out

    # ----------------------------------------------------------------------------------
    # session

    async def open(self) -> None:
        """Connect, become the primary client, make sure the program is installed."""
        if self._client.stub is not None:
            return
        self._client.open()
        try:
            await self._client.unary("Capabilities", P4R.CapabilitiesRequest())
            await self._arbitration.start()
            self._program = await self._load_program()
            if self._ports is not None:
                await self._ports.open()
        except BaseException:
            await self.close()
            raise
        self._session.set(self._arbitration)

    async def _rearbitrate(self) -> Arbitration:
        """The stream again after the server restarted (``drivers.reconnect``): arbitration
        with our election id, then the program it runs (installed again only as ``open``
        would)."""
        await self._arbitration.stop()
        await self._client.close()  # a fresh channel connects now, not at gRPC's next backoff
        self._client.open()
        await self._arbitration.start()
        self._program = await self._load_program()
        return self._arbitration

    async def _primary(self) -> program.Program:
        """The program, once this session is the primary again (re-arbitrated after the
        server restarted)."""
        await self._session.get()
        return self._loaded()

    @property
    def down_since(self) -> float | None:
        """Since when (``time.time()``) the server has been unreachable; None: it answers."""
        return self._session.down_since

    @property
    def connections(self) -> int:
        """Sessions made so far (one more after every restart of the server)."""
        return self._session.connections

    async def install_program(self) -> None:
        """Put the inventory's program (``p4info``, and ``pipeline`` as device config) back
        on a device that runs none (restarted cold), as ``install_pipeline`` does at open,
        whatever that says: a device without a program has no tables to reset. Nothing is
        pushed to a device that runs a program. DeviceRejected ``PIPELINE_MISMATCH`` when
        no p4info file is named (its program cannot be known)."""
        if self.p4info is None:
            raise DeviceRejected(
                self.name, f"device {self.device_id} runs no P4 program and the inventory "
                "names no p4info file to put back", "PIPELINE_MISMATCH",
            )  # fmt: skip
        self._restoring = True
        try:
            await self._session.get()
        finally:
            self._restoring = False

    async def identify(self) -> Identity:
        """The P4Runtime API version the server reports, and our role."""
        await self._primary()
        caps = await self._client.unary("Capabilities", P4R.CapabilitiesRequest())
        return Identity(
            summary=f"P4Runtime {caps.p4runtime_api_version or '?'}, device {self.device_id}, "
            f"{'primary' if self._arbitration.primary else 'backup'} with election id "
            f"{self._arbitration.election_id}"
        )

    def share(self) -> None:
        """Open as a backup (``MasterElection``): replicas share one inventory, and a
        server refuses a second client with an election id in use, so the stream starts
        with a random id below every claim's (generation 0), and a backup is no error;
        writes wait for ``claim_master``."""
        self._arbitration.election_id = secrets.randbits(63) + 1
        self._arbitration.backup_ok = True

    async def claim_master(self, generation_id: int) -> None:
        """Become the primary as ``generation_id`` (``MasterElection``): the election id
        becomes ``generation_id`` * 2**64 + the configured ``election_id``, so a later
        generation (the etcd revision of a replica's lock) outranks every earlier one and
        the server refuses the writes of the replica it replaced (PERMISSION_DENIED);
        kept for re-arbitration after a restart, where a stale one is refused."""
        if not 0 < generation_id < 2**64:
            raise ValueError(f"{self.name}: generation {generation_id} is not in 1..2**64-1")
        await self._session.get()
        await self._arbitration.claim(generation_id << 64 | self.election_id % 2**64)

    def master_generation(self) -> int | None:
        """The generation this client is the primary with (``ClaimKept``): None while its
        stream is down or another client is the primary (the server tells every client
        of a new primary), or before its first claim."""
        arbitration = self._arbitration
        generation = arbitration.election_id >> 64
        return generation if arbitration.primary and arbitration.alive and generation else None

    async def generation_seen(self) -> int:
        """The generation of the primary's election id (``GenerationSeen``): the high 64
        bits of the id the server last named as primary (0: none claimed)."""
        await self._session.get()
        return self._arbitration.primary_id >> 64

    async def close(self) -> None:
        """Stop the arbitration stream and close the gRPC channel."""
        self._session.forget()
        await self._arbitration.stop()
        await self._client.close()
        if self._ports is not None:
            await self._ports.close()

    async def _load_program(self) -> program.Program:
        """The program the device runs (installed first when asked), its ids by name."""
        info = await self._device_p4info()
        if self.p4info is not None:
            info = await self._file_program(info)
        elif not info.tables:
            raise DeviceRejected(
                self.name, f"device {self.device_id} runs no P4 program; nothing was changed. "
                "Name its p4info (and pipeline) file and say install_pipeline: true in the "
                "inventory to have it pushed", "PIPELINE_MISMATCH",
            )  # fmt: skip
        try:
            return program.Program.of(info, self.names)
        except program.ProgramError as exc:
            raise DeviceRejected(
                self.name, f"device {self.device_id} does not run the reroute program: {exc}; "
                "nothing was changed", "PIPELINE_MISMATCH",
            ) from exc  # fmt: skip

    async def _device_p4info(self) -> p4info_pb2.P4Info:
        """The P4Info the device runs (empty when it runs none)."""
        try:
            got = await self._client.unary(
                "GetForwardingPipelineConfig",
                P4R.GetForwardingPipelineConfigRequest(
                    device_id=self.device_id,
                    response_type=P4R.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE,
                ),
            )
        except DeviceRejected as exc:
            if exc.code != "FAILED_PRECONDITION":  # some targets: no pipeline yet
                raise
            return p4info_pb2.P4Info()
        info: p4info_pb2.P4Info = got.config.p4info
        return info

    async def _file_program(self, device: p4info_pb2.P4Info) -> p4info_pb2.P4Info:
        assert self.p4info is not None
        try:
            want = program.load(self.p4info)
        except program.ProgramError as exc:
            raise ConfigError(f"{self.name}: {exc}") from exc
        if device == want or _same_ids(device, want, self.names):
            return device
        if not (self.install_pipeline or (self._restoring and not device.tables)):
            raise DeviceRejected(
                self.name, f"device {self.device_id} runs another program than "
                f"{self.p4info} (or none); nothing was changed. Say install_pipeline: true "
                "in the inventory to have it pushed (this resets its tables)",
                "PIPELINE_MISMATCH",
            )  # fmt: skip
        config = P4R.ForwardingPipelineConfig(p4info=want)
        if self.pipeline is not None:
            config.p4_device_config = self.pipeline.read_bytes()
        log.info("%s: installing %s (resets the device's tables)", self.name, self.p4info)
        await self._client.unary(
            "SetForwardingPipelineConfig",
            P4R.SetForwardingPipelineConfigRequest(
                device_id=self.device_id,
                election_id=election(self._arbitration.election_id),
                action=P4R.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
                config=config,
            ),
        )
        return want

    def _loaded(self) -> program.Program:
        if self._program is None:
            raise DriverError(self.name, "not connected (call open() first)")
        return self._program

    # ----------------------------------------------------------------------------------
    # FlowProgrammer

    async def apply(self, changes: Sequence[FlowChange]) -> None:
        """One Write for the batch; undone on a partial failure (module docstring)."""
        if not changes:
            return
        await self._primary()
        with gcpause.paused():  # 1000s of entries: see drivers.gcpause
            self._check(changes)
        async with self._lock:
            rules = await self._read_all()
            with gcpause.paused():
                before = batch.index(rules)
                planned = updates.plan(self._loaded(), before, changes)
                request = self._request(planned.updates)
            try:
                await self._send(request, planned.updates)
            except WriteFailed as exc:
                await self._recover(before, changes, planned, exc)

    async def read(self, cookie: int | None = None, cookie_mask: int = 0) -> list[FlowRule]:
        """The table's entries (those whose cookie matches under ``cookie_mask``, when
        given; a ``cookie`` without a mask matches exactly). Only our table is read; its
        entries' cookie (metadata) is filtered here (a Read cannot filter by it)."""
        cookie, mask = foreign.cookie_filter(cookie, cookie_mask)
        entries = await self._entries()
        with gcpause.paused():
            return foreign.select(entries, self._reader(), cookie, mask, self.skips)

    async def survey(self, cookie: int, cookie_mask: int) -> Survey:
        """Our table's entries: ours (cookie under the filter) and other writers'."""
        entries = await self._entries()
        with gcpause.paused():
            return foreign.sort(entries, self._reader(), cookie, cookie_mask, self.skips)

    # ----------------------------------------------------------------------------------
    # steps

    def _check(self, changes: Sequence[FlowChange]) -> None:
        for i, change in enumerate(changes):
            why = mapping.unsupported(change.rule)
            if why is not None:
                raise DeviceRejected(
                    self.name, f"change #{i} ({change.op} {change.rule}) cannot be written "
                    f"to {program.TABLE}: {why}; nothing of the batch was sent", "UNSUPPORTED",
                )  # fmt: skip
        key = updates.twice(changes)
        if key is not None:
            raise DeviceRejected(
                self.name, f"the batch touches priority {key[1]}, {key[2]} twice: the "
                "updates of one Write may be applied in any order; nothing was sent",
                "UNSUPPORTED",
            )  # fmt: skip

    async def _read_all(self) -> list[FlowRule]:
        """Every entry of our table that reads as a rule (other writers' that do not:
        skipped, counted)."""
        entries = await self._entries()
        with gcpause.paused():
            return foreign.select(entries, self._reader(), 0, 0, self.skips)

    async def _entries(self) -> list[P4R.TableEntry]:
        """Every entry of our table (one Read of that table: no other table is read)."""
        loaded = await self._primary()
        request = P4R.ReadRequest(device_id=self.device_id)
        request.entities.add(table_entry=P4R.TableEntry(table_id=loaded.table_id))
        return [e.table_entry for e in await self._client.read(request)]

    def _reader(self) -> foreign.Reader[P4R.TableEntry]:
        loaded = self._loaded()
        return foreign.Reader(
            cookie=mapping.entry_cookie,
            rule=functools.partial(mapping.to_rule, loaded),
            foreign=functools.partial(mapping.foreign_entry, loaded),
            text=rpc.oneline,
        )

    async def _write(self, update_list: list[dict[str, Any]]) -> None:
        """One Write of ``updates.plan``'s updates; WriteFailed unless every update is done
        (a DELETE of a missing entry is done)."""
        if update_list:
            await self._send(self._request(update_list), update_list)

    def _request(self, update_list: list[dict[str, Any]]) -> P4R.WriteRequest:
        return P4R.WriteRequest(
            device_id=self.device_id,
            election_id=election(self._arbitration.election_id),
            atomicity=P4R.WriteRequest.CONTINUE_ON_ERROR,
            updates=update_list,
        )

    async def _send(self, request: P4R.WriteRequest, update_list: list[dict[str, Any]]) -> None:
        """The Write of ``request`` (``update_list``'s updates); see ``_write``."""
        if not update_list:
            return
        try:
            await self._client.unary("Write", request)
        except WriteFailed as exc:
            if len(exc.updates) != len(update_list):
                raise ProtocolError(
                    self.name, f"{len(exc.updates)} errors for {len(update_list)} updates"
                ) from exc
            if not all(_done(u, s) for u, s in zip(update_list, exc.updates, strict=True)):
                raise

    async def _recover(
        self,
        before: batch.Table,
        changes: Sequence[FlowChange],
        planned: updates.Planned,
        error: WriteFailed,
    ) -> None:
        """Undo what the failed Write did, then raise its DeviceRejected."""
        rejected = self._rejected(changes, planned, error)
        keys = batch.touched(changes)
        try:
            now = batch.index(await self._read_all())
            undo = batch.restore(before, now, keys)
            if undo:
                log.warning("%s: undoing %d change(s) after: %s", self.name, len(undo), error)
            for run in updates.runs(undo):
                await self._write(updates.plan(self._loaded(), now, run).updates)
                now = _after(now, run)
            wrong = batch.mismatches(
                {k: before.get(k) for k in keys}, batch.index(await self._read_all())
            )
        except DriverError as undo_error:
            raise DriverError(
                self.name, f"{rejected}; undoing the batch failed too ({undo_error}): read "
                "the table back",
            ) from undo_error  # fmt: skip
        if wrong:
            raise DriverError(self.name, f"{rejected}; {len(wrong)} entries not restored")
        raise rejected from error

    def _rejected(
        self, changes: Sequence[FlowChange], planned: updates.Planned, error: WriteFailed
    ) -> DeviceRejected:
        pairs = enumerate(zip(planned.updates, error.updates, strict=True))
        bad = [i for i, (update, status) in pairs if not _done(update, status)]
        first = error.updates[bad[0]]
        change = changes[planned.changes[bad[0]]]
        others = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        return DeviceRejected(
            self.name,
            f"change #{planned.changes[bad[0]]} ({change.op} {change.rule}) rejected: "
            f"{first.name}: {first.message}{others}; the batch of {len(changes)} was undone",
            first.name,
        )


class P4RuntimeWithPorts(P4RuntimeDriver):
    """A P4Runtime switch whose port state an OpenFlow target of it reports (``ports``: the
    management socket of the bridge under our EMULATOR, say): also a ``PortMonitor``."""

    capabilities = replace(
        P4RuntimeDriver.capabilities,
        port_state=True,
        notes=P4RuntimeDriver.capabilities.notes + "; port state from the ports OpenFlow target",
    )

    async def port_states(self) -> dict[int, PortState]:
        """Link state by port, from the ``ports`` OpenFlow target (P4Runtime has none)."""
        if self._ports is None:
            raise DriverError(self.name, "no ports target to read port state from")
        return await self._ports.port_states()


class P4RuntimeWithGnmi(P4RuntimeDriver):
    """A P4Runtime switch whose port state its gNMI target reports (``gnmi``: OpenConfig
    oper-status subscribed ON_CHANGE, ``drivers.p4runtime.gnmi``), as Stratum serves it:
    a ``PortMonitor`` and ``PortEvents``. TLS, when given, is the P4Runtime target's."""

    capabilities = replace(
        P4RuntimeDriver.capabilities,
        port_state=True,
        notes=P4RuntimeDriver.capabilities.notes + "; port state over gNMI (OpenConfig "
        "interfaces/interface/state/oper-status, subscribed ON_CHANGE)",
    )

    def __init__(self, name: str, address: str, *, gnmi: str, **options: Any) -> None:
        super().__init__(name, address, **options)
        self.gnmi = GnmiPorts(name, gnmi, self.timeout, options.get("tls"))

    async def open(self) -> None:
        """P4Runtime as ``P4RuntimeDriver.open``, then the gNMI subscription in sync."""
        if self._client.stub is not None:
            return
        await super().open()
        try:
            await self.gnmi.open()
        except BaseException:
            await super().close()
            raise

    async def close(self) -> None:
        """The gNMI subscription and channel, then P4Runtime's."""
        await self.gnmi.close()
        await super().close()

    async def identify(self) -> Identity:
        """P4Runtime's identity, and the ports gNMI reports."""
        found = await super().identify()
        states = await self.gnmi.port_states()
        up = sum(s is PortState.UP for s in states.values())
        summary = f"{found.summary}; gNMI {self.gnmi.address}: {len(states)} ports, {up} up"
        return replace(found, summary=summary)

    async def port_states(self) -> dict[int, PortState]:
        """Oper-status by port number (ifindex), from the gNMI subscription."""
        return await self.gnmi.port_states()

    def port_events(self, listener: PortListener) -> AbstractAsyncContextManager[None]:
        """Every oper-status change the gNMI stream reports, to ``listener``."""
        return self.gnmi.port_events(listener)


def _same_ids(device: p4info_pb2.P4Info, want: p4info_pb2.P4Info, names: Mapping[str, str]) -> bool:
    """Whether the device's program gives our names the ids the file gives them (then it
    runs the file's program, whatever else differs: nothing to install)."""
    try:
        a, b = program.Program.of(device, names), program.Program.of(want, names)
    except program.ProgramError:
        return False
    ids = (a.table_id, a.field_ids, a.action_ids, a.param_ids)
    return ids == (b.table_id, b.field_ids, b.action_ids, b.param_ids)


def _done(update: dict[str, Any], status: UpdateStatus) -> bool:
    deleting = update["type"] == P4R.Update.DELETE
    return status.ok or (deleting and status.code == code_pb2.NOT_FOUND)


def _after(table: batch.Table, changes: Sequence[FlowChange]) -> dict[batch.Key, FlowRule]:
    state = {**table, **batch.expected(table, changes)}
    return {k: r for k, r in state.items() if r is not None}
