"""``python -m emulators.odl``: run the OpenDaylight northbound EMULATOR until SIGTERM or SIGINT.

    python -m emulators.odl --listen 127.0.0.1:0 --openflow 127.0.0.1:0 \\
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
from pathlib import Path

from aiohttp import web

from emulators.daemon import daemon_options, exit_now, listen_address, run_daemon
from emulators.odl.controller import Controller
from emulators.odl.northbound import Credentials, make_app
from emulators.odl.serving import serve_over_osken
from emulators.odl.southbound import Link


def positive(text: str) -> float:
    """argparse type: seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    """The command line of the ODL emulator."""
    p = argparse.ArgumentParser(
        prog="python -m emulators.odl",
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
    return daemon_options(p, "write the ports here (JSON) once listening")


def main(argv: list[str] | None = None) -> int:
    """Run the ODL emulator until SIGTERM or SIGINT; return the exit code."""
    return run_daemon(parser().parse_args(argv), _run)


async def _run(args: argparse.Namespace) -> int:
    controller = Controller(stats_interval_s=args.stats_interval_s)
    password = args.password
    if args.password_file is not None:
        password = args.password_file.read_text().splitlines()[0]
    credentials = Credentials(user=args.user, password=password)

    def northbound(link: Link) -> web.Application:
        controller.start(link)
        return make_app(controller, credentials)

    return await serve_over_osken(
        args, controller, northbound, rest="northbound", closing=controller.close
    )


if __name__ == "__main__":
    exit_now(main())
