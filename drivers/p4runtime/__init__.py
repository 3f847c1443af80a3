"""P4Runtime v1 (gRPC). Importing registers the kind ``p4runtime``.

Needs the ``p4rt`` extra (grpcio, p4runtime, protobuf >= 4); the generated P4Runtime
modules run on protobuf's pure-Python implementation (see ``proto``).
"""

from drivers.p4runtime.driver import P4RuntimeDriver

__all__ = ["P4RuntimeDriver"]
