"""The exception tree as services see it: ``drivers.errors`` (the root ``RerouteError``,
the ``DriverError`` subtree, ``ConfigError``) re-exported, and the service layer's own
errors. The whole tree is drawn in ``drivers.errors``.

Every error raised across a module boundary is one of these, chained with ``from``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from drivers.errors import (
    ConfigError,
    DeviceRejected,
    DeviceTimeout,
    DeviceUnreachable,
    DriverError,
    ProtocolError,
    RerouteError,
    UnknownDriver,
)

__all__ = [
    "OPTIONS",
    "ApiError",
    "ConfigError",
    "DeviceRejected",
    "DeviceTimeout",
    "DeviceUnreachable",
    "DriverError",
    "HostError",
    "PlanError",
    "ProtocolError",
    "RerouteError",
    "TopologyError",
    "UnknownDriver",
    "field_word",
    "option",
]


class TopologyError(RerouteError):
    """A topology file is invalid; ``where`` names the node, link or path at fault and
    ``line`` its line (the first fault's, when ``text`` reports several)."""

    def __init__(
        self,
        file: Path | str,
        where: str,
        message: str,
        *,
        line: int | None = None,
        text: str | None = None,
    ) -> None:
        self.file = str(file)
        self.where = where
        self.message = message
        self.line = line
        at = f"{file}:{line}" if line else str(file)
        super().__init__(text or (f"{at}: {where}: {message}" if where else f"{at}: {message}"))


class HostError(RerouteError):
    """A facility of this host is missing: a network namespace, a raw socket (needs root),
    an interface's counters."""


OPTIONS = frozenset(
    {"flows", "to_path", "strategy", "via", "drain_ms", "bbm_gap_ms", "lock_timeout_ms"}
)
"""The options of a reroute a ``PlanError`` may name, by the API's field names."""
_OPTION = re.compile(r"\{(" + "|".join(sorted(OPTIONS)) + r")(?:=([^{}]*))?\}")


def option(name: str, value: str = "") -> str:
    """A reroute option in a ``PlanError`` message, for each front end to word: ``name``
    (one of ``OPTIONS``) set to ``value`` (empty: the option itself, any value)."""
    assert name in OPTIONS, name
    return f"{{{name}={value}}}" if value else f"{{{name}}}"


def field_word(name: str, value: str) -> str:
    """An option as the API and the engine name it: ``via=temporary``, ``via``."""
    return f"{name}={value}" if value else name


class PlanError(RerouteError):
    """An intent cannot be planned (unknown path, flows not on the source path, ...).

    The message is neutral: the options it names (what would work) are written with
    ``option`` and worded by each front end (``worded``): the CLI as its flags, the API by
    its field names, which ``str()`` uses. ``options`` lists them as (name, value)."""

    def __init__(self, message: str) -> None:
        self.template = message
        super().__init__(_OPTION.sub(lambda m: field_word(m[1], m[2] or ""), message))

    @property
    def options(self) -> tuple[tuple[str, str], ...]:
        """The options the message names, (name, value) in order (value "": any)."""
        return tuple((m[1], m[2] or "") for m in _OPTION.finditer(self.template))

    def worded(self, word: Callable[[str, str], str]) -> PlanError:
        """This error with its options worded by ``word(name, value)`` (a front end's)."""
        return PlanError(_OPTION.sub(lambda m: word(m[1], m[2] or ""), self.template))


class ApiError(RerouteError):
    """The reroute service answered an error: ``status`` (HTTP) and the server's ``message``
    (``status`` 0: no answer at all, after the client's retries)."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(f"HTTP {status}: {message}" if status else message)

    @property
    def is_plan_error(self) -> bool:
        """The intent cannot be planned or is malformed (nothing changed)."""
        return self.status == 422

    @property
    def is_conflict(self) -> bool:
        """An idempotency key reused with another body, or a reroute that cannot be cancelled."""
        return self.status == 409

    @property
    def is_auth_error(self) -> bool:
        """The service refused the caller's token (401) or role (403)."""
        return self.status in (401, 403)

    @property
    def is_unavailable(self) -> bool:
        """The service is shutting down, unreachable or failing: try again later."""
        return self.status == 0 or self.status >= 500
