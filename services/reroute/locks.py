"""Device locks between engine instances on one machine (processes, services, the CLI).

One service serialises its own reroutes, but two instances managing the same switch (a
full-scope CLI apply while a site's service fails over, say) would otherwise interleave
their plans. Each instance holds an exclusive ``flock`` on ``<lock dir>/<switch>.lock`` for
every switch it manages while it plans and executes. Locks are taken in name order (no
deadlock) and released by the kernel if the process dies.
"""

from __future__ import annotations

import asyncio
import fcntl
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO


@asynccontextmanager
async def device_locks(lock_dir: Path | None, devices: Iterable[str]) -> AsyncIterator[None]:
    """Hold the locks of ``devices`` (nothing when ``lock_dir`` is None)."""
    if lock_dir is None:
        yield
        return
    lock_dir.mkdir(parents=True, exist_ok=True)
    held: list[IO[str]] = []
    try:
        for name in sorted(set(devices)):
            handle = (lock_dir / f"{name}.lock").open("a")
            held.append(handle)
            await asyncio.to_thread(fcntl.flock, handle.fileno(), fcntl.LOCK_EX)
        yield
    finally:
        for open_file in reversed(held):
            open_file.close()  # closing the descriptor releases its flock
