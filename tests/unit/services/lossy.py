"""A lossy network between a replica and etcd, for the tests of what a lost answer does."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from services.reroute.store.etcd.client import Etcd, StoreUnavailable, TxnResult

UNSENT = "etcd at loopback cannot be used: unreachable (Lossy)"
LOST = "etcd at loopback cannot be used: no answer (Lossy)"


class _Network:
    """What the next transactions that ``only`` picks (by their operations; default: all)
    meet: ``plan``, one word each (``Lossy``); the others pass."""

    def __init__(self, only: Callable[[Sequence[Any]], bool] | None) -> None:
        self.only = only
        self.plan: list[str] = []
        self.held: list[tuple[Any, Any, Any]] = []

    def _what(self, success: Any) -> str:
        picked = self.plan and (self.only is None or self.only(success))
        return self.plan.pop(0) if picked else "pass"


class Lossy(_Network):
    """Between ``etcd``'s asyncio transactions and the cluster, doing to each next one
    that ``only`` picks (by its operations; default: all) what ``plan`` says, then passing
    the rest: "lost" (applied, its answer lost), "unsent" (refused before it reached etcd),
    "late" (held back, applied by ``deliver``; the client tries again at once and sees that
    answer, ``retried``), "twice" (applied, and sent again: the second answer is the one
    seen, ``retried``). etcd itself is real: what is applied is applied."""

    def __init__(self, etcd: Etcd, only: Callable[[Sequence[Any]], bool] | None = None) -> None:
        super().__init__(only)
        self.send = etcd.atxn
        etcd.atxn = self  # type: ignore[method-assign]

    async def __call__(self, compare: Any, success: Any, failure: Any = ()) -> TxnResult:
        what = self._what(success)
        if what == "unsent":
            raise StoreUnavailable(UNSENT)
        if what == "late":
            self.held.append((compare, success, failure))
        else:
            result = await self.send(compare, success, failure)
            if what == "lost":
                raise StoreUnavailable(LOST)
            if what == "pass":
                return result
        return replace(await self.send(compare, success, failure), retried=True)

    async def deliver(self) -> list[TxnResult]:
        held, self.held = self.held, []
        return [await self.send(*h) for h in held]


class LossySync(_Network):
    """``Lossy`` between the blocking transactions (``Etcd.txn``: the journal's, run in
    worker threads) and the cluster, with one more: "stuck" (held back and not answered:
    the client gives up; ``deliver`` applies it later, as etcd applies a proposal whose
    client left)."""

    def __init__(self, etcd: Etcd, only: Callable[[Sequence[Any]], bool] | None = None) -> None:
        super().__init__(only)
        self.send = etcd.txn
        etcd.txn = self  # type: ignore[method-assign]

    def __call__(self, compare: Any, success: Any, failure: Any = ()) -> TxnResult:
        what = self._what(success)
        if what == "unsent":
            raise StoreUnavailable(UNSENT)
        if what == "stuck":
            self.held.append((compare, success, failure))
            raise StoreUnavailable(LOST)
        if what == "late":
            self.held.append((compare, success, failure))
        else:
            result = self.send(compare, success, failure)
            if what == "lost":
                raise StoreUnavailable(LOST)
            if what == "pass":
                return result
        return replace(self.send(compare, success, failure), retried=True)

    def deliver(self) -> list[TxnResult]:
        held, self.held = self.held, []
        return [self.send(*h) for h in held]


def puts_under(part: str) -> Callable[[Sequence[Any]], bool]:
    """``Lossy.only``: a transaction that puts a key containing ``part``."""

    def picks(success: Sequence[Any]) -> bool:
        return any(
            op.WhichOneof("request") == "request_put" and part in op.request_put.key.decode()
            for op in success
        )

    return picks
