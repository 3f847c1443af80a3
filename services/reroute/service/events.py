"""Server-sent events: step progress and reroute state changes, to every subscriber.

The executor reports steps synchronously (``on_event``); ``EventBus.publish`` only puts the
event on each subscriber's bounded queue, so it never blocks a reroute. A subscriber that
falls ``backlog`` events behind is dropped (its stream ends; it may reconnect and read the
reroute's state with GET). Events are numbered (``id:``) in publication order.

Wire format (one event)::

    id: 7
    event: step            (or: reroute; device, resync: see core.py)
    data: {"reroute_id": "...", "index": 3, "total": 9, "state": "done", ...}

Comments (``: ...``) open the stream (``: subscribed``) and keep it alive when idle.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass

from services.reroute.engine.executor import StepEvent

KEEPALIVE_S = 15.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    seq: int
    kind: str  # "step" | "reroute" | "device" | "resync"
    data: Mapping[str, object]

    def sse(self) -> str:
        """The event in server-sent events format."""
        return f"id: {self.seq}\nevent: {self.kind}\ndata: {json.dumps(self.data)}\n\n"


def step_data(event: StepEvent) -> dict[str, object]:
    """A step event as the JSON data of a server-sent event."""
    data = asdict(event)
    data["state"] = str(event.state)
    return data


class Subscription:
    def __init__(self, backlog: int) -> None:
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue(maxsize=backlog)

    def offer(self, event: Event | None) -> bool:
        """Queue the event; False if the subscriber is too far behind."""
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            return False
        return True

    def end(self) -> None:
        """End the subscription (dropping queued events if it is full)."""
        while not self.offer(None):
            self.queue.get_nowait()

    async def next(self, timeout: float) -> Event | str | None:
        """The next event; None when the stream ends; ``"idle"`` after ``timeout``."""
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return "idle"


class EventBus:
    def __init__(self, backlog: int = 1000) -> None:
        self.backlog = backlog
        self.seq = 0
        self.closed = False
        self._subs: set[Subscription] = set()

    def publish(self, kind: str, data: Mapping[str, object]) -> None:
        """Send an event to every subscriber and keep it in the backlog."""
        self.seq += 1
        event = Event(seq=self.seq, kind=kind, data=data)
        for sub in list(self._subs):
            if not sub.offer(event):
                self._subs.discard(sub)
                sub.end()

    def close(self) -> None:
        """End every stream (shutdown); later subscribers get an empty stream."""
        self.closed = True
        for sub in self._subs:
            sub.end()
        self._subs.clear()

    @asynccontextmanager
    async def subscribe(self) -> AsyncIterator[Subscription]:
        """A new subscription starting with the backlog."""
        sub = Subscription(self.backlog)
        if self.closed:
            sub.end()
        else:
            self._subs.add(sub)
        try:
            yield sub
        finally:
            self._subs.discard(sub)

    async def stream(self, keepalive_s: float = KEEPALIVE_S) -> AsyncIterator[str]:
        """The SSE text of one subscriber, until the bus closes or drops it."""
        async with self.subscribe() as sub:
            yield ": subscribed\n\n"
            while True:
                event = await sub.next(keepalive_s)
                if event is None:
                    return
                yield ": keep-alive\n\n" if isinstance(event, str) else event.sse()
