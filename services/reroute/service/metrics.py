"""Prometheus metrics of one service instance (its own registry: no process globals).

- ``reroute_reroutes_total{state,strategy}``: reroutes by final state (done, rolled_back,
  failed, rejected, cancelled) and strategy (mbb, bbm)
- ``reroute_reroute_duration_seconds``: from the first step to the outcome (executed ones)
- ``reroute_step_duration_seconds{kind}``: each step that finished, by kind (install,
  verify, shift, remove, drain, wait, circuits, await-lock)
- ``reroute_lock_wait_seconds``: how long new circuits took to lock (await-lock steps that
  ended locked); ``reroute_lock_timeouts_total``: the ones that did not lock in time
- ``reroute_queue_length``: pending reroutes; ``reroute_in_flight``: running here
- ``reroute_device_up{device}`` (1: answers and in sync) and
  ``reroute_device_state{device,state}`` (1 for the device's state now: up, down, hung,
  no_pipeline, out_of_sync, unknown), from the device tracker (``devicestate.py``)
- ``reroute_device_actionable{device}``: 1 while this replica can act on the device now: it
  may start a reroute (it holds a live lease in etcd, or its store needs none: SQLite; and
  it is not draining) and the device is up. It does not follow device ownership (a
  group's reroutes wait for a master while it changes hands; ``reroute_device_mastered``
  tells that), so "some replica could take it" is what an alert on
  ``max by (device) (...) == 0`` says
- ``reroute_replica_info{owner}``: 1, labelled with this replica's owner name in the store
  (SQLite: this process's); ``reroute_lease_lost_seconds`` (``core.py``): etcd's lease lost
- ``reroute_groups_mastered``: the device groups this replica masters for their terms, and
  ``reroute_device_mastered{device}``: 1 for each device it masters (etcd, device ownership,
  ``etcd/terms.py``; exported only there): ``sum by (device)`` is 1 for every device of a
  group while the replicas are balanced, 0 while its group changes hands
- ``reroute_device_claims_total{how}``: fenced devices' master claims before a run's first
  write to them: ``made``, or ``kept`` (this replica's earlier claim still stands: no other
  owner held the device since; ``etcd/locks.py``, "A claim kept"; exported on etcd only)

docs/prometheus/alerts.yml alerts on them, docs/grafana/reroute.json graphs them; both name
only metrics this module exports (``tests/unit/services/service/test_metrics.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from services.reroute.engine.executor import StepEvent
from services.reroute.planning.plan import StepKind
from services.reroute.store.records import RerouteState, StepState

STEP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
REROUTE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
LOCK_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10)
STRATEGIES = ("mbb", "bbm")


class Devices(Collector):
    """The device tracker's states as gauges, read at each scrape; ``able()``: whether this
    replica may start a reroute now (a device it can act on is one that is up, then)."""

    def __init__(
        self,
        states: Callable[[], Iterable[tuple[str, str]]],
        known: Sequence[str],
        able: Callable[[], bool],
    ):
        self._states = states
        self._known = known
        self._able = able

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily(
            "reroute_device_up", "1: the device answers and holds our rules", labels=["device"]
        )
        state = GaugeMetricFamily(
            "reroute_device_state", "1 for the device's state now", labels=["device", "state"]
        )
        actionable = GaugeMetricFamily(
            "reroute_device_actionable",
            "1: this replica can act on the device now (it may start reroutes: a live lease "
            "in etcd or none needed, not draining; and the device is up)",
            labels=["device"],
        )
        able = self._able()
        for name, now in self._states():
            up.add_metric([name], 1.0 if now == "up" else 0.0)
            actionable.add_metric([name], 1.0 if able and now == "up" else 0.0)
            for s in self._known:
                state.add_metric([name, s], 1.0 if s == now else 0.0)
        yield up
        yield state
        yield actionable


class Metrics:
    def __init__(self, queue_length: Callable[[], int], in_flight: Callable[[], int]) -> None:
        self.registry = CollectorRegistry()
        self._replica: Callable[[], str] = lambda: ""  # its owner name (``replica``)
        self.reroutes = Counter(
            "reroute_reroutes",
            "Reroutes by final state and strategy",
            ["state", "strategy"],
            registry=self.registry,
        )
        self.reroute_seconds = Histogram(
            "reroute_reroute_duration_seconds",
            "Duration of executed reroutes, first step to outcome",
            buckets=REROUTE_BUCKETS,
            registry=self.registry,
        )
        self.step_seconds = Histogram(
            "reroute_step_duration_seconds",
            "Duration of reroute steps, by kind",
            ["kind"],
            buckets=STEP_BUCKETS,
            registry=self.registry,
        )
        self.lock_seconds = Histogram(
            "reroute_lock_wait_seconds",
            "Time new circuits took to lock (their packet-switch ports up)",
            buckets=LOCK_BUCKETS,
            registry=self.registry,
        )
        self.lock_timeouts = Counter(
            "reroute_lock_timeouts",
            "New circuits that did not lock within the reroute's lock timeout",
            registry=self.registry,
        )
        queue = Gauge("reroute_queue_length", "Pending reroutes", registry=self.registry)
        queue.set_function(lambda: float(queue_length()))
        running = Gauge("reroute_in_flight", "Reroutes running here", registry=self.registry)
        running.set_function(lambda: float(in_flight()))
        for state in RerouteState:
            if state.final:
                for strategy in STRATEGIES:
                    self.reroutes.labels(state=state.value, strategy=strategy)
        for kind in StepKind:
            self.step_seconds.labels(kind=kind.value)

    def watch_devices(
        self,
        states: Callable[[], Iterable[tuple[str, str]]],
        known: Sequence[str],
        able: Callable[[], bool] = lambda: True,
    ) -> None:
        """Export the devices' states: ``states()`` gives (device, state) at each scrape,
        ``known`` every state a device can be in, ``able()`` whether this replica may start
        a reroute now."""
        self.registry.register(Devices(states, known, able))

    def mastering(
        self, groups: Callable[[], list[str]], owners: Callable[[], dict[str, str]]
    ) -> None:
        """Export the groups and devices this replica masters (read at each scrape)."""
        self.registry.register(_Mastering(groups, owners, self._replica))

    def claims(self, counts: Mapping[str, int]) -> None:
        """Export the master claims made and kept (``counts``, read at each scrape)."""
        self.registry.register(_Claims(counts))

    def replica(self, owner: Callable[[], str]) -> None:
        """Export this replica's owner name (read at each scrape: it changes with a lease)."""
        self._replica = owner
        self.registry.register(_Owner(owner))

    def step(self, event: StepEvent) -> None:
        """Count a finished step's duration (and a circuit's lock, or its timeout)."""
        if event.state is StepState.DONE and event.ms is not None:
            self.step_seconds.labels(kind=event.kind or "unknown").observe(event.ms / 1000)
            if event.kind == StepKind.AWAIT_LOCK:
                self.lock_seconds.observe(event.ms / 1000)
        elif event.state is StepState.FAILED and event.kind == StepKind.AWAIT_LOCK:
            self.lock_timeouts.inc()

    def finished(
        self, state: RerouteState, total_ms: float | None = None, strategy: str = "unknown"
    ) -> None:
        """Count a finished reroute by state and strategy, and its duration."""
        self.reroutes.labels(state=state.value, strategy=strategy).inc()
        if total_ms is not None:
            self.reroute_seconds.observe(total_ms / 1000)

    def render(self) -> tuple[bytes, str]:
        """The metrics in Prometheus text format, with its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _Mastering(Collector):
    def __init__(
        self,
        groups: Callable[[], list[str]],
        owners: Callable[[], dict[str, str]],
        me: Callable[[], str],
    ) -> None:
        self._groups, self._owners, self._me = groups, owners, me

    def collect(self) -> Iterator[GaugeMetricFamily]:
        count = GaugeMetricFamily(
            "reroute_groups_mastered", "Device groups this replica masters for their terms"
        )
        count.add_metric([], float(len(self._groups())))
        yield count
        mine = GaugeMetricFamily(
            "reroute_device_mastered", "1: this replica masters the device", labels=["device"]
        )
        me = self._me()
        for device, owner in self._owners().items():
            mine.add_metric([device], 1.0 if owner == me else 0.0)
        yield mine


class _Claims(Collector):
    def __init__(self, counts: Mapping[str, int]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[CounterMetricFamily]:
        claims = CounterMetricFamily(
            "reroute_device_claims",
            "Fenced devices' master claims before a reroute's first write: made, or kept"
            " (this replica's earlier claim still stands: no other held the device since)",
            labels=["how"],
        )
        for how, n in sorted(self._counts.items()):
            claims.add_metric([how], float(n))
        yield claims


class _Owner(Collector):
    def __init__(self, owner: Callable[[], str]) -> None:
        self._owner = owner

    def collect(self) -> Iterator[GaugeMetricFamily]:
        info = GaugeMetricFamily(
            "reroute_replica_info", "This replica's owner name in the store", labels=["owner"]
        )
        info.add_metric([self._owner()], 1.0)
        yield info
