"""The topology file as written: containerlab-shaped YAML, validated strictly.

    name: ngncs-ost
    topology:
      subnets: [10.0.0.0/24]
      kinds: {ovs: {protocols: [OpenFlow13]}}      # defaults merged into nodes of a kind
      nodes:
        vm1: {kind: host, interfaces: {eth0: 10.0.0.1/24}}
        br1: {kind: ovs, dpid: 1}
        ost1: {kind: polatis, size: 16x16, cross_connects: [[2, 19]]}
      links:
        - endpoints: ["vm1:eth0", "br1:p1"]
      paths:
        long: {src: vm2, dst: vm3, via: ["br2:p2", "ost1:p17", "br1:p3"], initial: true}

Unknown keys are errors. Semantic checks (dangling endpoints, ports used twice, addresses
outside their subnet, paths that do not connect) live in ``topology.py``.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

NODE_NAME = r"^[a-z][a-z0-9]{0,7}$"
ENDPOINT = r"^[a-z][a-z0-9]{0,7}:[a-z][a-z0-9]{0,9}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HostNode(_Strict):
    """A computing host: a network namespace with addressed interfaces."""

    kind: Literal["host"]
    interfaces: dict[Annotated[str, Field(pattern=r"^[a-z][a-z0-9]{0,9}$")], str] = Field(
        min_length=1, description="interface name -> IPv4 address with prefix, e.g. 10.0.0.1/24"
    )

    @field_validator("interfaces")
    @classmethod
    def _addresses(cls, value: dict[str, str]) -> dict[str, str]:
        for name, addr in value.items():
            try:
                ipaddress.IPv4Interface(addr)
            except ValueError as exc:
                raise ValueError(f"interface {name}: {exc}") from exc
            if "/" not in addr:
                raise ValueError(f"interface {name}: address {addr!r} needs a prefix length")
        return value


class OvsNode(_Strict):
    """An electronic packet switch: an Open vSwitch bridge (userspace datapath)."""

    kind: Literal["ovs"]
    dpid: int = Field(ge=1, lt=2**48, description="OpenFlow datapath id")
    protocols: list[Literal["OpenFlow10", "OpenFlow13", "OpenFlow14"]] = ["OpenFlow13"]
    driver: str = Field(
        default="ovs",
        pattern=r"^[a-z][a-z0-9_]{0,31}$",
        description=(
            "the driver kind the emulated fabric builds it for (any registered kind that "
            "programs packet switches, see `reroute inventory kinds`): ovs (OpenFlow 1.3 to "
            "the bridge), hp_dpctl (the bridge plays an HP switch: OpenFlow 1.0 on a passive "
            "TCP listener, the seeds' dpctl method), odl (through an OpenDaylight-compatible "
            "northbound), ryu_rest (through a Ryu ofctl_rest-compatible controller), ... Real "
            "equipment is reached as its inventory says."
        ),
    )


class OpticalNode(_Strict):
    """An optical circuit switch: ingress ports 1..N, egress ports N+1..N+M."""

    kind: Literal["optical"]
    driver: str = Field(
        pattern=r"^[a-z][a-z0-9_]{0,31}$",
        description=(
            "the driver kind of the switch (any registered kind that makes cross-connects, "
            "see `reroute inventory kinds`): the emulated fabric plays it with that kind's "
            "emulator; real equipment is reached as its inventory says"
        ),
    )
    size: str = Field(pattern=r"^\d{1,3}x\d{1,3}$", description="ingress x egress, e.g. 16x16")
    cross_connects: list[tuple[int, int]] = Field(
        default=[], description="initial connections as [ingress, egress] port pairs"
    )

    @property
    def ingress_count(self) -> int:
        """The N of the switch's NxM size."""
        return int(self.size.split("x")[0])

    @property
    def egress_count(self) -> int:
        """The M of the switch's NxM size."""
        return int(self.size.split("x")[1])


class LongHaulNode(_Strict):
    """An emulated long-haul connection (ANUE-like): two ports, a delay between them."""

    kind: Literal["longhaul"]
    delay_ms: float = Field(default=0.0, ge=0.0, le=10_000.0)


Node = Annotated[HostNode | OvsNode | OpticalNode | LongHaulNode, Field(discriminator="kind")]


class LinkSpec(_Strict):
    endpoints: tuple[
        Annotated[str, Field(pattern=ENDPOINT)], Annotated[str, Field(pattern=ENDPOINT)]
    ] = Field(description='two "node:port" strings')


class PathSpec(_Strict):
    """A named path: the output port chosen at each switching node, src host to dst host."""

    src: str = Field(pattern=NODE_NAME)
    dst: str = Field(pattern=NODE_NAME)
    via: list[Annotated[str, Field(pattern=ENDPOINT)]] = Field(min_length=1)
    initial: bool = Field(default=False, description="forwarded when the fabric comes up")


class TopologyBody(_Strict):
    subnets: list[str] = Field(min_length=1)
    kinds: dict[str, dict[str, object]] = {}
    nodes: dict[Annotated[str, Field(pattern=NODE_NAME)], Node] = Field(min_length=1)
    links: list[LinkSpec] = []
    paths: dict[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$")], PathSpec] = {}

    @field_validator("subnets")
    @classmethod
    def _subnets(cls, value: list[str]) -> list[str]:
        for subnet in value:
            ipaddress.IPv4Network(subnet)  # ValueError names the bad one
        return value


class TopologyFile(_Strict):
    """The root of a topology file."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,15}$")
    topology: TopologyBody


def merge_kind_defaults(raw: object) -> object:
    """Apply containerlab-style ``topology.kinds`` defaults to each node (node keys win)."""
    if not isinstance(raw, dict):
        return raw
    body = raw.get("topology")
    if not isinstance(body, dict) or not isinstance(body.get("kinds"), dict):
        return raw
    nodes = body.get("nodes")
    if not isinstance(nodes, dict):
        return raw
    kinds = body["kinds"]
    merged = {}
    for name, node in nodes.items():
        defaults = kinds.get(node.get("kind")) if isinstance(node, dict) else None
        merged[name] = {**defaults, **node} if isinstance(defaults, dict) else node
    return {**raw, "topology": {**body, "nodes": merged}}


def port_number(port: str) -> int | None:
    """``p12`` -> 12; anything else -> None."""
    match = re.fullmatch(r"p([1-9]\d{0,4})", port)
    return int(match.group(1)) if match else None
