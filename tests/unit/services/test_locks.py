"""Device locks between engine instances: overlapping sets of switches never run at once,
disjoint ones do, and a lock is free again when its holder is gone."""

from __future__ import annotations

import asyncio
from pathlib import Path

from services.reroute.locks import device_locks


def test_overlapping_holders_are_serialised_and_disjoint_ones_overlap(tmp_path: Path) -> None:
    spans: dict[str, tuple[float, float]] = {}

    async def hold(name: str, devices: list[str]) -> None:
        async with device_locks(tmp_path, devices):
            start = asyncio.get_running_loop().time()
            await asyncio.sleep(0.1)
            spans[name] = (start, asyncio.get_running_loop().time())

    async def main() -> None:
        await asyncio.gather(
            hold("site1", ["sw1"]), hold("site2", ["sw2"]), hold("full", ["sw2", "sw1"])
        )

    asyncio.run(main())

    def overlap(a: str, b: str) -> bool:
        return spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]

    assert not overlap("full", "site1") and not overlap("full", "site2")
    assert overlap("site1", "site2")


def test_no_lock_dir_means_no_locking(tmp_path: Path) -> None:
    async def main() -> None:
        async with device_locks(None, ["sw1"]), device_locks(None, ["sw1"]):
            pass

    asyncio.run(main())
    assert list(tmp_path.iterdir()) == []
