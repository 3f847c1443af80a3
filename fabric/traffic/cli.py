"""``reroute probe send|recv``: the sequence-numbered UDP probe from the command line.

Run the receiver first (it says ``listening on HOST:PORT`` on stderr once bound), then the
sender, each in its namespace if need be::

    ip netns exec B reroute probe recv --bind 10.0.0.2:9000 --json > probe.json &
    ip netns exec A reroute probe send --to 10.0.0.2:9000 --rate 10000 --duration 5
"""

from __future__ import annotations

import argparse
import sys

from fabric.traffic.analysis import ProbeReport
from fabric.traffic.probe import ProbeReceiver, parse_hostport, send_probes


def _send(args: argparse.Namespace) -> int:
    host, port = parse_hostport(args.to)
    result = send_probes(
        host,
        port,
        rate_pps=args.rate,
        duration_s=args.duration,
        size=args.size,
        run_id=args.run_id,
    )
    print(
        f"sent={result.count} run_id={result.run_id} elapsed_s={result.elapsed_s:.3f}"
        f" send_errors={result.send_errors} end_sent={result.end_sent}"
    )
    return 0


def _recv(args: argparse.Namespace) -> int:
    host, port = parse_hostport(args.bind)
    with ProbeReceiver(host, port, run_id=args.run_id) as receiver:
        bound_host, bound_port = receiver.address
        print(f"listening on {bound_host}:{bound_port}", file=sys.stderr, flush=True)
        result = receiver.receive(timeout_s=args.timeout, idle_s=args.idle)
    report = result.analyze(bin_ms=args.bin_ms)
    print(report.to_json(indent=2) if args.json else summary(report))
    if not result.arrivals and not result.end_seen:
        print("reroute: no probe datagrams received", file=sys.stderr)
        return 1
    return 0


def summary(report: ProbeReport) -> str:
    """A few readable lines about one probe run."""
    run = "?" if report.run_id is None else f"{report.run_id:#x}"
    lines = [
        f"run {run}: sent {report.sent}, received {report.received}, lost {report.lost}"
        f" ({report.loss_ratio:.3%}), duplicated {report.duplicated},"
        f" reordered {report.reordered}"
    ]
    if not report.end_seen:
        lines.append("END not seen: 'sent' is a lower bound (highest sequence number + 1)")
    if (gap := report.longest_gap) is not None:
        at = (gap.start_ns - report.rate.start_ns) / 1e9
        lines.append(
            f"longest gap {gap.ms:.3f} ms after seq {gap.last_seq_before}"
            f" (next seq {gap.first_seq_after}), {at:.3f} s into the run"
        )
    if (delay := report.delay) is not None:
        lines.append(
            f"one-way delay min {delay.min_ms:.3f} / avg {delay.avg_ms:.3f}"
            f" / max {delay.max_ms:.3f} ms"
        )
    if rates := report.rate.rates_pps():
        lines.append(
            f"rate per {report.rate.bin_ms:g} ms bin: min {min(rates):.0f}"
            f" / max {max(rates):.0f} pps over {len(rates)} bins"
        )
    return "\n".join(lines)


def _run_id(text: str) -> int:
    return int(text, 0)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``probe send|recv`` to the ``reroute`` parser."""
    probe = sub.add_parser("probe", help="sequence-numbered UDP probe: exact loss and gaps")
    psub = probe.add_subparsers(dest="probe_command", required=True, metavar="ACTION")
    send = psub.add_parser("send", help="send paced probes, then END; prints the count sent")
    send.add_argument("--to", required=True, metavar="HOST:PORT")
    send.add_argument("--rate", type=float, default=5000.0, metavar="PPS", help="default 5000")
    send.add_argument("--duration", type=float, required=True, metavar="S")
    send.add_argument("--size", type=int, default=64, metavar="B", help="UDP payload, default 64")
    send.add_argument("--run-id", type=_run_id, metavar="N", help="default: random 64-bit")
    send.set_defaults(func=_send)
    recv = psub.add_parser("recv", help="receive one run and report loss, gaps, delay")
    recv.add_argument("--bind", required=True, metavar="HOST:PORT")
    recv.add_argument("--timeout", type=float, default=60.0, metavar="S", help="default 60")
    recv.add_argument("--idle", type=float, default=5.0, metavar="S", help="stop after S silent")
    recv.add_argument("--run-id", type=_run_id, metavar="N", help="default: the first run heard")
    recv.add_argument("--bin-ms", type=float, default=10.0, metavar="MS", help="rate bin")
    recv.add_argument("--json", action="store_true", help="print the report as JSON")
    recv.set_defaults(func=_recv)
