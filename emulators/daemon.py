"""The daemon's side of the fabric's helper-daemon protocol (``fabric.daemons`` starts and
stops them), one copy for every EMULATOR's ``__main__``: ``daemon_options``
(``--ready-file``, ``--log-level``), ``listen_address`` (its ``--listen`` argument),
``run_daemon`` (logging, then its coroutine), ``listen_socket``, ``announce`` /
``write_ready`` (the ready file, written atomically), ``stop_requested`` (SIGTERM / SIGINT
as an asyncio event) and ``exit_now`` (for daemons with threads that cannot be stopped).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, NoReturn


def listen_address(text: str) -> tuple[str, int]:
    """argparse type: ``127.0.0.1:5025`` -> ``("127.0.0.1", 5025)``; port 0 = any free one."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def write_ready(path: Path, text: str) -> None:
    """Write the ready file atomically: the parent never reads half of it."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def stop_requested() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT (call inside the daemon's running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def daemon_options(p: argparse.ArgumentParser, ready: str) -> argparse.ArgumentParser:
    """Add the options every daemon takes: ``--ready-file`` (help text ``ready``) and
    ``--log-level``."""
    p.add_argument("--ready-file", type=Path, help=ready)
    p.add_argument("--log-level", default="INFO", choices=LOG_LEVELS)
    return p


def run_daemon(
    args: argparse.Namespace, serve: Callable[[argparse.Namespace], Coroutine[Any, Any, int]]
) -> int:
    """Set up logging at ``args.log_level``, then run ``serve(args)`` to its exit code."""
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s: %(message)s")
    return asyncio.run(serve(args))


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host:port`` (port 0: any free one)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


def announce(ready_file: Path | None, text: str) -> None:
    """Tell the parent the daemon serves: ``text`` into its ready file, if it gave one."""
    if ready_file is not None:
        write_ready(ready_file, text)


def exit_now(code: int) -> NoReturn:
    """Flush logs and standard streams, then end the process at once (``os._exit``): for
    daemons with native threads that cannot be stopped (os-ken's listener)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
