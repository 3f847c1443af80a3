"""The ordering of every reroute, as one table: which phases run, in which order, which run
their steps at once, and after which one every flow rests on a working path.

The planners compute steps and hand them to ``plan.laid_out(order, steps)``, which lays
them out by ``ORDER[order]``; they never name, order or flag a phase themselves. Changing an
ordering is changing a row here (the tests walk every prefix of every plan: a row that
leaves a flow without a path fails them).

    ELECTRONIC_MBB         make (c), verify-make (c), shift (c), verify-shift (c), drain, clean
    ELECTRONIC_BBM         break, gap, make, verify (c), clean
    OPTICAL_MBB_PARKED     park-make .. park-verify-shift [checkpoint], park-drain,
                           circuits (c), park-clean, swap-make, swap-verify-make,
                           await-lock, swap-shift .. swap-clean
    OPTICAL_MBB_FROM_HERE  circuits (c), move-make, move-verify-make, await-lock,
                           move-shift .. move-clean
    OPTICAL_BBM            circuits (c), gap, make .. verify-shift, clean, await-lock
    CLEANUP                clean (recovery: after the electronic MBBs that put flows back)
    RESYNC                 make (c), shift (c), clean (c)

(c): concurrent. Each phase has a ``Stage``: how an operator reads a reroute (the page
groups its steps by stage), carried by the API beside the phase's name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType


class PhaseName(StrEnum):
    MAKE = "make"  # the target path's transit/egress rules (tagged: no packet uses them yet)
    VERIFY_MAKE = "verify-make"
    SHIFT = "shift"  # the moved flows' ingress rules rewritten to the target's tag
    VERIFY_SHIFT = "verify-shift"
    DRAIN = "drain"  # packets in flight on the old path arrive
    CLEAN = "clean"  # the old path's rules no flow uses
    BREAK = "break"  # BBM: the moved flows' ingress rules removed
    GAP = "gap"  # BBM (experiments): an outage made longer
    VERIFY = "verify"  # BBM: make and shift read back
    CIRCUITS = "circuits"  # optical switches: colliding cross-connects out, new ones in
    AWAIT_LOCK = "await-lock"  # the new circuits' receiving ports up
    PARK_MAKE = "park-make"  # optical MBB, parked: the electronic move onto ``via``
    PARK_VERIFY_MAKE = "park-verify-make"
    PARK_SHIFT = "park-shift"
    PARK_VERIFY_SHIFT = "park-verify-shift"
    PARK_DRAIN = "park-drain"
    PARK_CLEAN = "park-clean"
    SWAP_MAKE = "swap-make"  # optical MBB, parked: the electronic move from ``via`` on
    SWAP_VERIFY_MAKE = "swap-verify-make"
    SWAP_SHIFT = "swap-shift"
    SWAP_VERIFY_SHIFT = "swap-verify-shift"
    SWAP_DRAIN = "swap-drain"
    SWAP_CLEAN = "swap-clean"
    MOVE_MAKE = "move-make"  # optical MBB from where the flows are: the electronic move
    MOVE_VERIFY_MAKE = "move-verify-make"
    MOVE_SHIFT = "move-shift"
    MOVE_VERIFY_SHIFT = "move-verify-shift"
    MOVE_DRAIN = "move-drain"
    MOVE_CLEAN = "move-clean"


class Leg(StrEnum):
    """An electronic move inside an optical plan: its phases are the electronic MBB's,
    prefixed."""

    PARK = "park"
    SWAP = "swap"
    MOVE = "move"


class Stage(StrEnum):
    """How an operator reads a reroute: an optical MBB as park, circuits, staged (what runs
    while the transceivers lock), await-lock, swap, clean; an electronic one as make,
    shift, clean."""

    PARK = "park"
    CIRCUITS = "circuits"
    STAGED = "staged"
    AWAIT_LOCK = "await-lock"
    SWAP = "swap"
    MAKE = "make"
    SHIFT = "shift"
    CLEAN = "clean"
    BREAK = "break"
    GAP = "gap"
    VERIFY = "verify"


class Order(StrEnum):
    ELECTRONIC_MBB = "electronic-mbb"
    ELECTRONIC_BBM = "electronic-bbm"
    OPTICAL_MBB_PARKED = "optical-mbb-parked"
    OPTICAL_MBB_FROM_HERE = "optical-mbb-from-here"
    OPTICAL_BBM = "optical-bbm"
    CLEANUP = "cleanup"
    RESYNC = "resync"


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    phase: PhaseName
    concurrent: bool = False  # its steps run at once (any subset may have run on a failure)
    checkpoint: bool = False  # after it every flow rests on a working path (rolled back to)


def leg_phase(leg: Leg, name: PhaseName) -> PhaseName:
    """Phase ``name`` of the electronic MBB as a phase of ``leg`` (``park-shift``)."""
    return PhaseName(f"{leg}-{name}")


def _rows(*spec: tuple[PhaseName, str]) -> tuple[Row, ...]:
    """Rows from (phase, flags): "c" concurrent, "k" checkpoint."""
    return tuple(Row(phase=p, concurrent="c" in f, checkpoint="k" in f) for p, f in spec)


P = PhaseName
_MBB = ((P.MAKE, "c"), (P.VERIFY_MAKE, "c"), (P.SHIFT, "c"), (P.VERIFY_SHIFT, "c"),
        (P.DRAIN, ""), (P.CLEAN, ""))  # fmt: skip


def _leg(leg: Leg, names: Sequence[PhaseName], flags: str = "") -> list[tuple[PhaseName, str]]:
    """The electronic MBB's rows ``names`` as phases of ``leg`` (``flags`` on the last)."""
    own = dict(_MBB)
    rows = [(leg_phase(leg, n), own[n]) for n in names]
    return [*rows[:-1], (rows[-1][0], rows[-1][1] + flags)]


ORDER: Mapping[Order, tuple[Row, ...]] = MappingProxyType({
    Order.ELECTRONIC_MBB: _rows(*_MBB),
    Order.ELECTRONIC_BBM: _rows(
        (P.BREAK, ""), (P.GAP, ""), (P.MAKE, ""), (P.VERIFY, "c"), (P.CLEAN, "")
    ),
    Order.OPTICAL_MBB_PARKED: _rows(
        *_leg(Leg.PARK, (P.MAKE, P.VERIFY_MAKE, P.SHIFT, P.VERIFY_SHIFT), "k"),
        *_leg(Leg.PARK, (P.DRAIN,)),  # in flight on the old path: arrived
        (P.CIRCUITS, "c"),
        # staged while the new circuit's transceivers lock: off the critical path
        *_leg(Leg.PARK, (P.CLEAN,)),
        *_leg(Leg.SWAP, (P.MAKE, P.VERIFY_MAKE)),
        (P.AWAIT_LOCK, ""),
        *_leg(Leg.SWAP, (P.SHIFT, P.VERIFY_SHIFT, P.DRAIN, P.CLEAN)),
    ),
    Order.OPTICAL_MBB_FROM_HERE: _rows(
        (P.CIRCUITS, "c"),
        *_leg(Leg.MOVE, (P.MAKE, P.VERIFY_MAKE)),  # staged: tagged rules no packet uses yet
        (P.AWAIT_LOCK, ""),
        *_leg(Leg.MOVE, (P.SHIFT, P.VERIFY_SHIFT, P.DRAIN, P.CLEAN)),
    ),
    Order.OPTICAL_BBM: _rows(
        (P.CIRCUITS, "c"), (P.GAP, ""), *[r for r in _MBB if r[0] is not P.DRAIN],
        (P.AWAIT_LOCK, ""),
    ),
    Order.CLEANUP: _rows((P.CLEAN, "")),
    Order.RESYNC: _rows((P.MAKE, "c"), (P.SHIFT, "c"), (P.CLEAN, "c")),
})  # fmt: skip

STAGE: Mapping[PhaseName, Stage] = MappingProxyType({
    P.MAKE: Stage.MAKE, P.VERIFY_MAKE: Stage.MAKE, P.SHIFT: Stage.SHIFT,
    P.VERIFY_SHIFT: Stage.SHIFT, P.DRAIN: Stage.CLEAN, P.CLEAN: Stage.CLEAN,
    P.BREAK: Stage.BREAK, P.GAP: Stage.GAP, P.VERIFY: Stage.VERIFY,
    P.CIRCUITS: Stage.CIRCUITS, P.AWAIT_LOCK: Stage.AWAIT_LOCK,
    **{leg_name: Stage.PARK for leg_name in (P.PARK_MAKE, P.PARK_VERIFY_MAKE, P.PARK_SHIFT,
                                             P.PARK_VERIFY_SHIFT, P.PARK_DRAIN)},
    P.PARK_CLEAN: Stage.STAGED, P.SWAP_MAKE: Stage.STAGED, P.SWAP_VERIFY_MAKE: Stage.STAGED,
    P.MOVE_MAKE: Stage.STAGED, P.MOVE_VERIFY_MAKE: Stage.STAGED,
    P.SWAP_SHIFT: Stage.SWAP, P.SWAP_VERIFY_SHIFT: Stage.SWAP, P.MOVE_SHIFT: Stage.SWAP,
    P.MOVE_VERIFY_SHIFT: Stage.SWAP, P.SWAP_DRAIN: Stage.CLEAN, P.SWAP_CLEAN: Stage.CLEAN,
    P.MOVE_DRAIN: Stage.CLEAN, P.MOVE_CLEAN: Stage.CLEAN,
})  # fmt: skip
