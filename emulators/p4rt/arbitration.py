"""Primary election on the StreamChannel, as a P4Runtime server does it (EMULATOR).

Each open stream that sent a ``MasterArbitrationUpdate`` is a client with an election id;
the highest is the primary. A client gets an arbitration update with status OK when it is
the primary, ALREADY_EXISTS when it is a backup; every client is told when the primary
changes, a joining backup only itself.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from emulators.p4rt.proto import code_pb2, election, p4runtime_pb2, status_pb2


@dataclass(eq=False, slots=True)
class Stream:
    """One client's StreamChannel: its election id, once it sent one, and its outbox
    (None closes the stream)."""

    outbox: asyncio.Queue[p4runtime_pb2.StreamMessageResponse | None] = field(
        default_factory=asyncio.Queue
    )
    election_id: int | None = None


class ArbitrationError(ValueError):
    """An arbitration update the server refuses (the stream is then closed with ``code``)."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(message)


class Arbiter:
    def __init__(self, device_id: int) -> None:
        self.device_id = device_id
        self.streams: list[Stream] = []

    def primary(self) -> int | None:
        """The highest election id of the open streams, or None."""
        ids = [s.election_id for s in self.streams if s.election_id is not None]
        return max(ids, default=None)

    def is_primary(self, election_id: int) -> bool:
        """``election_id`` is the primary's (0 never is)."""
        return election_id != 0 and election_id == self.primary()

    def join(self, stream: Stream, device_id: int, election_id: int) -> None:
        """Add ``stream`` with ``election_id`` and tell every stream who is primary."""
        if device_id != self.device_id:
            raise ArbitrationError(code_pb2.NOT_FOUND, f"no device {device_id}")
        if any(s.election_id == election_id for s in self.streams if s is not stream):
            raise ArbitrationError(
                code_pb2.INVALID_ARGUMENT, f"election id {election_id} is in use"
            )
        before = self.primary()
        stream.election_id = election_id
        if stream not in self.streams:
            self.streams.append(stream)
        self._notify(self.streams if self.primary() != before else [stream])

    def leave(self, stream: Stream) -> None:
        """Remove ``stream``; tell the others if the primary changed."""
        if stream not in self.streams:
            return
        before = self.primary()
        self.streams.remove(stream)
        if self.primary() != before:
            self._notify(self.streams)

    def _notify(self, streams: list[Stream]) -> None:
        primary = self.primary() or 0
        for stream in streams:
            code = code_pb2.OK if stream.election_id == primary else code_pb2.ALREADY_EXISTS
            update = p4runtime_pb2.MasterArbitrationUpdate(
                device_id=self.device_id,
                election_id=election(primary),
                status=status_pb2.Status(code=code),
            )
            stream.outbox.put_nowait(p4runtime_pb2.StreamMessageResponse(arbitration=update))
