"""Open vSwitch over OpenFlow 1.3 with ONF bundles. Importing registers the kind ``ovs``."""

from drivers.ovs.driver import OvsDriver

__all__ = ["OvsDriver"]
