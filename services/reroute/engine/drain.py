"""How long a drain waits: until the data plane shows the shift, and the old path is quiet.

An OVS datapath forwards by a flow's old actions for a while after the flow-mod was
acknowledged and read back (its revalidator threads re-translate the cached flows later;
11-16 ms on a loaded 2-core machine), so a fixed margin after the shift is a guess.
``quiet`` reads the devices' own counters instead (``PortCounters``, ``FlowCounters``);
the executor's drains and the floor of ``bench/optical_mbb.py`` both wait by it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from drivers.base import FlowCounters, PortCounters
from services.reroute.errors import DriverError
from services.reroute.planning.plan import Step

POLL_S = 0.001  # how often a drain reads the counters it watches
READ_S = 0.2  # a read of counters slower than this: the drain's margin alone
SEEN_S = 0.03  # the rules a shift added counting nothing this long: their flows idle
WATCH_S = 0.25  # a watched port still sending after this: traffic nobody moved

log = logging.getLogger("reroute.executor")


async def quiet(
    drain: Step,
    start: float,
    ports: Mapping[str, PortCounters],
    flows: Mapping[str, FlowCounters],
) -> float:
    """When the ports ``drain`` watches (they feed a circuit about to be cut) last sent,
    once the rules the shift added have matched packets: counters are read every
    ``POLL_S`` until those rules have counted (the data plane forwards by them) and no
    watched port has moved for the drain's whole duration, so its margin counts from the
    last packet seen going into the old path, not from the shift. A sender that paused
    meets quiet ports on a stale datapath: hence both. ``start`` (the shift's end, on the
    running loop's clock) + ``SEEN_S`` where it watches devices none of which is in
    ``ports`` / ``flows`` (nothing shows when their datapaths act on the shift: as long as
    the wait for an idle rule; a 5 ms margin alone lost packets on a loaded machine, dpctl,
    stop 49), ``start`` where it watches nothing (a plain wait: BBM's gap). A
    rule that counts nothing in ``SEEN_S`` (its flows idle), a port still sending after
    ``WATCH_S`` (traffic nobody moved), or a failed read: the last change seen, logged."""
    loop = asyncio.get_running_loop()
    watched = sorted((d, p) for d, p in drain.ports if d in ports)
    unseen = sorted({(d, c) for d, c in drain.seen_on if d in flows})
    if not watched and not unseen:  # none of its devices counts: blind for an idle rule's cap
        return start + SEEN_S if drain.ports or drain.seen_on else start  # else a plain wait
    read = sorted({d for d, _ in watched})
    asked = {d: [p for dd, p in watched if dd == d] for d in read}
    seen: list[int] | None = None
    last = start
    while loop.time() < start + WATCH_S:
        try:
            async with asyncio.timeout(READ_S):
                sent, counted = await asyncio.gather(
                    asyncio.gather(*(ports[d].tx_packets(asked[d]) for d in read)),
                    asyncio.gather(*(flows[d].flow_packets(c) for d, c in unseen)),
                )
        except (DriverError, TimeoutError) as exc:
            log.warning("drain: counters not read (%s): the margin alone", exc)
            return last
        now, by_device = loop.time(), dict(zip(read, sent, strict=True))
        if counted and all(counted):
            # the datapath forwards by the new rules from before this read on: what
            # entered the old path before then arrives within the drain's margin
            last = max(last, now)
        unseen = [rule for rule, n in zip(unseen, counted, strict=True) if n == 0]
        if not watched and not unseen:
            return last  # nothing left to read: the margin from the last evidence
        counts = [by_device[d].get(p, 0) for d, p in watched]
        if seen is not None and counts != seen:
            last = now  # something went out between the last read and this one
        elif seen is not None and now - last >= drain.duration_s:
            if not unseen:
                return last
            if now >= start + SEEN_S:  # idle flows: nothing can say it, waited out
                log.info("drain: no packet counted on %s (idle flows)", unseen)
                return last
        seen = counts
        await asyncio.sleep(POLL_S)
    busy = " ".join(f"{d}:p{p}" for d, p in watched)
    log.warning("drain: %s still sending after %.0f ms", busy, WATCH_S * 1000)
    return last
