"""How to reach one device: the per-kind entry of an inventory file, validated strictly.

Every driver kind declares a ``DeviceSpec`` subclass (``driver: Literal["<kind>"]``, its
``target`` format, its options) and registers it with its class (``drivers.base.register``);
the inventory loader (``services.reroute.model.inventory``) validates each device against the
model of its kind, and the registry builds the driver from (name, spec, expectations).

Secrets are never inline: a spec names an environment variable or a file, and
``read_secret`` fetches the value only when the driver is built; specs print no secret.
Relative paths in a spec are resolved against the inventory file's directory by the loader.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from drivers.errors import ConfigError

HOST_PORT = re.compile(r"^(?P<host>\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})$")


class DeviceSpec(BaseModel):
    """What every device entry has: its driver kind, its target and a timeout."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    driver: str = Field(description="the driver kind (drivers registered in this installation)")
    target: str = Field(description="how to reach the device; its format depends on the kind")
    timeout_s: float = Field(
        default=5.0, gt=0, le=300, description="longest wait for one answer of the device"
    )

    @property
    def readback_lag_s(self) -> float:
        """How long a write the device took may stay out of what it reads back (a
        controller that shows the switch's flows only at its next statistics poll): the
        least time a step that verifies its write can take. 0: the device answers with
        its own state at once."""
        return 0.0


class TlsFiles(BaseModel):
    """Client TLS material, as ``ovs-ofctl`` (``-p``, ``-c``, ``-C``) and gRPC take it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    private_key: Path | None = Field(default=None, description="client private key (PEM)")
    certificate: Path | None = Field(default=None, description="client certificate (PEM)")
    ca_certificate: Path = Field(
        description="CA certificate the device's certificate is checked against"
    )
    server_name: str | None = Field(
        default=None,
        description="name expected in the device's certificate (default: OpenFlow checks "
        "only the CA's signature, as ovs-ofctl does; gRPC checks the host)",
    )

    @model_validator(mode="after")
    def _pair(self) -> Self:
        if (self.private_key is None) != (self.certificate is None):
            raise ValueError("give both private_key and certificate, or neither")
        return self


class SecretRef(BaseModel):
    """Where a secret comes from: an environment variable or a file (first line), never inline."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    file: Path | None = None

    @model_validator(mode="after")
    def _one(self) -> Self:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of env: VARIABLE or file: PATH")
        return self

    def __str__(self) -> str:
        return f"env {self.env}" if self.env else f"file {self.file}"


def read_secret(device: str, ref: SecretRef) -> str:
    """The secret's value; ConfigError naming the device and the source (not the value)."""
    if ref.env is not None:
        value = os.environ.get(ref.env)
        if value is None:
            raise ConfigError(f"{device}: environment variable {ref.env} (its password) is not set")
        return value
    assert ref.file is not None
    try:
        lines = ref.file.read_text().splitlines()
    except OSError as exc:
        raise ConfigError(
            f"{device}: cannot read its password file {ref.file}: {exc.strerror}"
        ) from exc
    if not lines or not lines[0]:
        raise ConfigError(f"{device}: password file {ref.file} is empty")
    return lines[0]


def http_target(value: str) -> str:
    """An ``http(s)://HOST[:PORT]`` base URL, without a trailing slash; ValueError for
    another form, and for credentials in it (``http://user:pass@host``: they would be
    shown wherever the target is, in logs and ``inventory check``), whose message shows
    neither the password nor the URL."""
    scheme, sep, rest = value.partition("://")
    if scheme not in ("http", "https") or not sep or not rest:
        shown = value if "@" not in value else "(a URL with credentials)"
        raise ValueError(f"{shown!r}: expected http(s)://HOST:PORT")
    if "@" in rest.split("/", 1)[0]:
        raise ValueError(
            "the target has credentials in it (http://USER:PASSWORD@HOST): they are refused, "
            "since a target is shown in logs and checks; give user: USER and password: "
            "{env: VARIABLE} or {file: FILE} instead"
        )
    return value.rstrip("/")


def host_port(text: str, what: str = "target") -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``) -> (host, port); ValueError naming the fault."""
    m = HOST_PORT.match(text)
    if m is None or not 0 < int(m["port"]) < 65536:
        raise ValueError(f"{what} {text!r}: expected HOST:PORT with a port 1-65535")
    return m["host"].strip("[]"), int(m["port"])


@dataclass(frozen=True, slots=True, kw_only=True)
class Expect:
    """What the topology says a device is; a driver compares it with the device when it
    opens and refuses (DeviceRejected, nothing changed) on a mismatch."""

    dpid: int | None = None  # OpenFlow datapath id
    size: tuple[int, int] | None = None  # optical switch: ingress x egress ports
