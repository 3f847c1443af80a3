"""The engine's value types: flow specs, intents, strategies. Typed, immutable.

A moved flow is both directions: TCP needs its ACKs, so ``FlowSpec.reverse()`` moves too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

from drivers.base import Prefix
from services.reroute.errors import PlanError

PROTOCOLS = {"tcp": 6, "udp": 17, "icmp": 1}
# the forms of a flow as text; in a shell the first two need quotes (> is a redirect there)
FORMS = "SRC>DST, SRC->DST or src=SRC,dst=DST"
# a host's name in a topology (``vm2``): allowed wherever an address is, once resolved
HOST_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_PROTOCOL_NAMES = {v: k for k, v in reversed(PROTOCOLS.items())}  # the first name of a number


@lru_cache(maxsize=4096)
def _text(prefix: Prefix) -> str:
    """A prefix as text, remembered: 100,000 flows between two hosts share two prefixes."""
    return str(prefix)


class Strategy(StrEnum):
    MBB = "mbb"  # make-before-break: hitless when a temporary path exists
    BBM = "bbm"  # break-before-make: plain switching, disruption declared


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class FlowSpec:
    """Which packets (one direction): IPv4 source/destination, optionally protocol and ports."""

    src: Prefix
    dst: Prefix
    ip_proto: int | None = None
    l4_src: int | None = None
    l4_dst: int | None = None

    def reverse(self) -> FlowSpec:
        """The same flow in the other direction (source and destination swapped)."""
        return FlowSpec(
            src=self.dst,
            dst=self.src,
            ip_proto=self.ip_proto,
            l4_src=self.l4_dst,
            l4_dst=self.l4_src,
        )

    def __str__(self) -> str:
        text = f"{_text(self.src)}>{_text(self.dst)}"
        if self.ip_proto is not None:
            name = _PROTOCOL_NAMES.get(self.ip_proto) or str(self.ip_proto)
            text += f",{name}"
        if self.l4_src is not None:
            text += f",sport={self.l4_src}"
        if self.l4_dst is not None:
            text += f",dport={self.l4_dst}"
        return text

    @classmethod
    def parse(cls, text: str, hosts: Mapping[str, str] | None = None) -> FlowSpec:
        """A flow as text (addresses may carry a prefix), in any of the forms of ``FORMS``:
        ``10.0.0.2>10.0.0.3[,udp][,sport=N][,dport=N]``, the same with ``->``, or
        ``src=10.0.0.2,dst=10.0.0.3[,...]`` (no character a shell treats specially).

        ``hosts``: a topology's host names and their addresses; a name among them stands
        for its address (``vm2>vm3``). Without it only addresses are taken."""
        head, *opts = [p.strip() for p in text.split(",")]
        src, sep, dst = head.partition(">")
        if sep:
            src = src.removesuffix("-")  # SRC->DST
        elif "=" in head or head in PROTOCOLS:
            src, dst, opts = "", "", [head, *opts]  # src=SRC,dst=DST
        else:
            src = src.removesuffix("-")  # SRC alone: a shell took ">DST" (or "->DST")
        try:
            fields: dict[str, int | None] = {"ip_proto": None, "l4_src": None, "l4_dst": None}
            for opt in opts:
                key, _, value = opt.partition("=")
                if key in ("src", "dst") and value:
                    if src if key == "src" else dst:
                        raise ValueError(f"{key} given twice")
                    src, dst = (value, dst) if key == "src" else (src, value)
                elif key in PROTOCOLS and not value:
                    fields["ip_proto"] = PROTOCOLS[key]
                elif key in ("sport", "dport") and value.isdigit() and 0 < int(value) < 65536:
                    fields["l4_src" if key == "sport" else "l4_dst"] = int(value)
                else:
                    raise ValueError(
                        f"unknown option {opt!r} (src=, dst=, tcp, udp, icmp, sport=N, dport=N)"
                    )
            if not src or not dst:
                raise ValueError(f"no {'destination' if src else 'source'}: expected {FORMS}")
            if (fields["l4_src"] or fields["l4_dst"]) and fields["ip_proto"] not in (6, 17):
                raise ValueError("ports need tcp or udp")
            return cls(src=_address(src, hosts), dst=_address(dst, hosts), **fields)
        except ValueError as exc:
            raise PlanError(f"flow {text!r}: {exc}") from exc


def _address(text: str, hosts: Mapping[str, str] | None) -> Prefix:
    if hosts is not None and HOST_NAME.match(text) and text in hosts:
        text = hosts[text]
    elif HOST_NAME.match(text):
        if hosts is None:
            raise ValueError(f"{text!r} is not an IPv4 address or prefix")
        raise ValueError(
            f"{text!r} is not a host of the topology; hosts: {', '.join(sorted(hosts))}"
        )
    try:
        return Prefix.parse(text)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not an IPv4 address or prefix ({exc})") from None


class _AnyHost(Mapping[str, str]):
    """Every host name, standing for a documentation address (RFC 5737)."""

    def __getitem__(self, key: str) -> str:
        if not HOST_NAME.match(key):
            raise KeyError(key)
        return "192.0.2.1"

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


ANY_HOST: Mapping[str, str] = _AnyHost()
"""For ``FlowSpec.parse``: checks a flow's form before the topology that resolves its host
names is at hand (an API request's fields are checked before the engine sees them)."""


def lacks_destination(text: str) -> bool:
    """``text`` names no destination: how a flow arrives when a shell took its ``>``."""
    return ">" not in text and "dst=" not in text


DEFAULT_LOCK_TIMEOUT_S = 3.0
"""An optical move's lock wait when its intent names none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Intent:
    """Move ``flows`` (and their reverse directions) onto path ``to_path``."""

    flows: tuple[FlowSpec, ...]
    to_path: str
    strategy: Strategy = Strategy.MBB
    # wait before removing old rules; None: derived from the old paths' delay (planner.drain_for)
    drain_s: float | None = None
    bbm_gap_s: float = 0.0  # BBM only: extra outage between break and make (experiments)
    via: str | None = None  # optical MBB: the temporary path the flows wait on
    # optical: longest wait for the new circuit's transceivers; None: DEFAULT_LOCK_TIMEOUT_S
    # (a move with no optical step refuses any other value: it waits for no lock)
    lock_timeout_s: float | None = None
