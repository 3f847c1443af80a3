"""``python -m fabric.odl``: run the OpenDaylight northbound EMULATOR until SIGTERM or SIGINT.

    python -m fabric.odl --listen 127.0.0.1:0 --openflow 127.0.0.1:0 \\
        --stats-interval-s 3 --user admin --password admin --ready-file /run/x/odl.json

Switches connect to the OpenFlow listener (``ovs-vsctl set-controller BR
tcp:HOST:PORT``); clients use the northbound. Once both listen, ``--ready-file`` gets
``{"northbound": PORT, "openflow": PORT}`` (written atomically), so a parent can wait
for the file.

os-ken 4.x serves switches on native threads, one of which (its listener) cannot be
stopped: after an orderly shutdown (northbound closed, switches hung up on, os-ken's
applications stopped) the process ends with ``os._exit``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import sys
from pathlib import Path

from aiohttp import web

from fabric.daemons import listen_address, stop_requested, write_ready
from fabric.odl.controller import Controller
from fabric.odl.northbound import Credentials, make_app
from fabric.odl.southbound import Link, start_osken

log = logging.getLogger("reroute.fabric.odl")


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fabric.odl",
        description="Run an EMULATOR of OpenDaylight's northbound REST (flows, inventory) "
        "over a real OpenFlow 1.3 controller (os-ken).",
    )
    add = p.add_argument
    add("--listen", type=listen_address, default=("127.0.0.1", 8181), metavar="HOST:PORT")
    add("--openflow", type=listen_address, default=("127.0.0.1", 6653), metavar="HOST:PORT")
    add("--stats-interval-s", type=positive, default=3.0, help="operational poll (ODL: 3 s)")
    add("--user", default="admin")
    add("--password", default="admin", help="(visible in ps: prefer --password-file)")
    add("--password-file", type=Path, help="the password: the first line of this file")
    add("--ready-file", type=Path, help="write the ports here (JSON) once listening")
    add("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s: %(message)s")
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    stop = stop_requested()
    controller = Controller(stats_interval_s=args.stats_interval_s)
    link = Link(loop, controller)
    osken = await asyncio.to_thread(start_osken, link, *args.openflow)
    controller.start(link)
    password = args.password
    if args.password_file is not None:
        password = args.password_file.read_text().splitlines()[0]
    credentials = Credentials(user=args.user, password=password)
    runner = web.AppRunner(make_app(controller, credentials))
    await runner.setup()
    try:
        sock = _listen(*args.listen)
        await web.SockSite(runner, sock).start()
        ports = {"northbound": sock.getsockname()[1], "openflow": osken.port}
        log.info("EMULATOR listening: %s", ports)
        if args.ready_file:
            write_ready(args.ready_file, json.dumps(ports) + "\n")
        await stop.wait()
        log.info("stopping")
    finally:
        await runner.cleanup()
        await controller.close()
        link.close()
        await asyncio.to_thread(osken.close)
    return 0


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


if __name__ == "__main__":
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
