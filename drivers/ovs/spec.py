"""The inventory entry of an OpenFlow 1.3 switch (kind ``ovs``): Open vSwitch, PicOS in OVS
mode, or any switch with a passive OpenFlow 1.3 listener.

    br1:
      driver: ovs
      target: tcp:192.0.2.11:6653        # or ssl:HOST:PORT with tls:, or unix:/PATH
      tls: {private_key: sc-privkey.pem, certificate: sc-cert.pem, ca_certificate: cacert.pem}
"""

from __future__ import annotations

import re
from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from drivers.spec import DeviceSpec, TlsFiles, host_port

TARGET = re.compile(r"^(tcp|ssl):(.+)$|^unix:(/.+)$")


class OvsSpec(DeviceSpec):
    driver: Literal["ovs"]
    target: str = Field(
        description="the switch's passive OpenFlow listener: tcp:HOST:PORT, ssl:HOST:PORT "
        "(with tls) or unix:/PATH (as ovs-ofctl takes it)"
    )
    tls: TlsFiles | None = Field(
        default=None, description="for ssl: targets: our key and certificate, and the CA's"
    )

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        m = TARGET.match(value)
        if m is None:
            raise ValueError(f"{value!r}: expected tcp:HOST:PORT, ssl:HOST:PORT or unix:/PATH")
        if m[2] is not None:
            host_port(m[2])
        return value

    @model_validator(mode="after")
    def _tls(self) -> Self:
        ssl = self.target.startswith("ssl:")
        if ssl and (self.tls is None or self.tls.private_key is None):
            raise ValueError("an ssl: target needs tls: private_key, certificate, ca_certificate")
        if not ssl and self.tls is not None:
            raise ValueError("tls: is only for ssl: targets")
        return self
