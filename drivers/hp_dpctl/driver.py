"""``HpDpctlDriver``: an HP/Aruba OpenFlow switch the seeds' "dpctl method" way.

No controller: a host tool speaks OpenFlow 1.0 straight to the switch's passive listener
(``openflow`` -> ``instance`` -> ``listen-port``), one process per request: the OpenFlow
1.0 reference ``dpctl`` when one is on PATH, else ``ovs-ofctl -O OpenFlow10 -F OpenFlow10``
(``drivers.hp_dpctl.tool``; each program is recognised before it is used,
``drivers.hp_dpctl.which``). Every entry is written with ``idle_timeout=0,hard_timeout=0``.
Through dpctl, whose ``atoi`` cannot carry a 64-bit cookie, cookies are folded into 32 bits
and unfolded on reading (``drivers.hp_dpctl.cookies``); a cookie that cannot be folded is
refused before anything is sent.

``apply`` (OpenFlow 1.0 has no bundles, so ``atomic_batch`` is False):

1. changes OpenFlow 1.0 cannot express are refused before anything is sent;
2. the undo point is the table as this driver last read it or left it (read first only
   when it has none; other writers' entries it cannot read are skipped, never fatal:
   ``drivers.foreign``), the batch is sent as one ``add-flows``: one tool run per batch;
3. with ``ovs-ofctl``, which waits for the switch's errors and a barrier, a zero exit is
   the confirmation; with ``dpctl``, which does not wait, the entries the batch touches
   are read back and compared with what it should leave, until ``verify_wait_s`` (default:
   ``timeout``) passes: a refused flow-mod is only seen as an entry that never appears;
4. on any failure in 2-3 (rejected flow-mod, lost connection, timeout, a read-back that
   differs) the touched entries are put back as they were and re-verified, and then the
   error is raised: nothing of a failed batch stays applied. When the undo itself fails,
   a plain ``DriverError`` says the table is in an unknown state.

``missing`` (the executor's VERIFY, ``FlowVerifier``): after batches ``ovs-ofctl``
confirmed, the driver knows the table they left (the undo point above) and answers from it
without a tool run: a VERIFY runs inside a reroute that holds the switch's device lock and
read the table to plan, so the switch has no other writer meanwhile (the dpctl method has
no controller). With ``dpctl``, or when the table is not known, it reads back. So a
failover's MBB is 3 tool runs (the plan's survey, make, shift; the survey is the make's
undo point), not 5, each with a ``show`` checking the dpid (below).

``open`` runs ``show`` (the FEATURES_REPLY, which in OpenFlow 1.0 lists the ports; not
``dump-ports-desc``, an Open vSwitch extension a real HP answers with BAD_STAT) and
refuses a switch whose datapath id is not the topology's (``Expect.dpid``), before any
change. Every tool run is a new connection, and the switch behind the address may have been
replaced or restarted meanwhile: the datapath id is checked again (one ``show``) before
every ``apply``, beside every ``survey`` (a plan's read: both tools at once, the dump
discarded on a mismatch), and read from the output of every ``port_states``; a mismatch is
``DeviceRejected(code="DPID_MISMATCH")`` before any change.
The undo point (the table last read or left) is refreshed by every ``read`` and ``survey``,
and forgotten when a run finds the switch unreachable or silent (it may come back empty).

Errors: refused / lost connection -> ``DeviceUnreachable``; no answer in ``timeout`` (the
driver kills the tool; the tool's own ``--timeout`` is a backstop) -> ``DeviceTimeout``;
``OFPT_ERROR`` -> ``DeviceRejected(code=<OpenFlow error name>)``; a read-back that differs
-> ``DeviceRejected(code="NOT_APPLIED")``; output that does not parse -> ``ProtocolError``.

Every command line, its stdin and its output are logged at DEBUG on
``reroute.wire.hp_dpctl.<name>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence

from drivers import batch, foreign
from drivers.base import (
    Capabilities,
    FlowChange,
    FlowOp,
    FlowRule,
    Identity,
    PortState,
    Session,
    Survey,
    register,
)
from drivers.batch import Expected, Key
from drivers.errors import (
    DeviceRejected,
    DeviceTimeout,
    DeviceUnreachable,
    DriverError,
    ProtocolError,
)
from drivers.hp_dpctl import flowtext
from drivers.hp_dpctl.spec import HpDpctlSpec
from drivers.hp_dpctl.tool import Command, Tool, classify
from drivers.hp_dpctl.which import find_tool
from drivers.spec import Expect

log = logging.getLogger("reroute.drivers.hp_dpctl")

ALL_COOKIE_BITS = 0xFFFF_FFFF_FFFF_FFFF
POLL_S = 0.05  # read-back interval while waiting for a dpctl batch to land
READER: foreign.Reader[tuple[int, str]] = foreign.Reader(
    cookie=lambda entry: entry[0],
    rule=lambda entry: flowtext.parse_flow(entry[1]),
    foreign=lambda entry: flowtext.foreign_entry(entry[1]),
    text=lambda entry: entry[1].strip(),
)


@register("hp_dpctl", spec=HpDpctlSpec)
class HpDpctlDriver(Session):
    """An OpenFlow 1.0 switch's passive listener at ``tcp:HOST:PORT``."""

    capabilities = Capabilities(
        atomic_batch=False,
        read_back=True,
        max_batch=0,
        port_state=True,
        notes="OpenFlow 1.0 via dpctl / ovs-ofctl to the switch's passive listener, no "
        "controller; no bundles: a failed batch is undone by the driver from the table it "
        "last read or left; ovs-ofctl's barrier confirms a batch (and VERIFY is answered from "
        "the table the confirmed batches left), dpctl's is read back; "
        "push/pop VLAN = mod_vlan_vid/strip_vlan (one tag); HP/Aruba software-table flows "
        "are rate-limited (100 pps by default)",
        self_undoing=True,
    )

    @classmethod
    def from_spec(cls, name: str, spec: HpDpctlSpec, expect: Expect) -> HpDpctlDriver:
        """The driver of an inventory entry (``drivers.hp_dpctl.spec``)."""
        driver = cls(
            name,
            spec.target,
            timeout=spec.timeout_s,
            dpid=expect.dpid,
            verify_wait_s=spec.verify_wait_s,
        )
        path = None if spec.tool_path is None else str(spec.tool_path)
        driver.tool = find_tool(spec.timeout_s, path, kind=spec.tool)
        return driver

    def __init__(
        self,
        name: str,
        target: str,
        *,
        timeout: float = 5.0,
        dpctl: str | None = None,
        dpid: int | None = None,
        verify_wait_s: float | None = None,
    ) -> None:
        self.name = name
        self.target = target
        self.timeout = timeout
        self.verify_wait_s = timeout if verify_wait_s is None else verify_wait_s
        self.expected_dpid = dpid
        self.datapath_id: int | None = None
        self.tool = find_tool(timeout, dpctl)
        self._wire = logging.getLogger(f"reroute.wire.hp_dpctl.{name}")
        self._lock = asyncio.Lock()
        # the table as last read or left by a confirmed batch: the undo point of the next
        # batch without a read of its own (the dpctl method has no other writer)
        self._known: batch.Table | None = None
        self.skips = foreign.Skips(name)  # other writers' entries our reads left out

    # ----------------------------------------------------------------------------------
    # session: one process per request, so only a probe

    async def open(self) -> None:
        """Check that the switch answers (``show``) and is the topology's datapath."""
        text = await self._run(self.tool.ports(self.target))
        self.datapath_id = flowtext.parse_dpid(text)
        self._check_dpid(self.datapath_id)

    async def _same_switch(self) -> None:
        """``show`` again: the switch at the address is still the one opened."""
        self._check_dpid(flowtext.parse_dpid(await self._run(self.tool.ports(self.target))))

    def _check_dpid(self, found: int | None) -> None:
        """DeviceRejected (DPID_MISMATCH) unless ``found`` is the topology's dpid (without
        one: the dpid the switch had when opened)."""
        want = self.expected_dpid if self.expected_dpid is not None else self.datapath_id
        if want is None or found == want:
            return
        self._known = None  # another switch's table, or none
        shown = "no dpid" if found is None else f"dpid {found:016x}"
        whose = "the topology gives" if self.expected_dpid is not None else "it opened as"
        raise DeviceRejected(
            self.name,
            f"{self.target} has {shown} (its FEATURES_REPLY), but {whose} {self.name} dpid "
            f"{want:016x}: wrong switch or wrong topology; nothing was changed",
            "DPID_MISMATCH",
        )

    async def identify(self) -> Identity:
        """The tool used, the datapath id and the ports the switch lists."""
        ports = await self.port_states()
        dpid = "?" if self.datapath_id is None else f"{self.datapath_id:016x}"
        return Identity(
            summary=f"OpenFlow 1.0 switch via {type(self.tool).__name__.lower()}, "
            f"dpid {dpid}, {len(ports)} ports"
        )

    async def close(self) -> None:
        """Nothing stays open between requests."""

    # ----------------------------------------------------------------------------------
    # FlowProgrammer

    async def apply(self, changes: Sequence[FlowChange]) -> None:
        """Apply the batch in order, verified; undone on failure (see the module docstring)."""
        if not changes:
            return
        self._check(changes)
        async with self._lock:
            await self._same_switch()
            before = self._known if self._known is not None else batch.index(await self.read())
            self._known = None  # unknown until the batch is confirmed
            want = batch.expected(before, changes)
            try:
                await self._send(changes)
                if not self.tool.waits:  # dpctl does not wait for the switch: read back
                    await self._verify(changes, want)
            except DriverError as exc:
                await self._undo(before, batch.touched(changes), exc)
                raise
            self._known = _after(before, want)

    async def read(self, cookie: int | None = None, cookie_mask: int = 0) -> list[FlowRule]:
        """The table (entries whose cookie matches under ``cookie_mask``, when given; a
        ``cookie`` without a mask matches exactly). OpenFlow 1.0 cannot filter by cookie
        in the request: the entries are filtered here. An entry outside the filter that a
        FlowRule cannot say (another writer's) is skipped and counted; inside it, it is a
        ``ProtocolError``."""
        cookie, mask = foreign.cookie_filter(cookie, cookie_mask)
        want = cookie & mask
        table, ours = [], []
        for found, line in await self._dump():
            mine = found & mask == want
            try:
                rule = flowtext.parse_flow(line)
            except flowtext.FlowTextError as exc:
                if mask and mine:
                    raise ProtocolError(self.name, str(exc)) from exc
                self.skips.skip(line.strip(), exc)
                continue
            table.append(rule)
            if mine:
                ours.append(rule)
        self._known = batch.index(table)  # the undo point of the next apply
        return ours

    async def survey(self, cookie: int, cookie_mask: int) -> Survey:
        """One dump, the dpid checked beside it (a read changes nothing: two tool runs at
        once, and a mismatch discards what was read): entries under the cookie filter as
        rules, the others as foreign; the table read is the next batch's undo point."""
        show = asyncio.create_task(self._run(self.tool.ports(self.target)))
        try:
            entries = await self._dump()
        except BaseException:
            show.cancel()  # its tool is killed and reaped (``_run``)
            await asyncio.wait([show])
            raise
        self._check_dpid(flowtext.parse_dpid(await show))
        found = foreign.sort(entries, READER, cookie, cookie_mask, self.skips)
        self._known = batch.index(_readable(entries))
        return found

    async def _dump(self) -> list[tuple[int, str]]:
        """(cookie, line) of every entry ``dump-flows`` lists."""
        text = await self._run(self.tool.dump(self.target))
        return list(flowtext.parse_flows(self.tool.table(text)))

    async def missing(
        self, expect: Sequence[FlowRule], cookie: int, cookie_mask: int = ALL_COOKIE_BITS
    ) -> list[FlowRule]:
        """The rules of ``expect`` the switch lacks (``FlowVerifier``): from the table the
        confirmed batches left when the tool confirms them (see the module docstring), else
        read back (entries whose cookie matches ``cookie`` under ``cookie_mask``)."""
        known = self._known if self.tool.waits else None
        if known is None:
            have = set(await self.read(cookie=cookie, cookie_mask=cookie_mask))
        else:
            have = set(known.values())
        return [r for r in expect if r not in have]

    # ----------------------------------------------------------------------------------
    # PortMonitor

    async def port_states(self) -> dict[int, PortState]:
        """Link state of every numbered port (LOCAL left out), from ``show``; DOWN when the
        link is down or the port is administratively down."""
        text = await self._run(self.tool.ports(self.target))
        self._check_dpid(flowtext.parse_dpid(text))
        return flowtext.parse_ports(text)

    # ----------------------------------------------------------------------------------
    # apply, step by step

    def _check(self, changes: Sequence[FlowChange]) -> None:
        for i, change in enumerate(changes):
            why = flowtext.unsupported(change.rule) or self.tool.cannot_carry(change.rule)
            if why is not None:
                raise DeviceRejected(
                    self.name,
                    f"change #{i} ({change.op} {change.rule}) cannot be sent in OpenFlow "
                    f"1.0: {why}; nothing of the batch of {len(changes)} was sent",
                    "UNSUPPORTED",
                )

    async def _send(self, changes: Sequence[FlowChange]) -> None:
        lines = [_line(c, self.tool) for c in changes]
        for command in self.tool.batch(self.target, lines):
            await self._run(command)

    async def _verify(self, changes: Sequence[FlowChange], want: Expected) -> None:
        """Read back until the touched entries are as the batch should leave them."""
        deadline = time.monotonic() + (0.0 if self.tool.waits else self.verify_wait_s)
        while wrong := batch.mismatches(want, batch.index(await self.read())):
            if time.monotonic() >= deadline:
                raise self._not_applied(changes, wrong)
            await asyncio.sleep(POLL_S)

    def _not_applied(self, changes: Sequence[FlowChange], wrong: list[Key]) -> DeviceRejected:
        i = next(i for i, c in enumerate(changes) if c.rule.key in wrong)
        return DeviceRejected(
            self.name,
            f"change #{i} ({changes[i].op} {changes[i].rule}) is not in the table read "
            f"back ({len(wrong)} entries differ); the batch of {len(changes)} was undone",
            "NOT_APPLIED",
        )

    async def _undo(self, before: batch.Table, keys: list[Key], error: DriverError) -> None:
        """Put ``keys`` back as they were in ``before``; raise DriverError when that fails."""
        try:
            fix = batch.restore(before, batch.index(await self.read()), keys)
            if fix:
                log.warning("%s: undoing %d change(s) after: %s", self.name, len(fix), error)
                await self._send(fix)
                await self._verify(fix, {k: before.get(k) for k in keys})
        except DriverError as undo_error:
            raise DriverError(
                self.name,
                f"{error}; undoing the batch failed too ({undo_error}): the table is in an "
                "unknown state, read it back",
            ) from undo_error

    # ----------------------------------------------------------------------------------
    # running the tool

    async def _run(self, command: Command) -> str:
        """Run ``command``; its stdout, or the DriverError its failure means."""
        self._log_command(command)
        proc = await self._spawn(command)
        try:
            stdin = None if command.stdin is None else command.stdin.encode()
            out, err = await asyncio.wait_for(proc.communicate(stdin), self.timeout)
        except TimeoutError as exc:
            self._known = None  # the switch may come back with another table
            raise DeviceTimeout(
                self.name, f"no answer from {self.target} within {self.timeout} s ({command})"
            ) from exc
        finally:
            await _reap(proc)
        stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
        self._log_output(proc.returncode, stdout, stderr)
        failure = classify(self.name, command, proc.returncode or 0, stderr)
        if isinstance(failure, DeviceUnreachable | DeviceTimeout):
            self._known = None
        if failure is not None:
            raise failure
        return stdout

    async def _spawn(self, command: Command) -> asyncio.subprocess.Process:
        pipe = asyncio.subprocess.PIPE
        try:
            return await asyncio.create_subprocess_exec(
                *command.argv,
                stdin=pipe if command.stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=pipe,
                stderr=pipe,
            )
        except OSError as exc:
            raise DeviceUnreachable(self.name, f"cannot run {command.argv[0]}: {exc}") from exc

    def _log_command(self, command: Command) -> None:
        if not self._wire.isEnabledFor(logging.DEBUG):
            return
        self._wire.debug("$ %s", command)
        for line in (command.stdin or "").splitlines():
            self._wire.debug("> %s", line)

    def _log_output(self, returncode: int | None, stdout: str, stderr: str) -> None:
        if not self._wire.isEnabledFor(logging.DEBUG):
            return
        for line in stdout.splitlines():
            self._wire.debug("< %s", line)
        for line in stderr.splitlines():
            self._wire.debug("! %s", line)
        self._wire.debug("= exit %s", returncode)


def _readable(entries: Sequence[tuple[int, str]]) -> list[FlowRule]:
    """The rules of the entries a FlowRule can say (the others are not ours to undo)."""
    rules = []
    for _, line in entries:
        with contextlib.suppress(flowtext.FlowTextError):
            rules.append(flowtext.parse_flow(line))
    return rules


def _after(before: batch.Table, want: Expected) -> dict[Key, FlowRule]:
    """The table ``before`` with the entries of ``want`` (None: gone)."""
    table = dict(before)
    for key, rule in want.items():
        if rule is None:
            table.pop(key, None)
        else:
            table[key] = rule
    return table


def _line(change: FlowChange, tool: Tool) -> str:
    if change.op is FlowOp.ADD:
        return flowtext.add_line(change.rule, cookie=tool.cookie_text(change.rule.cookie))
    return flowtext.delete_line(change.rule)


async def _reap(proc: asyncio.subprocess.Process) -> None:
    """Kill the tool if it still runs (timeout, cancellation) and wait for it."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
