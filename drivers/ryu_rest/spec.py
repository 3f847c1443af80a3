"""The inventory entry of a switch behind a Ryu (or os-ken) controller running its
``ofctl_rest`` application (kind ``ryu_rest``): the controller's REST base URL and the
switch's datapath id there.

    br1:
      driver: ryu_rest
      target: http://192.0.2.50:8080     # ryu-manager ryu.app.ofctl_rest (wsgi port 8080)
      dpid: 1                            # default: the topology's dpid
      verify_wait_s: 2                   # longest wait for a change to show in /stats/flow

``ofctl_rest`` has no authentication: keep it on a control network or behind a proxy
(https targets: ``verify_tls``, ``ca_certificate``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from drivers.spec import DeviceSpec


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

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")) or len(value.split("://", 1)[1]) == 0:
            raise ValueError(f"{value!r}: expected http(s)://HOST:PORT")
        return value.rstrip("/")
