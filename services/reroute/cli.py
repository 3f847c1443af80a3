"""The ``reroute`` command line: one entry point, subcommands registered by their modules.

Each subcommand module exposes ``register(subparsers)`` which adds its parser and sets
``func`` (``(argparse.Namespace) -> int``). Library code never prints or exits; only the
functions bound here do, and a ``RerouteError`` becomes a one-line message and exit code 1.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from services.reroute import __version__
from services.reroute.errors import RerouteError


def build_parser() -> argparse.ArgumentParser:
    from fabric import cli as fabric_cli
    from fabric.traffic import cli as traffic_cli
    from services.reroute import demo, reroute_cli, topo_cli
    from services.reroute.monitor import cli as monitor_cli
    from services.reroute.service import cli as serve_cli

    parser = argparse.ArgumentParser(
        prog="reroute",
        description="Make-before-break reroutes for optical-hybrid fabrics and long-haul links.",
    )
    parser.add_argument("--version", action="version", version=f"reroute {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (topo_cli, fabric_cli, reroute_cli, traffic_cli, monitor_cli, demo, serve_cli):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        code: int = args.func(args)
    except RerouteError as exc:
        print(f"reroute: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("reroute: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `reroute plan ... | head`: the reader is gone, stay quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return code


if __name__ == "__main__":
    sys.exit(main())
