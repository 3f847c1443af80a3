"""Prometheus metrics of one service instance (its own registry: no process globals).

- ``reroute_reroutes_total{state}``: reroutes by final state (done, rolled_back, failed,
  rejected, cancelled)
- ``reroute_reroute_duration_seconds``: from the first step to the outcome (executed ones)
- ``reroute_step_duration_seconds``: each step that finished
- ``reroute_queue_length``: pending reroutes; ``reroute_in_flight``: running (0 or 1)
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from services.reroute.executor import StepEvent
from services.reroute.journal import RerouteState, StepState

STEP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
REROUTE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    def __init__(self, queue_length: Callable[[], int], in_flight: Callable[[], int]) -> None:
        self.registry = CollectorRegistry()
        self.reroutes = Counter(
            "reroute_reroutes", "Reroutes by final state", ["state"], registry=self.registry
        )
        self.reroute_seconds = Histogram(
            "reroute_reroute_duration_seconds",
            "Duration of executed reroutes, first step to outcome",
            buckets=REROUTE_BUCKETS,
            registry=self.registry,
        )
        self.step_seconds = Histogram(
            "reroute_step_duration_seconds",
            "Duration of reroute steps",
            buckets=STEP_BUCKETS,
            registry=self.registry,
        )
        queue = Gauge("reroute_queue_length", "Pending reroutes", registry=self.registry)
        queue.set_function(lambda: float(queue_length()))
        running = Gauge("reroute_in_flight", "Reroutes running", registry=self.registry)
        running.set_function(lambda: float(in_flight()))
        for state in RerouteState:
            if state.final:
                self.reroutes.labels(state=state.value)

    def step(self, event: StepEvent) -> None:
        """Count a finished step's duration."""
        if event.state is StepState.DONE and event.ms is not None:
            self.step_seconds.observe(event.ms / 1000)

    def finished(self, state: RerouteState, total_ms: float | None = None) -> None:
        """Count a finished reroute by state, and its duration."""
        self.reroutes.labels(state=state.value).inc()
        if total_ms is not None:
            self.reroute_seconds.observe(total_ms / 1000)

    def render(self) -> tuple[bytes, str]:
        """The metrics in Prometheus text format, with its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
