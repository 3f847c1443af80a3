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

A switch that restarts (ovs-vswitchd killed and started again, the connection lost) is
connected to again by the next request (``drivers.reconnect``: backoff bounded by
``timeout``; the datapath id checked and bundles probed again); a request in flight when
it went fails with ``DeviceUnreachable``.

Targets: ``unix:PATH``, ``tcp:HOST:PORT`` and ``ssl:HOST:PORT`` with the key, certificate
and CA certificate files ``ovs-ofctl -p -c -C`` takes (``drivers.spec.TlsFiles``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import logging
import ssl
from collections.abc import AsyncIterator, Iterator, Sequence

from drivers import batch, foreign, gcpause
from drivers.base import (
    Capabilities,
    FlowChange,
    FlowOp,
    FlowRule,
    ForeignEntry,
    Identity,
    PortListener,
    PortState,
    Session,
    Survey,
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
from drivers.ovs.ofp13_flow import (
    FlowModCommand,
    decode_flow_stats,
    encode_flow_mod,
    encode_flow_stats_request,
    entry_key,
    flow_entry_keys,
    flow_mod_entry_key,
)
from drivers.ovs.ofp13_foreign import foreign_entry
from drivers.ovs.ofp13_layout import MatchDecoder, decode_flow_rules, split_flow_rules
from drivers.ovs.ordered import apply_ordered
from drivers.ovs.spec import OvsSpec
from drivers.reconnect import Reconnecting
from drivers.spec import Expect, TlsFiles
from protocols.openflow13.errors import code_name

log = logging.getLogger("reroute.drivers.ovs")

BUNDLE_FLAGS = ofp13.OFPBF_ATOMIC | ofp13.OFPBF_ORDERED
ALL_COOKIE_BITS = 0xFFFF_FFFF_FFFF_FFFF
_ALL_PORT_REASONS = 1 << ofp13.OFPPR_ADD | 1 << ofp13.OFPPR_DELETE | 1 << ofp13.OFPPR_MODIFY
ROLE_NOCHANGE, ROLE_SLAVE = 0, 3  # OFPCR_ROLE_*: ask the role (and generation); a slave
NO_GENERATION = 0xFFFF_FFFF_FFFF_FFFF  # what OVS answers NOCHANGE before any generation
FOLLOW_TRIES = 3  # a superseded session's tries to become a slave (``_follow``)
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
        self._link: Reconnecting[Channel] = Reconnecting(
            name, self._connect, lambda chan: chan.alive, timeout
        )
        self._lock = asyncio.Lock()
        self._bundle_id = 0
        self._async_ports: Channel | None = None  # the channel the switch sends PORT_STATUS
        # the last batch and its flow-mods: ``missing`` after ``apply`` of the same rules
        # cuts their keys out of the flow-mods instead of encoding them again
        self._sent: tuple[Sequence[FlowChange], list[bytes]] = ((), [])
        self.skips = foreign.Skips(name)  # other writers' entries our reads left out
        self._generation: int | None = None  # the master claim last granted (MasterElection)

    async def open(self) -> None:
        """Connect, exchange HELLOs, check the datapath id, probe for bundles."""
        if self._link.current is not None:
            return
        self._link.set(await self._connect())

    async def _connect(self) -> Channel:
        """A new channel to the switch, checked (datapath id) and probed (bundles): at open,
        and again after the switch restarted (``drivers.reconnect``)."""
        old = self._link.current
        if old is not None:
            await old.close()  # lost: its reader has ended; release the socket
        chan = await Channel.open(
            self.name, self.target, timeout=self.timeout, tls=self._tls_context(),
            server_name=self.tls.server_name if self.tls else None,
        )  # fmt: skip
        try:
            reply = await chan.request(ofp13.encode_features_request(chan.xids(1)))
            self.datapath_id = ofp13.parse_features_reply(reply.body).datapath_id
            self._check_dpid(self.datapath_id)
            self.bundles = await self._probe_bundles(chan)
            if self._generation is not None:  # a master before the switch was lost
                await self._reclaim(chan)
        except ofp13.CodecError as exc:
            await chan.close()
            raise ProtocolError(self.name, str(exc)) from exc
        except BaseException:
            await chan.close()
            raise
        self.capabilities = OvsDriver.capabilities
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
        return chan

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
            named = ", ".join(
                f"{k} {v}"
                for k, v in (
                    ("private_key", files.private_key),
                    ("certificate", files.certificate),
                    ("ca_certificate", files.ca_certificate),
                )
            )
            raise ConfigError(
                f"{self.name}: its TLS files ({named}) cannot be used: {exc}"
            ) from exc

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
        """Open an empty bundle and discard it; False when the switch refuses bundles, or
        ignores the OPEN without a word (a BARRIER after it tells silence from a slow
        answer: the switch answers the barrier only after everything before it)."""
        self._bundle_id = bundle = (self._bundle_id + 1) & 0xFFFFFFFF
        opening = ofp13.encode_bundle_ctrl(
            chan.xids(1), bundle, BundleCtrlType.OPEN_REQUEST, BUNDLE_FLAGS
        )
        try:
            reply = await chan.fenced(opening)
        except DeviceRejected as exc:
            log.info("%s: no ONF bundles (%s); batches are ordered flow-mods", self.name, exc)
            return False
        if reply is None:
            log.info("%s: no ONF bundles (the bundle OPEN went unanswered before a barrier); "
                     "batches are ordered flow-mods", self.name)  # fmt: skip
            return False
        self._check_control(reply, bundle, BundleCtrlType.OPEN_REQUEST)
        await self._control(chan, bundle, BundleCtrlType.DISCARD_REQUEST)
        return True

    async def identify(self) -> Identity:
        """The datapath id the switch announces (a FEATURES_REQUEST now: a round trip, so a
        switch that went away is found out) and whether it has bundles."""
        chan = await self._channel()
        reply = await chan.request(ofp13.encode_features_request(chan.xids(1)))
        try:
            self._check_dpid(ofp13.parse_features_reply(reply.body).datapath_id)
        except ofp13.CodecError as exc:
            raise ProtocolError(self.name, str(exc)) from exc
        batches = "atomic bundles" if self.bundles else "no bundles (ordered flow-mods)"
        return Identity(
            summary=f"OpenFlow 1.3 switch, dpid {self.datapath_id or 0:016x}, {batches}"
        )

    def share(self) -> None:
        """Nothing to do (``MasterElection``): a connection is an equal until it claims."""

    async def claim_master(self, generation_id: int) -> None:
        """ROLE_REQUEST master as ``generation_id`` (``MasterElection``): OVS demotes the
        connection that was master to slave (its flow-mods then fail with
        OFPBRC_IS_SLAVE) and refuses an id older than the last it saw (OFPRRFC_STALE)."""
        await self._claim(await self._channel(), generation_id)
        self._generation = generation_id  # claimed again on a new channel (``_connect``)

    def master_generation(self) -> int | None:
        """The generation last claimed (``ClaimKept``): claimed again on each new channel
        and given up when the switch refuses it as stale. OpenFlow 1.3 tells a master
        nothing when a later claim demotes it: whether another claimed since is the
        caller's to know (etcd's record of the device's holders)."""
        return self._generation

    async def generation_seen(self) -> int:
        """The highest generation id the switch has seen (``GenerationSeen``): a
        ROLE_REQUEST NOCHANGE, which OVS answers with it (0: none yet)."""
        _, generation = await self._role(await self._channel(), ROLE_NOCHANGE, 0)
        return 0 if generation == NO_GENERATION else generation

    async def _claim(self, chan: Channel, generation_id: int) -> None:
        role, _ = await self._role(chan, ofp13.ROLE_MASTER, generation_id)
        if role != ofp13.ROLE_MASTER:
            raise DeviceRejected(self.name, f"ROLE_REPLY gives role {role}, not master")

    async def _reclaim(self, chan: Channel) -> None:
        """Claim the generation this session was master with on a new channel (the switch
        restarted, or the connection dropped). Refused as stale, another replica claimed
        the switch since: this session gives its claim up and follows as a slave at the
        switch's generation, so it still reads (an error here would leave it unable to),
        its flow-mods are refused, and it writes again only after ``claim_master`` with a
        current token (not as an equal, whose writes OVS would take)."""
        assert self._generation is not None
        try:
            await self._claim(chan, self._generation)
        except DeviceRejected as exc:
            if not exc.code.endswith("STALE"):
                raise
            log.warning("%s: generation %d was superseded; a slave until claimed again",
                        self.name, self._generation)  # fmt: skip
            self._generation = None
            await self._follow(chan)

    async def _follow(self, chan: Channel) -> None:
        """Become a slave at the switch's current generation (a newer master may claim
        between the two requests: then again)."""
        for _ in range(FOLLOW_TRIES):
            _, generation = await self._role(chan, ROLE_NOCHANGE, 0)
            if generation == NO_GENERATION:  # forgotten meanwhile (restarted): no master
                return
            try:
                await self._role(chan, ROLE_SLAVE, generation)
                return
            except DeviceRejected as exc:
                if not exc.code.endswith("STALE"):
                    raise
        raise DeviceRejected(self.name, "no slave role: the master kept changing", "STALE")

    async def _role(self, chan: Channel, role: int, generation_id: int) -> tuple[int, int]:
        """ROLE_REQUEST: the role and generation id of the ROLE_REPLY."""
        reply = await chan.request(ofp13.encode_role_request(chan.xids(1), role, generation_id))
        try:
            return ofp13.parse_role_reply(reply.body)
        except ofp13.CodecError as exc:
            raise ProtocolError(self.name, str(exc)) from exc

    async def close(self) -> None:
        """Close the OpenFlow connection."""
        chan = self._link.forget()
        if chan is not None:
            await chan.close()

    async def _channel(self) -> Channel:
        """The channel; opened again when the switch was lost (restarted)."""
        return await self._link.get()

    @property
    def down_since(self) -> float | None:
        """Since when (``time.time()``) the switch has been unreachable; None: it answers."""
        return self._link.down_since

    @property
    def connections(self) -> int:
        """Channels opened so far (one more after every restart of the switch)."""
        return self._link.connections

    # ----------------------------------------------------------------------------------
    # FlowProgrammer

    async def apply(self, changes: Sequence[FlowChange]) -> None:
        """Apply the batch as one atomic, ordered bundle, or where the switch has no bundles
        as ordered flow-mods, verified and undone on failure (see the module docstring)."""
        if not changes:
            return
        chan = await self._channel()
        if not self.bundles:
            cookie, mask = batch.cookies(changes)  # the batch's entries, not other writers'
            read = functools.partial(self._read, cookie, mask, strict=False)
            async with self._lock:
                await apply_ordered(self.name, chan, changes, self._encode_flow_mod, read)
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
        self._check_control(await chan.request(msg), bundle, ctrl)

    def _check_control(self, reply: ofp13.Message, bundle: int, ctrl: BundleCtrlType) -> None:
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
        (a ``cookie`` without a mask matches exactly): the switch filters (flow stats
        request). Without a filter, entries a FlowRule cannot say are skipped and counted
        (``drivers.foreign``); under one such an entry is a ``ProtocolError``."""
        return await self._read(*foreign.cookie_filter(cookie, cookie_mask))

    async def _read(self, cookie: int, mask: int, *, strict: bool = True) -> list[FlowRule]:
        """The entries under (cookie, mask) (``mask`` 0: every entry); those a FlowRule
        cannot say are skipped unless the read is ``strict`` and filtered."""
        chan = await self._channel()
        wire = foreign.wire_filter(cookie, mask)
        parts = await chan.multipart(encode_flow_stats_request(chan.xids(1), *wire))
        matches = MatchDecoder()  # match layouts learnt once per read
        try:
            if wire[1] and strict:
                return [r for part in parts for r in decode_flow_rules(part.body, matches)]
            rules = []
            for part in parts:
                skip = functools.partial(self._skip, part.body)
                rules += decode_flow_rules(part.body, matches, skip)
        except ofp13.CodecError as exc:
            raise ProtocolError(self.name, f"flow table entry: {exc}") from exc
        want = cookie & mask
        return [r for r in rules if r.cookie & mask == want] if mask else rules

    def _skip(self, body: bytes, pos: int, why: Exception) -> None:
        try:
            text = foreign_entry(body, pos)[0].text
        except ofp13.CodecError:
            text = f"entry at offset {pos}"
        self.skips.skip(text, why)

    async def survey(self, cookie: int, cookie_mask: int) -> Survey:
        """The whole table in one flow stats request: entries under the cookie filter
        decoded as rules, every other one as a ``ForeignEntry`` (``ofp13_foreign``)."""
        chan = await self._channel()
        parts = await chan.multipart(encode_flow_stats_request(chan.xids(1)))
        matches = MatchDecoder()
        ours: list[FlowRule] = []
        others: list[ForeignEntry] = []
        try:
            for part in parts:
                rules, offsets = split_flow_rules(part.body, matches, cookie, cookie_mask)
                ours += rules
                others += self._foreign(part.body, offsets)
        except ofp13.CodecError as exc:
            raise ProtocolError(self.name, f"flow table entry: {exc}") from exc
        return Survey(ours=ours, foreign=others)

    def _foreign(self, body: bytes, offsets: list[int]) -> list[ForeignEntry]:
        found = []
        for pos in offsets:
            try:
                found.append(foreign_entry(body, pos)[0])
            except ofp13.CodecError as exc:
                self.skips.skip(f"entry at offset {pos}: {body[pos : pos + 64].hex()}", exc)
        return found

    async def missing(
        self, expect: Sequence[FlowRule], cookie: int, cookie_mask: int = ALL_COOKIE_BITS
    ) -> list[FlowRule]:
        """The rules of ``expect`` the switch lacks (``FlowVerifier``): the entries read back
        are compared as bytes with the rules encoded, without decoding 10,000s of entries
        (the rules of the last ``apply`` are not even encoded again: their keys are cut out
        of the flow-mods sent); only rules not found that way are looked for among the
        decoded entries."""
        chan = await self._channel()
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
    # PortMonitor, FlowCounters, PortCounters, PortEvents

    async def port_states(self) -> dict[int, PortState]:
        """Link state of every numbered port (reserved ports such as LOCAL left out).

        A port is DOWN when its link is down (OFPPS_LINK_DOWN) or it is administratively
        down (OFPPC_PORT_DOWN)."""
        chan = await self._channel()
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

    async def flow_packets(self, cookie: int) -> int:
        """Packets the entries of exactly ``cookie`` matched (``FlowCounters``): their flow
        statistics, which OVS credits as its datapath's cached flows are revalidated."""
        chan = await self._channel()
        parts = await chan.multipart(
            encode_flow_stats_request(chan.xids(1), cookie, ALL_COOKIE_BITS)
        )
        try:
            return sum(e.packet_count for part in parts for e in decode_flow_stats(part.body))
        except ofp13.CodecError as exc:
            raise ProtocolError(self.name, f"flow statistics: {exc}") from exc

    async def tx_packets(self, ports: Sequence[int] = ()) -> dict[int, int]:
        """Packets each port has sent (``PortCounters``): PORT_STATS of the one port asked
        for, else of every port; OVS reads the device's own counters at each request."""
        chan = await self._channel()
        port = ports[0] if len(ports) == 1 else ofp13.OFPP_ANY
        parts = await chan.multipart(ofp13.encode_port_stats_request(chan.xids(1), port))
        try:
            sent = [pair for part in parts for pair in ofp13.parse_port_tx_packets(part.body)]
        except ofp13.CodecError as exc:
            raise ProtocolError(self.name, f"port statistics: {exc}") from exc
        return {port: n for port, n in sent if port <= ofp13.OFPP_MAX}

    @contextlib.asynccontextmanager
    async def port_events(self, listener: PortListener) -> AsyncIterator[None]:
        """``listener(port, state)`` for every PORT_STATUS the switch sends meanwhile
        (``PortEvents``). On first use the connection asks for them (SET_CONFIG with the
        switch's own flags, SET_ASYNC: port status only) and waits for a BARRIER, so a
        change after entry is reported."""
        chan = await self._channel()

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
            if self._async_ports is not chan:  # a new connection asks again
                await self._ask_for_port_status(chan)
                self._async_ports = chan
            yield

    async def _ask_for_port_status(self, chan: Channel) -> None:
        """SET_CONFIG with the switch's own flags (GET_CONFIG first: fragment handling is
        the bridge's, and another controller may have set it), SET_ASYNC, a BARRIER."""
        reply = await chan.request(ofp13.encode_get_config_request(chan.xids(1)))
        try:
            flags, _ = ofp13.parse_switch_config(reply.body)
        except ofp13.CodecError as exc:
            raise ProtocolError(self.name, f"GET_CONFIG reply: {exc}") from exc
        first = chan.xids(3)
        await chan.transact(
            [
                ofp13.encode_set_config(first, flags=flags),
                ofp13.encode_set_async(first + 1, port_status=_ALL_PORT_REASONS),
                ofp13.encode_barrier_request(first + 2),
            ],
            [first + 2],
        )
