"""The API's request and response bodies (pydantic; they make the OpenAPI document).

Requests are strict: unknown fields, wrong types and malformed flows are 422 with the
``loc`` of the field at fault (``["body", "flows", 2]``); nothing is changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, StrictBool

from services.reroute.errors import PlanError
from services.reroute.model.intent import ANY_HOST, FlowSpec, Intent, Strategy
from services.reroute.model.topology import NodeKind
from services.reroute.planning.order import PhaseName, Stage
from services.reroute.planning.plan import Disruption
from services.reroute.store.records import RerouteState, StepState

MAX_MS = 600_000.0


def _flow(text: str) -> str:
    try:
        FlowSpec.parse(text, ANY_HOST)  # host names are resolved with the topology
    except (PlanError, ValueError) as exc:
        raise ValueError(str(exc)) from None
    return text


Flow = Annotated[str, Strict(), Field(min_length=3, max_length=200), AfterValidator(_flow)]
PathName = Annotated[str, Strict(), Field(min_length=1, max_length=200)]
Millis = Annotated[float, Strict(), Field(ge=0, le=MAX_MS, allow_inf_nan=False)]


class RerouteRequest(BaseModel):
    """Move ``flows`` (and their reverse directions) onto path ``to_path``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    flows: list[Flow] = Field(
        min_length=1,
        max_length=100_000,
        description="SRC>DST[,tcp|udp|icmp][,sport=N][,dport=N], e.g. 10.0.0.2>10.0.0.3; "
        "also SRC->DST or src=SRC,dst=DST[,...]; SRC and DST may name the topology's hosts "
        "(vm2>vm3)",
    )
    to_path: PathName
    strategy: Strategy = Strategy.MBB
    drain_ms: Millis | None = Field(
        default=None,
        description="wait before removing old rules or cutting a circuit; default: the old "
        "path's one-way delay (its long-haul nodes) + 10 % + 5 ms",
    )
    bbm_gap_ms: Millis = Field(default=0.0, description="BBM only: extra outage")
    via: PathName | None = Field(default=None, description="optical MBB: temporary path")
    lock_timeout_ms: Millis | None = Field(
        default=None,
        description="optical: the longest wait for the new circuit's ports to come up (then "
        "roll back); default 3000. Refused on a move with no optical step (it waits for no "
        "lock)",
    )
    dry_run: StrictBool = Field(default=False, description="return the plan, change nothing")

    def intent(self, hosts: Mapping[str, str] | None = None) -> Intent:
        """The engine's ``Intent`` of this request, host names resolved with ``hosts`` (a
        topology's ``addresses``)."""
        return Intent(
            flows=tuple(FlowSpec.parse(f, hosts) for f in self.flows),
            to_path=self.to_path,
            strategy=self.strategy,
            drain_s=None if self.drain_ms is None else self.drain_ms / 1000,
            bbm_gap_s=self.bbm_gap_ms / 1000,
            via=self.via,
            lock_timeout_s=None if self.lock_timeout_ms is None else self.lock_timeout_ms / 1000,
        )

    def fingerprint(self) -> str:
        """Identifies the request's meaning (for idempotency keys): its canonical JSON."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()


class IntentView(BaseModel):
    flows: list[str]
    to_path: str
    strategy: Strategy
    drain_ms: float | None
    bbm_gap_ms: float
    via: str | None
    lock_timeout_ms: float | None


class StepView(BaseModel):
    index: int = Field(description="1-based, in plan order")
    phase: PhaseName | None = Field(default=None, description="the plan phase it belongs to")
    stage: Stage | None = Field(
        default=None, description="how an operator reads its phase (the page groups by it)"
    )
    description: str
    state: StepState | Literal["planned"]
    started: float | None = Field(description="Unix time")
    finished: float | None
    ms: float | None
    error: str | None


class RerouteView(BaseModel):
    id: str
    state: RerouteState
    summary: str
    intent: IntentView | None
    plan: str | None = Field(description="the plan as text (null while pending)")
    steps: list[StepView]
    error: str | None
    created: float = Field(description="Unix time")
    started: float | None
    finished: float | None
    queue_position: int | None = Field(description="pending: how many run before it")
    cleanup_pending: list[str] = Field(
        default=[],
        description="devices that did not answer while the flows left their paths: their "
        "rules of those paths are removed when they answer again",
    )


class RerouteList(BaseModel):
    reroutes: list[RerouteView]


class PlanStepView(BaseModel):
    index: int
    phase: PhaseName
    stage: Stage
    kind: str
    device: str
    description: str


class PlanView(BaseModel):
    """A dry run: the plan on the devices' current state. Nothing was changed or recorded."""

    dry_run: Literal[True] = True
    summary: str
    from_paths: list[str]
    to_path: str
    disruption: Disruption
    flow_count: int
    steps: list[PlanStepView]
    text: str


class PathView(BaseModel):
    name: str
    src: str
    dst: str
    hops: list[str]
    circuits: list[str]
    initial: bool


class NodeView(BaseModel):
    name: str
    kind: NodeKind
    managed: bool = Field(description="a switch this instance manages")


class TopologyView(BaseModel):
    name: str
    fabric: str
    nodes: list[NodeView]
    links: list[list[str]]
    paths: list[PathView]


class PathFlows(BaseModel):
    path: str
    flows: list[str] = Field(description="flows (forward direction) whose ingress tags this path")


class FlowsView(BaseModel):
    paths: list[PathFlows]


class OpticalSwitchView(BaseModel):
    name: str
    ingress_count: int = Field(description="ports 1..N are ingress, N+1..N+M egress")
    egress_count: int
    managed: bool = Field(description="a switch this instance manages (and reads)")
    cross_connects: list[tuple[int, int]] | None = Field(
        description="[ingress, egress] as read from the device now (null: not managed here)"
    )


class OpticsView(BaseModel):
    switches: list[OpticalSwitchView]


class WhoAmI(BaseModel):
    role: Literal["read", "operator"] = Field(description="what the caller's token may do")
    fabric: str


DeviceStateName = Literal["unknown", "up", "down", "hung", "no_pipeline", "out_of_sync"]


class Health(BaseModel):
    status: Literal["ok", "degraded", "starting", "draining"] = Field(
        description="degraded: some device is not up (``devices`` names them; the service "
        "serves, reroutes that need them are refused), or this replica holds no lease in "
        "etcd (``reason``)"
    )
    fabric: str
    queue: int
    running: str | None  # the oldest running reroute
    in_flight: int = 0  # how many run at once (disjoint reroutes run concurrently)
    replica: str = ""  # this instance (its owner name in the journal and the locks)
    groups: list[str] = Field(
        default_factory=list,
        description="the device groups this replica masters (etcd, device ownership), each "
        "named after its first device; /v1/health names every device's master",
    )
    devices: dict[str, DeviceStateName] = Field(
        default_factory=dict, description="the devices that are not up, and their state"
    )
    reason: str = Field(
        default="",
        description="degraded but not for a device: this replica holds no lease in etcd "
        "(since when; it starts nothing until it has a new one), or etcd cannot be read",
    )


class DeviceHealth(BaseModel):
    name: str
    kind: str = Field(description="its driver kind (the inventory's), or its driver's class")
    up: bool = Field(description="state is up: it answered its last probe, in sync")
    state: DeviceStateName = Field(
        default="unknown",
        description="up; down (refused, unreachable); hung (connected, no answer within "
        "its timeout); no_pipeline (a P4 target without its program); out_of_sync (it "
        "lacks rules the journal expects: restarted with empty tables); unknown (not "
        "probed yet)",
    )
    since: float | None = Field(
        default=None, description="unix time it entered this state (null: not probed yet)"
    )
    error: str = Field(default="", description="why it is not up (empty when up)")
    checked: float | None = Field(default=None, description="unix time of its last probe")
    detail: str = Field(description="what it says it is, or why it did not answer")
    down_since: float | None = Field(
        description="unix time since when it has not been up (null: it is up)"
    )
    owner: str = Field(
        default="",
        description="the replica that masters it for its term (etcd, device ownership); "
        "empty: no master now, not in a group (an optical switch), or a single service",
    )


class DevicesHealth(BaseModel):
    status: Literal["ok", "degraded", "starting", "draining"] = Field(
        description="degraded: some device is not up (down, hung, no_pipeline, "
        "out_of_sync: a reroute that needs it is refused before changing anything)"
    )
    fabric: str
    queue: int
    running: str | None
    devices: list[DeviceHealth]
    reason: str = Field(default="", description="as in Health")


class Problem(BaseModel):
    detail: str
