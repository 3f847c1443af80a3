"""Congestion windows over time: ``ss -tin`` sampled in a host's namespace (seed 002 Fig. 2).

:class:`CwndTrace` runs one shell loop in the sender's namespace for the length of a stream,
printing a timestamp and ``ss -tinH`` of the connections to a destination every interval;
:func:`parse` turns that output into per-socket series of (time, cwnd, rtt). An MPTCP
connection shows as its TCP subflows, one socket each. Pure but for the process.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Iterable
from typing import IO, Any

from fabric.run import in_netns

STAMP = "@@"
_CWND = re.compile(r"\bcwnd:(\d+)")
_RTT = re.compile(r"\brtt:([\d.]+)/")


class CwndTrace:
    """Every ``interval_s``, ``ss -tinH state established dst DST`` in namespace ``ns``
    until left."""

    def __init__(self, ns: str, dst: str, interval_s: float = 0.1) -> None:
        loop = (
            f"while :; do echo {STAMP} $(date +%s.%N); ss -tinH state established dst {dst}; "
            f"sleep {interval_s:g}; done"
        )
        self.cmd = in_netns(ns, ["sh", "-c", loop])
        self.proc: subprocess.Popen[str] | None = None
        self.file: IO[str] | None = None  # a file, not a pipe: nobody reads it meanwhile
        self.output = ""

    def __enter__(self) -> CwndTrace:
        self.file = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(
            self.cmd, stdout=self.file, stderr=subprocess.DEVNULL, text=True
        )
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None and self.file is not None
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.file.seek(0)
        self.output = self.file.read()
        self.file.close()

    def series(self, t0: float) -> dict[str, list[list[float]]]:
        """Per socket (``local > remote``): ``[t - t0, cwnd, rtt_ms]`` samples."""
        return parse(self.output.splitlines(), t0)


def parse(lines: Iterable[str], t0: float) -> dict[str, list[list[float]]]:
    """The samples of ``ss -tinH`` blocks, each after a ``@@ <epoch>`` line."""
    out: dict[str, list[list[float]]] = {}
    now, sock = None, None
    for line in lines:
        if line.startswith(STAMP):
            now, sock = float(line.split()[1]) - t0, None
            continue
        if line and not line[0].isspace():
            ends = [f for f in line.split() if ":" in f]  # local, peer (with or without State)
            sock = f"{ends[0]}>{ends[1]}" if len(ends) >= 2 else None
            continue
        cwnd, rtt = _CWND.search(line), _RTT.search(line)
        if now is None or sock is None or cwnd is None:
            continue
        out.setdefault(sock, []).append(
            [round(now, 3), int(cwnd[1]), float(rtt[1]) if rtt else -1.0]
        )
    return out


def this_connection(series: dict[str, list[list[float]]]) -> dict[str, list[list[float]]]:
    """The sockets seen from t = 0 (the sender's start) on: a previous run's connection
    still closing (its last data draining over a long RTT) shows only before, and is left
    out."""
    return {k: v for k, v in series.items() if any(s[0] >= 0 for s in v)}


def summary(series: dict[str, list[list[float]]]) -> dict[str, Any]:
    """The largest cwnd of each socket and how many sockets there were."""
    return {
        "sockets": len(series),
        "max_cwnd": {k: max(s[1] for s in v) for k, v in series.items()},
    }
