"""HP/Aruba OpenFlow 1.0 switches, the "dpctl method". Importing registers the kind ``hp_dpctl``."""

from drivers.hp_dpctl.driver import HpDpctlDriver

__all__ = ["HpDpctlDriver"]
