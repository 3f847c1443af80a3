"""``reroute serve``: the HTTP service (``--config FILE``), or its OpenAPI document."""

from __future__ import annotations

import argparse
import logging
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from services.reroute.errors import ConfigError


def _serve(args: argparse.Namespace) -> int:
    from services.reroute.service.app import openapi_json
    from services.reroute.service.config import load_config, resolve
    from services.reroute.service.oplog import LOGGERS
    from services.reroute.service.server import listening_socket, serve

    if args.openapi is not None:
        return _write(openapi_json(), args.openapi)
    if args.config is None:
        raise ConfigError("give --config FILE (its keys: `reroute serve --help`)")
    settings = resolve(load_config(args.config), listen=args.listen)
    for logger in LOGGERS:  # the operator's lines, whatever -v says
        logger.setLevel(min(logger.getEffectiveLevel(), logging.INFO))
    try:
        sock = listening_socket(settings.host, settings.port)
    except OSError as exc:
        given = "--listen" if args.listen else f"{args.config}: listen:"
        raise ConfigError(
            f"{given} cannot listen on {settings.host}:{settings.port}: {exc.strerror} "
            "(another service there? give another HOST:PORT; port 0 picks a free one)"
        ) from exc
    host, port = sock.getsockname()[:2]
    where = f"[{host}]" if ":" in host else host
    inv = settings.inventory.file if settings.inventory else "-"
    url = f"{settings.scheme}://{where}:{port}"
    print(
        f"reroute serve: {url} (fabric {settings.fabric}, inventory {inv}); the page: {url}/ui/",
        flush=True,
    )
    serve(settings, sock)
    return 0


def _write(text: str, target: str) -> int:
    if target == "-":
        sys.stdout.write(text)
    else:
        Path(target).write_text(text)
    return 0


class _HelpWithKeys(argparse._HelpAction):
    """``--help`` that ends with the config file's keys (made from its model when asked:
    the model is not imported for other commands)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        from services.reroute.model.modeldoc import keys_help
        from services.reroute.service.config import ServiceConfig

        parser.epilog = keys_help(ServiceConfig)
        super().__call__(parser, namespace, values, option_string)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``serve`` to the ``reroute`` parser."""
    p = sub.add_parser(
        "serve",
        help="run the HTTP reroute service",
        description=textwrap.fill(
            "Serve the reroute API and the operator's page (/ui/) for the devices of an "
            "inventory (SIGTERM drains gracefully). Logs one line per request and one per "
            "reroute that ends, to stderr.",
            78,
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
    )
    p.add_argument("-h", "--help", action=_HelpWithKeys, help="show this help and the config keys")
    p.add_argument("--config", type=Path, metavar="FILE", help="the service's YAML config")
    p.add_argument("--listen", metavar="HOST:PORT", help="overrides the config's listen")
    p.add_argument(
        "--openapi",
        metavar="FILE",
        help="write the OpenAPI document to FILE ('-': stdout) and exit "
        "(docs/openapi.json is this output)",
    )
    p.set_defaults(func=_serve)
