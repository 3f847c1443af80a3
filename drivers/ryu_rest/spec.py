"""The inventory entry of a switch behind a Ryu (or os-ken) controller running its
``ofctl_rest`` application (kind ``ryu_rest``): the controller's REST base URL and the
switch's datapath id there.

    br1:
      driver: ryu_rest
      target: http://192.0.2.50:8080     # ryu-manager ryu.app.ofctl_rest (wsgi port 8080)
      dpid: 1                            # default: the topology's dpid
      verify_wait_s: 2                   # longest wait for a change to show in /stats/flow

``ofctl_rest`` has no authentication: keep it on a control network or behind a proxy
(https targets: ``verify_tls``, ``ca_certificate``). A proxy that asks for HTTP Basic
authentication gets ``user`` and ``password`` (``{env: VAR}`` or ``{file: F}``, never
inline, never in the target URL).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from drivers.spec import DeviceSpec, SecretRef, http_target


class RyuRestSpec(DeviceSpec):
    driver: Literal["ryu_rest"]
    target: str = Field(description="the controller's ofctl_rest base URL, http(s)://HOST:PORT")
    dpid: int | None = Field(
        default=None, ge=1, lt=2**64, description="the switch's datapath id (default: topology's)"
    )
    verify_wait_s: float = Field(
        default=2.0,
        gt=0,
        le=600,
        description="longest wait for a batch to show in the switch's flow table (ofctl_rest "
        "answers before the switch has applied, or refused, a change)",
    )
    verify_tls: bool = Field(default=True, description="https: check the controller's certificate")
    ca_certificate: Path | None = Field(
        default=None, description="https: CA to check it against (default: the system's)"
    )
    user: str | None = Field(
        default=None, min_length=1, description="HTTP Basic user of a proxy in front of it"
    )
    password: SecretRef | None = Field(
        default=None, description="that user's password: {env: VAR} or {file: F}"
    )

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        return http_target(value)

    @model_validator(mode="after")
    def _both(self) -> Self:
        if (self.user is None) != (self.password is None):
            raise ValueError("give both user and password (a proxy's Basic auth), or neither")
        return self
