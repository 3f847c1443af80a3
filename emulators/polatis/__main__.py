"""``python -m emulators.polatis``: run a Polatis SCPI EMULATOR until SIGTERM or SIGINT.

    python -m emulators.polatis --listen 127.0.0.1:0 --size 16x16 --connect 2:17,1:18 \\
        --switch-ms 25 --lock-ms table --seed 1 --ready-file /run/x/polatis.port

Once listening it writes the bound port to ``--ready-file`` (atomically), so a parent can
wait for the file. Another module can serve a real ``Layer1`` with options of its own::

    parser = argparse.ArgumentParser(prog="python -m fabric.polatis_l1")
    parser.add_argument("--fabric", required=True)
    main(argv, lambda args: FabricLayer1(args.fabric), parser=parser)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from collections.abc import Callable

from emulators.daemon import announce, daemon_options, listen_address, run_daemon, stop_requested
from emulators.polatis.emulator import (
    EmulatorConfig,
    FixedLock,
    Layer1,
    LockModel,
    NullLayer1,
    QuantileLock,
)
from emulators.polatis.server import EmulatorServer, PolatisEmulator

log = logging.getLogger("reroute.emulators.polatis")

Layer1Factory = Callable[[argparse.Namespace], Layer1]


def switch_size(text: str) -> tuple[int, int]:
    """``16x16`` -> ``(16, 16)``."""
    n, sep, m = text.lower().partition("x")
    if not sep or not n.isdigit() or not m.isdigit() or int(n) < 1 or int(m) < 1:
        raise argparse.ArgumentTypeError(f"expected NxM, got {text!r}")
    return int(n), int(m)


def connection_pairs(text: str) -> tuple[tuple[int, int], ...]:
    """``2:17,1:18`` -> ``((2, 17), (1, 18))``; empty -> ``()``."""
    pairs = []
    for item in filter(None, (i.strip() for i in text.split(","))):
        i, sep, e = item.partition(":")
        if not sep or not i.isdigit() or not e.isdigit():
            raise argparse.ArgumentTypeError(f"expected INGRESS:EGRESS,..., got {text!r}")
        pairs.append((int(i), int(e)))
    return tuple(pairs)


def lock_model(text: str) -> LockModel:
    """``table`` (seed 003 Table 4.3) or a fixed time in ms."""
    if text.lower() == "table":
        return QuantileLock()
    try:
        ms = float(text)
    except ValueError:
        ms = -1.0
    if not 0 <= ms < float("inf"):
        raise argparse.ArgumentTypeError(f"expected 'table' or milliseconds >= 0, got {text!r}")
    return FixedLock(ms=ms)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the emulator's options to ``parser``."""
    add = parser.add_argument
    add("--listen", type=listen_address, default=("127.0.0.1", 5025), metavar="HOST:PORT")
    add("--size", type=switch_size, default=(16, 16), metavar="NxM")
    add("--connect", type=connection_pairs, default=(), metavar="I:E,...", help="lit at start")
    add("--switch-ms", type=float, default=25.0, help="MEMS switching time")
    add(
        "--lock-ms",
        type=lock_model,
        default=QuantileLock(),
        metavar="table|MS",
        help="receiver lock time (default: table = seed 003 Table 4.3)",
    )
    add("--seed", type=int, default=0, help="seed of the lock-time and power draws")
    add("--model", default="N-VST", help="product family *IDN? names (I-OST: no power monitors)")
    add("--no-power-monitors", action="store_true", help="a unit without power monitors")
    daemon_options(parser, "write the bound port here once listening")


def config_from(args: argparse.Namespace) -> EmulatorConfig:
    """The emulator configuration of parsed arguments (ValueError if inconsistent)."""
    n, m = args.size
    return EmulatorConfig(
        ingress=n,
        egress=m,
        connections=args.connect,
        switch_ms=args.switch_ms,
        lock=args.lock_ms,
        seed=args.seed,
        model=args.model,
        monitors=not args.no_power_monitors,
    )


def main(
    argv: list[str] | None = None,
    layer1_factory: Layer1Factory | None = None,
    *,
    parser: argparse.ArgumentParser | None = None,
) -> int:
    """Parse, serve until SIGTERM/SIGINT, return 0. A caller with options of its own (for
    its ``layer1_factory``) passes a ``parser`` that has them; ``add_arguments`` is added."""
    parser = parser or argparse.ArgumentParser(
        prog="python -m emulators.polatis",
        description="Run an EMULATOR of a Polatis optical switch's SCPI interface.",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        config = config_from(args)
    except ValueError as exc:
        parser.error(str(exc))
    return run_daemon(args, lambda a: _run(a, config, layer1_factory))


async def _run(
    args: argparse.Namespace, config: EmulatorConfig, layer1_factory: Layer1Factory | None
) -> int:
    layer1 = layer1_factory(args) if layer1_factory else NullLayer1()
    emulator = PolatisEmulator(config, layer1)
    server = EmulatorServer(emulator)
    stop = stop_requested()
    try:
        await emulator.start()
        port = await server.start(*args.listen)
        announce(args.ready_file, f"{port}\n")
        await stop.wait()
        log.info("stopping")
    finally:
        await server.close()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().remove_signal_handler(sig)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
