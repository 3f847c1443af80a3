"""The delay line's values: the delay of each direction, the counters, and PUT validation.

Everything here is pure: :func:`parse_update` turns a PUT body and the current state into the
new state, or raises :class:`Refused` whose ``field`` names the field at fault.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Self

from emulators.delayline.errors import Refused

MAX_DELAY_MS = 10_000.0
BOTH = "delay_ms"
A_TO_B, B_TO_A = "a_to_b", "b_to_a"
FIELDS = (BOTH, f"{A_TO_B}_ms", f"{B_TO_A}_ms")


@dataclass(frozen=True, slots=True, kw_only=True)
class DelayState:
    """One-way delay of each direction. ``delay_ms`` is their mean: RTT grows by 2x it."""

    a_to_b_ms: float
    b_to_a_ms: float

    @classmethod
    def both(cls, delay_ms: float) -> Self:
        """The same delay both ways."""
        return cls(a_to_b_ms=delay_ms, b_to_a_ms=delay_ms)

    @property
    def delay_ms(self) -> float:
        """The mean of the two directions' delays."""
        return (self.a_to_b_ms + self.b_to_a_ms) / 2

    def to_dict(self) -> dict[str, float]:
        """The delays as the control API's JSON object."""
        return {BOTH: self.delay_ms, "a_to_b_ms": self.a_to_b_ms, "b_to_a_ms": self.b_to_a_ms}

    @classmethod
    def from_dict(cls, doc: object) -> Self:
        """The state a ``GET /delay`` answered; ValueError if it is not one."""
        if not isinstance(doc, dict):
            raise ValueError("the delay is not a JSON object")
        return cls(
            a_to_b_ms=_number(doc.get("a_to_b_ms"), "a_to_b_ms"),
            b_to_a_ms=_number(doc.get("b_to_a_ms"), "b_to_a_ms"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DirectionStats:
    """Counters of one direction since start. ``late_*`` is how long after its due time a
    frame really left (the release error); ``dropped_kernel`` counts frames the kernel could
    not hand to the delay line (its socket buffer was full)."""

    delay_ms: float
    forwarded: int
    bytes: int
    queued: int
    dropped_queue_full: int
    dropped_send_error: int
    dropped_kernel: int
    late_mean_us: float
    late_max_us: float
    late_over_1ms: int

    @property
    def dropped(self) -> int:
        """All packets dropped, for any reason."""
        return self.dropped_queue_full + self.dropped_send_error + self.dropped_kernel

    @classmethod
    def from_dict(cls, doc: object) -> Self:
        """The counters of a JSON object (ValueError unless it has exactly the fields)."""
        if not isinstance(doc, dict) or set(doc) != {f.name for f in fields(cls)}:
            raise ValueError("direction stats have missing or unknown fields")
        return cls(**doc)


@dataclass(frozen=True, slots=True, kw_only=True)
class LineStats:
    a_to_b: DirectionStats
    b_to_a: DirectionStats

    def to_dict(self) -> dict[str, Any]:
        """The counters as a JSON object."""
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: object) -> Self:
        """The counters of a JSON object (ValueError if malformed)."""
        if not isinstance(doc, dict):
            raise ValueError("the stats are not a JSON object")
        return cls(
            a_to_b=DirectionStats.from_dict(doc.get(A_TO_B)),
            b_to_a=DirectionStats.from_dict(doc.get(B_TO_A)),
        )


def parse_update(body: bytes, current: DelayState) -> DelayState:
    """The state a ``PUT /delay`` body asks for (see :func:`update`)."""
    return update(_json_object(body), current)


def update(doc: Mapping[str, object], current: DelayState) -> DelayState:
    """``current`` changed by ``doc``: ``delay_ms`` sets both directions, then ``a_to_b_ms`` /
    ``b_to_a_ms`` set one each. Rejects the whole of ``doc`` on any bad field."""
    ms = {key: _checked(key, value) for key, value in doc.items()}
    both = ms.get(BOTH)
    return DelayState(
        a_to_b_ms=ms.get("a_to_b_ms", current.a_to_b_ms if both is None else both),
        b_to_a_ms=ms.get("b_to_a_ms", current.b_to_a_ms if both is None else both),
    )


def _json_object(body: bytes) -> dict[str, object]:
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _rejected("body", f"not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise _rejected("body", 'expected a JSON object such as {"delay_ms": 40}')
    if not doc:
        raise _rejected("body", f"give at least one of {', '.join(FIELDS)}")
    return doc


def _checked(key: str, value: object) -> float:
    if key not in FIELDS:
        raise _rejected(key, f"unknown field {key!r}; known: {', '.join(FIELDS)}")
    try:
        ms = _number(value, key)
    except ValueError as exc:
        raise _rejected(key, str(exc)) from exc
    if not 0 <= ms <= MAX_DELAY_MS:
        raise _rejected(key, f"{key} must be within 0..{MAX_DELAY_MS:g} ms, got {ms:g}")
    return ms


def _number(value: object, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{key} must be a finite number of milliseconds, got {value!r}")
    return float(value)


def _rejected(field: str, message: str) -> Refused:
    return Refused(message, field=field)
