"""``OvsDriver``: Open vSwitch over OpenFlow 1.3, one atomic ONF bundle per batch.

``apply`` sends the whole batch as one bundle with flags ATOMIC|ORDERED:

1. bundle OPEN, one ADD_MESSAGE per change (the flow-mod's xid is the add's xid, so an
   error names the change), and a BARRIER, written 4,096 adds at a time as they are encoded
   (the switch checks the first while we encode the next; a change that cannot be encoded
   DISCARDs the bundle);
2. after the OPEN and BARRIER replies: if the switch rejected any added message (OVS checks
   a flow-mod when it is added, e.g. match prerequisites or output ports), DISCARD the
   bundle and raise ``DeviceRejected`` naming the first offending change. OVS keeps a
   bundle open after a failed add, and committing it would apply the rest: this is why
   the BARRIER comes before the COMMIT;
3. COMMIT and wait for its reply. A flow-mod that fails while committing (e.g. a full
   table) comes back as an error for that flow-mod's xid followed by ``OFPBFC_MSG_FAILED``
   for the commit; OVS has then reverted everything and removed the bundle.

Either way the table is left exactly as before. A ``DeviceTimeout`` during COMMIT leaves
the outcome unknown: read the table back.

``open`` checks the switch before anything is changed: its FEATURES_REPLY datapath id must
be the topology's (``Expect.dpid``; ``DeviceRejected`` naming both otherwise), and it probes
for the ONF bundle extension (a bundle OPEN, then DISCARD). A switch that refuses bundles
(an OpenFlow 1.3 switch need not have them) gets this session's ``capabilities`` with
``atomic_batch=False`` and each batch through ``drivers.ovs.ordered``: flow-mods separated
by barriers, read back, and undone on failure.

Targets: ``unix:PATH``, ``tcp:HOST:PORT`` and ``ssl:HOST:PORT`` with the key, certificate
and CA certificate files ``ovs-ofctl -p -c -C`` takes (``drivers.spec.TlsFiles``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import ssl
from collections.abc import AsyncIterator, Iterator, Sequence

from drivers import gcpause
from drivers.base import (
    Capabilities,
    FlowChange,
    FlowOp,
    FlowRule,
    Identity,
    PortListener,
    PortState,
    Session,
    register,
)
from drivers.errors import (
    ConfigError,
    DeviceRejected,
    DeviceUnreachable,
    DriverError,
    ProtocolError,
)
from drivers.ovs import ofp13
from drivers.ovs.channel import Channel, OpenFlowError, parse_target, tls_context
from drivers.ovs.ofp13 import BundleCtrlType, ErrorMsg
from drivers.ovs.ofp13_errors import code_name
from drivers.ovs.ofp13_flow import (
    FlowModCommand,
    encode_flow_mod,
    encode_flow_stats_request,
    entry_key,
    flow_entry_keys,
    flow_mod_entry_key,
)
from drivers.ovs.ofp13_layout import MatchDecoder, decode_flow_rules
from drivers.ovs.ordered import apply_ordered
from drivers.ovs.spec import OvsSpec
from drivers.spec import Expect, TlsFiles

log = logging.getLogger("reroute.drivers.ovs")

BUNDLE_FLAGS = ofp13.OFPBF_ATOMIC | ofp13.OFPBF_ORDERED
ALL_COOKIE_BITS = 0xFFFF_FFFF_FFFF_FFFF
_ALL_PORT_REASONS = 1 << ofp13.OFPPR_ADD | 1 << ofp13.OFPPR_DELETE | 1 << ofp13.OFPPR_MODIFY
_CHUNK = 4096  # adds encoded and written at a time: OVS checks them while we make the next
_COMMANDS = {FlowOp.ADD: FlowModCommand.ADD, FlowOp.DELETE: FlowModCommand.DELETE_STRICT}


@register("ovs", spec=OvsSpec)
class OvsDriver(Session):
    """An OpenFlow 1.3 switch (Open vSwitch, PicOS) at ``unix:``, ``tcp:`` or ``ssl:`` targets."""

    capabilities = Capabilities(
        atomic_batch=True,
        read_back=True,
        max_batch=0,
        port_state=True,
        typical_latency_ms=1.0,
        notes="OpenFlow 1.3 + ONF bundles (atomic, ordered); a switch without bundles (probed "
        "at open) gets ordered flow-mods + barriers, read back and undone, and that session "
        "declares atomic_batch=False; dpid checked at open; port state from PORT_DESC",
    )

    @classmethod
    def from_spec(cls, name: str, spec: OvsSpec, expect: Expect) -> OvsDriver:
        """The driver of an inventory entry (``drivers.ovs.spec``)."""
        return cls(name, spec.target, timeout=spec.timeout_s, tls=spec.tls, dpid=expect.dpid)

    def __init__(
        self,
        name: str,
        target: str,
        *,
        timeout: float = 5.0,
        tls: TlsFiles | None = None,
        dpid: int | None = None,
    ) -> None:
        try:
            self.target = parse_target(target)
        except ValueError as exc:
            raise DeviceUnreachable(name, str(exc)) from exc
        self.name = name
        self.timeout = timeout
        self.tls = tls
        self.expected_dpid = dpid
        self.datapath_id: int | None = None
        self.bundles: bool | None = None  # the switch takes ONF bundles (known once open)
        self._chan: Channel | None = None
        self._lock = asyncio.Lock()
        self._bundle_id = 0
        self._async_ports = False  # the switch sends this connection PORT_STATUS
        # the last batch and its flow-mods: ``missing`` after ``apply`` of the same rules
        # cuts their keys out of the flow-mods instead of encoding them again
        self._sent: tuple[Sequence[FlowChange], list[bytes]] = ((), [])

    async def open(self) -> None:
        """Connect, exchange HELLOs, check the datapath id, probe for bundles."""
        if self._chan is not None:
            return
        chan = await Channel.open(
            self.name, self.target, timeout=self.timeout, tls=self._tls_context(),
            server_name=self.tls.server_name if self.tls else None,
        )  # fmt: skip
        try:
            reply = await chan.request(ofp13.encode_features_request(chan.xids(1)))
            self.datapath_id = ofp13.parse_features_reply(reply.body).datapath_id
            self._check_dpid(self.datapath_id)
            self.bundles = await self._probe_bundles(chan)
        except ofp13.CodecError as exc:
            await chan.close()
            raise ProtocolError(self.name, str(exc)) from exc
        except BaseException:
            await chan.close()
            raise
        self._chan = chan
        if not self.bundles:
            self.capabilities = dataclasses.replace(
                OvsDriver.capabilities,
                atomic_batch=False,
                notes="OpenFlow 1.3 without bundles: flow-mods separated by barriers, read "
                "back, undone on failure; port state from PORT_DESC",
            )
        log.debug(
            "%s: connected to %s, dpid %016x, bundles %s",
            self.name, self.target, self.datapath_id, "yes" if self.bundles else "no",
        )  # fmt: skip

    def _tls_context(self) -> ssl.SSLContext | None:
        if self.tls is None or not self.target.startswith("ssl:"):
            return None
        files = self.tls
        assert files.private_key is not None and files.certificate is not None
        try:
            return tls_context(
                str(files.ca_certificate), str(files.certificate), str(files.private_key),
                files.server_name,
            )  # fmt: skip
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"{self.name}: its TLS files cannot be used: {exc}") from exc

    def _check_dpid(self, dpid: int) -> None:
        want = self.expected_dpid
        if want is not None and dpid != want:
            raise DeviceRejected(
                self.name,
                f"{self.target} has dpid {dpid:016x} (its FEATURES_REPLY), but the topology "
                f"gives {self.name} dpid {want:016x}: wrong switch or wrong topology; nothing "
                "was changed",
                "DPID_MISMATCH",
            )

    async def _probe_bundles(self, chan: Channel) -> bool:
        """Open an empty bundle and discard it; False when the switch refuses bundles."""
        self._bundle_id = bundle = (self._bundle_id + 1) & 0xFFFFFFFF
        try:
            await self._control(chan, bundle, BundleCtrlType.OPEN_REQUEST)
        except DeviceRejected as exc:
            log.info("%s: no ONF bundles (%s); batches are ordered flow-mods", self.name, exc)
            return False
        await self._control(chan, bundle, BundleCtrlType.DISCARD_REQUEST)
        return True

    async def identify(self) -> Identity:
        """The datapath id the switch announced (FEATURES_REPLY) and whether it has bundles."""
        self._channel()
        batches = "atomic bundles" if self.bundles else "no bundles (ordered flow-mods)"
        return Identity(
            summary=f"OpenFlow 1.3 switch, dpid {self.datapath_id or 0:016x}, {batches}"
        )

    async def claim_master(self, generation_id: int) -> None:
        """ROLE_REQUEST master as ``generation_id`` (``MasterElection``): OVS demotes the
        connection that was master to slave (its flow-mods then fail with
        OFPBRC_IS_SLAVE) and refuses an id older than the last it saw (OFPRRFC_STALE)."""
        chan = self._channel()
        msg = ofp13.encode_role_request(chan.xids(1), ofp13.ROLE_MASTER, generation_id)
        reply = await chan.request(msg)
        try:
            role, _ = ofp13.parse_role_reply(reply.body)
        except ofp13.CodecError as exc:
            raise ProtocolError(self.name, str(exc)) from exc
        if role != ofp13.ROLE_MASTER:
            raise DeviceRejected(self.name, f"ROLE_REPLY gives role {role}, not master")

    async def close(self) -> None:
        """Close the OpenFlow connection."""
        chan, self._chan = self._chan, None
        if chan is not None:
            await chan.close()

    def _channel(self) -> Channel:
        if self._chan is None:
            raise DeviceUnreachable(self.name, "not connected (call connect() first)")
        return self._chan

    # ----------------------------------------------------------------------------------
    # FlowProgrammer

    async def apply(self, changes: Sequence[FlowChange]) -> None:
        """Apply the batch as one atomic, ordered bundle, or where the switch has no bundles
        as ordered flow-mods, verified and undone on failure (see the module docstring)."""
        if not changes:
            return
        chan = self._channel()
        if not self.bundles:
            async with self._lock:
                await apply_ordered(self.name, chan, changes, self._encode_flow_mod, self.read)
            return
        async with self._lock:
            self._bundle_id = bundle = (self._bundle_id + 1) & 0xFFFFFFFF
            first = chan.xids(len(changes))
            with chan.watch(range(first, first + len(changes))) as watch:
                await self._stage(chan, bundle, self._adds(changes, bundle, first))
                if watch.errors:
                    await self._discard(chan, bundle)
                    rejected = self._rejected(changes, first, watch.errors)
                    raise rejected from OpenFlowError(watch.errors[0][1])
                try:
                    await self._control(chan, bundle, BundleCtrlType.COMMIT_REQUEST)
                except DeviceRejected as exc:
                    if watch.errors:  # a flow-mod failed at commit; OVS reverted the bundle
                        raise self._rejected(changes, first, watch.errors) from exc
                    raise

    def _adds(
        self, changes: Sequence[FlowChange], bundle: int, first: int
    ) -> Iterator[list[bytes]]:
        """The bundle's ADD_MESSAGEs, ``_CHUNK`` at a time, encoded as they are asked for."""
        self._sent, flow_mods = ((), []), []
        for start in range(0, len(changes), _CHUNK):
            with gcpause.paused():  # 1000s of flow-mods: see drivers.gcpause
                mods = self._flow_mods(changes, start, min(start + _CHUNK, len(changes)), first)
                adds = [ofp13.encode_bundle_add(bundle, BUNDLE_FLAGS, m) for m in mods]
            flow_mods += mods
            yield adds
        self._sent = (changes, flow_mods)

    def _encode_flow_mod(self, changes: Sequence[FlowChange], first: int) -> list[bytes]:
        """One flow-mod per change, xids ``first``, ``first + 1``... (all or none)."""
        flow_mods = self._flow_mods(changes, 0, len(changes), first)
        self._sent = (changes, flow_mods)
        return flow_mods

    def _flow_mods(
        self, changes: Sequence[FlowChange], start: int, stop: int, first: int
    ) -> list[bytes]:
        """The flow-mods of ``changes[start:stop]``, change ``i`` with xid ``first + i``."""
        flow_mods = []
        for i in range(start, stop):
            change = changes[i]
            try:
                flow_mods.append(encode_flow_mod(change.rule, first + i, _COMMANDS[change.op]))
            except ofp13.CodecError as exc:
                raise DeviceRejected(
                    self.name, f"change #{i} ({change.op} {change.rule}) cannot be encoded: "
                    f"{exc}; nothing of the batch of {len(changes)} was applied",
                ) from exc  # fmt: skip
        return flow_mods

    def _entry_keys(self, rules: Sequence[FlowRule]) -> list[bytes]:
        """``entry_key`` of each rule; cut out of its flow-mod if the last batch added it."""
        changes, flow_mods = self._sent
        sent = {id(c.rule): i for i, c in enumerate(changes) if c.op is FlowOp.ADD}
        keys = []
        for rule in rules:
            i = sent.get(id(rule), -1)
            same = i >= 0 and changes[i].rule is rule
            keys.append(flow_mod_entry_key(flow_mods[i]) if same else entry_key(rule))
        return keys

    async def _stage(self, chan: Channel, bundle: int, adds: Iterator[list[bytes]]) -> None:
        """OPEN, the adds as they are encoded, a BARRIER; errors for adds land in the watch.
        An add that cannot be encoded discards the bundle (nothing of it was committed)."""
        open_xid = chan.xids(2)
        barrier_xid = open_xid + 1
        opening = ofp13.encode_bundle_ctrl(
            open_xid, bundle, BundleCtrlType.OPEN_REQUEST, BUNDLE_FLAGS
        )
        barrier = ofp13.encode_barrier_request(barrier_xid)
        try:
            messages = itertools.chain([[opening]], adds, [[barrier]])
            await chan.transact_chunks(messages, [open_xid, barrier_xid])
        except DriverError:
            await self._discard(chan, bundle)
            raise

    async def _control(self, chan: Channel, bundle: int, ctrl: BundleCtrlType) -> None:
        msg = ofp13.encode_bundle_ctrl(chan.xids(1), bundle, ctrl, BUNDLE_FLAGS)
        reply = await chan.request(msg)
        try:
            got = ofp13.parse_bundle_ctrl(reply.body)
        except ofp13.CodecError as exc:
            raise ProtocolError(self.name, f"bad reply to bundle {ctrl.name}: {exc}") from exc
        if got.type != ctrl + 1 or got.bundle_id != bundle:
            raise ProtocolError(self.name, f"bundle {ctrl.name} answered by {got}")

    async def _discard(self, chan: Channel, bundle: int) -> None:
        """Best effort: the bundle may not exist any more (OVS drops it after a failed commit)."""
        with contextlib.suppress(DriverError):
            await self._control(chan, bundle, BundleCtrlType.DISCARD_REQUEST)

    def _rejected(
        self, changes: Sequence[FlowChange], first: int, errors: list[tuple[int, ErrorMsg]]
    ) -> DeviceRejected:
        xid, error = errors[0]
        index = xid - first
        change = changes[index]
        others = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return DeviceRejected(
            self.name,
            f"change #{index} ({change.op} {change.rule}) rejected: {error.name}{others}; "
            f"nothing of the batch of {len(changes)} was applied",
            code_name(error.type, error.code, error.experimenter),
        )

    async def read(self, cookie: int | None = None, cookie_mask: int = 0) -> list[FlowRule]:
        """All entries of all tables; with ``cookie``, those matching it under ``cookie_mask``
        (a ``cookie`` without a mask matches exactly)."""
        chan = self._channel()
        if cookie is None:
            cookie, cookie_mask = 0, 0
        elif not cookie_mask:
            cookie_mask = ALL_COOKIE_BITS
        request = encode_flow_stats_request(chan.xids(1), cookie, cookie_mask)
        parts = await chan.multipart(request)
        matches = MatchDecoder()  # match layouts learnt once per read
        try:
            return [r for part in parts for r in decode_flow_rules(part.body, matches)]
        except ofp13.CodecError as exc:
            raise ProtocolError(self.name, f"flow table entry: {exc}") from exc

    async def missing(
        self, expect: Sequence[FlowRule], cookie: int, cookie_mask: int = ALL_COOKIE_BITS
    ) -> list[FlowRule]:
        """The rules of ``expect`` the switch lacks (``FlowVerifier``): the entries read back
        are compared as bytes with the rules encoded, without decoding 10,000s of entries
        (the rules of the last ``apply`` are not even encoded again: their keys are cut out
        of the flow-mods sent); only rules not found that way are looked for among the
        decoded entries."""
        chan = self._channel()
        parts = await chan.multipart(encode_flow_stats_request(chan.xids(1), cookie, cookie_mask))
        try:
            have = {key for part in parts for key in flow_entry_keys(part.body)}
            keys = self._entry_keys(expect)
            gone = [r for r, k in zip(expect, keys, strict=True) if k not in have]
            if gone:
                matches = MatchDecoder()
                rules = {r for part in parts for r in decode_flow_rules(part.body, matches)}
                gone = [r for r in gone if r not in rules]
        except ofp13.CodecError as exc:
            raise ProtocolError(self.name, f"flow table entry: {exc}") from exc
        return gone

    # ----------------------------------------------------------------------------------
    # PortMonitor, PortEvents

    async def port_states(self) -> dict[int, PortState]:
        """Link state of every numbered port (reserved ports such as LOCAL left out).

        A port is DOWN when its link is down (OFPPS_LINK_DOWN) or it is administratively
        down (OFPPC_PORT_DOWN)."""
        chan = self._channel()
        parts = await chan.multipart(ofp13.encode_port_desc_request(chan.xids(1)))
        try:
            ports = [p for part in parts for p in ofp13.parse_port_desc(part.body)]
        except ofp13.CodecError as exc:
            raise ProtocolError(self.name, f"port description: {exc}") from exc
        return {
            p.port_no: PortState.DOWN if p.link_down else PortState.UP
            for p in ports
            if not p.reserved
        }

    @contextlib.asynccontextmanager
    async def port_events(self, listener: PortListener) -> AsyncIterator[None]:
        """``listener(port, state)`` for every PORT_STATUS the switch sends meanwhile
        (``PortEvents``). On first use the connection asks for them (SET_CONFIG, SET_ASYNC:
        port status only) and waits for a BARRIER, so a change after entry is reported."""
        chan = self._channel()

        def on_status(msg: ofp13.Message) -> None:
            """Hand a PORT_STATUS message's port state to the listener."""
            try:
                reason, port = ofp13.parse_port_status(msg.body)
            except ofp13.CodecError as exc:
                log.warning("%s: bad PORT_STATUS: %s", self.name, exc)
                return
            if not port.reserved and reason != ofp13.OFPPR_DELETE:
                listener(port.port_no, PortState.DOWN if port.link_down else PortState.UP)

        with chan.listen(ofp13.MsgType.PORT_STATUS, on_status):
            if not self._async_ports:
                first = chan.xids(3)
                await chan.transact(
                    [
                        ofp13.encode_set_config(first),
                        ofp13.encode_set_async(first + 1, port_status=_ALL_PORT_REASONS),
                        ofp13.encode_barrier_request(first + 2),
                    ],
                    [first + 2],
                )
                self._async_ports = True
            yield
