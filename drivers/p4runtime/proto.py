"""The P4Runtime protobuf modules (``p4.v1``, ``p4.config.v1``, ``google.rpc``), imported
in one place.

They run on protobuf's C implementation (upb): ``make setup`` regenerates the
``p4runtime`` wheel's modules, which only the slow pure-Python protobuf could load, with
grpcio-tools (``scripts/p4stubs.py``). Nothing here changes protobuf's implementation.
"""

from __future__ import annotations

from google.rpc import code_pb2, status_pb2

try:
    from p4.config.v1 import p4info_pb2
    from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
except TypeError as exc:  # pragma: no cover - a venv set up before scripts/p4stubs.py
    raise ImportError(
        "the installed p4runtime modules predate this protobuf: regenerate them with "
        "`python scripts/p4stubs.py` (make setup does)"
    ) from exc

__all__ = ["code_pb2", "p4info_pb2", "p4runtime_pb2", "p4runtime_pb2_grpc", "status_pb2"]

STATUS_DETAILS_KEY = "grpc-status-details-bin"  # the trailer of a Write's per-update errors


def code_name(code: int) -> str:
    """``google.rpc.Code`` name of a number (``RESOURCE_EXHAUSTED``), or the number."""
    try:
        return str(code_pb2.Code.Name(code))
    except ValueError:
        return str(code)


def election(value: int) -> p4runtime_pb2.Uint128:
    """An election id as a ``Uint128``."""
    return p4runtime_pb2.Uint128(high=value >> 64, low=value & 0xFFFF_FFFF_FFFF_FFFF)


def election_value(uint128: p4runtime_pb2.Uint128) -> int:
    """The int of a ``Uint128`` election id."""
    return int(uint128.high) << 64 | int(uint128.low)
