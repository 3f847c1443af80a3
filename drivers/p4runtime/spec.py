"""The inventory entry of a P4Runtime switch (kind ``p4runtime``): bmv2 simple_switch_grpc,
Stratum, Tofino, or our emulator.

    p4sw1:
      driver: p4runtime
      target: 192.0.2.50:9559
      device_id: 1
      election_id: 10
      p4info: ../p4/reroute.p4info.txtpb   # the program the device runs (names -> ids)
      pipeline: ../build/reroute.json        # device config, only to install it
      install_pipeline: false                # never reset a live device's tables unasked
      ports: unix:/run/bmv2/br0.mgmt         # optional: where its port state is read

P4Runtime has no port state (that is gNMI's). ``ports`` names an OpenFlow target
(``ovs-ofctl`` form) of the same switch that reports it, such as the management socket of
the Open vSwitch bridge that is the dataplane of our EMULATOR: with it the driver is a
``PortMonitor`` (the optical MBB waits on it for a new circuit's lock).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from drivers.spec import DeviceSpec, TlsFiles, host_port


class P4RuntimeSpec(DeviceSpec):
    driver: Literal["p4runtime"]
    target: str = Field(description="the P4Runtime gRPC server, HOST:PORT")
    device_id: int = Field(default=1, ge=0, lt=2**64)
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
    ports: str | None = Field(
        default=None,
        description="an OpenFlow target (tcp:, ssl:, unix:) of the same switch that reports "
        "its port state (P4Runtime has none)",
    )

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        host_port(value)
        return value

    @model_validator(mode="after")
    def _install(self) -> Self:
        if self.install_pipeline and self.p4info is None:
            raise ValueError("install_pipeline needs p4info (and the target's pipeline)")
        return self
