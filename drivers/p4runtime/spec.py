"""The inventory entry of a P4Runtime switch (kind ``p4runtime``): bmv2 simple_switch_grpc,
Stratum, Tofino, or our emulator.

    p4sw1:
      driver: p4runtime
      target: 192.0.2.50:9559
      device_id: 0                       # required: bmv2's --device-id (default 0), Stratum 1
      election_id: 10
      p4info: ../p4/reroute.p4info.txtpb   # the program the device runs (names -> ids)
      pipeline: ../build/reroute.json        # device config, only to install it
      install_pipeline: false                # never reset a live device's tables unasked
      gnmi: 192.0.2.50:9559                  # optional: its gNMI target (port state)
      ports: unix:/run/bmv2/br0.mgmt         # or: an OpenFlow target that reports it
      names:                                 # optional: the P4Info spells names otherwise
        MyIngress.reroute: pipe.MyIngress.reroute   # (Tofino's bf-p4c: the pipe's name first)

P4Runtime has no port state: real P4 switches serve it over gNMI (Stratum on its
P4Runtime port), and ``gnmi`` names that target: OpenConfig
``interfaces/interface/state/oper-status`` (and ``ifindex``, the port number) subscribed
ON_CHANGE (``drivers.p4runtime.gnmi``; TLS as ``tls``). Or ``ports`` names an OpenFlow
target (``ovs-ofctl`` form) of the same switch that reports it. With either the driver is
a ``PortMonitor`` (the optical MBB waits on it for a new circuit's lock); with neither an
optical plan through the switch is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from drivers.p4runtime import program
from drivers.spec import DeviceSpec, TlsFiles, host_port


class P4RuntimeSpec(DeviceSpec):
    driver: Literal["p4runtime"]
    target: str = Field(description="the P4Runtime gRPC server, HOST:PORT")
    device_id: int = Field(
        ge=0,
        lt=2**64,
        description="the device's id on its P4Runtime server, as the server was started "
        "with: bmv2 simple_switch_grpc's --device-id (0 unless given), Stratum's (1 unless "
        "configured); required, since a wrong one programs another device or none",
    )
    election_id: int = Field(default=1, ge=1, lt=2**128, description="ours; highest is primary")
    p4info: Path | None = Field(
        default=None, description="P4Info of the program (text or binary protobuf)"
    )
    pipeline: Path | None = Field(
        default=None, description="the target's device config (e.g. bmv2 JSON), to install"
    )
    install_pipeline: bool = Field(
        default=False,
        description="install p4info + pipeline (SetForwardingPipelineConfig) when the device "
        "runs another program: this resets its tables",
    )
    tls: TlsFiles | None = Field(default=None, description="TLS to the gRPC server")
    max_batch: int = Field(
        default=0,
        ge=0,
        description="most updates in one Write (0: no limit); a server whose gRPC message "
        "limit (4 MiB unless raised) a large batch would exceed takes them in several",
    )
    names: dict[str, str] = Field(
        default_factory=dict,
        description="the program's names (table MyIngress.reroute, its actions and match "
        "fields) as this device's P4Info spells them, where they differ: Tofino's bf-p4c "
        "puts the pipeline's name first, e.g. {MyIngress.reroute: pipe.MyIngress.reroute}",
    )
    ports: str | None = Field(
        default=None,
        description="an OpenFlow target (tcp:, ssl:, unix:) of the same switch that reports "
        "its port state (P4Runtime has none)",
    )

    gnmi: str | None = Field(
        default=None,
        description="the switch's gNMI target, HOST:PORT (Stratum: its P4Runtime port), "
        "whose OpenConfig interfaces/interface/state/oper-status gives the port state",
    )

    @field_validator("target", "gnmi")
    @classmethod
    def _target(cls, value: str | None) -> str | None:
        if value is not None:
            host_port(value)
        return value

    @field_validator("names")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - program.NAMES)
        if unknown:
            known = ", ".join(sorted(program.NAMES))
            raise ValueError(f"names {unknown} are not the program's (it has: {known})")
        return value

    @model_validator(mode="after")
    def _install(self) -> Self:
        if self.install_pipeline and self.p4info is None:
            raise ValueError("install_pipeline needs p4info (and the target's pipeline)")
        if self.gnmi is not None and self.ports is not None:
            raise ValueError("give one port-state source: gnmi or ports, not both")
        return self
