"""The inventory entry of an OpenFlow 1.0 switch driven the "dpctl way" (kind ``hp_dpctl``):
an HP/Aruba switch's passive OpenFlow listener, programmed by a tool run per request.

    sw1:
      driver: hp_dpctl
      target: tcp:192.0.2.21:6633     # openflow > instance > listen-port on the switch
      tool: auto                      # the reference dpctl when on PATH, else ovs-ofctl
      tool_path: /opt/of/dpctl        # where it is (default: PATH)
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from drivers.spec import DeviceSpec, host_port


class HpDpctlSpec(DeviceSpec):
    driver: Literal["hp_dpctl"]
    target: str = Field(description="the switch's passive OpenFlow 1.0 listener: tcp:HOST:PORT")
    tool: Literal["auto", "dpctl", "ovs-ofctl"] = Field(
        default="auto",
        description="the tool that talks to it (auto: the OpenFlow 1.0 reference dpctl when "
        "one is on PATH, else ovs-ofctl; each recognised by what it says it is)",
    )
    tool_path: Path | None = Field(default=None, description="where the tool is (default: PATH)")
    verify_wait_s: float | None = Field(
        default=None,
        gt=0,
        le=600,
        description="dpctl: longest wait for a batch to show in the table read back (dpctl "
        "sends no barrier and never hears a refusal; default: timeout_s)",
    )

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        if not value.startswith("tcp:"):
            raise ValueError(f"{value!r}: expected tcp:HOST:PORT (the switch's listen-port)")
        host_port(value.removeprefix("tcp:"))
        return value
