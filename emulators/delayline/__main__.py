"""``python -m emulators.delayline``: run a delay line until SIGTERM or SIGINT.

    python -m emulators.delayline --netns NS --a lh1-p1 --b lh1-p2 --delay-ms 15 \\
        --control 127.0.0.1:0 --ready-file /run/reroute/lh1.port

Started in the root namespace, it binds the control endpoint there, then moves into ``NS``
and opens the packet sockets on ``--a`` and ``--b``. Once both are ready it writes the
control port (one line) into ``--ready-file``; it removes that file when it exits.
Exit status: 0 after a signal, 1 when it cannot start (the reason is logged on stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import signal
import threading
from collections.abc import Sequence
from pathlib import Path

from emulators.daemon import listen_address, write_ready
from emulators.delayline.control import ControlServer
from emulators.delayline.errors import DelayLineError
from emulators.delayline.line import DEFAULT_MAX_QUEUE, DEFAULT_RT_PRIORITY, DelayLine
from emulators.delayline.model import DelayState, update
from emulators.delayline.netns import enter as enter_netns

log = logging.getLogger("reroute.emulators.delayline")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m emulators.delayline",
        description="Userspace long-haul delay line (an ANUE-like network emulator).",
    )
    p.add_argument("--netns", help="network namespace of the interfaces (default: this one)")
    p.add_argument("--a", required=True, metavar="IFACE", help="first interface")
    p.add_argument("--b", required=True, metavar="IFACE", help="second interface")
    p.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay, both ways")
    p.add_argument("--a-to-b-ms", type=float, help="one-way delay a -> b (overrides)")
    p.add_argument("--b-to-a-ms", type=float, help="one-way delay b -> a (overrides)")
    p.add_argument(
        "--max-queue",
        type=_positive,
        default=DEFAULT_MAX_QUEUE,
        metavar="FRAMES",
        help="frames waiting per direction beyond which new ones are dropped (default %(default)s)",
    )
    p.add_argument(
        "--rt-priority",
        type=int,
        default=DEFAULT_RT_PRIORITY,
        metavar="N",
        help="SCHED_FIFO priority of the forwarding thread; 0: none (default %(default)s)",
    )
    p.add_argument(
        "--control",
        type=listen_address,
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="loopback address of the HTTP control endpoint; port 0 picks a free one",
    )
    p.add_argument("--ready-file", type=Path, help="gets the control port once ready")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def _initial_delay(args: argparse.Namespace) -> DelayState:
    given = {"delay_ms": args.delay_ms, "a_to_b_ms": args.a_to_b_ms, "b_to_a_ms": args.b_to_a_ms}
    return update({k: v for k, v in given.items() if v is not None}, DelayState.both(0.0))


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _serve(args: argparse.Namespace, stop: threading.Event) -> None:
    delay = _initial_delay(args)
    with ControlServer.bind(*args.control) as control:
        if args.netns:
            enter_netns(args.netns)
        line = DelayLine.open(
            args.a, args.b, delay=delay, max_queue=args.max_queue, rt_priority=args.rt_priority
        )
        with line:
            gc.freeze()  # what exists now is never collected: no full-collection pauses
            line.start()
            control.serve(line)
            if args.ready_file:
                write_ready(args.ready_file, f"{control.port}\n")
            log.info("forwarding, delay %s, control %s", delay.to_dict(), control.url)
            stop.wait()
            control.close()  # no request may reach the line while it closes


def main(argv: Sequence[str] | None = None) -> int:
    """Run the delay line until SIGTERM or SIGINT; return the exit code."""
    args = _parser().parse_args(argv)
    tag = f"delayline[{os.getpid()}] {args.a}<->{args.b}"
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format=f"%(asctime)s %(levelname)s {tag}: %(message)s",
    )
    stop = _stop_on_signals()
    try:
        _serve(args, stop)
    except DelayLineError as exc:
        log.error("%s", exc)
        return 1
    finally:
        if args.ready_file:
            with contextlib.suppress(FileNotFoundError):
                args.ready_file.unlink()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
