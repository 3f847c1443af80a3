"""The inventory entry of a Polatis optical switch (kind ``polatis_scpi``): SCPI over a raw
TCP socket, named by its VISA resource string.

    ost1:
      driver: polatis_scpi
      target: TCPIP0::192.0.2.30::5025::SOCKET
      power_monitors: auto     # found at open (I-OST: none; else a :PMON:POW? probe), yes / no
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from drivers.spec import DeviceSpec

RESOURCE = re.compile(r"^TCPIP\d*::(?P<host>[A-Za-z0-9_.:\[\]-]+)::(?P<port>\d{1,5})::SOCKET$")


class PolatisSpec(DeviceSpec):
    driver: Literal["polatis_scpi"]
    target: str = Field(
        description="VISA resource of the SCPI socket, TCPIP0::HOST::5025::SOCKET (port 5025; "
        "3082 is TL1 and 830 NETCONF)"
    )
    backend: str = Field(default="@py", description="pyvisa backend (@py: pyvisa-py)")
    power_monitors: Literal["auto", "yes", "no"] = Field(
        default="auto",
        description="whether the unit has optical power monitors (:PMON:POW?): auto finds "
        "out at open (an I-OST product code has none; any other unit is asked one port's "
        "power, and has them when it answers); without them it reports no port state",
    )

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        m = RESOURCE.match(value)
        if m is None or not 0 < int(m["port"]) < 65536:
            raise ValueError(
                f"{value!r}: expected a VISA socket resource TCPIP0::HOST::PORT::SOCKET"
            )
        return value
