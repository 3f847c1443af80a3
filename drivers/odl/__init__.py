"""OpenDaylight northbound REST, the seeds' "ODL method". Importing registers the kind ``odl``."""

from drivers.odl.driver import OdlDriver
from drivers.odl.styles import Style

__all__ = ["OdlDriver", "Style"]
