"""Locks on resources (``resources.py``) between reroutes, in one process and between
processes on one machine (the service, the CLI, experiments): the embedded default.

Every key is held as *atoms*: a packet switch, or one port of an optical switch (a whole
optical switch is all of its ports; ``EVERYTHING`` every atom of the ``Universe``). A set
of keys is taken **all or nothing**: each atom is tried without waiting, in name order,
and if one is taken the ones got are let go again, so no holder ever waits while holding
(no deadlock). ``acquire`` retries until it gets them all; who goes first among waiting
reroutes is the scheduler's business (``service/scheduler.py``), not the locks'.

``FileLocks`` holds an exclusive ``flock`` on ``<lock dir>/<atom>.lock`` per atom (the
kernel releases them when the process dies); ``MemoryLocks`` is the same within one
process (engines without a state directory). Each instance is an *owner*: the journal
records which owner runs a reroute, and ``alive`` tells whether that owner still runs (a
file lock ``owners/<owner>.lock`` it holds while it lives), so recovery takes only the
reroutes of owners that died.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from services.reroute.planning.resources import Keys, covers
from services.reroute.store.locks import Held, Universe, new_owner

RETRY_S = (0.002, 0.005, 0.01, 0.02, 0.05)  # ``acquire``'s pauses between tries (then the last)


class AtomHeld:
    """Atoms held through an ``AtomLocks``."""

    def __init__(self, locks: AtomLocks, keys: Keys, atoms: dict[str, object]) -> None:
        self._locks = locks
        self._keys = keys
        self._atoms = atoms

    @property
    def keys(self) -> Keys:
        return self._keys

    async def extend(self, keys: Keys, extra: Sequence[object] = ()) -> bool:
        more = [a for a in self._locks.universe.atoms(keys) if a not in self._atoms]
        got = self._locks.take(more)
        if got is None:
            return False
        self._atoms |= got
        self._keys = self._keys | keys
        return True

    async def narrow(self, keys: Keys) -> None:
        assert covers(self._keys, keys), f"narrowing {sorted(self._keys)} to {sorted(keys)}"
        keep = set(self._locks.universe.atoms(keys))
        for atom in [a for a in self._atoms if a not in keep]:
            self._locks.free(self._atoms.pop(atom))
        self._keys = keys

    async def release(self) -> None:
        for handle in self._atoms.values():
            self._locks.free(handle)
        self._atoms.clear()
        self._keys = frozenset()

    def revision(self, device: str) -> int:
        return 0


class AtomLocks:
    """All-or-nothing locking of atoms; subclasses say how one atom is taken."""

    def __init__(self, universe: Universe, owner: str | None = None) -> None:
        self.universe = universe
        self.owner = owner or new_owner()

    @property
    def changed(self) -> asyncio.Event | None:
        return None

    def try_one(self, atom: str) -> object | None:
        """Take one atom without waiting (a handle), or None."""
        raise NotImplementedError

    def free(self, handle: object) -> None:
        """Let one atom go."""
        raise NotImplementedError

    def take(self, atoms: list[str]) -> dict[str, object] | None:
        """Every atom or none."""
        got: dict[str, object] = {}
        for atom in atoms:
            handle = self.try_one(atom)
            if handle is None:
                for h in got.values():
                    self.free(h)
                return None
            got[atom] = handle
        return got

    async def try_acquire(
        self, keys: Keys, claim: str | None = None, extra: Sequence[object] = ()
    ) -> Held | None:
        # ``extra`` is etcd's (the SQLite journal's guard is empty)
        got = self.take(self.universe.atoms(keys))  # one process runs the queue: no claims
        return None if got is None else AtomHeld(self, keys, got)

    async def acquire(self, keys: Keys) -> Held:
        for pause in itertools.chain(RETRY_S, itertools.repeat(RETRY_S[-1])):
            held = await self.try_acquire(keys)
            if held is not None:
                return held
            await asyncio.sleep(pause)
        raise AssertionError("unreachable")  # the pauses never end

    async def alive(self, owner: str | None) -> bool:
        return owner == self.owner

    async def close(self) -> None:
        pass

    def lease_left(self) -> float | None:
        return None

    @property
    def step_s(self) -> float:
        return 0.0


class MemoryLocks(AtomLocks):
    """Atoms locked within this process only (an engine without a state directory)."""

    def __init__(self, universe: Universe, owner: str | None = None) -> None:
        super().__init__(universe, owner)
        self._taken: set[str] = set()

    def try_one(self, atom: str) -> object | None:
        if atom in self._taken:
            return None
        self._taken.add(atom)
        return atom

    def free(self, handle: object) -> None:
        assert isinstance(handle, str)
        self._taken.discard(handle)


class FileLocks(AtomLocks):
    """Atoms locked with ``flock`` on files of ``lock_dir`` (module docstring); the owner
    holds ``owners/<owner>.lock`` from ``open`` to ``close``."""

    def __init__(self, lock_dir: Path, universe: Universe, owner: str | None = None) -> None:
        super().__init__(universe, owner)
        self.dir = lock_dir
        self._me: IO[str] | None = None

    def open(self) -> FileLocks:
        """Announce this owner (its liveness file), make the directories and remove the
        liveness files of owners that died."""
        owners = self.dir / "owners"
        owners.mkdir(parents=True, exist_ok=True)
        for stale in owners.glob("*.lock"):
            _unlink_if_free(stale)
        self._me = (owners / f"{self.owner}.lock").open("a")
        fcntl.flock(self._me.fileno(), fcntl.LOCK_EX)
        return self

    async def close(self) -> None:
        """This owner is gone: its liveness file goes."""
        if self._me is not None:
            with contextlib.suppress(OSError):
                (self.dir / "owners" / f"{self.owner}.lock").unlink()
            self._me.close()
            self._me = None

    def try_one(self, atom: str) -> object | None:
        name = atom.replace("/", ".")
        handle = (self.dir / f"{name}.lock").open("a")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return None
        return handle

    def free(self, handle: object) -> None:
        assert not isinstance(handle, str)
        handle.close()  # type: ignore[attr-defined]  # closing the descriptor drops its flock

    async def alive(self, owner: str | None) -> bool:
        if owner is None:
            return False
        if owner == self.owner:
            return True
        return not _unlink_if_free(self.dir / "owners" / f"{owner}.lock")


def _unlink_if_free(path: Path) -> bool:
    """Remove an owner's liveness file if no process holds it (True: it was free, or gone)."""
    try:
        handle = path.open("r")
    except FileNotFoundError:
        return True
    with handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        with contextlib.suppress(OSError):
            path.unlink()  # its owner died without closing
    return True


def file_or_memory(lock_dir: Path | None, universe: Universe) -> AtomLocks:
    """``FileLocks`` in ``lock_dir`` (opened), or ``MemoryLocks`` without one."""
    if lock_dir is None:
        return MemoryLocks(universe)
    return FileLocks(lock_dir, universe).open()
