"""A lossy network between a replica and etcd, for the tests of what a lost answer does."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from services.reroute.etcd.client import Etcd, StoreUnavailable, TxnResult


class Lossy:
    """Between ``etcd``'s asyncio transactions and the cluster, doing to each next one
    that ``only`` picks (by its operations; default: all) what ``plan`` says, then passing
    the rest: "lost" (applied, its answer lost), "unsent" (refused before it reached etcd),
    "late" (held back, applied by ``deliver``; the client tries again at once and sees that
    answer, ``retried``), "twice" (applied, and sent again: the second answer is the one
    seen, ``retried``). etcd itself is real: what is applied is applied."""

    def __init__(self, etcd: Etcd, only: Callable[[Sequence[Any]], bool] | None = None) -> None:
        self.send = etcd.atxn
        self.only = only
        self.plan: list[str] = []
        self.held: list[tuple[Any, Any, Any]] = []
        etcd.atxn = self  # type: ignore[method-assign]

    async def __call__(self, compare: Any, success: Any, failure: Any = ()) -> TxnResult:
        picked = self.plan and (self.only is None or self.only(success))
        what = self.plan.pop(0) if picked else "pass"
        if what == "unsent":
            raise StoreUnavailable("etcd at loopback cannot be used: unreachable (Lossy)")
        if what == "late":
            self.held.append((compare, success, failure))
        else:
            result = await self.send(compare, success, failure)
            if what == "lost":
                raise StoreUnavailable("etcd at loopback cannot be used: no answer (Lossy)")
            if what == "pass":
                return result
        return replace(await self.send(compare, success, failure), retried=True)

    async def deliver(self) -> list[TxnResult]:
        held, self.held = self.held, []
        return [await self.send(*h) for h in held]


def puts_under(part: str) -> Callable[[Sequence[Any]], bool]:
    """``Lossy.only``: a transaction that puts a key containing ``part``."""

    def picks(success: Sequence[Any]) -> bool:
        return any(
            op.WhichOneof("request") == "request_put" and part in op.request_put.key.decode()
            for op in success
        )

    return picks
