"""The delay line's own errors (an EMULATOR raises nothing of the service's tree)::

    DelayLineError     the line cannot run: a port or the control endpoint cannot open
     +-- Refused       a delay change refused; ``field`` names the one at fault

The control endpoint answers a ``Refused`` with 400 and ``{"error", "field"}``; the fabric's
client (``fabric.delaycontrol``) turns that into the service's ``DeviceRejected``.
"""

from __future__ import annotations


class DelayLineError(Exception):
    """The delay line cannot run as asked."""


class Refused(DelayLineError):
    """A delay change refused; ``field`` names the field at fault (``body``: the request)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field
