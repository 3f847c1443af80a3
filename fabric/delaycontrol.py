"""A typed client of the delay line's HTTP control endpoint (what the seeds did with curl).

Errors are translated into the one exception tree: a refused change is ``DeviceRejected``
(``code`` names the field), no connection is ``DeviceUnreachable``, no answer in time is
``DeviceTimeout``, an answer we cannot read is ``ProtocolError``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from http import HTTPStatus
from typing import Any

from emulators.delayline.model import DelayState, LineStats
from services.reroute.errors import (
    DeviceRejected,
    DeviceTimeout,
    DeviceUnreachable,
    ProtocolError,
)


class DelayControl:
    """The delay line listening at ``url`` (e.g. ``http://127.0.0.1:8080``)."""

    def __init__(self, url: str, *, timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def get(self) -> DelayState:
        """The line's current delays."""
        return self._state(self._call("GET", "/delay"))

    def set(
        self,
        *,
        delay_ms: float | None = None,
        a_to_b_ms: float | None = None,
        b_to_a_ms: float | None = None,
    ) -> DelayState:
        """Change the delay (``delay_ms``: both directions); return the delay now in force."""
        given = {"delay_ms": delay_ms, "a_to_b_ms": a_to_b_ms, "b_to_a_ms": b_to_a_ms}
        body = {k: v for k, v in given.items() if v is not None}
        return self._state(self._call("PUT", "/delay", body))

    def stats(self) -> LineStats:
        """The line's packet counters, per direction."""
        doc = self._call("GET", "/stats")
        try:
            return LineStats.from_dict(doc)
        except (TypeError, ValueError) as exc:
            raise ProtocolError(self.url, f"unexpected stats: {exc}") from exc

    def healthy(self) -> bool:
        """The control endpoint answers its health check."""
        try:
            return self._call("GET", "/healthz").get("ok") is True
        except (DeviceUnreachable, DeviceTimeout):
            return False

    def _state(self, doc: dict[str, Any]) -> DelayState:
        try:
            return DelayState.from_dict(doc)
        except ValueError as exc:
            raise ProtocolError(self.url, f"unexpected delay: {exc}") from exc

    def _call(self, method: str, path: str, body: object = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return self._json(resp.read())
        except urllib.error.HTTPError as exc:
            raise self._refusal(exc) from exc
        except (urllib.error.URLError, OSError) as exc:
            raise self._failure(f"{method} {path}", exc) from exc

    def _failure(self, what: str, exc: OSError) -> DeviceTimeout | DeviceUnreachable:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        if isinstance(reason, TimeoutError):
            return DeviceTimeout(self.url, f"{what}: no answer in {self.timeout_s:g} s")
        return DeviceUnreachable(self.url, f"{what}: {reason}")

    def _refusal(self, exc: urllib.error.HTTPError) -> DeviceRejected | ProtocolError:
        try:
            doc = self._json(exc.read())
        except ProtocolError as bad:
            return bad
        message = str(doc.get("error", exc.reason))
        if exc.code != HTTPStatus.BAD_REQUEST:
            return ProtocolError(self.url, f"HTTP {exc.code}: {message}")
        return DeviceRejected(self.url, message, str(doc.get("field", "")))

    def _json(self, raw: bytes) -> dict[str, Any]:
        try:
            doc = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ProtocolError(self.url, f"answer is not JSON: {raw[:100]!r}") from exc
        if not isinstance(doc, dict):
            raise ProtocolError(self.url, "answer is not a JSON object")
        return doc
