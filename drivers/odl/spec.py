"""The inventory entry of a switch behind OpenDaylight (kind ``odl``): the controller's
northbound base URL, its API style and the switch's node id there.

    sw1:
      driver: odl
      target: http://192.0.2.40:8181     # no port: 8181 (RESTCONF), 8080 for api: adsal
      api: rfc8040                       # rfc8040 | restconf | adsal
      node: openflow:1                   # default: openflow:<the topology's dpid>
      user: admin
      password: {env: ODL_PASSWORD}      # or {file: odl-password.txt}; never inline
      verify_tls: true                   # https: check the controller's certificate
      read_back: operational             # or config: trust the controller (see below)
      stats_interval_s: 3                # the controller's statistics poll (ODL's default)
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from drivers.spec import DeviceSpec, SecretRef, http_target


class OdlSpec(DeviceSpec):
    driver: Literal["odl"]
    target: str = Field(
        description="the northbound's base URL, http(s)://HOST[:PORT]; without a port, "
        "8181 (RESTCONF, Lithium on) or 8080 (api: adsal, Hydrogen/Helium)"
    )
    api: Literal["rfc8040", "restconf", "adsal"] = Field(
        default="rfc8040",
        description="RFC 8040 (/rests, Oxygen on), draft RESTCONF (/restconf, Lithium.."
        "Sulfur) or AD-SAL flowprogrammer (Hydrogen/Helium)",
    )
    node: str | None = Field(
        default=None,
        pattern=r"^openflow:\d+$",
        description="the switch's node id (default openflow:<dpid of the topology>)",
    )
    user: str = Field(default="admin", min_length=1)
    password: SecretRef = Field(
        description="where the password comes from: {env: VAR} or {file: F}"
    )
    verify_tls: bool = Field(default=True, description="https: check the controller's certificate")
    ca_certificate: Path | None = Field(
        default=None, description="https: CA to check it against (default: the system's)"
    )
    operational_wait_s: float = Field(
        default=10.0, gt=0, le=600, description="longest wait for a change to show in operational"
    )
    stats_interval_s: float = Field(
        default=3.0,
        gt=0,
        le=600,
        description="the controller's statistics poll (ODL's default: every 3 s): the "
        "operational datastore shows a change only after it, so each verified step takes up "
        "to this long (the service refuses a step cap below it)",
    )
    read_back: Literal["operational", "config"] = Field(
        default="operational",
        description="where a batch is confirmed: operational (what the switch has, as the "
        "controller last polled it: a refusal shows) or config (what the controller was "
        "asked for, at once: a client that trusts the controller, as the seeds' external "
        "ODL scripts did; RESTCONF styles only). Plans are made on config either way",
    )

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        return http_target(value)

    @model_validator(mode="after")
    def _config_needs_restconf(self) -> OdlSpec:
        if self.read_back == "config" and self.api == "adsal":
            raise ValueError("read_back: config needs a RESTCONF api (rfc8040 or restconf)")
        return self

    @property
    def readback_lag_s(self) -> float:
        """A change reaches operational (or AD-SAL's statistics) at the next poll."""
        return self.stats_interval_s if self.read_back == "operational" else 0.0

    @property
    def url(self) -> str:
        """``target`` with its port: as given, else the API style's default."""
        parts = urlsplit(self.target)
        if parts.port is not None:
            return self.target
        port = DEFAULT_PORTS[self.api]
        return parts._replace(netloc=f"{parts.netloc}:{port}").geturl()


DEFAULT_PORTS = {"rfc8040": 8181, "restconf": 8181, "adsal": 8080}
