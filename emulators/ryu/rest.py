"""The EMULATOR's REST side: Ryu ``ofctl_rest`` request handling over a ``Link``.

Per request, as ``ryu.app.ofctl_rest`` does it (its ``stats_method`` / ``command_method``):

- stats (``GET /stats/flow/<dpid>``, ``POST`` with a JSON filter; ``GET
  /stats/portdesc/<dpid>``, ``GET /stats/port/<dpid>[/<port>]``): a dpid ``int(x, 0)`` cannot read
  -> 400; no such datapath -> 404; a filter that is not JSON or has a bad value
  (ValueError) -> 400; AttributeError -> 501; else 200 with ``{"<dpid>": [...]}``;
- commands (``POST /stats/flowentry/<cmd>``, ``DELETE /stats/flowentry/clear/<dpid>``):
  the body is read with ``ast.literal_eval`` (a SyntaxError -> 400; JSON ``true`` and
  other non-literals raise ValueError, which ofctl_rest does not catch -> 500); the dpid
  comes from the body, else the URL (neither -> 400); bad dpid -> 400; no such datapath
  -> 404; an unknown command -> 404; ValueError while building the flow-mod -> 400,
  AttributeError -> 501; anything else -> 500; else 200 once the flow-mod is SENT;
- ``GET /stats/switches``: the connected dpids, a JSON list;
- any other path or method: 404 (Ryu's WSGI router).

Error answers carry an empty body, as ``webob.Response(status=N)`` in ofctl_rest.
"""

from __future__ import annotations

import ast
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web
from os_ken.lib import ofctl_v1_3 as ofctl

from emulators.odl.southbound import SouthboundError
from emulators.writelog import WriteLog, transport_ends

log = logging.getLogger("reroute.emulators.ryu")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
NOT_FOUND = "404 Not Found\n\nThe resource could not be found.\n\n   "


class Switches(Protocol):
    """What the REST side needs of the southbound (``emulators.odl.southbound.Link``)."""

    def connected_dpids(self) -> list[int]:
        """The connected datapath ids."""

    def datapath(self, dpid: int) -> Any | None:
        """The os-ken datapath of ``dpid``, or None."""

    async def multipart(self, dpid: int, msg: Any) -> list[Any]:
        """Send a multipart request to ``dpid``; every part of the reply."""


class Status(Exception):
    """End the request with this HTTP status and an empty body."""

    def __init__(self, status: int, why: str) -> None:
        self.status = status
        super().__init__(why)


def make_app(switches: Switches) -> web.Application:
    """The ofctl_rest application over ``switches``."""
    api = OfctlRest(switches)
    writes = WriteLog.from_env("ryu")
    middlewares = [_statuses] if writes is None else [_logged(writes), _statuses]
    app = web.Application(middlewares=middlewares)
    app.router.add_get("/stats/switches", api.switches)
    app.router.add_route("GET", "/stats/flow/{dpid}", api.flow_stats)
    app.router.add_route("POST", "/stats/flow/{dpid}", api.flow_stats)
    app.router.add_get("/stats/portdesc/{dpid}", api.port_desc)
    app.router.add_get("/stats/port/{dpid}", api.port_stats)
    app.router.add_get("/stats/port/{dpid}/{port}", api.port_stats)
    app.router.add_post("/stats/flowentry/{cmd}", api.mod_flow_entry)
    app.router.add_delete("/stats/flowentry/clear/{dpid}", api.clear)
    return app


def _logged(writes: WriteLog) -> Any:
    """A middleware recording each flow-table write answered 200 (REROUTE_WRITE_LOG); the
    switch is named ``ryu@HOST:PORT/DPID`` (the dpid as the handler read it)."""

    @web.middleware
    async def logged(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        if request.path.startswith("/stats/flowentry/") and response.status == 200:
            raw = await request.read()  # aiohttp keeps the body: read again, no I/O
            dpid = int(str(_dpid_of(_literal(raw), request)), 0)
            server, peer = transport_ends(request)
            what = f"{request.method} {request.path} {raw.decode(errors='replace')}"
            writes.write(peer, what, device=f"ryu@{server}/{dpid}")
        return response

    return logged


@web.middleware
async def _statuses(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except Status as exc:
        log.warning("%s %s -> %d: %s", request.method, request.path, exc.status, exc)
        return web.Response(status=exc.status, body=b"", content_type="text/html")
    except web.HTTPException as exc:
        if exc.status in (404, 405):  # Ryu's router: no route for the path and method
            return web.Response(status=404, text=NOT_FOUND, content_type="text/plain")
        raise
    except Exception:
        log.exception("%s %s -> 500", request.method, request.path)
        return web.Response(status=500, text="Internal Server Error", content_type="text/plain")


class OfctlRest:
    def __init__(self, switches: Switches) -> None:
        self.switches_ = switches

    # ----------------------------------------------------------------------------------
    # stats

    async def switches(self, request: web.Request) -> web.Response:
        """GET /stats/switches: the connected datapath ids."""
        return web.json_response(self.switches_.connected_dpids())

    async def flow_stats(self, request: web.Request) -> web.Response:
        """GET|POST /stats/flow/{dpid}: the flow entries (filtered by the body)."""
        dp = self._dp(request.match_info["dpid"])
        body = await request.read()
        try:
            flow = json.loads(body) if body else {}
            stats = _flow_stats_request(dp, flow)
            priority = ofctl.str_to_int(flow.get("priority", -1))
        except ValueError as exc:
            raise Status(400, f"Invalid syntax: {body[:200]!r}: {exc}") from exc
        except AttributeError as exc:
            raise Status(501, f"Unsupported OF request in this version: {exc}") from exc
        replies = await self._multipart(dp, stats)
        entries = [s for r in replies for s in r.body if not 0 <= priority != s.priority]
        return web.json_response({str(dp.id): [_flow_entry(s) for s in entries]})

    async def port_desc(self, request: web.Request) -> web.Response:
        """GET /stats/portdesc/{dpid}: the port descriptions."""
        dp = self._dp(request.match_info["dpid"])
        msg = dp.ofproto_parser.OFPPortDescStatsRequest(dp, 0)
        replies = await self._multipart(dp, msg)
        return web.json_response({str(dp.id): [_port(d) for r in replies for d in r.body]})

    async def port_stats(self, request: web.Request) -> web.Response:
        """GET /stats/port/{dpid}[/{port}]: every port's counters (or one's), asked of the
        switch now."""
        dp = self._dp(request.match_info["dpid"])
        port = request.match_info.get("port")
        try:
            number = dp.ofproto.OFPP_ANY if port is None else ofctl.str_to_int(port)
        except ValueError as exc:
            raise Status(400, f"Invalid port: {port}") from exc
        msg = dp.ofproto_parser.OFPPortStatsRequest(dp, 0, number)
        replies = await self._multipart(dp, msg)
        return web.json_response({str(dp.id): [_port_stats(s) for r in replies for s in r.body]})

    # ----------------------------------------------------------------------------------
    # commands

    async def mod_flow_entry(self, request: web.Request) -> web.Response:
        """POST /stats/flowentry/{cmd}: add, modify or delete a flow entry."""
        body = _literal(await request.read())
        dp = self._dp(_dpid_of(body, request))
        commands = {
            "add": dp.ofproto.OFPFC_ADD,
            "modify": dp.ofproto.OFPFC_MODIFY,
            "modify_strict": dp.ofproto.OFPFC_MODIFY_STRICT,
            "delete": dp.ofproto.OFPFC_DELETE,
            "delete_strict": dp.ofproto.OFPFC_DELETE_STRICT,
        }
        command = commands.get(request.match_info["cmd"])
        if command is None:
            raise Status(404, f"No such command : {request.match_info['cmd']}")
        _send(lambda: ofctl.mod_flow_entry(dp, body, command))
        return web.Response(status=200, body=b"", content_type="text/html")

    async def clear(self, request: web.Request) -> web.Response:
        """DELETE /stats/flowentry/clear/{dpid}: delete every flow entry."""
        body = _literal(await request.read())
        dp = self._dp(_dpid_of(body, request))
        flow = {"table_id": dp.ofproto.OFPTT_ALL}
        _send(lambda: ofctl.mod_flow_entry(dp, flow, dp.ofproto.OFPFC_DELETE))
        return web.Response(status=200, body=b"", content_type="text/html")

    async def _multipart(self, dp: Any, msg: Any) -> list[Any]:
        """The reply parts. Ryu waits 1 s per part and answers what it has (an empty list
        when the switch is silent); this emulator answers 500 instead of a table that
        looks empty (a deviation, see drivers/ryu_rest/CHECKED.md)."""
        try:
            return await self.switches_.multipart(dp.id, msg)
        except SouthboundError as exc:
            raise Status(500, f"openflow:{dp.id}: {exc}") from exc

    def _dp(self, dpid: object) -> Any:
        try:
            number = int(str(dpid), 0)
        except ValueError as exc:
            raise Status(400, f"Invalid dpid: {dpid}") from exc
        dp = self.switches_.datapath(number)
        if dp is None:
            raise Status(404, f"No such Datapath: {dpid}")
        return dp


def _literal(raw: bytes) -> Any:
    """The body as ofctl_rest reads it (``ast.literal_eval``); ``{}`` when empty."""
    if not raw:
        return {}
    try:
        return ast.literal_eval(raw.decode("utf-8"))
    except SyntaxError as exc:
        raise Status(400, f"Invalid syntax: {raw[:200]!r}") from exc
    # a ValueError (e.g. JSON true) escapes, as in ofctl_rest: a 500


def _dpid_of(body: Any, request: web.Request) -> object:
    dpid = body.get("dpid", None)  # a body that is not an object: AttributeError, a 500
    if not dpid:
        dpid = request.match_info.get("dpid")
        if dpid is None:
            raise Status(400, "Cannot get dpid from request parameters")
    return dpid


def _send(build_and_send: Callable[[], None]) -> None:
    try:
        build_and_send()
    except ValueError as exc:
        raise Status(400, f"Invalid syntax: {exc}") from exc
    except AttributeError as exc:
        raise Status(501, f"Unsupported OF request in this version: {exc}") from exc


# --------------------------------------------------------------------------------------
# OpenFlow 1.3 messages <-> ofctl_rest JSON (os-ken's ofctl_v1_3 does the fields)


def _flow_stats_request(dp: Any, flow: dict[str, Any]) -> Any:
    ofp, util = dp.ofproto, ofctl.UTIL
    return dp.ofproto_parser.OFPFlowStatsRequest(
        dp,
        ofctl.str_to_int(flow.get("flags", 0)),
        util.ofp_table_from_user(flow.get("table_id", ofp.OFPTT_ALL)),
        util.ofp_port_from_user(flow.get("out_port", ofp.OFPP_ANY)),
        util.ofp_group_from_user(flow.get("out_group", ofp.OFPG_ANY)),
        ofctl.str_to_int(flow.get("cookie", 0)),
        ofctl.str_to_int(flow.get("cookie_mask", 0)),
        ofctl.to_match(dp, flow.get("match", {})),
    )


def _flow_entry(s: Any) -> dict[str, Any]:
    return {
        "priority": s.priority, "cookie": s.cookie, "idle_timeout": s.idle_timeout,
        "hard_timeout": s.hard_timeout, "byte_count": s.byte_count,
        "duration_sec": s.duration_sec, "duration_nsec": s.duration_nsec,
        "packet_count": s.packet_count, "length": s.length, "flags": s.flags,
        "actions": ofctl.actions_to_str(s.instructions),
        "match": ofctl.match_to_str(s.match),
        "table_id": ofctl.UTIL.ofp_table_to_user(s.table_id),
    }  # fmt: skip


PORT_COUNTERS = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_dropped", "tx_dropped",
                 "rx_errors", "tx_errors", "rx_frame_err", "rx_over_err", "rx_crc_err",
                 "collisions", "duration_sec", "duration_nsec")  # fmt: skip


def _port_stats(s: Any) -> dict[str, Any]:
    """One ``ofp_port_stats`` as ofctl_rest's /stats/port lists it."""
    return {"port_no": ofctl.UTIL.ofp_port_to_user(s.port_no)} | {
        k: getattr(s, k) for k in PORT_COUNTERS
    }


def _port(d: Any) -> dict[str, Any]:
    return {
        "hw_addr": d.hw_addr, "name": d.name.decode("utf-8", errors="replace"),
        "config": d.config, "state": d.state, "curr": d.curr, "advertised": d.advertised,
        "supported": d.supported, "peer": d.peer, "curr_speed": d.curr_speed,
        "max_speed": d.max_speed, "port_no": ofctl.UTIL.ofp_port_to_user(d.port_no),
    }  # fmt: skip
