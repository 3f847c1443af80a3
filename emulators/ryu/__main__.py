"""``python -m emulators.ryu``: run the Ryu ofctl_rest EMULATOR until SIGTERM or SIGINT.

    python -m emulators.ryu --listen 127.0.0.1:0 --openflow 127.0.0.1:0 --ready-file /run/x/ryu.json

Switches connect to the OpenFlow listener (``ovs-vsctl set-controller BR
tcp:HOST:PORT``, OpenFlow13 only); clients use the REST side (Ryu's wsgi default is port
8080). Once both listen, ``--ready-file`` gets ``{"rest": PORT, "openflow": PORT}``.

os-ken serves switches on native threads, one of which (its listener) cannot be stopped:
after an orderly shutdown the process ends with ``os._exit``.
"""

from __future__ import annotations

import argparse
import logging

from emulators.daemon import daemon_options, exit_now, listen_address, run_daemon
from emulators.odl.flows import Port
from emulators.odl.serving import serve_over_osken
from emulators.ryu.rest import make_app

log = logging.getLogger("reroute.emulators.ryu")


class Events:
    """Switch events: ofctl_rest keeps no state of its own (the Link knows the switches)."""

    def switch_connected(self, dpid: int) -> None:
        """Log a switch's connection."""
        log.info("datapath %016x connected", dpid)

    def switch_disconnected(self, dpid: int) -> None:
        """Log a switch's disconnection."""
        log.info("datapath %016x disconnected", dpid)

    def port_changed(self, dpid: int, port: Port) -> None:
        """Ignore port changes (ofctl_rest keeps no state)."""
        pass


def parser() -> argparse.ArgumentParser:
    """The command line of the Ryu emulator."""
    p = argparse.ArgumentParser(
        prog="python -m emulators.ryu",
        description="Run an EMULATOR of Ryu's ofctl_rest REST application over a real "
        "OpenFlow 1.3 controller (os-ken).",
    )
    add = p.add_argument
    add("--listen", type=listen_address, default=("127.0.0.1", 8080), metavar="HOST:PORT")
    add("--openflow", type=listen_address, default=("127.0.0.1", 6653), metavar="HOST:PORT")
    return daemon_options(p, "write the ports here (JSON) once listening")


def main(argv: list[str] | None = None) -> int:
    """Run the Ryu emulator until SIGTERM or SIGINT; return the exit code."""
    return run_daemon(parser().parse_args(argv), _run)


async def _run(args: argparse.Namespace) -> int:
    return await serve_over_osken(args, Events(), make_app, rest="rest")


if __name__ == "__main__":
    exit_now(main())
