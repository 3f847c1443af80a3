"""A small typed client of etcd's v3 API over gRPC, on the generated stubs of ``aetcd``.

Why ``aetcd``: of the maintained Python clients, it speaks etcd's own gRPC API (measured
here against etcd 3.4: a put in 0.6 ms, against 1.5 ms through the JSON gateway that
``etcd3gw`` uses), its stubs run on the ``grpcio`` and ``protobuf`` the project already
has for P4Runtime, and ``grpc.aio`` fits the asyncio service. Its ``Client`` takes one
insecure endpoint, so the channels are made here: one per endpoint, with TLS when
configured, failing over to the next endpoint when one is unreachable.

**Deadlines.** ``timeout_s`` bounds a whole call, across endpoints, not each endpoint: a
black-holed cluster of 3 members answers a call with ``StoreUnavailable`` after
``timeout_s``, not 3x it. Each endpoint tried gets an equal share of what is left (one that
refuses at once leaves its share to the next; a member slower than its share is left for
the next, which forwards to the same leader). A blocking call is also bounded by the time
the replica's lease surely has left, less a step's margin (``lease_left``, set to the
locks' ``call_left``): a write fenced by the lease is of no use after it, and a caller
still on the event loop (the CLI's, a test's) would otherwise hold back the lease's
renewal and a step's cancellation that long. With no lease left a call still gets
``NO_LEASE_CALL_S`` (reads, and the queue's unfenced writes, go on; a fenced write is
refused by etcd itself).

**Cut off.** Once a call found no endpoint answering (``unanswered``), a blocking call of
a replica (one with a lease to renew) fails at once, without waiting, until any call is
answered again: the lease's renewal, asynchronous, keeps trying every 50 ms and is the
first to know. A replica cut off from etcd so waits one call's deadline, not one per
call, and only in the thread that made it.

Both flavours of call are here: blocking (``get``, ``txn``, ...) for the journal, which
the service runs off the event loop (``journal.offload``: a worker thread per call under
way, so a replica cut off from etcd keeps renewing, cancelling steps and answering;
measured: loop lag p99 under 2 ms, max ~10 ms through a 4 s total cut, against a ~1 s
stall when the first blocking call after the cut ran on the loop); asyncio (``aget``,
``atxn``, leases, watches) for locks and leases. Why not the journal on ``grpc.aio`` as
well: the journal's protocol is synchronous (SQLite's, the CLI's, the tests'), a thread
hop costs ~0.1 ms against a Raft round's 1.5-3 ms, and the deadlines stay the client's
own either way. ``calls`` counts every call by what it costs etcd (``kind_of``). Every
gRPC error becomes a ``StoreUnavailable`` naming the endpoints and etcd's reason (no
leader, no quorum, unreachable, timed out).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import grpc.aio
from aetcd import rpc

from drivers.spec import SecretRef, TlsFiles, read_secret
from services.reroute.store.records import JournalError

_T = TypeVar("_T")
WRITTEN = 256  # own write revisions remembered (``Etcd.written``)
# a blocking call's budget when the lease has (surely) nothing left: enough for a healthy
# cluster on a LAN (a put is 0.6 ms), short enough to leave the event loop responsive
NO_LEASE_CALL_S = 0.1
Compare = Any  # rpc.Compare
Op = Any  # rpc.RequestOp


class StoreUnavailable(JournalError):
    """The journal store (etcd) cannot be reached or has no quorum. A write's answer was
    lost: it may have been applied all the same (etcd commits a proposal whose client gave
    up; ``TxnResult.retried``). The locks settle theirs (``locks.py``, "In doubt")."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KV:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EtcdSettings:
    endpoints: tuple[str, ...]  # host:port
    tls: TlsFiles | None = None
    user: str | None = None
    password: SecretRef | None = None
    timeout_s: float = 1.0


def prefix_end(prefix: str) -> str:
    """The end of the key range of every key starting with ``prefix``."""
    raw = prefix.encode()
    return (raw[:-1] + bytes([raw[-1] + 1])).decode()


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """One key changed (a watch's event)."""

    key: str
    revision: int  # of the transaction that changed it
    value: bytes  # its value; a deleted key's value before
    deleted: bool


def _change(event: Any) -> Change:
    deleted = event.type == event.DELETE
    value = event.prev_kv.value if deleted else event.kv.value
    return Change(
        key=event.kv.key.decode(), revision=event.kv.mod_revision, value=value, deleted=deleted
    )


def _kv(kv: Any) -> KV:
    return KV(
        key=kv.key.decode(),
        value=kv.value,
        create_revision=kv.create_revision,
        mod_revision=kv.mod_revision,
        lease=kv.lease,
    )


# ------------------------------------------------------------------------------------------
# request builders


def exists(key: str) -> Compare:
    """``key`` exists."""
    return rpc.Compare(
        key=key.encode(),
        target=rpc.Compare.CREATE,
        result=rpc.Compare.GREATER,
        create_revision=0,
    )


def absent(key: str, *, prefix: bool = False) -> Compare:
    """``key`` does not exist (``prefix``: no key starts with it)."""
    extra = {"range_end": prefix_end(key).encode()} if prefix else {}
    return rpc.Compare(
        key=key.encode(),
        target=rpc.Compare.CREATE,
        result=rpc.Compare.EQUAL,
        create_revision=0,
        **extra,
    )


def created(key: str, create_revision: int) -> Compare:
    """``key`` is the one created at ``create_revision`` (not deleted and made again)."""
    return rpc.Compare(
        key=key.encode(),
        target=rpc.Compare.CREATE,
        result=rpc.Compare.EQUAL,
        create_revision=create_revision,
    )


def unchanged(key: str, mod_revision: int) -> Compare:
    """``key`` was last changed at ``mod_revision`` (0: it does not exist)."""
    if mod_revision == 0:
        return absent(key)
    return rpc.Compare(
        key=key.encode(),
        target=rpc.Compare.MOD,
        result=rpc.Compare.EQUAL,
        mod_revision=mod_revision,
    )


def put(key: str, value: bytes, lease: int = 0) -> Op:
    return rpc.RequestOp(request_put=rpc.PutRequest(key=key.encode(), value=value, lease=lease))


def delete(key: str, *, prefix: bool = False) -> Op:
    end = prefix_end(key).encode() if prefix else b""
    return rpc.RequestOp(
        request_delete_range=rpc.DeleteRangeRequest(key=key.encode(), range_end=end)
    )


def get_op(key: str, *, prefix: bool = False, limit: int = 0) -> Op:
    """Read ``key`` (``prefix``: every key starting with it, in creation order, at most
    ``limit`` of them when given)."""
    if not prefix:
        return rpc.RequestOp(request_range=rpc.RangeRequest(key=key.encode()))
    request = rpc.RangeRequest(
        key=key.encode(),
        range_end=prefix_end(key).encode(),
        sort_target=rpc.RangeRequest.CREATE,
        sort_order=rpc.RangeRequest.ASCEND,
        limit=limit,
    )
    return rpc.RequestOp(request_range=request)


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnResult:
    succeeded: bool
    revision: int
    ranges: list[list[KV]]  # the KVs of each range op, in order
    # answered after an earlier attempt failed (another endpoint, or its deadline): that
    # attempt may still be applied, before this answer or after it
    retried: bool = False


def _txn_result(reply: Any, retried: bool = False) -> TxnResult:
    ranges = [
        [_kv(kv) for kv in r.response_range.kvs]
        for r in reply.responses
        if r.WhichOneof("response") == "response_range"
    ]
    return TxnResult(
        succeeded=reply.succeeded, revision=reply.header.revision, ranges=ranges, retried=retried
    )


# ------------------------------------------------------------------------------------------
# the client


class Etcd:
    """Channels to the endpoints of one etcd cluster (module docstring)."""

    def __init__(self, settings: EtcdSettings) -> None:
        self.settings = settings
        self.where = ",".join(settings.endpoints)
        self._creds = _credentials(settings.tls) if settings.tls else None
        self._sync = [_channel(grpc, e, self._creds) for e in settings.endpoints]
        self._aio_channels: list[Any] = []  # made in the event loop that uses them
        self._at = 0  # the endpoint in use
        # the revisions of this client's latest writes: a watcher tells them from others'
        self.written: deque[int] = deque(maxlen=WRITTEN)
        self.last_written = 0  # the highest of them
        self._metadata: tuple[tuple[str, str], ...] | None = None
        # seconds a blocking call of the replica using this client may take before its
        # lease ends (None: no lease): bounds every blocking call (module docstring)
        self.lease_left: Callable[[], float] | None = None
        self.unanswered: float | None = None  # monotonic: since when no endpoint answers
        # calls made, by cost (``kind_of``): "write" (a Raft round, fsynced on a quorum:
        # a transaction with a put or delete, a lease granted or revoked), "read" (a
        # linearizable range or read-only transaction), "renew" (a lease kept alive)
        self.calls: Counter[str] = Counter()
        # writes under way (blocking ones run off the event loop: ``journal.offload``): a
        # watch may see one before ``written`` has its revision (``writes_done``)
        self.writing = 0
        self._writing_lock = threading.Lock()

    def _count(self, kind: str) -> None:
        with self._writing_lock:  # (calls are made from the loop and from threads)
            self.calls[kind] += 1

    def budget(self) -> float:
        """Seconds a blocking call may take now: ``timeout_s``, less when the lease ends
        sooner, never under ``NO_LEASE_CALL_S`` (module docstring)."""
        total = self.settings.timeout_s
        if self.lease_left is not None:
            total = min(total, max(self.lease_left(), NO_LEASE_CALL_S))
        return total

    def _tries(self, total_s: float) -> Iterator[tuple[int, float]]:
        """Each endpoint to try, from the one in use, with its timeout: an equal share of
        what is left of ``total_s`` (none once it is spent)."""
        n, start = len(self.settings.endpoints), self._at
        end = time.monotonic() + total_s
        for i in range(n):
            left = end - time.monotonic()
            if left <= 0:
                return
            yield (start + i) % n, left / (n - i)

    @property
    def _aio(self) -> list[Any]:
        if not self._aio_channels:
            self._aio_channels = [
                _channel(grpc.aio, e, self._creds) for e in self.settings.endpoints
            ]
        return self._aio_channels

    def close(self) -> None:
        for channel in self._sync:
            channel.close()

    async def aclose(self) -> None:
        self.close()
        for channel in self._aio_channels:
            await channel.close()
        self._aio_channels = []

    # -- blocking ------------------------------------------------------------------------

    def _call(self, stub: Callable[[Any], Any], method: str, request: Any) -> Any:
        return self._call_tried(stub, method, request)[0]

    def _call_tried(
        self, stub: Callable[[Any], Any], method: str, request: Any
    ) -> tuple[Any, bool]:
        """The reply, and whether an earlier attempt failed (``TxnResult.retried``)."""
        self._count(kind_of(method, request))
        if self.lease_left is not None and self.unanswered is not None:
            since = time.monotonic() - self.unanswered
            raise StoreUnavailable(
                f"etcd at {self.where} cannot be used: no answer for {since:.1f} s (no quorum, "
                "or unreachable)"
            )
        last: grpc.RpcError | None = None
        for at, timeout in self._tries(self.budget()):
            try:
                call = getattr(stub(self._sync[at]), method)
                reply = call(request, timeout=timeout, metadata=self._auth_sync(at, timeout))
            except grpc.RpcError as exc:
                last = exc
                if not _next_endpoint(exc):
                    break
                continue
            self._answered(at)
            return reply, last is not None
        raise self._unavailable(last)

    def get(self, key: str) -> KV | None:
        reply = self._call(rpc.KVStub, "Range", rpc.RangeRequest(key=key.encode()))
        return _kv(reply.kvs[0]) if reply.kvs else None

    def get_prefix(self, prefix: str, *, newest_first: bool = False, limit: int = 0) -> list[KV]:
        """Every key under ``prefix`` in creation order (``newest_first``: reversed)."""
        order = rpc.RangeRequest.DESCEND if newest_first else rpc.RangeRequest.ASCEND
        request = rpc.RangeRequest(
            key=prefix.encode(),
            range_end=prefix_end(prefix).encode(),
            sort_target=rpc.RangeRequest.CREATE,
            sort_order=order,
            limit=limit,
        )
        return [_kv(kv) for kv in self._call(rpc.KVStub, "Range", request).kvs]

    def txn(
        self, compare: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        request = rpc.TxnRequest(compare=compare, success=success, failure=failure)
        writes = kind_of("Txn", request) == "write"
        if writes:
            with self._writing_lock:
                self.writing += 1
        try:
            reply, retried = self._call_tried(rpc.KVStub, "Txn", request)
            return self._wrote(_txn_result(reply, retried and writes), success)
        finally:
            if writes:
                with self._writing_lock:
                    self.writing -= 1

    async def writes_done(self) -> None:
        """Until no write is under way (at most ``timeout_s``): then ``written``
        has the revision of every write of this client that etcd made so far."""
        end = time.monotonic() + self.settings.timeout_s
        while self.writing and time.monotonic() < end:
            await asyncio.sleep(0.001)

    def wrote(self, revision: int) -> bool:
        """This client's write made ``revision`` (of the latest ``WRITTEN``; under the lock:
        a deque read while another thread appends raises)."""
        with self._writing_lock:
            return revision in self.written

    def _wrote(self, result: TxnResult, success: Sequence[Op]) -> TxnResult:
        """Remember the revision of a transaction that wrote (``written``)."""
        if result.succeeded and any(op.WhichOneof("request") != "request_range" for op in success):
            with self._writing_lock:  # (from the loop and from threads)
                self.written.append(result.revision)
                self.last_written = max(self.last_written, result.revision)
        return result

    # -- asyncio -------------------------------------------------------------------------

    async def _acall(self, stub: Callable[[Any], Any], method: str, request: Any) -> Any:
        return (await self._acall_tried(stub, method, request))[0]

    async def _acall_tried(
        self, stub: Callable[[Any], Any], method: str, request: Any
    ) -> tuple[Any, bool]:
        """The reply, and whether an earlier attempt failed (``TxnResult.retried``)."""
        self._count(kind_of(method, request))
        last: grpc.RpcError | None = None
        for at, timeout in self._tries(self.settings.timeout_s):
            try:
                call = getattr(stub(self._aio[at]), method)
                reply = await call(request, timeout=timeout, metadata=await self._auth(at))
            except grpc.RpcError as exc:
                last = exc
                if not _next_endpoint(exc):
                    break
                continue
            self._answered(at)
            return reply, last is not None
        raise self._unavailable(last)

    async def aget(self, key: str) -> KV | None:
        reply = await self._acall(rpc.KVStub, "Range", rpc.RangeRequest(key=key.encode()))
        return _kv(reply.kvs[0]) if reply.kvs else None

    async def atxn(
        self, compare: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        request = rpc.TxnRequest(compare=compare, success=success, failure=failure)
        writes = kind_of("Txn", request) == "write"
        if writes:
            with self._writing_lock:
                self.writing += 1
        try:
            reply, retried = await self._acall_tried(rpc.KVStub, "Txn", request)
            return self._wrote(_txn_result(reply, retried and writes), success)
        finally:
            if writes:
                with self._writing_lock:
                    self.writing -= 1

    async def grant(self, ttl_s: int) -> int:
        """A new lease of ``ttl_s`` seconds; its id."""
        reply = await self._acall(rpc.LeaseStub, "LeaseGrant", rpc.LeaseGrantRequest(TTL=ttl_s))
        return int(reply.ID)

    async def keep_alive(self, lease: int) -> int:
        """Renew ``lease``; its new TTL (0 or less: it has expired)."""

        async def once() -> AsyncIterator[Any]:
            yield rpc.LeaseKeepAliveRequest(ID=lease)

        self._count("renew")
        last: grpc.RpcError | None = None
        for at, timeout in self._tries(self.settings.timeout_s):
            try:
                stream = rpc.LeaseStub(self._aio[at]).LeaseKeepAlive(
                    once(), timeout=timeout, metadata=await self._auth(at)
                )
                async for reply in stream:
                    self._answered(at)
                    return int(reply.TTL)
                return 0
            except grpc.RpcError as exc:
                last = exc
                if not _next_endpoint(exc):
                    break
        raise self._unavailable(last)

    async def revoke(self, lease: int) -> None:
        await self._acall(rpc.LeaseStub, "LeaseRevoke", rpc.LeaseRevokeRequest(ID=lease))

    async def changes(
        self, prefix: str, created: asyncio.Event | None = None
    ) -> AsyncIterator[list[Change]]:
        """Each change under ``prefix``, as etcd reports them (a watch; StoreUnavailable
        when the stream ends). ``created`` is set once etcd confirms the watch: every
        change from then on is reported."""
        create = rpc.WatchCreateRequest(
            key=prefix.encode(), range_end=prefix_end(prefix).encode(), prev_kv=True
        )
        requests: asyncio.Queue[Any] = asyncio.Queue()
        requests.put_nowait(rpc.WatchRequest(create_request=create))

        async def send() -> AsyncIterator[Any]:
            while True:
                yield await requests.get()

        at = self._at
        try:
            stream = rpc.WatchStub(self._aio[at]).Watch(send(), metadata=await self._auth(at))
            async for reply in stream:
                if reply.created and created is not None:
                    created.set()
                if reply.events:
                    yield [_change(e) for e in reply.events]
        except grpc.RpcError as exc:  # (not ``unanswered``: the renewal tells)
            self._at = (at + 1) % len(self._aio)
            raise StoreUnavailable(f"etcd at {self.where} cannot be used: {_detail(exc)}") from exc

    # -- errors and auth -----------------------------------------------------------------

    def _answered(self, at: int) -> None:
        self._at = at
        self.unanswered = None

    def _unavailable(self, exc: grpc.RpcError | None) -> StoreUnavailable:
        if exc is not None and _next_endpoint(exc) and self.unanswered is None:
            self.unanswered = time.monotonic()
        detail = _detail(exc)
        return StoreUnavailable(f"etcd at {self.where} cannot be used: {detail}")

    def _auth_sync(self, at: int, timeout: float) -> tuple[tuple[str, str], ...] | None:
        if self.settings.user is None or self._metadata is not None:
            return self._metadata
        assert self.settings.password is not None
        request = rpc.AuthenticateRequest(
            name=self.settings.user, password=read_secret("etcd", self.settings.password)
        )
        reply = rpc.AuthStub(self._sync[at]).Authenticate(request, timeout=timeout)
        self._metadata = (("token", reply.token),)
        return self._metadata

    async def _auth(self, at: int) -> tuple[tuple[str, str], ...] | None:
        if self.settings.user is None or self._metadata is not None:
            return self._metadata
        assert self.settings.password is not None
        request = rpc.AuthenticateRequest(
            name=self.settings.user, password=read_secret("etcd", self.settings.password)
        )
        reply = await rpc.AuthStub(self._aio[at]).Authenticate(
            request, timeout=self.settings.timeout_s
        )
        self._metadata = (("token", reply.token),)
        return self._metadata


def kind_of(method: str, request: Any) -> str:
    """What a call costs etcd (``Etcd.calls``): "write", "read" or "renew"."""
    if method == "Txn":
        ops = (*request.success, *request.failure)
        if any(op.WhichOneof("request") != "request_range" for op in ops):
            return "write"
        return "read"
    if method in ("Range", "Authenticate"):
        return "read"
    if method == "LeaseKeepAlive":
        return "renew"
    return "write"  # LeaseGrant, LeaseRevoke, Put, DeleteRange


def _channel(module: Any, endpoint: str, creds: Any) -> Any:
    options = [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 500)]
    if creds is None:
        return module.insecure_channel(endpoint, options=options)
    return module.secure_channel(endpoint, creds, options=options)


def _credentials(tls: TlsFiles) -> grpc.ChannelCredentials:
    def read(path: Any) -> bytes | None:
        return None if path is None else path.read_bytes()

    return grpc.ssl_channel_credentials(
        root_certificates=read(tls.ca_certificate),
        private_key=read(tls.private_key),
        certificate_chain=read(tls.certificate),
    )


def _next_endpoint(exc: grpc.RpcError) -> bool:
    """Another endpoint may answer: this one is unreachable, or it has no leader."""
    code = exc.code() if hasattr(exc, "code") else None
    return code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def _detail(exc: grpc.RpcError | None) -> str:
    if exc is None:
        return "no endpoint"
    code = exc.code() if hasattr(exc, "code") else None
    text = exc.details() if hasattr(exc, "details") else str(exc)
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"no answer in time (no quorum, or unreachable): {text}"
    if code is grpc.StatusCode.UNAVAILABLE:
        return f"unreachable or without a leader: {text}"
    return f"{code.name if code else 'error'}: {text}"
