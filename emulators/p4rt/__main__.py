"""``python -m emulators.p4rt``: run the P4Runtime switch EMULATOR until SIGTERM or SIGINT.

    python -m emulators.p4rt --listen 127.0.0.1:0 --bridge-mgmt unix:/run/x/br.mgmt \\
        --device-id 1 --p4info p4/reroute.p4info.txtpb --ready-file /run/x/p4rt.port

The program is the P4Info file's (``p4/reroute.p4``'s by default), installed from the
start unless ``--no-pipeline`` (then a client must set it first).

The bridge (OpenFlow 1.3 enabled, ``fail_mode=secure``) is the dataplane: its flows are
emptied at start, and then belong to the emulator. Its ports' state is served over gNMI
(OpenConfig oper-status, ``emulators.p4rt.gnmi``) on the same gRPC port, as Stratum does,
unless ``--no-gnmi``. Once serving, ``--ready-file`` gets
the gRPC port (written atomically), so a parent can wait for the file.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from emulators.daemon import announce, daemon_options, run_daemon, stop_requested
from emulators.p4rt.bridge import Bridge
from emulators.p4rt.gnmi import GnmiEmulator
from emulators.p4rt.ports import PortWatch
from emulators.p4rt.program import DEFAULT_P4INFO, Pipeline, load
from emulators.p4rt.server import P4RuntimeEmulator, serve
from emulators.p4rt.table import Table

log = logging.getLogger("reroute.emulators.p4rt")


def parser() -> argparse.ArgumentParser:
    """The command line of the P4Runtime emulator."""
    p = argparse.ArgumentParser(
        prog="python -m emulators.p4rt",
        description="Run an EMULATOR of a P4Runtime v1 switch (one device, the reroute "
        "program) whose dataplane is an Open vSwitch bridge.",
    )
    add = p.add_argument
    add("--listen", default="127.0.0.1:9559", metavar="HOST:PORT", help="gRPC (0: any port)")
    add("--bridge-mgmt", required=True, metavar="TARGET", help="unix:/path/br.mgmt or tcp:")
    add("--device-id", type=int, default=1)
    add("--p4info", type=Path, default=DEFAULT_P4INFO, help="the program's P4Info file")
    add("--no-pipeline", action="store_true", help="start without a program installed")
    add("--installed", action="store_true", help="start with the program (the default)")
    add("--no-gnmi", action="store_true", help="serve no gNMI (no port state)")
    add(
        "--warm",
        action="store_true",
        help="a warm restart (as Stratum's --warmboot): take the table from the bridge's "
        "flows instead of emptying it",
    )
    return daemon_options(p, "write the gRPC port here once serving")


def main(argv: list[str] | None = None) -> int:
    """Run the P4Runtime emulator until SIGTERM or SIGINT; return the exit code."""
    return run_daemon(parser().parse_args(argv), _run)


async def _run(args: argparse.Namespace) -> int:
    stop = stop_requested()
    bridge = Bridge(args.bridge_mgmt)
    table = Table(bridge, Pipeline.of(load(args.p4info)))
    if args.warm and not args.no_pipeline:
        log.info("warm start: %d entries from the bridge", await table.restore())
    else:
        await table.clear()
    servicer = P4RuntimeEmulator(args.device_id, table, installed=not args.no_pipeline)
    watch = PortWatch(args.bridge_mgmt)
    if not args.no_gnmi:
        watch.start()
    gnmi = None if args.no_gnmi else GnmiEmulator(watch)
    server, port = await serve(servicer, args.listen, gnmi=gnmi)
    try:
        log.info("EMULATOR serving P4Runtime on port %d (device %d)", port, args.device_id)
        announce(args.ready_file, f"{port}\n")
        await stop.wait()
        log.info("stopping")
    finally:
        await server.stop(1.0)
        await watch.stop()
        await bridge.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
