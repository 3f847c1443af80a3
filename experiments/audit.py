"""The audit sample: packet captures kept for the first repetitions of each arm, and the
check that recomputes their numbers from them.

A repetition whose key ends in ``-NN`` with NN <= ``AUDIT_REPS`` (``bbm-01`` .. ``bbm-03``,
``dpctl-mbb-02``, ``bbm-rto900-01``, ``rate0060-03``) keeps its sender's and receiver's
captures as ``OUT/pcaps/<key>-<host>.pcap.gz``: headers only (each frame cut after its TCP
header, :func:`experiments.tcpcap.headers_only`), gzip-compressed; the raw document's
``capture`` names them (``pcaps``) and records what the analysis was given (``analysis``).
:func:`recheck` runs :func:`experiments.capture.analyse` on them again and lists every number
that differs from the raw document, so that how a retransmission was classified, or where an
unavailability began, can be read from the packets themselves (``tshark -r``, ``tcpdump
-r``) and the numbers traced to them.
"""

from __future__ import annotations

import gzip
import math
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from experiments import capture, tcpcap

AUDIT_REPS = 3  # the first repetitions of each arm whose captures are kept
DIR = "pcaps"
_KEEPING: ContextVar[tuple[Path, str] | None] = ContextVar("audit_keeping", default=None)
_INDEX = re.compile(r"-(\d+)$")
_SWEPT = re.compile(r"^[a-z]+\d+(\.\d+)?$")  # a swept value: lock00100, rto900, rate0060


def index(key: str) -> int | None:
    """The repetition's number within its arm (``bbm-03`` -> 3), None if the key has none."""
    m = _INDEX.search(key)
    return int(m[1]) if m else None


def sampled(key: str) -> bool:
    """Whether repetition ``key`` is in the audit sample."""
    i = index(key)
    return i is not None and i <= AUDIT_REPS


def arm(key: str) -> str:
    """What the committed sample counts repetitions in: the key without its number and
    without a sweep's value (``lock00100-bbm-01`` and ``lock00800-bbm-02`` -> ``bbm``;
    ``dpctl-mbb-02`` -> ``dpctl-mbb``; ``bbm-rto900-01`` -> ``bbm``; ``rate0060-03`` -> "")."""
    words = _INDEX.sub("", key).split("-")
    return "-".join(w for w in words if not _SWEPT.match(w))


def committed(keys: Iterable[str]) -> set[str]:
    """Of the sampled repetitions ``keys``, those whose captures a full run commits: the first
    ``AUDIT_REPS`` of each :func:`arm`, first numbers first (a sweep's first repetition of
    each value before any second one), so that a sweep of 5 values commits 3 captures per
    strategy and not 15 (its other captures stay in the part's own output)."""
    by_arm: dict[str, list[str]] = {}
    for key in sorted((k for k in keys if sampled(k)), key=lambda k: (index(k), k)):
        by_arm.setdefault(arm(key), []).append(key)
    return {k for chosen in by_arm.values() for k in chosen[:AUDIT_REPS]}


def missing(out: Path, raw: Mapping[str, Any]) -> bool:
    """Whether a repetition names captures that are not under ``out`` (outside what was
    committed): :func:`recheck` leaves it out."""
    files = (raw.get("capture") or {}).get("pcaps") or []
    return any(not (out / rel).exists() for rel in files)


@contextmanager
def keeping(out: Path, key: str) -> Iterator[None]:
    """Inside, :func:`keep` keeps captures of repetition ``key`` under ``out/pcaps`` if the
    repetition is in the sample (the runner wraps every repetition in it)."""
    token = _KEEPING.set((out / DIR, key) if sampled(key) else None)
    try:
        yield
    finally:
        _KEEPING.reset(token)


def keep(pcap: Path, host: str) -> str | None:
    """Keep ``pcap`` (headers only, gzip) as the current repetition's capture at ``host``;
    its path relative to the output directory, or None outside the sample."""
    where = _KEEPING.get()
    if where is None:
        return None
    into, key = where
    into.mkdir(parents=True, exist_ok=True)
    name = f"{key}-{host}.pcap.gz"
    with (
        tempfile.NamedTemporaryFile(dir=into, prefix=f".{name}.", delete=False) as tmp,
        gzip.GzipFile(fileobj=tmp, mode="wb", compresslevel=6, mtime=0) as gz,  # 9: 3x slower
    ):
        tcpcap.headers_only(pcap, gz)
    os.replace(tmp.name, into / name)
    return f"{DIR}/{name}"


def recheck(out: Path, raws: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """For every raw document with kept captures: the capture numbers recomputed from them
    that differ from the document's (empty lists: all agree), by key."""
    found: dict[str, list[str]] = {}
    for key, raw in raws.items():
        doc = raw.get("capture") or {}
        files, given = doc.get("pcaps"), doc.get("analysis")
        if not files or not given or missing(out, raw):
            continue
        with tempfile.TemporaryDirectory(prefix="reroute-audit-") as tmp:
            plain = []
            for i, rel in enumerate(files):
                path = Path(tmp) / f"{i}.pcap"
                with gzip.open(out / rel, "rb") as src, path.open("wb") as dst:
                    shutil.copyfileobj(src, dst)
                plain.append(path)
            dropped = given.get("dropped") or [None, None]
            again = capture.analyse(
                plain[0],
                plain[1],
                port=int(given["port"]),
                request_t=float(given["request_t"]),
                rtt_window_s=float(given["rtt_window_s"]),
                gap_window_s=float(given["gap_window_s"]),
                dropped=(dropped[0], dropped[1]),
            )
        found[key] = [
            f"{name}: raw {doc.get(name)!r}, pcaps {value!r}"
            for name, value in again.items()
            if name not in ("pcaps", "analysis") and not _same(doc.get(name), value)
        ]
    return found


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
