"""Signals while a fabric is up: SIGTERM unwinds like Ctrl-C (so the code that brought the
fabric up tears it down, as on an error), and a teardown is shielded from both."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import FrameType
from typing import NoReturn

Handler = Callable[[int, FrameType | None], object] | signal.Handlers
STOPPING = (signal.SIGINT, signal.SIGTERM)


def interrupt(signum: int, frame: FrameType | None) -> NoReturn:
    """A handler that unwinds as Ctrl-C does."""
    raise KeyboardInterrupt


@contextmanager
def handled(handler: Handler, *signums: signal.Signals) -> Iterator[None]:
    """``signums`` handled by ``handler`` inside, as before outside."""
    before = {s: signal.signal(s, handler) for s in signums}
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def unwinding() -> AbstractContextManager[None]:
    """Inside, SIGTERM (and Ctrl-C) raise KeyboardInterrupt: ``finally`` blocks run."""
    return handled(interrupt, *STOPPING)


def shielded() -> AbstractContextManager[None]:
    """Inside, SIGTERM and Ctrl-C are ignored (a teardown is never left half done)."""
    return handled(signal.SIG_IGN, *STOPPING)
