"""The HTTP endpoints: thin; ``RerouteService`` does the work.

Status codes: 200 read / replayed (same Idempotency-Key and body) / dry run / cancelled;
201 created and already final (``?wait``), a reroute the planner refused at once included
(state ``rejected``); 202 created, queued or running (Location: the reroute); 401/403 auth;
404 unknown reroute; 409 key reused with another body, or cancel of a reroute that is not
pending; 422 malformed request (a field, an unknown path; nothing recorded or changed);
503 shutting down or devices unreachable (retry with the same Idempotency-Key).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from fastapi.responses import StreamingResponse

from services.reroute.service.core import RerouteService
from services.reroute.service.schemas import (
    DevicesHealth,
    FlowsView,
    Health,
    OpticsView,
    PlanView,
    Problem,
    RerouteList,
    RerouteRequest,
    RerouteView,
    TopologyView,
    WhoAmI,
)
from services.reroute.service.views import plan_view, topology_view
from services.reroute.store.records import RerouteState

MAX_WAIT_S = 300.0
router = APIRouter()


def service(request: Request) -> RerouteService:
    """The running service (a FastAPI dependency)."""
    svc: RerouteService = request.app.state.service
    return svc


Svc = Annotated[RerouteService, Depends(service)]
RerouteId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[0-9A-Za-z_-]+$")]
Wait = Annotated[
    float,
    Query(ge=0, le=MAX_WAIT_S, allow_inf_nan=False, description="block up to this many s"),
]
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": Problem} for code in (401, 403, 404, 409, 503)
}


@router.post(
    "/v1/reroutes",
    status_code=202,
    responses={
        **ERRORS,
        200: {"model": RerouteView, "description": "replayed (same Idempotency-Key and body)"},
        201: {
            "model": RerouteView,
            "description": "created and already final: `done`, `rolled_back`, `failed`, or "
            "`rejected` when the planner refused it on the devices' tables (an unknown flow, "
            "flows already on the path; nothing changed, `error` says why)",
        },
        202: {
            "model": RerouteView,
            "description": "created, `pending` or `running`; a queued reroute is planned at its "
            "turn and may end `rejected` then (the same refusal as a 201 `rejected`)",
        },
    },
    summary="Reroute flows (or plan it: dry_run)",
)
async def create_reroute(
    body: RerouteRequest,
    response: Response,
    svc: Svc,
    idempotency_key: Annotated[str | None, Header(min_length=1, max_length=200)] = None,
    wait: Wait = 0.0,
) -> RerouteView | PlanView:
    if body.dry_run:
        response.status_code = 200
        return plan_view(await svc.dry_run(body))
    reroute_id, created = await svc.submit(body, idempotency_key)
    await svc.wait(reroute_id, wait)
    view = await svc.io(svc.view, reroute_id)
    response.headers["Location"] = f"/v1/reroutes/{reroute_id}"
    response.status_code = 200 if not created else 201 if view.state.final else 202
    return view


@router.get("/v1/reroutes/{reroute_id}", responses=ERRORS, summary="One reroute")
async def get_reroute(reroute_id: RerouteId, svc: Svc, wait: Wait = 0.0) -> RerouteView:
    await svc.io(svc.view, reroute_id)  # 404 before waiting
    await svc.wait(reroute_id, wait)
    return await svc.io(svc.view, reroute_id)


@router.get("/v1/reroutes", responses=ERRORS, summary="Reroutes, newest first")
async def list_reroutes(
    svc: Svc,
    state: RerouteState | None = None,
    flow: Annotated[str | None, Query(max_length=200, description="moving this flow")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> RerouteList:
    return RerouteList(reroutes=await svc.io(svc.history, state=state, flow=flow, limit=limit))


@router.delete("/v1/reroutes/{reroute_id}", responses=ERRORS, summary="Cancel a pending one")
async def cancel_reroute(reroute_id: RerouteId, svc: Svc) -> RerouteView:
    return await svc.io(svc.cancel, reroute_id)


@router.get(
    "/v1/events",
    response_class=StreamingResponse,
    responses={**ERRORS, 200: {"content": {"text/event-stream": {}}}},
    summary="Server-sent events: step progress and reroute state changes",
)
async def events(svc: Svc) -> StreamingResponse:
    return StreamingResponse(
        svc.bus.stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get("/v1/topology", responses=ERRORS, summary="Nodes, links and paths")
async def topology(svc: Svc) -> TopologyView:
    s = svc.settings
    return topology_view(s.topo, s.fabric, s.scope)


@router.get("/v1/flows", responses=ERRORS, summary="Per path, the flows installed on devices")
async def flows(svc: Svc) -> FlowsView:
    return await svc.flows()


@router.get(
    "/v1/optics", responses=ERRORS, summary="Each optical switch's cross-connects, read now"
)
async def optics(svc: Svc) -> OpticsView:
    return await svc.optics()


@router.get("/v1/whoami", responses=ERRORS, summary="The role of the caller's token")
async def whoami(request: Request, svc: Svc) -> WhoAmI:
    role = svc.settings.tokens.role_of(request.headers.get("authorization"))
    assert role is not None  # the auth middleware let the request through
    return WhoAmI(role=role.value, fabric=svc.settings.fabric)


@router.get("/healthz", summary="Liveness (no token needed)")
async def healthz(svc: Svc) -> Health:
    return await svc.io(svc.health)


@router.get(
    "/v1/health",
    responses=ERRORS,
    summary="The service and every device it manages, asked now: which are down",
)
async def health(svc: Svc) -> DevicesHealth:
    return await svc.device_health()


@router.get(
    "/metrics",
    response_class=Response,
    responses={**ERRORS, 200: {"content": {"text/plain": {}}}},
    summary="Prometheus metrics",
)
async def metrics(svc: Svc) -> Response:
    body, content_type = svc.metrics.render()
    return Response(body, media_type=content_type)
