"""The SCPI text of a Polatis optical switch: pure formatters and parsers, no I/O.

Commands are formatted without their line terminator (the session adds ``\\n``); replies
are parsed after the session stripped ``\\r\\n``. Port lists are SCPI channel lists:
``(@1,2,3)``, empty ``(@)``; ranges ``(@1:3)`` are accepted in replies.

A reply that does not parse raises ``MalformedReply`` (a ``ProtocolError``) carrying the
raw reply; the parsers do not know the device, so they name it ``scpi`` and the driver
re-raises under its own name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from drivers.errors import ProtocolError

IDN = "*IDN?"
SIZE = ":OXC:SWIT:SIZE?"
STATE = ":OXC:SWIT:CONN:STAT?"
ERROR = "SYST:ERR?"
NO_ERROR = 0
NO_POWER_MONITORS = ("I-OST",)  # product families without power monitors (PROTOCOLS.md)

_PRODUCT_SIZE = re.compile(r"-(\d+)x(\d+)-", re.IGNORECASE)
_ERROR = re.compile(r"^\s*([+-]?\d+)\s*,\s*(.*?)\s*$", re.DOTALL)
_QUEUED = re.compile(r'^\s*[+-]?\d+\s*,\s*".*"\s*$', re.DOTALL)  # a SYST:ERR? reply
_LIST = re.compile(r"\(@([^()]*)\)")


class MalformedReply(ProtocolError):
    """A reply that does not parse as ``what``; ``raw`` is the reply as received."""

    def __init__(self, what: str, raw: str, device: str = "scpi") -> None:
        self.what = what
        self.raw = raw
        super().__init__(device, f"malformed {what} reply: {raw!r}")

    def renamed(self, device: str) -> MalformedReply:
        """The same error naming ``device``."""
        return MalformedReply(self.what, self.raw, device)


@dataclass(frozen=True, slots=True, kw_only=True)
class Identity:
    """``*IDN?``: vendor, product code, serial, firmware; the NxM size when the code has it."""

    vendor: str
    product: str
    serial: str
    firmware: str
    size: tuple[int, int] | None = None

    def __str__(self) -> str:
        """As a person reads it: ``Polatis N-VST-192x192-LA1, serial 001705, firmware 6.5.1.7``."""
        return f"{self.vendor} {self.product}, serial {self.serial}, firmware {self.firmware}"

    @property
    def power_monitors(self) -> bool:
        """Whether the model has optical power monitors (``:PMON:POW?``): not the families
        in ``NO_POWER_MONITORS``, known by the product code's start."""
        code = self.product.upper()
        return not any(code == f or code.startswith(f"{f}-") for f in NO_POWER_MONITORS)


# --------------------------------------------------------------------------------------
# formatting


def port_list(ports: Iterable[int]) -> str:
    """``[1, 2, 3]`` -> ``(@1,2,3)``; nothing -> ``(@)``."""
    return "(@" + ",".join(str(p) for p in ports) + ")"


def add_command(pairs: Sequence[tuple[int, int]]) -> str:
    """Connect the i-th ingress to the i-th egress, keeping all other connections."""
    return f":OXC:SWIT:CONN:ADD {_pair_lists(pairs)}"


def sub_command(ingresses: Sequence[int]) -> str:
    """Remove every connection of these ingress ports (empty egress list = all of them)."""
    return f":OXC:SWIT:CONN:SUB {port_list(ingresses)},(@)"


def peer_query(port: int) -> str:
    """The query of the port connected to ``port``."""
    return f":OXC:SWIT:CONN:PORT? {port}"


def power_query(ports: Sequence[int]) -> str:
    """The optical power query of ``ports``."""
    return f":PMON:POW? {port_list(ports)}"


def _pair_lists(pairs: Sequence[tuple[int, int]]) -> str:
    return port_list(i for i, _ in pairs) + "," + port_list(e for _, e in pairs)


# --------------------------------------------------------------------------------------
# parsing


def parse_port_list(text: str) -> list[int]:
    """``(@1,2,3)`` -> ``[1, 2, 3]``; ``(@)`` -> ``[]``; ``(@4:6)`` -> ``[4, 5, 6]``."""
    match = _LIST.fullmatch(text.strip())
    if match is None:
        raise MalformedReply("port list", text)
    body = match.group(1).strip()
    if not body:
        return []
    try:
        return [p for item in body.split(",") for p in _port_item(item)]
    except ValueError:
        raise MalformedReply("port list", text) from None


def _port_item(item: str) -> range:
    first, sep, last = item.partition(":")
    low = int(first)
    high = int(last) if sep else low
    if low <= 0 or high < low:
        raise ValueError(item)
    return range(low, high + 1)


def parse_connections(reply: str) -> dict[int, int]:
    """``(@1,2),(@19,18)`` -> ``{1: 19, 2: 18}``; ``(@),(@)`` -> ``{}``."""
    lists = _LIST.findall(reply)
    if len(lists) != 2 or _LIST.sub("", reply).strip() != ",":
        raise MalformedReply("connection state", reply)
    try:
        ingress, egress = (parse_port_list(f"(@{body})") for body in lists)
    except MalformedReply:
        raise MalformedReply("connection state", reply) from None
    if len(ingress) != len(egress) or len(set(ingress)) != len(ingress):
        raise MalformedReply("connection state", reply)
    return dict(zip(ingress, egress, strict=True))


def parse_peer(reply: str) -> int | None:
    """``"18"`` -> 18; ``""`` -> None (the port is not connected)."""
    text = reply.strip()
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        raise MalformedReply("port peer", reply)
    inner = text[1:-1].strip()
    if not inner:
        return None
    if not inner.isdigit() or int(inner) <= 0:
        raise MalformedReply("port peer", reply)
    return int(inner)


def parse_identity(reply: str) -> Identity:
    """``Polatis,N-VST-16x16-LA1-EMUL-701,EMU0001,6.5.1.7`` -> ``Identity``."""
    fields = [f.strip() for f in reply.strip().split(",")]
    if len(fields) != 4 or not all(fields[:2]):
        raise MalformedReply("*IDN?", reply)
    vendor, product, serial, firmware = fields
    size = _PRODUCT_SIZE.search(product)
    return Identity(
        vendor=vendor,
        product=product,
        serial=serial,
        firmware=firmware,
        size=(int(size.group(1)), int(size.group(2))) if size else None,
    )


def parse_size(reply: str) -> tuple[int, int]:
    """``16,16`` -> ``(16, 16)`` (ingress ports N, egress ports M)."""
    fields = reply.strip().split(",")
    try:
        n, m = (int(f) for f in fields)
    except ValueError:
        raise MalformedReply("switch size", reply) from None
    if n <= 0 or m <= 0:
        raise MalformedReply("switch size", reply)
    return n, m


def parse_powers(ports: Sequence[int], reply: str) -> dict[int, float]:
    """``(-2.31,-55.00)`` for ports ``[17, 18]`` -> ``{17: -2.31, 18: -55.0}``."""
    body = reply.strip()
    if body.startswith("(") and body.endswith(")"):
        body = body[1:-1]
    try:
        values = [float(v) for v in body.split(",")] if body.strip() else []
    except ValueError:
        raise MalformedReply("optical power", reply) from None
    if len(values) != len(ports):
        raise MalformedReply(f"optical power of {len(ports)} ports", reply)
    return dict(zip(ports, values, strict=True))


def is_error_reply(reply: str) -> bool:
    """Whether ``reply`` is a ``SYST:ERR?`` reply (a code, a comma, a quoted message): no
    reply to the queries the driver asks looks so, so a query the device did not answer
    (SCPI: a failing query sends nothing, its error is queued) shows as its ``SYST:ERR?``."""
    return _QUEUED.match(reply) is not None


def parse_error(reply: str) -> tuple[int, str]:
    """``-222,"Data out of range"`` (or with a space after the comma) -> ``(-222, "...")``.

    The message loses its quotes; an unquoted message is taken as it is."""
    match = _ERROR.match(reply)
    if match is None:
        raise MalformedReply("SYST:ERR?", reply)
    message = match.group(2)
    if len(message) >= 2 and message[0] == message[-1] == '"':
        message = message[1:-1]
    return int(match.group(1)), message
