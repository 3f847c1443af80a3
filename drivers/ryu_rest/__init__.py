"""Ryu / os-ken ``ofctl_rest``, seed 003's controller. Importing registers the kind ``ryu_rest``."""

from drivers.ryu_rest.driver import RyuRestDriver

__all__ = ["RyuRestDriver"]
