"""What a journal keeps, whichever store keeps it (``sqlite``, ``etcd``): a reroute's
``Record`` and its steps' ``StepRecord``s, their states, the queue's mark, how long ended
reroutes are kept, the journal's errors, and the JSON form of intents and flows (both
stores write the same). Pure."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from drivers.base import Prefix
from services.reroute.errors import RerouteError
from services.reroute.model.intent import DEFAULT_LOCK_TIMEOUT_S, FlowSpec, Intent, Strategy
from services.reroute.planning.resources import EVERYTHING


class RerouteState(StrEnum):
    PENDING = "pending"  # queued, not planned yet: nothing touched
    RUNNING = "running"
    DONE = "done"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"  # rollback itself failed: needs an operator
    REJECTED = "rejected"  # its plan failed when its turn came: nothing touched
    CANCELLED = "cancelled"  # cancelled while pending: nothing touched

    @property
    def final(self) -> bool:
        """The reroute has ended (neither pending nor running)."""
        return self not in (RerouteState.PENDING, RerouteState.RUNNING)


class StepState(StrEnum):
    STARTED = "started"
    DONE = "done"
    FAILED = "failed"
    UNDONE = "undone"


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    id: str
    created: float
    summary: str
    state: RerouteState
    error: str | None
    plan_text: str
    origins: dict[str, tuple[FlowSpec, ...]]  # path -> the flows that were on it
    touched: tuple[str, ...]  # every path the reroute may have written
    started_steps: tuple[int, ...]
    intent: Intent | None = None
    step_names: tuple[str, ...] = ()  # the plan's step descriptions, in order
    started: float | None = None  # when it began to run (planned)
    finished: float | None = None
    idem_key: str | None = None
    fingerprint: str | None = None  # of the request that created it (idempotency)
    owner: str | None = None  # the engine instance running it (locks.py: ``alive``)
    resources: frozenset[str] = frozenset({EVERYTHING})  # what it holds (resources.py)

    def placed(self) -> dict[FlowSpec, str]:
        """Where the reroute meant its flows to be: its target when ``done``, its origins
        (or checkpoint) when rolled back or failed; nothing otherwise."""
        if self.state is RerouteState.DONE and self.intent is not None:
            return dict.fromkeys(self.intent.flows, self.intent.to_path)
        if self.state in (RerouteState.ROLLED_BACK, RerouteState.FAILED):
            return {f: path for path, flows in self.origins.items() for f in flows}
        return {}


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRecord:
    index: int  # 0-based, as in the plan
    state: StepState
    started: float
    finished: float | None
    error: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Queue:
    """The reroutes in flight and the queue, read at one moment (``Journaling.queue``).

    A running reroute whose owner died holds no lock any more (etcd: its locks went with
    its lease); only its row in flight keeps an overlapping reroute from its devices. Two
    reads at different moments could miss it in both (pending at the first, running at
    the second). ``guard``: what a lock transaction adds (etcd compares) so that it takes
    its keys only while no reroute has started running since this read. Empty for SQLite,
    whose file locks take no compares: the scheduler asks ``started_since`` once it holds
    the locks instead (any reroute starting after that needs them)."""

    running: list[Record]  # oldest first, without their step records
    pending: list[Record]  # in queue order
    revision: int = 0  # the store's revision read at (etcd; SQLite: the highest row id)
    guard: tuple[object, ...] = ()
    # the guard of a lock transaction taking given keys, narrower than ``guard``: only
    # reroutes started on what those keys touch fail it (etcd with device ownership)
    narrow: Callable[[frozenset[str]], tuple[object, ...]] | None = None

    def guard_for(self, keys: frozenset[str]) -> tuple[object, ...]:
        """What a lock transaction taking ``keys`` compares (``guard``, or ``narrow``)."""
        return self.guard if self.narrow is None else self.narrow(keys)


class JournalError(RerouteError):
    """The journal file cannot be used."""


class InDoubt(JournalError):
    """A write whose outcome the journal could not learn: it may be applied all the same
    (etcd: an enqueue whose answer and settling were both lost)."""


class LeaseLost(JournalError):
    """This replica's lease (etcd) expired: it may no longer write about the reroutes it
    ran, nor touch their devices; another replica recovers them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Retention:
    """How much history the journal keeps: ended reroutes are removed once more than
    ``reroutes`` ended after them or they ended over ``days`` ago."""

    reroutes: int = 10_000
    days: float = 30.0


def queued_summary(intent: Intent) -> str:
    """The summary of a ``pending`` reroute (every store writes it so)."""
    n = len(intent.flows)
    return f"{intent.strategy.value.upper()}: {n} flow(s) -> {intent.to_path} (queued)"


def encode_flows(flows: tuple[FlowSpec, ...]) -> list[tuple[object, ...]]:
    return [(f.src, f.dst, f.ip_proto, f.l4_src, f.l4_dst) for f in flows]


def decode_flows(rows: list[list[object]]) -> tuple[FlowSpec, ...]:
    out = []
    for src, dst, proto, sport, dport in rows:
        assert isinstance(src, list | tuple) and isinstance(dst, list | tuple)  # JSON, or as made
        out.append(
            FlowSpec(
                src=Prefix(*src),
                dst=Prefix(*dst),
                ip_proto=proto if isinstance(proto, int) else None,
                l4_src=sport if isinstance(sport, int) else None,
                l4_dst=dport if isinstance(dport, int) else None,
            )
        )
    return tuple(out)


def encode_intent(intent: Intent, names: list[str] | None = None) -> str:
    """The intent as JSON; ``names``: its flows as text, when already made."""
    return json.dumps(
        {
            "flows": [str(f) for f in intent.flows] if names is None else names,
            "to_path": intent.to_path,
            "strategy": intent.strategy.value,
            "drain_s": intent.drain_s,
            "bbm_gap_s": intent.bbm_gap_s,
            "via": intent.via,
            "lock_timeout_s": intent.lock_timeout_s,
            "lock_timeout_nullable": True,  # None: the default (see decode_intent)
        }
    )


def decode_intent(text: str) -> Intent:
    """The intent ``encode_intent`` wrote."""
    raw = json.loads(text)
    lock = raw.get("lock_timeout_s")
    if not raw.get("lock_timeout_nullable") and lock == DEFAULT_LOCK_TIMEOUT_S:
        # written before a lock timeout could be left out: every intent had one, 3 s unless
        # asked, used only by an optical move. The default it was is the default it is: a
        # pending electronic move queued before an upgrade is not refused for it.
        lock = None
    return Intent(
        flows=tuple(FlowSpec.parse(f) for f in raw["flows"]),
        to_path=raw["to_path"],
        strategy=Strategy(raw["strategy"]),
        drain_s=raw.get("drain_s"),
        bbm_gap_s=raw["bbm_gap_s"],
        via=raw["via"],
        lock_timeout_s=lock,
    )


# how steps run at once ended: (index, done or failed, error)
Ended = Sequence[tuple[int, StepState, str | None]]
