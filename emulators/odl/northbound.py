"""The EMULATOR's northbound: ODL's REST URL shapes over HTTP Basic auth (aiohttp).

RESTCONF, RFC 8040 (``?content=config|nonconfig|all``, default all)::

    /rests/data/opendaylight-inventory:nodes[/node=openflow%3A1
        [/flow-node-inventory:table=0[/flow=ID]]]

RESTCONF, the older draft (``/restconf/config/...`` or ``/restconf/operational/...``)::

    /restconf/config/opendaylight-inventory:nodes[/node/openflow:1
        [/flow-node-inventory:table/0[/flow/ID]]]

Hydrogen AD-SAL flowprogrammer::

    /controller/nb/v2/flowprogrammer/default[/node/OF/00:00:00:00:00:00:00:01
        [/staticFlow/NAME]]

PUT (flows only, config only): 201 created; 204 (RFC 8040) or 200 (draft, AD-SAL)
replaced. DELETE (a flow, or a whole config table): 204; when it is not there, 409
``data-missing`` (RFC 8040, section 7's mapping) or 404 (draft, AD-SAL). GET: 200, or 404.
AD-SAL also lists a node's static flows (GET ``.../node/OF/ID`` -> ``{"flowConfig": [...]}``,
the controller's config) and, in its statistics northbound, the flows the switch reported
at the last poll: GET ``/controller/nb/v2/statistics/default/flow/node/OF/ID``.
400 for a malformed body (an ODL ``errors`` body); 409 when the body's id or table
disagrees with the URL; 405 when an AD-SAL body's name or node disagrees with the URL,
and for methods a resource does not take. 401 without the right credentials.

Fault injection (emulator-only, not ODL; same credentials)::

    PUT /emulator/faults {"flow-writes": 3, "status": 500, "node": "openflow:2"}
        the next 3 flow writes (PUT or DELETE, any style; only those of that node when
        "node" is given) answer 500 with an ODL ``errors`` body (``operation-failed``) and
        change nothing; then the emulator answers normally again
    GET /emulator/faults -> {"flow-writes": left, "status": 500, "node": ..., "failed": n}
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from aiohttp import BasicAuth, web

from emulators.odl import adsal, restconf
from emulators.odl.controller import Controller
from emulators.odl.datastore import node_name, parse_node
from emulators.odl.flows import Counters, Flow, FlowError, Port
from emulators.odl.restconf import Json, error_body
from emulators.writelog import WriteLog, transport_ends

RFC8040 = re.compile(
    r"/rests/data/opendaylight-inventory:nodes(?:/node=(?P<node>[^/]+)"
    r"(?:/flow-node-inventory:table=(?P<table>\d+)(?:/flow=(?P<flow>[^/]+))?)?)?/?"
)
DRAFT = re.compile(
    r"/restconf/(?P<ds>config|operational)/opendaylight-inventory:nodes(?:/node/(?P<node>[^/]+)"
    r"(?:/flow-node-inventory:table/(?P<table>\d+)(?:/flow/(?P<flow>[^/]+))?)?)?/?"
)
ADSAL_STATS = re.compile(
    r"/controller/nb/v2/statistics/(?P<container>[^/]+)/flow/node/(?P<type>[^/]+)/(?P<node>[^/]+)/?"
)
ADSAL = re.compile(
    r"/controller/nb/v2/flowprogrammer/(?P<container>[^/]+)"
    r"(?:/node/(?P<type>[^/]+)/(?P<node>[^/]+)(?:/staticFlow/(?P<name>[^/]+))?)?/?"
)
MISSING = "Request could not be completed because the relevant data model content does not exist"
CONTENT = {"config": "config", "nonconfig": "operational", "all": "all"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Credentials:
    user: str = "admin"
    password: str = "admin"


@dataclass(frozen=True, slots=True, kw_only=True)
class Resource:
    """A RESTCONF resource: datastore ('config', 'operational', 'all'), then the path."""

    draft: bool
    datastore: str
    dpid: int | None = None
    table: int | None = None
    flow: str | None = None


class HttpError(Exception):
    def __init__(self, status: int, tag: str, message: str) -> None:
        self.status, self.tag, self.message = status, tag, message
        super().__init__(message)


@dataclass(slots=True)
class WriteFaults:
    """Flow writes still to fail (``/emulator/faults``), their status, and how many did."""

    left: int = 0
    status: int = 500
    node: int | None = None  # only writes of this node (datapath id) fail; None: any
    failed: int = 0

    def take(self, dpid: int | None) -> bool:
        """True when this write (of node ``dpid``) is to fail (one fewer left)."""
        if self.left <= 0 or (self.node is not None and dpid != self.node):
            return False
        self.left -= 1
        self.failed += 1
        return True

    def json(self) -> Json:
        node = None if self.node is None else node_name(self.node)
        return {"flow-writes": self.left, "status": self.status, "node": node,
                "failed": self.failed}  # fmt: skip


FAULTS = web.AppKey("faults", WriteFaults)


def make_app(controller: Controller, credentials: Credentials) -> web.Application:
    """The northbound REST application (basic auth) over ``controller``."""
    writes = WriteLog.from_env("odl")
    logged = [] if writes is None else [_logged(writes)]
    app = web.Application(middlewares=[*logged, _auth(credentials), _errors])
    app["controller"] = controller
    app[FAULTS] = WriteFaults()
    app.router.add_route("*", "/emulator/faults", _faults)
    app.router.add_route("*", "/{tail:.*}", _dispatch)
    return app


def _logged(writes: WriteLog) -> Any:
    """A middleware recording each write the controller accepted (REROUTE_WRITE_LOG): a PUT
    or DELETE answered 2xx, on the switch ``odl@HOST:PORT/DPID``."""

    @web.middleware
    async def logged(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        path = request.raw_path.split("?", 1)[0]
        accepted = request.method in ("PUT", "DELETE") and response.status < 300
        if accepted and path != "/emulator/faults":
            server, peer = transport_ends(request)
            body = (await request.read()).decode(errors="replace")
            device = f"odl@{server}/{_node_of(path)}"
            writes.write(peer, f"{request.method} {path} {body}", device=device)
        return response

    return logged


async def _faults(request: web.Request) -> web.Response:
    faults = request.app[FAULTS]
    if request.method == "PUT":
        body = await _body(request)
        if not isinstance(body, dict) or set(body) - {"flow-writes", "status", "node"}:
            raise HttpError(400, "malformed-message", 'expected {"flow-writes": N, "status": S}')
        count, status = body.get("flow-writes", 0), body.get("status", 500)
        if not isinstance(count, int) or count < 0 or status not in range(500, 600):
            raise HttpError(400, "invalid-value", "flow-writes >= 0, status 5xx")
        node = body.get("node")
        faults.node = None if node is None else parse_node(str(node))
        faults.left, faults.status = count, status
    elif request.method != "GET":
        raise HttpError(405, "operation-not-supported", f"{request.method} is not supported here")
    return _json(200, faults.json())


def _auth(credentials: Credentials) -> Any:
    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        """Refuse requests without the right basic-auth credentials (401)."""
        try:
            given = BasicAuth.decode(request.headers.get("Authorization", ""))
        except ValueError:
            given = None
        if given is None or (given.login, given.password) != (
            credentials.user,
            credentials.password,
        ):
            headers = {"WWW-Authenticate": 'Basic realm="opendaylight"'}
            return web.Response(status=401, headers=headers, text="Unauthorized")
        return await handler(request)

    return auth


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except FlowError as exc:
        return _json(400, error_body(exc.tag, str(exc)))
    except HttpError as exc:
        return _json(exc.status, error_body(exc.tag, exc.message, "protocol"))


async def _dispatch(request: web.Request) -> web.StreamResponse:
    path = request.raw_path.split("?", 1)[0]
    controller: Controller = request.app["controller"]
    if request.method in ("PUT", "DELETE") and request.app[FAULTS].take(_node_of(path)):
        status = request.app[FAULTS].status
        message = "emulated fault (/emulator/faults): the write was not committed"
        return _json(status, error_body("operation-failed", message))
    if found := RFC8040.fullmatch(path):
        return await _restconf(request, controller, _resource(found, request, draft=False))
    if found := DRAFT.fullmatch(path):
        return await _restconf(request, controller, _resource(found, request, draft=True))
    if found := ADSAL.fullmatch(path):
        return await _adsal(request, controller, found)
    if found := ADSAL_STATS.fullmatch(path):
        return _adsal_statistics(request, controller, found)
    raise HttpError(404, "data-missing", f"no such resource {unquote(path)}")


def _node_of(path: str) -> int | None:
    """The datapath id a request's path names, if any (for ``/emulator/faults``)."""
    for pattern in (RFC8040, DRAFT, ADSAL):
        found = pattern.fullmatch(path)
        if found is not None and found.group("node") is not None:
            node = unquote(found.group("node"))
            try:
                return adsal.parse_node_id(node) if pattern is ADSAL else parse_node(node)
            except (ValueError, FlowError):
                return None
    return None


def _resource(found: re.Match[str], request: web.Request, *, draft: bool) -> Resource:
    groups = {k: unquote(v) for k, v in found.groupdict().items() if v is not None}
    if draft:
        datastore = groups["ds"]
    else:
        content = request.query.get("content", "all")
        if content not in CONTENT:
            raise HttpError(400, "invalid-value", f"content={content}: config|nonconfig|all")
        datastore = CONTENT[content]
    return Resource(
        draft=draft,
        datastore=datastore,
        dpid=parse_node(groups["node"]) if "node" in groups else None,
        table=int(groups["table"]) if "table" in groups else None,
        flow=groups.get("flow"),
    )


def _json(status: int, body: object) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


# --------------------------------------------------------------------------------------
# RESTCONF


async def _restconf(request: web.Request, ctl: Controller, res: Resource) -> web.StreamResponse:
    if request.method == "GET":
        return _json(200, _get(ctl, res))
    if res.draft and res.datastore != "config":
        raise HttpError(405, "operation-not-supported", "the operational datastore is read-only")
    if request.method == "PUT" and res.flow is not None:
        return await _put(request, ctl, res)
    if request.method == "DELETE" and res.table is not None:
        return _delete(ctl, res)
    raise HttpError(405, "operation-not-supported", f"{request.method} is not supported here")


async def _put(request: web.Request, ctl: Controller, res: Resource) -> web.Response:
    assert res.dpid is not None and res.table is not None and res.flow is not None
    flow = restconf.parse_flow(restconf.flow_body(await _body(request)))
    if (flow.id, flow.table) != (res.flow, res.table):
        raise HttpError(409, "invalid-value", "the flow's id and table_id must match the URL")
    created = ctl.put(res.dpid, flow)
    return web.Response(status=201 if created else 200 if res.draft else 204)


async def _body(request: web.Request) -> object:
    try:
        return await request.json()
    except ValueError as exc:
        raise FlowError(f"the body is not JSON: {exc}") from exc


def _delete(ctl: Controller, res: Resource) -> web.Response:
    assert res.dpid is not None and res.table is not None
    if res.flow is None:
        found = ctl.delete_table(res.dpid, res.table)
    else:
        found = ctl.delete(res.dpid, res.table, res.flow)
    if not found:  # RFC 8040 section 7 maps data-missing to 409; the draft answered 404
        raise HttpError(404 if res.draft else 409, "data-missing", MISSING)
    return web.Response(status=204)


def _get(ctl: Controller, res: Resource) -> Json:
    if res.dpid is None:
        nodes = [_node_json(ctl, res.datastore, d) for d in _dpids(ctl, res.datastore)]
        return {"nodes" if res.draft else "opendaylight-inventory:nodes": {"node": nodes}}
    if res.dpid not in _dpids(ctl, res.datastore):
        raise HttpError(404, "data-missing", MISSING)
    if res.table is None:
        node = _node_json(ctl, res.datastore, res.dpid)
        return {"node" if res.draft else "opendaylight-inventory:node": [node]}
    flows = _flows(ctl, res.datastore, res.dpid, res.table)
    if res.flow is None:
        return {"flow-node-inventory:table": [_table_json(res.dpid, res.table, flows)]}
    found = [restconf.flow_json(f, res.dpid, c) for f, c in flows if f.id == res.flow]
    if not found:
        raise HttpError(404, "data-missing", MISSING)
    return {"flow-node-inventory:flow": found}


def _dpids(ctl: Controller, datastore: str) -> list[int]:
    config = set(ctl.config.dpids()) if datastore != "operational" else set()
    operational = set(ctl.nodes) if datastore != "config" else set()
    return sorted(config | operational)


Entries = list[tuple[Flow, Counters | None]]


def _flows(ctl: Controller, datastore: str, dpid: int, table: int) -> Entries:
    state = ctl.nodes.get(dpid)
    operational = state.table(table) if state and datastore != "config" else []
    found: Entries = list(operational)
    if datastore != "operational":
        seen = {f.id for f, _ in operational}
        found += [(f, None) for f in ctl.config.flows(dpid, table) if f.id not in seen]
    return found


def _tables(ctl: Controller, datastore: str, dpid: int) -> list[int]:
    state = ctl.nodes.get(dpid)
    tables = set(state.tables()) if state and datastore != "config" else set()
    if datastore != "operational":
        tables |= {f.table for f in ctl.config.flows(dpid)}
    return sorted(tables)


def _table_json(dpid: int, table: int, flows: Entries) -> Json:
    return restconf.table_json(table, [restconf.flow_json(f, dpid, c) for f, c in flows])


def _node_json(ctl: Controller, datastore: str, dpid: int) -> Json:
    tables = [
        _table_json(dpid, t, _flows(ctl, datastore, dpid, t)) for t in _tables(ctl, datastore, dpid)
    ]
    node: Json = {"id": node_name(dpid), "flow-node-inventory:table": tables}
    state = ctl.nodes.get(dpid)
    if state is not None and datastore != "config":
        node["node-connector"] = [restconf.connector_json(dpid, p) for p in _ports(state.ports)]
    return node


def _ports(ports: tuple[Port, ...]) -> list[Port]:
    return sorted(ports, key=lambda p: p.number)


# --------------------------------------------------------------------------------------
# AD-SAL flowprogrammer


async def _adsal(request: web.Request, ctl: Controller, found: re.Match[str]) -> web.Response:
    groups = {k: unquote(v) for k, v in found.groupdict().items() if v is not None}
    if groups["container"] != "default" or groups.get("type", "OF") != "OF":
        raise HttpError(404, "data-missing", "unknown container or node type")
    dpid = _adsal_node(groups["node"]) if "node" in groups else None
    name = groups.get("name")
    if request.method == "GET":
        return _json(200, _adsal_get(ctl, dpid, name))
    if dpid is None or name is None:
        raise HttpError(405, "operation-not-supported", f"{request.method} needs a staticFlow")
    if request.method == "PUT":
        return await _adsal_put(request, ctl, dpid, name)
    if request.method == "DELETE":
        return _adsal_delete(ctl, dpid, name)
    raise HttpError(405, "operation-not-supported", f"{request.method} is not supported here")


def _adsal_statistics(request: web.Request, ctl: Controller, found: re.Match[str]) -> web.Response:
    groups = {k: unquote(v) for k, v in found.groupdict().items()}
    if groups["container"] != "default" or groups["type"] != "OF":
        raise HttpError(404, "data-missing", "unknown container or node type")
    if request.method != "GET":
        raise HttpError(405, "operation-not-supported", f"{request.method} is not supported here")
    dpid = _adsal_node(groups["node"])
    if dpid not in ctl.nodes:
        raise HttpError(404, "data-missing", f"node {groups['node']} is not connected")
    entries = [
        e for t in _tables(ctl, "operational", dpid) for e in _flows(ctl, "operational", dpid, t)
    ]
    return _json(200, adsal.flow_statistics(dpid, entries))


def _adsal_node(text: str) -> int:
    try:
        return adsal.parse_node_id(text)
    except ValueError as exc:
        raise FlowError(str(exc)) from exc


def _adsal_get(ctl: Controller, dpid: int | None, name: str | None) -> Json:
    if name is not None and dpid is not None:
        flow = ctl.config.get(dpid, 0, name)
        if flow is None:
            raise HttpError(404, "data-missing", f"static flow {name} not found")
        return adsal.flow_config(flow, dpid)
    dpids = [dpid] if dpid is not None else ctl.config.dpids()
    flows = [adsal.flow_config(f, d) for d in dpids for f in ctl.config.flows(d, 0)]
    return {"flowConfig": flows}


async def _adsal_put(request: web.Request, ctl: Controller, dpid: int, name: str) -> web.Response:
    body = await _body(request)
    flow = adsal.parse_flow_config(body)
    assert isinstance(body, dict)
    kind, node = adsal.body_node(body)
    if flow.id != name or kind != "OF" or _adsal_node(node) != dpid:
        raise HttpError(405, "operation-not-supported", "the body's name or node is not the URL's")
    created = ctl.put(dpid, flow)
    return web.Response(status=201 if created else 200, text="Success")


def _adsal_delete(ctl: Controller, dpid: int, name: str) -> web.Response:
    if not ctl.delete(dpid, 0, name):
        raise HttpError(404, "data-missing", f"static flow {name} not found")
    return web.Response(status=204)
