"""Loaded topology: resolved, checked and frozen.

``load_topology(file)`` reads a topology file (see ``topofile.py`` for its shape), rejects
anything inconsistent with a ``TopologyError`` naming the file and the node, link or path
at fault, and returns a ``Topology``: immutable, with every named path resolved into the
hops a packet takes in both directions and the optical circuits it needs.

Port conventions: switch ports are ``pN`` with N the OpenFlow port number (ovs) or the
optical port number (polatis). A duplex transceiver on an optical switch occupies ingress i
and egress N+i (N = ingress count); a link may name either. A long-haul node has p1 and p2.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path as FsPath
from typing import Any, TypeVar

from pydantic import ValidationError

from drivers import base as drivers_base
from services.reroute.errors import DriverError, TopologyError
from services.reroute.model.problems import Problem, dotted, nearest, report, validation_problems
from services.reroute.model.topofile import (
    HostNode,
    LongHaulNode,
    OpticalNode,
    OvsNode,
    PathSpec,
    TopologyFile,
    merge_kind_defaults,
    port_number,
)
from services.reroute.model.yamlfile import (
    Document,
    Loc,
    YAMLError,
    strict_document,
    yaml_error_line,
    yaml_error_text,
)


class NodeKind(StrEnum):
    HOST = "host"
    OVS = "ovs"
    OPTICAL = "optical"
    LONGHAUL = "longhaul"


KNOWN_KINDS = tuple(k.value for k in NodeKind)
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class Endpoint:
    node: str
    port: str

    def __str__(self) -> str:
        return f"{self.node}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        """``node:port`` as an endpoint."""
        node, _, port = text.partition(":")
        return cls(node=node, port=port)


@dataclass(frozen=True, slots=True, kw_only=True)
class Link:
    index: int
    a: Endpoint
    b: Endpoint


@dataclass(frozen=True, slots=True, kw_only=True)
class Interface:
    name: str
    address: ipaddress.IPv4Interface


@dataclass(frozen=True, slots=True, kw_only=True)
class Host:
    name: str
    interfaces: tuple[Interface, ...]
    kind: NodeKind = NodeKind.HOST

    @property
    def address(self) -> ipaddress.IPv4Address:
        """The host's first interface address."""
        return self.interfaces[0].address.ip


@dataclass(frozen=True, slots=True, kw_only=True)
class Switch:
    """An OpenFlow packet switch (an OVS bridge in the fabric)."""

    name: str
    dpid: int
    protocols: tuple[str, ...]
    ports: tuple[int, ...]
    driver: str = "ovs"  # the driver kind the emulated fabric gives it (a registered kind)
    kind: NodeKind = NodeKind.OVS


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class Circuit:
    """One optical cross-connect: light entering ``ingress`` leaves at ``egress``."""

    switch: str
    ingress: int
    egress: int

    def __str__(self) -> str:
        return f"{self.switch}:{self.ingress}->{self.egress}"


@dataclass(frozen=True, slots=True, kw_only=True)
class OpticalSwitch:
    name: str
    ingress_count: int
    egress_count: int
    attachments: tuple[int, ...]  # ingress numbers of linked duplex ports
    cross_connects: frozenset[Circuit]
    driver: str  # its driver kind (a registered kind that makes cross-connects)
    kind: NodeKind = NodeKind.OPTICAL

    def egress_of(self, ingress: int) -> int:
        """The egress port of the duplex port whose ingress is ``ingress``."""
        return ingress + self.ingress_count

    def ingress_of(self, egress: int) -> int:
        """The ingress port of the duplex port whose egress is ``egress``."""
        return egress - self.ingress_count


@dataclass(frozen=True, slots=True, kw_only=True)
class LongHaul:
    name: str
    delay_ms: float
    kind: NodeKind = NodeKind.LONGHAUL


AnyNode = Host | Switch | OpticalSwitch | LongHaul


@dataclass(frozen=True, slots=True, kw_only=True)
class Hop:
    """Traffic enters ``node`` at ``in_port`` and leaves at ``out_port`` (OpenFlow numbers)."""

    node: str
    in_port: int
    out_port: int

    def reversed(self) -> Hop:
        """The hop traversed the other way."""
        return Hop(node=self.node, in_port=self.out_port, out_port=self.in_port)


@dataclass(frozen=True, slots=True, kw_only=True)
class Path:
    name: str
    src: str
    dst: str
    src_ip: ipaddress.IPv4Address
    dst_ip: ipaddress.IPv4Address
    hops: tuple[Hop, ...]  # switch hops src -> dst; reverse traffic takes them reversed
    circuits: frozenset[Circuit]  # optical cross-connects needed, both directions
    initial: bool
    delay_ms: float = 0.0  # one way: the long-haul nodes it crosses (links count as 0)

    @property
    def reverse_hops(self) -> tuple[Hop, ...]:
        """The path's hops in the reverse direction."""
        return tuple(h.reversed() for h in reversed(self.hops))

    def describe(self) -> str:
        """The path as one line: source, hops with ports, destination."""
        hops = " -> ".join(f"{h.node}[{h.in_port}>{h.out_port}]" for h in self.hops)
        return f"{self.src} -> {hops} -> {self.dst}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Topology:
    name: str
    file: str
    subnets: tuple[ipaddress.IPv4Network, ...]
    nodes: Mapping[str, AnyNode]
    links: tuple[Link, ...]
    paths: Mapping[str, Path]
    _peers: Mapping[Endpoint, Endpoint] = field(repr=False)

    def of_kind(self, cls: type[_T]) -> list[_T]:
        """The nodes of class ``cls``."""
        return [n for n in self.nodes.values() if isinstance(n, cls)]

    @property
    def hosts(self) -> list[Host]:
        """The hosts."""
        return self.of_kind(Host)

    @property
    def addresses(self) -> dict[str, str]:
        """Each host's name and its first address: a flow may name hosts (``vm2>vm3``)."""
        return {h.name: str(h.address) for h in self.hosts}

    @property
    def switches(self) -> list[Switch]:
        """The packet switches."""
        return self.of_kind(Switch)

    @property
    def optical_switches(self) -> list[OpticalSwitch]:
        """The optical switches."""
        return self.of_kind(OpticalSwitch)

    def peer(self, endpoint: Endpoint) -> Endpoint | None:
        """The endpoint linked to ``endpoint``, or None."""
        return self._peers.get(endpoint)


# --------------------------------------------------------------------------------------
# loading


def load_topology(file: FsPath | str) -> Topology:
    """Read, validate and resolve a topology file."""
    path = FsPath(file)
    try:
        text = path.read_text()
    except OSError as exc:
        raise TopologyError(path, "", f"cannot read: {exc.strerror}") from exc
    return parse_topology(text, path)


def parse_topology(text: str, file: FsPath | str = "<string>") -> Topology:
    """Parse and validate a topology document (``file`` names it in errors)."""
    try:
        doc = strict_document(text)
    except YAMLError as exc:
        line = yaml_error_line(exc)
        raise TopologyError(file, "", f"not valid YAML: {yaml_error_text(exc)}", line=line) from exc
    problems = _kind_problems(doc)
    try:
        spec = TopologyFile.model_validate(merge_kind_defaults(doc.data))
    except ValidationError as exc:
        unknown = {p.where for p in problems}
        found = validation_problems(exc, TopologyFile, doc, _locate)
        problems += [p for p in found if p.where not in unknown]
    if problems:
        raise _failure(file, problems)
    return _Resolver(spec, str(file), doc).resolve()


def _failure(file: FsPath | str, problems: list[Problem]) -> TopologyError:
    first = min(problems, key=lambda p: p.line or 0)
    message = f"{first.key}: {first.message}" if first.key else first.message
    text = report(file, problems)
    return TopologyError(file, first.where, message, line=first.line, text=text)


def _kind_problems(doc: Document) -> list[Problem]:
    """Unknown kinds, each with the nearest known one (pydantic's error is cryptic)."""
    raw = doc.data
    body = raw.get("topology") if isinstance(raw, dict) else None
    if not isinstance(body, dict):
        return []
    problems = [
        Problem(
            line=doc.line(("topology", "kinds", kind)),
            where=f"kinds.{kind}",
            message="unknown kind" + nearest(str(kind), KNOWN_KINDS),
        )
        for kind in (body.get("kinds") or {})
        if kind not in KNOWN_KINDS
    ]
    nodes = body.get("nodes")
    for name, node in (nodes or {}).items() if isinstance(nodes, dict) else ():
        kind = node.get("kind") if isinstance(node, dict) else None
        if kind not in KNOWN_KINDS:
            line = doc.line(("topology", "nodes", name, "kind"))
            hint = nearest(str(kind), KNOWN_KINDS) if kind is not None else ""
            problems.append(
                Problem(line=line, where=f"node {name}", message=f"unknown kind {kind!r}{hint}")
            )
    return problems


def _locate(loc: Loc) -> tuple[str, str]:
    """A location as (place, key): ``node br1``, ``link 3`` (1-based), ``path long``."""
    parts = list(loc)
    if len(parts) >= 3 and parts[0] == "topology" and parts[1] in ("nodes", "paths"):
        return f"{str(parts[1])[:-1]} {parts[2]}", ".".join(str(p) for p in parts[3:])
    if len(parts) >= 3 and parts[0] == "topology" and parts[1] == "links":
        return f"link {int(parts[2]) + 1}", ".".join(str(p) for p in parts[3:])
    return dotted(loc)


def _loc_of(where: str) -> Loc:
    """The location of a place ``_locate`` names (``link 3 [...]`` too)."""
    kind, _, rest = where.partition(" ")
    name = rest.split(" ")[0]
    if kind in ("node", "path") and name:
        return ("topology", f"{kind}s", name)
    if kind == "link" and name.isdigit():
        return ("topology", "links", int(name) - 1)
    return tuple(where.split("."))


class _Resolver:
    """Turns a validated file into a Topology, raising TopologyError on the first fault."""

    def __init__(self, spec: TopologyFile, file: str, doc: Document | None = None) -> None:
        self.spec = spec
        self.file = file
        self.doc = doc
        self.body = spec.topology
        self.subnets = tuple(ipaddress.IPv4Network(s) for s in self.body.subnets)
        self.nodes: dict[str, AnyNode] = {}
        self.peers: dict[Endpoint, Endpoint] = {}
        self.links: list[Link] = []

    def fail(self, where: str, message: str) -> TopologyError:
        """A TopologyError at ``where`` in the file (and its line)."""
        line = self.doc.line(_loc_of(where)) if self.doc is not None else None
        return TopologyError(self.file, where, message, line=line)

    def resolve(self) -> Topology:
        """The resolved, checked topology."""
        self._check_unique_dpids()
        self._resolve_links()
        for name, node in self.body.nodes.items():
            self.nodes[name] = self._resolve_node(name, node)
        self._check_addresses()
        paths = {name: self._resolve_path(name, p) for name, p in self.body.paths.items()}
        self._check_initial_paths(paths)
        return Topology(
            name=self.spec.name,
            file=self.file,
            subnets=self.subnets,
            nodes=self.nodes,
            links=tuple(self.links),
            paths=paths,
            _peers=self.peers,
        )

    # nodes ----------------------------------------------------------------------------

    def _resolve_node(self, name: str, node: Any) -> AnyNode:
        where = f"node {name}"
        if isinstance(node, HostNode):
            ifaces = tuple(
                Interface(name=i, address=ipaddress.IPv4Interface(a))
                for i, a in node.interfaces.items()
            )
            for iface in ifaces:
                if Endpoint(node=name, port=iface.name) not in self.peers:
                    raise self.fail(where, f"interface {iface.name} is not linked")
            return Host(name=name, interfaces=ifaces)
        if isinstance(node, OvsNode):
            ports = sorted(port_number(e.port) or 0 for e in self.peers if e.node == name)
            self._check_driver(where, node.driver, "apply")
            return Switch(
                name=name,
                dpid=node.dpid,
                protocols=tuple(node.protocols),
                ports=tuple(ports),
                driver=node.driver,
            )
        if isinstance(node, OpticalNode):
            return self._resolve_optical(name, node)
        assert isinstance(node, LongHaulNode)
        for port in ("p1", "p2"):
            if Endpoint(node=name, port=port) not in self.peers:
                raise self.fail(where, f"long-haul port {port} is not linked")
        return LongHaul(name=name, delay_ms=node.delay_ms)

    def _check_driver(self, where: str, kind: str, method: str) -> None:
        """A registered driver kind whose sessions have ``method``: ``apply`` (it programs
        packet switches) or ``connect`` (it makes cross-connects). The registry is the one
        list of kinds."""
        try:
            factory = drivers_base.lookup(kind)
        except DriverError as exc:
            raise self.fail(where, f"driver: {str(exc).removeprefix(f'{kind}: ')}") from None
        if not callable(getattr(factory, method, None)):
            what = "program packet switches" if method == "apply" else "make cross-connects"
            raise self.fail(where, f"driver: {kind} does not {what}")

    def _resolve_optical(self, name: str, node: OpticalNode) -> OpticalSwitch:
        where = f"node {name}"
        self._check_driver(where, node.driver, "connect")
        n, m = node.ingress_count, node.egress_count
        circuits: set[Circuit] = set()
        used_in: set[int] = set()
        used_out: set[int] = set()
        for ingress, egress in node.cross_connects:
            if not 1 <= ingress <= n:
                raise self.fail(where, f"cross-connect {ingress}->{egress}: ingress outside 1..{n}")
            if not n < egress <= n + m:
                raise self.fail(
                    where, f"cross-connect {ingress}->{egress}: egress outside {n + 1}..{n + m}"
                )
            if ingress in used_in or egress in used_out:
                raise self.fail(where, f"cross-connect {ingress}->{egress}: port connected twice")
            used_in.add(ingress)
            used_out.add(egress)
            circuits.add(Circuit(switch=name, ingress=ingress, egress=egress))
        attachments = sorted(port_number(e.port) or 0 for e in self.peers if e.node == name)
        return OpticalSwitch(
            name=name,
            ingress_count=n,
            egress_count=m,
            attachments=tuple(attachments),
            cross_connects=frozenset(circuits),
            driver=node.driver,
        )

    def _check_unique_dpids(self) -> None:
        seen: dict[int, str] = {}
        for name, node in self.body.nodes.items():
            if isinstance(node, OvsNode):
                if node.dpid in seen:
                    raise self.fail(
                        f"node {name}", f"dpid {node.dpid} already used by {seen[node.dpid]}"
                    )
                seen[node.dpid] = name

    def _check_addresses(self) -> None:
        seen: dict[ipaddress.IPv4Address, str] = {}
        for host in self.of_kind(Host):
            for iface in host.interfaces:
                where = f"node {host.name}"
                addr = iface.address
                nets = [s for s in self.subnets if addr.ip in s]
                listed = ", ".join(str(s) for s in self.subnets)
                if not nets:
                    raise self.fail(
                        where, f"{iface.name}: {addr} is outside every subnet ({listed})"
                    )
                if addr.network != nets[0]:
                    raise self.fail(where, f"{iface.name}: {addr} does not match subnet {nets[0]}")
                if addr.ip in (nets[0].network_address, nets[0].broadcast_address):
                    raise self.fail(where, f"{iface.name}: {addr.ip} is not a host address")
                if addr.ip in seen:
                    raise self.fail(
                        where, f"{iface.name}: {addr.ip} already used by {seen[addr.ip]}"
                    )
                seen[addr.ip] = f"{host.name}:{iface.name}"

    def of_kind(self, cls: type[_T]) -> Iterator[_T]:
        """The parsed nodes of class ``cls``."""
        return (n for n in self.nodes.values() if isinstance(n, cls))

    # links ----------------------------------------------------------------------------

    def _resolve_links(self) -> None:
        for index, spec in enumerate(self.body.links, start=1):
            where = f"link {index} {list(spec.endpoints)}"
            a, b = (self._endpoint(Endpoint.parse(e), where) for e in spec.endpoints)
            if a.node == b.node:
                raise self.fail(where, "both ends on the same node")
            for end in (a, b):
                if end in self.peers:
                    raise self.fail(where, f"port {end} is already used by another link")
            self.peers[a], self.peers[b] = b, a
            self.links.append(Link(index=index, a=a, b=b))

    def _endpoint(self, end: Endpoint, where: str) -> Endpoint:
        """Check an endpoint against its node; optical ports normalise to the ingress port."""
        node = self.body.nodes.get(end.node)
        if node is None:
            hint = nearest(end.node, self.body.nodes)
            raise self.fail(where, f"endpoint {end} names no node{hint}")
        number = port_number(end.port)
        if isinstance(node, HostNode):
            if end.port not in node.interfaces:
                hint = nearest(end.port, node.interfaces)
                raise self.fail(where, f"{end.node} has no interface {end.port!r}{hint}")
            return end
        if number is None:
            raise self.fail(where, f"port {end.port!r} of {end.node} must be p<number>")
        if isinstance(node, OvsNode):
            if number > 0xFEFF:
                raise self.fail(where, f"port {end} is beyond the OpenFlow port range")
            return end
        if isinstance(node, LongHaulNode):
            if number not in (1, 2):
                raise self.fail(where, f"long-haul node {end.node} has only p1 and p2")
            return end
        n, m = node.ingress_count, node.egress_count
        if 1 <= number <= n:
            ingress = number
        elif n < number <= n + m:
            ingress = number - n
        else:
            raise self.fail(where, f"port {end} is outside 1..{n + m}")
        if ingress + n > n + m:
            raise self.fail(where, f"duplex port {end} has no egress partner {ingress + n}")
        return Endpoint(node=end.node, port=f"p{ingress}")

    # paths ----------------------------------------------------------------------------

    def _resolve_path(self, name: str, spec: PathSpec) -> Path:
        walker = _PathWalker(self, f"path {name}", spec)
        hops, circuits = walker.walk()
        delay_ms = sum(n.delay_ms for n in walker.longhauls)
        src, dst = self.nodes[spec.src], self.nodes[spec.dst]
        assert isinstance(src, Host) and isinstance(dst, Host)
        return Path(
            name=name,
            src=spec.src,
            dst=spec.dst,
            src_ip=src.address,
            dst_ip=dst.address,
            hops=tuple(hops),
            circuits=frozenset(circuits),
            initial=spec.initial,
            delay_ms=delay_ms,
        )

    def _check_initial_paths(self, paths: dict[str, Path]) -> None:
        pairs: dict[frozenset[str], str] = {}
        installed = {c for o in self.of_kind(OpticalSwitch) for c in o.cross_connects}
        for path in paths.values():
            if not path.initial:
                continue
            pair = frozenset((path.src, path.dst))
            if pair in pairs:
                raise self.fail(
                    f"path {path.name}", f"{path.src}<->{path.dst} already initial in {pairs[pair]}"
                )
            pairs[pair] = path.name
            missing = sorted(path.circuits - installed)
            if missing:
                text = ", ".join(str(c) for c in missing)
                raise self.fail(f"path {path.name}", f"initial path needs cross-connects {text}")


class _PathWalker:
    """Follows a path's ``via`` list over the links, hop by hop."""

    def __init__(self, resolver: _Resolver, where: str, spec: PathSpec) -> None:
        self.r = resolver
        self.where = where
        self.spec = spec
        self.via = [Endpoint.parse(v) for v in spec.via]
        self.longhauls: list[LongHaul] = []  # crossed by the walk, in order

    def walk(self) -> tuple[list[Hop], set[Circuit]]:
        """The resolved path, checked hop by hop."""
        src, dst = self.r.nodes.get(self.spec.src), self.r.nodes.get(self.spec.dst)
        for role, node in (("src", src), ("dst", dst)):
            if not isinstance(node, Host):
                name = self.spec.src if role == "src" else self.spec.dst
                hosts = [n for n, x in self.r.nodes.items() if isinstance(x, Host)]
                hint = "" if node is not None else nearest(name, hosts)
                raise self.r.fail(self.where, f"{role} must be a host node{hint}")
        assert isinstance(src, Host)
        at = self._leave(Endpoint(node=src.name, port=src.interfaces[0].name))
        hops: list[Hop] = []
        circuits: set[Circuit] = set()
        step = 0
        while True:
            node = self.r.nodes[at.node]
            if isinstance(node, Host):
                if node.name != self.spec.dst or step != len(self.via):
                    left = (
                        f"; unused via {[str(v) for v in self.via[step:]]}"
                        if step < len(self.via)
                        else ""
                    )
                    raise self.r.fail(self.where, f"traffic reaches host {node.name}{left}")
                return hops, circuits
            if isinstance(node, LongHaul):
                self.longhauls.append(node)
                at = self._leave(Endpoint(node=node.name, port="p2" if at.port == "p1" else "p1"))
                continue
            if step >= len(self.via):
                raise self.r.fail(self.where, f"via ends at {at}, before reaching {self.spec.dst}")
            out = self.via[step]
            step += 1
            if out.node != node.name:
                raise self.r.fail(self.where, f"via {step} is {out} but traffic arrives at {at}")
            if isinstance(node, OpticalSwitch):
                out = self.r._endpoint(out, self.where)
                i, j = port_number(at.port) or 0, port_number(out.port) or 0
                circuits.add(Circuit(switch=node.name, ingress=i, egress=node.egress_of(j)))
                circuits.add(Circuit(switch=node.name, ingress=j, egress=node.egress_of(i)))
            else:
                hops.append(
                    Hop(
                        node=node.name,
                        in_port=port_number(at.port) or 0,
                        out_port=port_number(out.port) or 0,
                    )
                )
            if out == at:
                raise self.r.fail(self.where, f"via {step} sends traffic back out of {at}")
            at = self._leave(out)

    def _leave(self, out: Endpoint) -> Endpoint:
        peer = self.r.peers.get(out)
        if peer is None:
            raise self.r.fail(self.where, f"port {out} is not linked")
        return peer
