"""``reroute monitor rtt|loss|throughput``: watch a connection from a host, fail over on
degradation through the site's reroute service.

    reroute monitor rtt --netns rr-two-site.h1 --target 10.10.0.2 --trigger 10 --clear 5 \\
        --api http://127.0.0.1:8081 --token-file site1.token \\
        --flow '10.10.0.1>10.10.0.2' --to standby

Prints one JSON line per trigger and failover (and per sample with ``--verbose``).
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable
from ipaddress import IPv4Address
from pathlib import Path
from typing import TYPE_CHECKING

from services.reroute.cli import flowarg
from services.reroute.cli.flowarg import parse_flows
from services.reroute.errors import ApiError
from services.reroute.monitor.detector import Detector, Sense, Thresholds
from services.reroute.monitor.runner import Event, Failover, Sampler, run
from services.reroute.monitor.samplers import LossWindow, Pinger, RxRate

if TYPE_CHECKING:
    from services.reroute.service.client import RerouteClient

DEFAULTS = {  # kind -> (trigger, clear, unit)
    "rtt": (10.0, 5.0, "ms"),
    "loss": (0.2, 0.0, "fraction of the last 10 echoes"),
    "throughput": (10e6, 50e6, "bit/s received"),
}


def _sampler(args: argparse.Namespace) -> Sampler:
    if args.kind == "throughput":
        return RxRate(args.netns, args.iface)
    if args.target is None:
        raise SystemExit(f"reroute monitor {args.kind}: --target IP is required")
    pinger = Pinger(args.netns, IPv4Address(args.target), args.timeout_ms / 1000)
    return pinger if args.kind == "rtt" else LossWindow(pinger)


def _fire(args: argparse.Namespace, flows: list[str]) -> Callable[[int], Failover]:
    from services.reroute.service.client import RerouteClient

    token = args.token or (Path(args.token_file).read_text().strip() if args.token_file else "")
    if (args.cert is None) != (args.key is None):
        raise SystemExit(f"reroute monitor {args.kind}: --cert and --key go together")
    cert = (args.cert, args.key) if args.cert else None
    client = RerouteClient(args.api, token, retries=args.retries, ca=args.cacert, cert=cert)
    await_service(client, args.api, args.api_wait_s)  # and warm the connection for the failover
    run_id = args.id or uuid.uuid4().hex[:8]

    def fire(n: int) -> Failover:
        """Ask the service for the failover reroute (attempt ``n``) and wait for its end."""
        view = client.create(
            flows,
            args.to,
            strategy=args.strategy,
            idempotency_key=f"monitor-{run_id}-{n}",  # one degradation, one reroute
            wait_s=args.wait_s,
        )
        return Failover(reroute=view.id, state=view.state)

    return fire


def await_service(client: RerouteClient, url: str, wait_s: float) -> None:
    """Until the service answers ``/healthz`` (it may still be starting: a monitor started
    beside its service), at most ``wait_s``; a wrong URL fails after that, an answer that
    is an error (a wrong token, say) at once."""
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        try:
            client.health()
            return
        except ApiError as exc:
            if not exc.is_unavailable or time.monotonic() >= deadline:
                raise
            if not said:
                print(f"monitor: waiting up to {wait_s:g} s for {url} to answer", file=sys.stderr)
                said = True
        time.sleep(0.2)


def _run(args: argparse.Namespace) -> int:
    trigger, clear, _ = DEFAULTS[args.kind]
    thresholds = Thresholds(
        trigger=trigger if args.trigger is None else args.trigger,
        clear=clear if args.clear is None else args.clear,
        samples=args.samples,
        hold_down_s=args.hold_down_s,
        sense=Sense.LOW_IS_BAD if args.kind == "throughput" else Sense.HIGH_IS_BAD,
    )
    flows = [str(f) for f in parse_flows(args.flow, "10.10.0.1", "10.10.0.2")]

    def emit(event: Event) -> None:
        """Print one monitor event as a JSON line."""
        print(event.to_json(), flush=True)

    fired = run(
        _sampler(args),
        Detector(thresholds),
        _fire(args, flows),
        emit,
        rate_hz=args.rate_hz,
        duration_s=args.duration_s,
        once=args.once,
        verbose=args.verbose,
    )
    print(f"monitor done: {fired} failover(s)", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``monitor`` to the ``reroute`` parser."""
    p = sub.add_parser(
        "monitor",
        help="watch rtt, loss or throughput from a host and fail over on degradation",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("kind", choices=sorted(DEFAULTS))
    p.add_argument("--netns", help="the host's network namespace (default: this one)")
    p.add_argument("--target", help="rtt/loss: the peer to send ICMP echoes to")
    p.add_argument("--iface", default="eth0", help="throughput: the interface to watch")
    units = "; ".join(f"{k}: {t} / {c} {u}" for k, (t, c, u) in DEFAULTS.items())
    p.add_argument("--trigger", type=float, help=f"degraded beyond this ({units})")
    p.add_argument("--clear", type=float, help="re-armed once back beyond this (hysteresis)")
    p.add_argument("--samples", type=int, default=3, help="consecutive bad samples to fire")
    p.add_argument("--hold-down-s", type=float, default=5.0, help="quiet time after a trigger")
    p.add_argument("--rate-hz", type=float, default=50.0, help="samples per second (>= 10)")
    p.add_argument("--timeout-ms", type=float, default=200.0, help="echo reply timeout")
    p.add_argument("--api", required=True, metavar="URL", help="the site's reroute service")
    p.add_argument("--token", help="bearer token (operator role)")
    p.add_argument("--token-file", help="file holding the bearer token")
    p.add_argument("--cacert", type=Path, metavar="FILE", help="HTTPS: the service's CA (PEM)")
    p.add_argument("--cert", type=Path, metavar="FILE", help="HTTPS: client certificate (PEM)")
    p.add_argument("--key", type=Path, metavar="FILE", help="HTTPS: its private key (PEM)")
    p.add_argument(
        "--flow", action="append", default=[], metavar=flowarg.METAVAR, help=flowarg.HELP
    )
    p.add_argument("--to", required=True, metavar="PATH", help="the standby path")
    p.add_argument("--strategy", choices=["mbb", "bbm"], default="mbb")
    p.add_argument("--wait-s", type=float, default=5.0, help="wait for the reroute to finish")
    p.add_argument("--retries", type=int, default=3)
    p.add_argument(
        "--api-wait-s",
        type=float,
        default=30.0,
        help="at start, how long to wait for the service to answer (it may be starting too)",
    )
    p.add_argument("--id", help="monitor id in idempotency keys (default: random)")
    p.add_argument("--duration-s", type=float, help="stop after this long (default: never)")
    p.add_argument("--once", action="store_true", help="stop after the first failover")
    p.add_argument("--verbose", action="store_true", help="print every sample too")
    p.set_defaults(func=_run)
