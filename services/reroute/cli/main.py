"""The ``reroute`` command line: one entry point, command groups registered by their modules.

Each command module exposes ``register(subparsers)`` which adds its parsers and sets
``func`` (``(argparse.Namespace) -> int``). The modules are found through the entry-point
group ``reroute.commands`` (``pyproject.toml``), so the emulated fabric's and the
experiments' commands join the CLI without ``services`` importing them (layers only import
downward). Library code never prints or exits; only the functions bound here do, and a
``RerouteError`` becomes a one-line message and exit code 1.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points

from services.reroute import __version__
from services.reroute.errors import RerouteError

GROUP = "reroute.commands"
Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


def command_modules() -> list[tuple[str, Register]]:
    """The registered command groups, by name (``importlib.metadata`` entry points)."""
    found = sorted(entry_points(group=GROUP), key=lambda e: e.name)
    if not found:
        raise RerouteError(f"no {GROUP} entry points: install the package (`make setup`)")
    return [(e.name, e.load()) for e in found]


def build_parser() -> argparse.ArgumentParser:
    """The ``reroute`` parser with every registered command group."""
    parser = argparse.ArgumentParser(
        prog="reroute",
        description="Make-before-break reroutes for optical-hybrid fabrics and long-haul links.",
    )
    parser.add_argument("--version", action="version", version=f"reroute {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for _, register in command_modules():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``reroute`` command; return its exit code (errors become one line on stderr)."""
    try:
        parser = build_parser()
    except RerouteError as exc:
        print(f"reroute: error: {exc}", file=sys.stderr)
        return 1
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
