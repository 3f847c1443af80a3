"""An EMULATOR of a Polatis optical switch's SCPI interface (not a real device).

``emulator`` is the state machine and the ``Layer1`` hook; ``server`` runs it (lock timers,
Layer 1, TCP); ``python -m emulators.polatis`` starts one.
"""

from emulators.polatis.emulator import (
    EmulatorConfig,
    FixedLock,
    Layer1,
    NullLayer1,
    QuantileLock,
    SwitchState,
)
from emulators.polatis.server import EmulatorServer, PolatisEmulator, serve

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
