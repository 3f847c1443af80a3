"""An EMULATOR of a Polatis optical switch's SCPI interface (not a real device).

``emulator`` is the state machine and the ``Layer1`` hook; ``server`` runs it (lock timers,
Layer 1, TCP); ``python -m fabric.polatis`` starts one.
"""

from fabric.polatis.emulator import (
    EmulatorConfig,
    FixedLock,
    Layer1,
    NullLayer1,
    QuantileLock,
    SwitchState,
)
from fabric.polatis.server import EmulatorServer, PolatisEmulator, serve

__all__ = [
    "EmulatorConfig",
    "EmulatorServer",
    "FixedLock",
    "Layer1",
    "NullLayer1",
    "PolatisEmulator",
    "QuantileLock",
    "SwitchState",
    "serve",
]
