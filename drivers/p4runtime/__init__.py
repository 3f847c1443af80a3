"""P4Runtime v1 (gRPC). Importing registers the kind ``p4runtime``.

Needs the ``p4rt`` extra (grpcio, p4runtime, grpcio-tools); ``make setup`` regenerates
the P4Runtime modules for protobuf's C implementation (see ``proto``).
"""

from drivers.p4runtime.driver import P4RuntimeDriver

__all__ = ["P4RuntimeDriver"]
