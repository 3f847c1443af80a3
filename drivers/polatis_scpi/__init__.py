"""Polatis optical switches over SCPI (pyvisa-py). Importing registers the kind ``polatis_scpi``."""

from drivers.polatis_scpi.driver import PolatisScpiDriver, WireLine, socket_resource
from drivers.polatis_scpi.scpi import Identity

__all__ = ["Identity", "PolatisScpiDriver", "WireLine", "socket_resource"]
