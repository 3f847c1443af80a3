"""A REST northbound over os-ken, as a daemon: the run of ``python -m emulators.odl`` and of
``python -m emulators.ryu`` (both EMULATORS: a controller's REST side in aiohttp, switches
on os-ken's OpenFlow 1.3 listener through ``emulators.odl.southbound.Link``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from emulators.daemon import announce, listen_socket, stop_requested
from emulators.odl.southbound import Link, SwitchEvents, start_osken

log = logging.getLogger("reroute.emulators.odl")


async def serve_over_osken(
    args: argparse.Namespace,
    events: SwitchEvents,
    app_of: Callable[[Link], web.Application],
    *,
    rest: str,
    closing: Callable[[], Awaitable[None]] | None = None,
) -> int:
    """os-ken on ``args.openflow``, the application ``app_of(link)`` on ``args.listen``,
    until SIGTERM or SIGINT. Once both listen, ``args.ready_file`` gets ``{rest: PORT,
    "openflow": PORT}``. On the way out: the northbound, then ``closing``, then os-ken."""
    stop = stop_requested()
    link = Link(asyncio.get_running_loop(), events)
    osken = await asyncio.to_thread(start_osken, link, *args.openflow)
    runner = web.AppRunner(app_of(link))
    await runner.setup()
    try:
        sock = listen_socket(*args.listen)
        await web.SockSite(runner, sock).start()
        ports = {rest: sock.getsockname()[1], "openflow": osken.port}
        log.info("EMULATOR listening: %s", ports)
        announce(args.ready_file, json.dumps(ports) + "\n")
        await stop.wait()
        log.info("stopping")
    finally:
        await runner.cleanup()
        if closing is not None:
            await closing()
        link.close()
        await asyncio.to_thread(osken.close)
    return 0
